"""`eagle-convert normalize SRC OUT`: rewrite a draft into one canonical form (streaming, atomic, reversible)."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from eagle_convert.cli.formatting import url_paragraph
from eagle_convert.cli.options import (
    OUTPUT,
    aux_convention_option,
    color_option,
    device_option,
    dtype_option,
    family_option,
    profile_option,
    quiet_option,
    verbose_option,
)
from eagle_convert.errors import UsageError
from eagle_convert.reference.budget import MIN_POSITIONS as PROBE_POSITIONS
from eagle_convert.version import SCHEMAS_URL

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def parse_size(text: str) -> int:
    """'5GB', '500MiB' or a byte count -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise UsageError(f"--max-shard-size {text!r} is not a size", hint="write it like 5GB, 500MiB or 1000000")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def normalize(
    src: Path = typer.Argument(..., metavar="SRC", help="Draft checkpoint to convert (never modified)."),
    out: Path = typer.Argument(..., metavar="OUT", help="Output directory (written atomically)."),
    profile: str = profile_option(
        "Output form: portable loads right in both engines; sglang, vllm and speculators carry only what that "
        "consumer reads."
    ),
    target: Path | None = typer.Option(
        None, "--target", metavar="PATH", help="Target model directory or config.json (N, hidden size, family)."
    ),
    target_family: str | None = family_option("Target family, when no target config is at hand."),
    aux_convention: str | None = aux_convention_option(
        "Declare what the source's aux-layer ids mean, or measure it against --target (auto).", auto=True
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan; write nothing."),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Write the plan/report as one JSON object (normalize-report.schema.json; on bad input "
        "error.schema.json), schemas at:" + url_paragraph(SCHEMAS_URL),
    ),
    allow_pickle: bool = typer.Option(
        False, "--allow-pickle", help="Convert .bin/.pt weights with torch's weights-only loader."
    ),
    force: bool = typer.Option(
        False, "--force", help="Replace an existing OUT (atomically) that holds a checkpoint's files only."
    ),
    max_shard_size: str | None = typer.Option(
        None, "--max-shard-size", metavar="SIZE", help="Re-split the output into shards of at most SIZE (e.g. 5GB)."
    ),
    device: str = device_option("--aux-convention auto: where the target and draft run (auto: the GPU if any)."),
    dtype: str = dtype_option("--aux-convention auto: compute precision.", engine_level=False),
    token_ids: Path | None = typer.Option(
        None,
        "--token-ids",
        metavar="FILE",
        help="--aux-convention auto: a JSON list of token-id lists to measure with (as verify --token-ids).",
    ),
    prompts: Path | None = typer.Option(
        None,
        "--prompts",
        metavar="FILE",
        help="--aux-convention auto: text prompts, one per line, continued by the target (as verify --prompts).",
    ),
    probe_positions: int = typer.Option(
        PROBE_POSITIONS,
        "--probe-positions",
        min=16,
        help="--aux-convention auto: positions to score at least (as verify).",
    ),
    _quiet: bool = quiet_option(),
    _verbose: bool = verbose_option(),
    _color: str = color_option(),
) -> None:
    """Rewrite configs and tensor names into one canonical form that loads with the intended meaning."""
    from eagle_convert.normalize.plan import normalize_checkpoint
    from eagle_convert.normalize.request import NormalizeRequest
    from eagle_convert.probe.text import read_prompts, read_token_ids
    from eagle_convert.render.console import stdout_console
    from eagle_convert.render.json_output import json_errors, write_json
    from eagle_convert.render.normalize_tables import render_normalize
    from eagle_convert.render.progress import progress_bar

    with json_errors(as_json, "normalize", src):
        request = NormalizeRequest.build(
            profile=profile,
            target=target,
            target_family=target_family,
            aux_convention=aux_convention,
            dry_run=dry_run,
            allow_pickle=allow_pickle,
            force=force,
            max_shard_size=parse_size(max_shard_size) if max_shard_size else None,
            device=device,
            dtype=dtype,
            token_ids=read_token_ids(token_ids) if token_ids else None,
            prompts=read_prompts(prompts) if prompts else None,
            probe_positions=probe_positions,
            read_files=tuple(p for p in (token_ids, prompts) if p is not None),
        ).validate()  # every usage error, before the draft is opened
    with (
        json_errors(as_json, "normalize", src),
        progress_bar(enabled=not as_json and not dry_run and not OUTPUT.quiet, label="writing") as advance,
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
