"""`eagle-convert verify PATH`: the pre-deploy gate (rules, reports, CI formats, exit codes)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from eagle_convert import engines
from eagle_convert.cli.options import OUTPUT, choice, request_of, takes
from eagle_convert.errors import (
    EXIT_BAD_INPUT,
    EXIT_FINDINGS,
    EXIT_NOTHING_TO_CHECK,
    EXIT_OK,
    EagleConvertError,
    UsageError,
)
from eagle_convert.rules.registry import LEVELS
from eagle_convert.verify.request import CHECKS, HUB, OUTPUT_PANEL, PROBE, VerifyRequest

if TYPE_CHECKING:
    from eagle_convert.engines import AttachedServer
    from eagle_convert.verify.report import VerifyReport
    from eagle_convert.verify.request import CheckedRequest, InProcessEngine


def _formatter(name: str) -> Callable[[VerifyReport], str]:
    def render(report: VerifyReport) -> str:
        from eagle_convert.render import formats as rf

        return str(getattr(rf, name)(report))

    return render


# --format: each report format and what writes it (human: the rich report on stdout, the JSON report to --output).
RENDERERS: dict[str, Callable[[VerifyReport], str]] = {
    "human": _formatter("to_json"),
    "json": _formatter("to_json"),
    "github": _formatter("github_annotations"),
    "sarif": _formatter("to_sarif_text"),
    "junit": _formatter("to_junit"),
    "concise": _formatter("to_concise"),
}


# verify -h: the panels of its options, in this order (drawn by cli/formatting.py, as the help stays plain)
PANELS = (CHECKS, OUTPUT_PANEL, PROBE, engines.ENGINE_PANEL, engines.SERVER_PANEL, HUB)


@takes(VerifyRequest, panels=PANELS, habits_panel=OUTPUT_PANEL)
def verify(
    paths: list[Path] = typer.Argument(
        ...,
        metavar="PATH",
        help="Draft checkpoint directories, or Hub repos owner/name[@revision] (static level); a file stands for the "
        "directory that holds it, and each checkpoint is verified once. Several paths: each is reported, and the "
        "exit code is the worst.",
        show_default=False,
    ),
    output_format: str = choice(
        tuple(RENDERERS),
        next(iter(RENDERERS)),
        "--format",
        help="Report format (concise: one greppable line per finding on stdout, as ruff's).",
        rich_help_panel=OUTPUT_PANEL,
    ),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json.", rich_help_panel=OUTPUT_PANEL),
    output: Path | None = typer.Option(
        None,
        "--output",
        metavar="FILE",
        help="Write the report to FILE instead of stdout (human format: the JSON report).",
        rich_help_panel=OUTPUT_PANEL,
    ),
    exit_zero: bool = typer.Option(
        False, "--exit-zero", help="Exit 0 even when findings fail the gate.", rich_help_panel=OUTPUT_PANEL
    ),
    **options: Any,  # the request's options, each declared once on VerifyRequest (verify/request.py)
) -> None:
    """Check drafts before deployment: every rule, a report for people or CI, and an exit code.

    Several paths are verified in turn and each is reported; the exit code is the worst (2, then 1, then 3, then 0).
    Machine formats then cover them all: json is a JSON array of the reports, in the order given
    (verify-reports.schema.json; one path still writes one report object), sarif one run with
    each checkpoint under its own uri base id (CHECKPOINT1, CHECKPOINT2, ...), junit one testsuite per checkpoint,
    github and concise the lines of each in turn.
    """
    from eagle_convert.cli.settings import load_settings
    from eagle_convert.render.console import render_error, stdout_console
    from eagle_convert.render.escape import one_line
    from eagle_convert.render.progress import progress_bar, steps_bar
    from eagle_convert.render.verify_tables import render_verify
    from eagle_convert.verify.request import InProcessEngine
    from eagle_convert.verify.run import Hooks, verify_checkpoint

    if as_json and output_format not in ("human", "json"):
        raise UsageError(f"--json and --format {output_format} ask for two formats", hint="give one of them")
    fmt = "json" if as_json else output_format
    engine_run = _engine_run(options)
    request = request_of(VerifyRequest, options, load_settings(Path.cwd()), "verify", engine_run=engine_run)
    checked = request.validate()  # every usage error, before any checkpoint is opened
    checkpoints = checkpoint_paths(paths)
    _no_stray_folder(checkpoints)
    for path in checkpoints:
        checked.check_source(path)
    level = checked.level
    if output is not None:
        from eagle_convert.read.output_place import check_output_place

        probe, run = request.probe, engine_run if isinstance(engine_run, InProcessEngine) else InProcessEngine()
        inputs = [*checkpoints, request.target, probe.token_ids_file, probe.prompts, probe.reference_hidden_states]
        check_output_place(
            output, [p for p in (*inputs, run.config_file, run.python) if p is not None], directory=False
        )
    runs: list[tuple[VerifyReport, EagleConvertError | None]] = []
    for path in checkpoints:
        try:
            with (
                steps_bar(enabled=level != LEVELS[0] and not OUTPUT.quiet) as steps,
                progress_bar(
                    enabled=request.compute_hashes and not OUTPUT.quiet, label="hashing", total=_local_bytes(path)
                ) as advance,
            ):
                hooks = Hooks(advance, steps, None if OUTPUT.quiet else _notice)
                report = verify_checkpoint(str(path), checked, hooks)
        except EagleConvertError as exc:
            if len(checkpoints) == 1:  # one path: the report, then the error rendered once by main(), as ever
                _emit(_failed(str(path), checked, exc), fmt, output)
                raise
            runs.append((_failed(str(path), checked, exc), exc))
            continue
        runs.append((report, None))
    reports = [r for r, _ in runs]
    # the human report on stdout, as every command's (`verify D | less`); errors stay on stderr
    for n, (report, error) in enumerate(runs):
        if len(runs) > 1 and fmt == "human" and not OUTPUT.quiet:
            sys.stdout.write(f"{chr(10) if n else ''}== {one_line(report.path)}\n")
        if error is not None:
            sys.stdout.flush()  # the error after the header of its checkpoint, where both streams are one terminal
            render_error(error.message, error.hint)
        elif fmt == "human":
            render_verify(report, stdout_console(), verbosity=OUTPUT.verbosity)
    if len(reports) == 1:  # the machine format; in GitHub Actions the annotations, after the human report
        _emit(reports[0], fmt, output)
    else:
        _emit_many(reports, fmt, output)
    if len(runs) > 1:  # the verdict over them all (printed with -q too): with the human report, else beside it
        tally = {s: sum(r.status == s for r in reports) for s in ("pass", "fail", "error")}
        (sys.stdout if fmt == "human" else sys.stderr).write(
            f"{len(runs)} checkpoints: {tally['pass']} passed, {tally['fail']} failed, "
            f"{tally['error']} could not be verified\n"
        )
    raise typer.Exit(_worst_exit(runs, exit_zero))


def _notice(line: str) -> None:
    sys.stderr.write(line + "\n")


def _engine_run(values: dict[str, Any]) -> InProcessEngine | AttachedServer:
    """The engine level's run, its options taken out of ``values``: the running server of --engine-url, else the
    engine the level starts. An option of the other run is a usage error, never dropped."""
    from eagle_convert.engines import AttachedServer
    from eagle_convert.options import build, declared
    from eagle_convert.real_engine.attached import token_from_env
    from eagle_convert.verify.request import InProcessEngine

    local, served = list(declared(InProcessEngine)), list(declared(AttachedServer))
    given = {d.name: values.pop(d.name) for d in (*local, *served) if d.name in values}
    mine = {d.name for d in local}
    if given["engine_url"] is None:
        for d in served:
            if d.name not in mine and d.name != "engine_url" and given[d.name] != d.default:
                raise UsageError(f"{d.flag} goes with --engine-url")
        return build(InProcessEngine, {d.name: given[d.name] for d in local}, "engine")
    if any(given[d.name] for d in local if d.name not in {s.name for s in served}):
        raise UsageError(
            "--engine-arg, --engine-config and --engine-python set the engine the engine level starts; with "
            "--engine-url the server runs with its own settings"
        )
    server = build(AttachedServer, {d.name: given[d.name] for d in served}, "engine")
    return replace(server, token=server.token or token_from_env())


def _no_stray_folder(checkpoints: list[Path]) -> None:
    """Several paths (``verify drafts/*``): a folder among them that holds no checkpoint is the user's mistake,
    refused before any work (exit 2), never a verdict hidden behind the others' exit code. One path alone keeps its
    own answer: exit 3, nothing to check."""
    from eagle_convert.read.checkpoint import holds_checkpoint

    if len(checkpoints) < 2:
        return
    stray = [str(p) for p in checkpoints if p.is_dir() and not holds_checkpoint(p)]
    if stray:
        raise UsageError(
            f"{', '.join(stray)}: no config.json and no weight files, among {len(checkpoints)} paths to verify",
            hint="leave the folders that are not checkpoints out of the list (e.g. `verify drafts/*/config.json`)",
        )


def checkpoint_paths(paths: list[Path]) -> list[Path]:
    """The checkpoints ``paths`` name, each once, in order: a file stands for the directory that holds it (what a
    pre-commit hook passes: changed ``config.json`` or shard files); directories and Hub ids stay as given."""
    out: dict[str, Path] = {}
    for path in paths:
        checkpoint = path.parent if path.is_file() else path
        out.setdefault(os.path.normpath(os.path.abspath(checkpoint)) if checkpoint.exists() else str(path), checkpoint)
    return list(out.values())


def _failed(path: str, checked: CheckedRequest, exc: EagleConvertError) -> VerifyReport:
    """The report of a checkpoint that could not be verified (its engines as asked: the draft was not read)."""
    from eagle_convert.verify.report import ReportError, VerifyReport

    request = checked.request
    return VerifyReport(
        path, checked.level, checked.selection, request.fail_level, "error", error=ReportError.of(exc),
        engine_source=checked.engine_source,
    )  # fmt: skip


# Several checkpoints: the exit code of the worst run (an error, then failed findings, then nothing to check).
_EXIT_RANK = (EXIT_OK, EXIT_NOTHING_TO_CHECK, EXIT_FINDINGS, EXIT_BAD_INPUT)


def _worst_exit(runs: list[tuple[VerifyReport, EagleConvertError | None]], exit_zero: bool) -> int:
    codes = [
        error.exit_code if error is not None else EXIT_FINDINGS if r.status == "fail" and not exit_zero else EXIT_OK
        for r, error in runs
    ]
    return max(codes, key=lambda c: _EXIT_RANK.index(c) if c in _EXIT_RANK else len(_EXIT_RANK))


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
    from eagle_convert.render.json_output import stdout_indent

    render = RENDERERS[fmt]
    if output is not None:
        from eagle_convert.normalize.writer import write_text_atomic

        write_text_atomic(output, render(report))
    elif fmt == "json":  # as every command's --json: indented at a terminal, one line into a pipe or a file
        sys.stdout.write(rf.to_json(report, indent=stdout_indent()))
    elif fmt != "human":
        sys.stdout.write(render(report))
    in_actions = os.environ.get("GITHUB_ACTIONS") == "true"
    if in_actions and fmt != "github" and (fmt == "human" or output is not None):
        sys.stdout.write(rf.github_annotations(report))  # stdout is free: annotate the run
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(rf.markdown_summary(report))


def _emit_many(reports: list[VerifyReport], fmt: str, output: Path | None) -> None:
    """Several reports as one document per format (render/combined.py); GitHub annotations and one step summary
    section per checkpoint when in Actions."""
    from eagle_convert.render import combined
    from eagle_convert.render import formats as rf
    from eagle_convert.render.json_output import stdout_indent

    to_stdout = fmt == "json" and output is None  # as every command's --json: one line into a pipe or a file
    text = combined.to_json(reports, indent=stdout_indent()) if to_stdout else combined.RENDERERS[fmt](reports)
    if output is not None:
        from eagle_convert.normalize.writer import write_text_atomic

        write_text_atomic(output, text)
    elif fmt != "human":
        sys.stdout.write(text)
    if os.environ.get("GITHUB_ACTIONS") == "true" and fmt != "github" and (fmt == "human" or output is not None):
        sys.stdout.write(combined.joined(rf.github_annotations)(reports))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(combined.joined(rf.markdown_summary)(reports))


def register(app: typer.Typer) -> None:
    app.command("verify", help=_help())(verify)


def _help() -> str:
    """verify's help: its docstring, then where its JSON schemas are, as a URL (an installed wheel has no
    repository paths)."""
    from inspect import cleandoc

    from eagle_convert.cli.formatting import url_paragraph
    from eagle_convert.version import SCHEMAS_URL

    return cleandoc(verify.__doc__ or "") + "\n\nThe JSON schemas of the reports:" + url_paragraph(SCHEMAS_URL)
