"""`eagle-convert inspect PATH`: what a draft checkpoint is (headers only, no torch)."""

from __future__ import annotations

from pathlib import Path

import typer

from eagle_convert.cli.options import aux_convention_option


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
    aux_convention: str | None = aux_convention_option("Declare what the aux-layer ids mean, overriding detection."),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Write one JSON object (schemas/inspect-report.schema.json; on bad input schemas/error.schema.json).",
    ),
    token: str | None = typer.Option(
        None, "--token", help="Hub token for private repos (default: HF_TOKEN or the login); never printed."
    ),
) -> None:
    """Tell what a draft checkpoint is: producer layout, attention, EAGLE version, flags, aux-layer ids."""
    from eagle_convert.inspect_api import inspect_checkpoint
    from eagle_convert.render.json_output import json_errors, write_json

    with json_errors(as_json, "inspect", path):
        report = inspect_checkpoint(str(path), target, aux_convention, token)
    if as_json:
        write_json(report.to_dict())
        return
    from eagle_convert.render.console import render_inspect, stdout_console  # rich: only for people

    render_inspect(report, stdout_console())


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
