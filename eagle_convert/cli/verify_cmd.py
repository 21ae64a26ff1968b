"""`eagle-convert verify PATH`: the pre-deploy gate (rules, reports, CI formats, exit codes)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from eagle_convert import engines
from eagle_convert.cli.options import (
    ENGINES_HELP,
    OUTPUT,
    RECORDED_HELP,
    aux_convention_option,
    choice,
    chosen_engines,
    color_option,
    device_option,
    dtype_option,
    engine_option,
    fail_level_option,
    level_option,
    quiet_option,
    verbose_option,
)
from eagle_convert.engines import NEW_TOKENS as ENGINE_NEW_TOKENS
from eagle_convert.errors import (
    EXIT_BAD_INPUT,
    EXIT_FINDINGS,
    EXIT_NOTHING_TO_CHECK,
    EXIT_OK,
    EagleConvertError,
    UsageError,
)
from eagle_convert.probe.text import TEXTS as PROBE_TEXTS
from eagle_convert.reference.budget import MIN_POSITIONS as PROBE_POSITIONS
from eagle_convert.reference.budget import PROBE_STEPS
from eagle_convert.rules.registry import LEVELS
from eagle_convert.verify.request import (
    DEFAULT_FAIL_LEVEL,
    MAX_ENGINE_TOKENS,
    ORACLES,
    SERVER_CONCURRENCY,
    SERVER_TIMEOUT,
)

if TYPE_CHECKING:
    from eagle_convert.real_engine.attached import AttachedServer
    from eagle_convert.verify.report import VerifyReport
    from eagle_convert.verify.request import CheckedRequest


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


def _setting(cli: str | None, settings: dict[str, Any], key: str, default: str) -> str:
    """A command-line value wins over [tool.eagle-convert] in pyproject.toml, which wins over the default."""
    return cli if cli is not None else str(settings.get(key, default))


# verify -h: its options in panels (drawn by cli/formatting.py, as the help stays plain)
CHECKS = "What to check"
OUTPUT_PANEL = "Output"
PROBE = "Probe (--level forward, target)"
ENGINE = "Engine (--level engine)"
SERVER = "Server (--engine-url: the engine level on a running server)"
HUB = "Hub"


def verify(
    paths: list[Path] = typer.Argument(
        ...,
        metavar="PATH",
        help="Draft checkpoint directories, or Hub repos owner/name[@revision] (static level); a file stands for the "
        "directory that holds it, and each checkpoint is verified once. Several paths: each is reported, and the "
        "exit code is the worst.",
        show_default=False,
    ),
    target: Path | None = typer.Option(
        None,
        "--target",
        metavar="PATH",
        help="Target model directory or config.json (N, family, rope, positions).",
        rich_help_panel=CHECKS,
    ),
    engine: str | None = engine_option(
        f"{ENGINES_HELP} {RECORDED_HELP} --level engine runs SGLang when only SGLang releases are selected, else vLLM.",
        rich_help_panel=CHECKS,
    ),
    level: str = level_option(
        "static: config and headers; tensors: also values; forward: the draft's forward; target: the probe; "
        "engine: also the draft in a real engine (`eagle-convert engine-env` builds one).",
        rich_help_panel=CHECKS,
    ),
    strict: bool = typer.Option(
        False,
        "--strict",
        help="Ambiguous aux-id convention, missing ids and pickle are errors.",
        rich_help_panel=CHECKS,
    ),
    fail_level: str | None = fail_level_option(
        "Lowest severity that fails [error].", default=False, rich_help_panel=CHECKS
    ),
    select: str | None = typer.Option(
        None,
        "--select",
        metavar="RULES",
        help="Only these rules (ids or prefixes, comma-separated).",
        rich_help_panel=CHECKS,
    ),
    ignore: str | None = typer.Option(
        None, "--ignore", metavar="RULES", help="Skip these rules (ids or prefixes).", rich_help_panel=CHECKS
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
    no_hash: bool = typer.Option(
        False, "--no-hash", help="Skip the sha256 manifest of the checkpoint files.", rich_help_panel=OUTPUT_PANEL
    ),
    token_ids: Path | None = typer.Option(
        None,
        "--token-ids",
        metavar="FILE",
        help="--level target: a JSON list "
        "of token-id lists to probe with (default: the target's own "
        "continuations of varied prompts through its chat template, see --probe-text).",
        rich_help_panel=PROBE,
    ),
    reference_hidden_states: Path | None = typer.Option(
        None,
        "--reference-hidden-states",
        metavar="FILE",
        help="--level target: a safetensors file of aux states saved by a trainer or engine (token_ids [T], "
        "hidden_states [K, T, Ht]); reports which target boundaries they are.",
        rich_help_panel=PROBE,
    ),
    oracle: str | None = choice(
        ORACLES,
        None,
        "--oracle",
        help="--level target: also check the reference target (transformers' model with its weights streamed from "
        "the checkpoint) against this implementation loaded whole in memory (transformers' from_pretrained).",
        rich_help_panel=PROBE,
    ),
    prompts: Path | None = typer.Option(
        None,
        "--prompts",
        metavar="FILE",
        help="--level target: text prompts, one per line, tokenized with the "
        "target's tokenizer.json and continued by the target.",
        rich_help_panel=PROBE,
    ),
    probe_steps: int = typer.Option(
        PROBE_STEPS, "--probe-steps", min=1, max=16, help="--level target: draft chain length.", rich_help_panel=PROBE
    ),
    probe_text: str = choice(
        PROBE_TEXTS,
        PROBE_TEXTS[0],
        "--probe-text",
        help="--level target without --token-ids: the target's own continuations of the prompts, greedy "
        "(acceptance exactly as greedy speculative decoding) or sampled at temperature 1.",
        rich_help_panel=PROBE,
    ),
    probe_positions: int = typer.Option(
        PROBE_POSITIONS,
        "--probe-positions",
        min=16,
        help="--level target: positions to score at least; while a comparison is undecided, more "
        "text up to 4 times as many.",
        rich_help_panel=PROBE,
    ),
    device: str = device_option(
        "--level forward/target: where the reference models run (auto: the GPU when torch sees one).",
        rich_help_panel=PROBE,
    ),
    dtype: str = dtype_option("--level forward/target: compute precision.", rich_help_panel=PROBE),
    engine_python: Path | None = typer.Option(
        None,
        "--engine-python",
        metavar="PATH",
        help="--level engine: the Python of the engine environment (default: $EAGLE_CONVERT_ENGINE_PYTHON, else "
        "the venv in the current directory, .venv-engine or .venv-sglang, else the one `eagle-convert engine-env` "
        "builds).",
        rich_help_panel=ENGINE,
    ),
    engine_tokens: int = typer.Option(
        ENGINE_NEW_TOKENS,
        "--engine-tokens",
        min=1,
        max=MAX_ENGINE_TOKENS,
        help="--level engine and --engine-url: new tokens the engine generates per prompt (EOS ignored).",
        rich_help_panel=ENGINE,
    ),
    engine_arg: list[str] | None = typer.Option(
        None,
        "--engine-arg",
        metavar="KEY=VALUE",
        help="--level engine: a setting of the engine in its own Python name (vLLM's LLM(...)/EngineArgs, SGLang's "
        "ServerArgs), e.g. tensor_parallel_size=2; the value is JSON when it parses, else text. Repeatable; validated "
        "by the engine before it loads anything. At every level, the deployment settings that decide what a selected "
        "release does with the draft: eagle3_layers_to_capture=[1,5,9] (trtllm: what TensorRT-LLM feeds it), "
        "platform=rocm and pipeline_parallel_size=2 (vllm: whether the target class captures).",
        show_default=False,
        rich_help_panel=ENGINE,
    ),
    engine_config: Path | None = typer.Option(
        None,
        "--engine-config",
        metavar="FILE",
        help="--level engine (the deployment settings: every level): engine settings as one JSON (.json) or YAML "
        "mapping, the same keys as --engine-arg, which wins over it.",
        rich_help_panel=ENGINE,
    ),
    engine_url: str | None = typer.Option(
        None,
        "--engine-url",
        metavar="URL",
        help="Measure the draft on a running server that serves --target with it (vLLM's OpenAI-compatible server, "
        f"SGLang's or trtllm-serve, detected; --engine {'|'.join(engines.ATTACHABLE)} forces one): the engine level "
        "without starting an engine, so --target needs only its config. Implies --level engine.",
        rich_help_panel=SERVER,
    ),
    engine_url_token: str | None = typer.Option(
        None,
        "--engine-url-token",
        metavar="KEY",
        help="--engine-url: the server's API key (default: $EAGLE_CONVERT_ENGINE_URL_TOKEN); never printed.",
        rich_help_panel=SERVER,
    ),
    engine_concurrency: int = typer.Option(
        SERVER_CONCURRENCY,
        "--engine-concurrency",
        min=1,
        max=1024,
        help="--engine-url: requests in flight at most.",
        rich_help_panel=SERVER,
    ),
    engine_timeout: float = typer.Option(
        SERVER_TIMEOUT,
        "--engine-timeout",
        min=1.0,
        metavar="SECONDS",
        help="--engine-url: seconds one request may take.",
        rich_help_panel=SERVER,
    ),
    token: str | None = typer.Option(
        None,
        "--token",
        help="Hub token for private repos (default: HF_TOKEN or the login); never printed.",
        rich_help_panel=HUB,
    ),
    aux_convention: str | None = aux_convention_option(
        "Declare what the aux-layer ids mean (as the trainer used them), as inspect.", rich_help_panel=CHECKS
    ),
    _quiet: bool = quiet_option(rich_help_panel=OUTPUT_PANEL),
    _verbose: bool = verbose_option(rich_help_panel=OUTPUT_PANEL),
    _color: str = color_option(rich_help_panel=OUTPUT_PANEL),
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
    from eagle_convert.verify.request import (
        ComputeRequest,
        InProcessEngine,
        ProbeRequest,
        VerifyRequest,
        rule_items,
    )
    from eagle_convert.verify.run import Hooks, verify_checkpoint

    if as_json and output_format not in ("human", "json"):
        raise UsageError(f"--json and --format {output_format} ask for two formats", hint="give one of them")
    fmt = "json" if as_json else output_format
    server = _attached_server(engine_url, engine_url_token, engine_concurrency, engine_timeout, engine, engine_tokens)
    if server is not None and (engine_arg or engine_config is not None or engine_python is not None):
        raise UsageError(
            "--engine-arg, --engine-config and --engine-python set the engine the engine level starts; with "
            "--engine-url the server runs with its own settings"
        )
    settings = load_settings(Path.cwd())
    request = VerifyRequest(
        target=target,
        engine=chosen_engines(engine, settings),
        level=level,
        strict=strict,
        fail_level=_setting(fail_level, settings, "fail-level", DEFAULT_FAIL_LEVEL),
        select=rule_items(select if select is not None else settings.get("select")),
        ignore=rule_items(ignore if ignore is not None else settings.get("ignore")),
        compute_hashes=not no_hash,
        hub_token=token,
        aux_convention=aux_convention,
        probe=ProbeRequest(
            token_ids_file=token_ids,
            prompts=prompts,
            text=probe_text,
            steps=probe_steps,
            positions=probe_positions,
            reference_hidden_states=reference_hidden_states,
            oracle=oracle,
        ),
        compute=ComputeRequest(device, dtype),
        engine_run=server or InProcessEngine(engine_python, engine_tokens, tuple(engine_arg or ()), engine_config),
    )
    checked = request.validate()  # every usage error, before any checkpoint is opened
    checkpoints = checkpoint_paths(paths)
    _no_stray_folder(checkpoints)
    for path in checkpoints:
        checked.check_source(path)
    level = checked.level
    if output is not None:
        inputs = [*checkpoints, target, token_ids, prompts, reference_hidden_states, engine_config]
        from eagle_convert.read.output_place import check_output_place

        check_output_place(output, [Path(p) for p in (*inputs, engine_python) if p is not None], directory=False)
    runs: list[tuple[VerifyReport, EagleConvertError | None]] = []
    for path in checkpoints:
        try:
            with (
                steps_bar(enabled=level != LEVELS[0] and not OUTPUT.quiet) as steps,
                progress_bar(
                    enabled=not no_hash and not OUTPUT.quiet, label="hashing", total=_local_bytes(path)
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


def _attached_server(
    url: str | None, token: str | None, concurrency: int, timeout: float, engine: str | None, new_tokens: int
) -> AttachedServer | None:
    """The running server of --engine-url and its options (None without it; the request checks the URL); --engine
    names its engine only when it is one of those --engine-url measures (a release list leaves it to detection). An
    option of the attached run without --engine-url is a usage error, never dropped."""
    from eagle_convert.real_engine.attached import ENGINES, AttachedServer, token_from_env

    if url is None:
        server_only = (
            ("--engine-url-token", token is not None),
            ("--engine-concurrency", concurrency != SERVER_CONCURRENCY),
            ("--engine-timeout", timeout != SERVER_TIMEOUT),
        )
        for name, given in server_only:
            if given:
                raise UsageError(f"{name} goes with --engine-url")
        return None
    forced = engine.strip().lower() if engine is not None and engine.strip().lower() in ENGINES else None
    return AttachedServer(url, token or token_from_env(), concurrency, timeout, forced, new_tokens)


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
