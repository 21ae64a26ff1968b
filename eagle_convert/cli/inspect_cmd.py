"""`eagle-convert inspect PATH`: what a draft checkpoint is (headers only, no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from eagle_convert.cli.formatting import url_paragraph
from eagle_convert.cli.options import (
    OUTPUT,
    aux_convention_option,
    chosen_engines,
    color_option,
    engine_option,
    quiet_option,
    verbose_option,
)
from eagle_convert.releases import ENGINES_HELP
from eagle_convert.version import SCHEMAS_URL


def inspect(
    path: Path = typer.Argument(
        ...,
        metavar="PATH",
        help="Draft checkpoint directory, .safetensors file, config.json, or Hub repo owner/name[@revision].",
    ),
    target: Path | None = typer.Option(
        None,
        "--target",
        metavar="PATH",
        help="Target model directory or config.json: gives N, target hidden size and family.",
    ),
    engine: str | None = engine_option(
        f"{ENGINES_HELP} The findings are checked against these releases (as verify); the aux-layer table lists "
        "every modelled release and marks the ones not checked."
    ),
    aux_convention: str | None = aux_convention_option("Declare what the aux-layer ids mean, overriding detection."),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Write one JSON object (inspect-report.schema.json; on bad input error.schema.json), schemas at:"
        + url_paragraph(SCHEMAS_URL),
    ),
    token: str | None = typer.Option(
        None, "--token", help="Hub token for private repos (default: HF_TOKEN or the login); never printed."
    ),
    engine_arg: list[str] | None = typer.Option(
        None,
        "--engine-arg",
        metavar="KEY=VALUE",
        help="A deployment setting that decides what a selected release does with the draft, as verify's: "
        "eagle3_layers_to_capture=[1,5,9] for a trtllm release (TensorRT-LLM reads no aux-layer ids from the "
        "draft), platform=rocm or pipeline_parallel_size=2 for a vllm release. The value is JSON. Repeatable.",
        show_default=False,
    ),
    engine_config: Path | None = typer.Option(
        None,
        "--engine-config",
        metavar="FILE",
        help="The same settings as one JSON (.json) or YAML mapping; --engine-arg wins over it.",
    ),
    _quiet: bool = quiet_option(),
    _verbose: bool = verbose_option(),
    _color: str = color_option(),
) -> None:
    """Tell what a draft checkpoint is: producer layout, attention, EAGLE version, flags, aux-layer ids."""
    from eagle_convert.cli.settings import load_settings
    from eagle_convert.inspect_api import inspect_checkpoint
    from eagle_convert.releases import DEFAULT_ENGINES
    from eagle_convert.render.json_output import json_errors, write_json

    with json_errors(as_json, "inspect", path):
        engines = chosen_engines(engine, load_settings(Path.cwd())) or DEFAULT_ENGINES
        deployment: dict[str, Any] = {}
        if engine_arg or engine_config is not None:  # headers-only work imports no engine code without them
            from eagle_convert.real_engine.engine_args import engine_args

            deployment = engine_args(engine_arg or (), engine_config)  # checked by inspect_checkpoint
        report = inspect_checkpoint(str(path), target, aux_convention, token, engine=engines, deployment=deployment)
    if as_json:
        write_json(report.to_dict())
        return
    from eagle_convert.render.console import stdout_console  # rich: only for people
    from eagle_convert.render.inspect_tables import render_inspect

    render_inspect(report, stdout_console(), verbosity=OUTPUT.verbosity)


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
