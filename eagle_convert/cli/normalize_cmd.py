"""`eagle-convert normalize SRC OUT`: rewrite a draft into one canonical form (streaming, atomic, reversible)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from eagle_convert.cli.formatting import url_paragraph
from eagle_convert.cli.options import OUTPUT, request_of, takes
from eagle_convert.normalize.request import NormalizeRequest
from eagle_convert.version import SCHEMAS_URL


@takes(NormalizeRequest)
def normalize(
    src: Path = typer.Argument(..., metavar="SRC", help="Draft checkpoint to convert (never modified)."),
    out: Path = typer.Argument(..., metavar="OUT", help="Output directory (written atomically)."),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Write the plan/report as one JSON object (normalize-report.schema.json; on bad input "
        "error.schema.json), schemas at:" + url_paragraph(SCHEMAS_URL),
    ),
    **options: Any,  # the request's options, each declared once on NormalizeRequest (normalize/request.py)
) -> None:
    """Rewrite configs and tensor names into one canonical form that loads with the intended meaning."""
    from eagle_convert.normalize.plan import normalize_checkpoint
    from eagle_convert.render.console import stdout_console
    from eagle_convert.render.json_output import json_errors, write_json
    from eagle_convert.render.normalize_tables import render_normalize
    from eagle_convert.render.progress import progress_bar

    with json_errors(as_json, "normalize", src):
        read_files = tuple(options[name] for name in ("token_ids", "prompts") if options[name] is not None)
        request = request_of(NormalizeRequest, options, {}, "normalize", read_files=read_files).validate()
    with (
        json_errors(as_json, "normalize", src),
        progress_bar(enabled=not as_json and not request.dry_run and not OUTPUT.quiet, label="writing") as advance,
    ):
        report = normalize_checkpoint(
            src, out, request, progress=advance, progress_total=advance.total if advance is not None else None
        )
    if as_json:
        write_json(report.to_dict())
    else:
        render_normalize(report, stdout_console(), verbosity=OUTPUT.verbosity)


def register(app: typer.Typer) -> None:
    app.command("normalize")(normalize)
