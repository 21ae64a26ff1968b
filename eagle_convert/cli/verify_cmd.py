"""`eagle-convert verify PATH`: the pre-deploy gate (rules, reports, CI formats, exit codes)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from eagle_convert.cli.options import (
    aux_convention_option,
    choice,
    device_option,
    dtype_option,
    fail_level_option,
    level_option,
)
from eagle_convert.errors import EXIT_FINDINGS, EXIT_OK, EagleConvertError
from eagle_convert.probe.text import TEXTS as PROBE_TEXTS
from eagle_convert.rules.registry import LEVELS
from eagle_convert.verify.run import ORACLES

if TYPE_CHECKING:
    from eagle_convert.verify.report import VerifyReport


ENGINES_HELP = (
    "Engine releases the draft must load right in: sglang, vllm (newest modelled), name@release (e.g. vllm@0.33-v1), "
    "comma lists, all, or both [both]. `eagle-convert engines` lists them."
)


def _sarif(report: VerifyReport) -> str:
    from eagle_convert.render import formats as rf

    return json.dumps(rf.to_sarif(report), indent=2, ensure_ascii=False) + "\n"


def _formatter(name: str) -> Callable[[VerifyReport], str]:
    def render(report: VerifyReport) -> str:
        from eagle_convert.render import formats as rf

        return str(getattr(rf, name)(report))

    return render


# --format: each report format and what writes it (human: the rich report on stderr, the JSON report to --output).
RENDERERS: dict[str, Callable[[VerifyReport], str]] = {
    "human": _formatter("to_json"),
    "json": _formatter("to_json"),
    "github": _formatter("github_annotations"),
    "sarif": _sarif,
    "junit": _formatter("to_junit"),
    "concise": _formatter("to_concise"),
}


def _setting(cli: str | None, settings: dict[str, Any], key: str, default: str) -> str:
    """A command-line value wins over [tool.eagle-convert] in pyproject.toml, which wins over the default."""
    return cli if cli is not None else str(settings.get(key, default))


def verify(
    path: Path = typer.Argument(
        ...,
        metavar="PATH",
        help="Draft checkpoint directory, .safetensors file, or Hub repo owner/name[@revision] (static level).",
    ),
    target: Path | None = typer.Option(
        None, "--target", metavar="PATH", help="Target model directory or config.json (N, family, rope, positions)."
    ),
    engine: str | None = typer.Option(
        None,
        "--engine",
        metavar="ENGINES",
        help=f"{ENGINES_HELP} --level engine runs SGLang when only SGLang releases are selected, else vLLM.",
    ),
    level: str = level_option(
        "static: config and headers; tensors: also values; forward: the draft's forward; target: the probe; "
        "engine: also the draft in a real engine (scripts/engine-env)."
    ),
    strict: bool = typer.Option(
        False, "--strict", help="Ambiguous aux-id convention, missing ids and pickle are errors."
    ),
    fail_level: str | None = fail_level_option("Lowest severity that fails [error].", default=False),
    select: str | None = typer.Option(
        None, "--select", metavar="RULES", help="Only these rules (ids or prefixes, comma-separated)."
    ),
    ignore: str | None = typer.Option(None, "--ignore", metavar="RULES", help="Skip these rules (ids or prefixes)."),
    output_format: str = choice(
        tuple(RENDERERS),
        next(iter(RENDERERS)),
        "--format",
        help="Report format (concise: one greppable line per finding on stdout, as ruff's).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
    output: Path | None = typer.Option(
        None,
        "--output",
        metavar="FILE",
        help="Write the report to FILE instead of stdout (human format: the JSON report).",
    ),
    exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit 0 even when findings fail the gate."),
    no_hash: bool = typer.Option(False, "--no-hash", help="Skip the sha256 manifest of the checkpoint files."),
    token_ids: Path | None = typer.Option(
        None,
        "--token-ids",
        metavar="FILE",
        help="--level target: a JSON list "
        "of token-id lists to probe with (default: the target's own "
        "continuations of varied prompts through its chat template, see --probe-text).",
    ),
    reference_hidden_states: Path | None = typer.Option(
        None,
        "--reference-hidden-states",
        metavar="FILE",
        help="--level target: a safetensors file of aux states saved by a trainer or engine (token_ids [T], "
        "hidden_states [K, T, Ht]); reports which target boundaries they are.",
    ),
    oracle: str | None = choice(
        ORACLES, None, "--oracle", help="--level target: also check the reference target against this implementation."
    ),
    prompts: Path | None = typer.Option(
        None,
        "--prompts",
        metavar="FILE",
        help="--level target: text prompts, one per line, tokenized with the "
        "target's tokenizer.json and continued by the target.",
    ),
    probe_steps: int = typer.Option(3, "--probe-steps", min=1, max=16, help="--level target: draft chain length."),
    probe_text: str = choice(
        PROBE_TEXTS,
        PROBE_TEXTS[0],
        "--probe-text",
        help="--level target without --token-ids: the target's own continuations of the prompts, greedy "
        "(acceptance exactly as greedy speculative decoding) or sampled at temperature 1.",
    ),
    probe_positions: int = typer.Option(
        4096,
        "--probe-positions",
        min=16,
        help="--level target: positions to score at least; while a comparison is undecided, more "
        "text up to 4 times as many.",
    ),
    device: str = device_option(
        "--level forward/target: where the reference models run (auto: the GPU when torch sees one)."
    ),
    dtype: str = dtype_option("--level forward/target: compute precision."),
    engine_python: Path | None = typer.Option(
        None,
        "--engine-python",
        metavar="PATH",
        help="--level engine: the Python of the engine environment "
        "(default: $EAGLE_CONVERT_ENGINE_PYTHON, else .venv-engine/bin/python).",
    ),
    engine_tokens: int = typer.Option(
        64, "--engine-tokens", min=1, max=4096, help="--level engine: new tokens the engine generates per prompt."
    ),
    token: str | None = typer.Option(
        None, "--token", help="Hub token for private repos (default: HF_TOKEN or the login); never printed."
    ),
    aux_convention: str | None = aux_convention_option(
        "Declare what the aux-layer ids mean (as the trainer used them), as inspect."
    ),
) -> None:
    """Check a draft before deployment: every rule, a report for people or CI, and an exit code."""
    from eagle_convert.engine_level import EngineSettings
    from eagle_convert.probe.text import read_token_ids
    from eagle_convert.render.console import progress_bar, render_verify, stderr_console, steps_bar
    from eagle_convert.verify.report import VerifyReport
    from eagle_convert.verify.run import load_settings, verify_checkpoint

    fmt = "json" if as_json else output_format
    settings = load_settings(Path.cwd())
    chosen_engine = _setting(engine, settings, "engine", "both")
    chosen_fail = _setting(fail_level, settings, "fail-level", "error")
    try:
        with (
            steps_bar(enabled=level != LEVELS[0]) as steps,
            progress_bar(enabled=not no_hash, label="hashing", total=_local_bytes(path)) as advance,
        ):
            report = verify_checkpoint(
                str(path),
                target=target,
                engine=chosen_engine,
                level=level,
                strict=strict,
                fail_level=chosen_fail,
                select=select if select is not None else settings.get("select"),
                ignore=ignore if ignore is not None else settings.get("ignore"),
                compute_hashes=not no_hash,
                progress=advance,
                token=token,
                token_ids=read_token_ids(token_ids) if token_ids else None,
                prompts=prompts,
                probe_steps=probe_steps,
                probe_text=probe_text,
                reference_hidden_states=reference_hidden_states,
                oracle=oracle,
                device=device,
                dtype=dtype,
                probe_progress=steps,
                aux_convention=aux_convention,
                engine_settings=EngineSettings(python=engine_python, new_tokens=engine_tokens),
                probe_positions=probe_positions,
            )
    except EagleConvertError as exc:
        failed = VerifyReport(
            str(path),
            level,
            chosen_engine,
            chosen_fail,
            "error",
            error={"message": exc.message, "hint": exc.hint, "exit_code": exc.exit_code},
        )
        _emit(failed, fmt, output)
        raise
    _emit(report, fmt, output)
    if fmt == "human":
        render_verify(report, stderr_console())
    if report.status == "fail" and not exit_zero:
        raise typer.Exit(EXIT_FINDINGS)
    raise typer.Exit(EXIT_OK)


_HASHED = ("config.json", "*.safetensors", "*.safetensors.index.json", "*.bin", "*.pt", "*.pth")


def _local_bytes(path: Path) -> int | None:
    """The bytes the sha256 manifest will read from a local checkpoint (a progress total); None for a Hub id."""
    if path.is_file():
        return path.stat().st_size
    if not path.is_dir():
        return None
    return sum(f.stat().st_size for pattern in _HASHED for f in path.glob(pattern) if f.is_file())


def _emit(report: VerifyReport, fmt: str, output: Path | None) -> None:
    """Machine formats with plain writes (never through rich); GitHub annotations and step summary when in Actions."""
    from eagle_convert.render import formats as rf

    render = RENDERERS[fmt]
    if output is not None:
        from eagle_convert.normalize.writer import write_text_atomic

        write_text_atomic(output, render(report))
    elif fmt != "human":
        sys.stdout.write(render(report))
    in_actions = os.environ.get("GITHUB_ACTIONS") == "true"
    if in_actions and fmt != "github" and (fmt == "human" or output is not None):
        sys.stdout.write(rf.github_annotations(report))  # stdout is free: annotate the run
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(rf.markdown_summary(report))


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
