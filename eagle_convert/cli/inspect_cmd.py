"""`eagle-convert inspect PATH`: what a draft checkpoint is (headers only, no torch)."""

from __future__ import annotations

from pathlib import Path

import typer

from eagle_convert.cli.formatting import url_paragraph
from eagle_convert.cli.options import (
    ENGINES_HELP,
    OUTPUT,
    aux_convention_option,
    chosen_engines,
    color_option,
    engine_option,
    quiet_option,
    verbose_option,
)
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
    _quiet: bool = quiet_option(),
    _verbose: bool = verbose_option(),
    _color: str = color_option(),
) -> None:
    """Tell what a draft checkpoint is: producer layout, attention, EAGLE version, flags, aux-layer ids."""
    from eagle_convert.inspect_api import inspect_checkpoint
    from eagle_convert.render.json_output import json_errors, write_json
    from eagle_convert.verify.run import load_settings

    with json_errors(as_json, "inspect", path):
        engines = chosen_engines(engine, load_settings(Path.cwd()))
        report = inspect_checkpoint(str(path), target, aux_convention, token, engine=engines)
    if as_json:
        write_json(report.to_dict())
        return
    from eagle_convert.render.console import render_inspect, stdout_console  # rich: only for people

    render_inspect(report, stdout_console(), verbosity=OUTPUT.verbosity)


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
