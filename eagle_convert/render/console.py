"""Rendering of results: rich tables for people, JSON for machines (plain stdout writes, never through rich)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import RULES
from eagle_convert.verify.report import TENSOR_VALUES

if TYPE_CHECKING:  # the reports' modules are imported by the commands that make them
    from eagle_convert.inspect_api import InspectReport
    from eagle_convert.normalize.plan import NormalizeReport
    from eagle_convert.probe.result import ProbeResult
    from eagle_convert.verify.report import VerifyReport

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


UNWRAPPED = 100_000  # the width of a stream that is not a terminal: one line per row, greppable, never wrapped


def _console(stream: TextIO) -> Console:
    """A terminal's width; COLUMNS when set; otherwise (a pipe, a file) no wrapping at all."""
    if os.environ.get("COLUMNS", "").isdigit():
        width: int | None = int(os.environ["COLUMNS"])
    else:
        width = None if stream.isatty() else UNWRAPPED
    return Console(file=stream, highlight=False, width=width)


def stderr_console() -> Console:
    return _console(sys.stderr)


def stdout_console() -> Console:
    return _console(sys.stdout)


def plain(value: object) -> str:
    """A value as people read it in this tool's output: JSON's true/false/null, not Python's True/False/None."""
    return json.dumps(value) if value is None or isinstance(value, bool) else str(value)


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _kv_table(title: str) -> Table:
    table = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    return table


def _row(table: Table, key: str, value: object) -> None:
    table.add_row(key, Text("-" if value is None else plain(value)))


def render_findings(console: Console, findings: list[Finding]) -> None:
    if not findings:
        console.print("No findings.")
        return
    table = Table(title="Findings", title_justify="left")
    table.add_column("rule", no_wrap=True)
    table.add_column("severity", no_wrap=True)
    table.add_column("message", overflow="fold")
    for f in findings:
        table.add_row(
            _rule_cell(f.rule_id),
            Text(f.severity, style=_SEVERITY_STYLE.get(f.severity, "")),
            _message(f.rule_id, f.message),
        )
    console.print(table)
    _fixable_footer(console, [f.rule_id for f in findings])


def _rule_cell(rule_id: str) -> Text:
    """The rule id, marked ``[*]`` when ``eagle-convert normalize`` fixes it (as ruff marks fixable findings)."""
    return Text(rule_id + (" [*]" if RULES.get(rule_id) and RULES[rule_id].fixable else ""))


def _message(rule_id: str, message: str) -> Text:
    """The finding's message, then what to do about it (the rule's fix) for errors and warnings."""
    rule = RULES.get(rule_id)
    text = Text(message)
    if rule is not None and rule.fix:
        text.append(f"\nfix: {rule.fix}", style="dim")
    return text


def _fixable_footer(console: Console, rule_ids: list[str]) -> None:
    fixable = sorted({r for r in rule_ids if r in RULES and RULES[r].fixable})
    if fixable:
        console.print(
            Text(
                f"[*] {len(fixable)} rule(s) fixed by `eagle-convert normalize SRC OUT`: {', '.join(fixable)}; "
                f"`eagle-convert rule {fixable[0]}` tells how."
            )
        )


def render_inspect(report: InspectReport, console: Console) -> None:
    doc = report.to_dict()
    fmt = doc["format"]

    overview = _kv_table(f"Draft checkpoint {report.path}")
    _row(overview, "producer", f"{fmt['producer']} ({fmt['confidence']} confidence)")
    for line in fmt["evidence"]:
        _row(overview, "", f"- {line}")
    _row(overview, "architectures", ", ".join(doc["architectures"]) or None)
    _row(
        overview,
        "weights",
        f"{fmt['weight_format']}, {len(fmt['shards']) or len(fmt['pickle_files'])} file(s)"
        + (", sharded" if fmt["sharded"] else "")
        + (f" ({', '.join(fmt['pickle_files'])}, not read)" if fmt["weight_format"] == "pickle" else ""),
    )
    _row(overview, "layer prefix", fmt["layer_prefix"])
    _row(overview, "draft layers", fmt["num_draft_layers"] or "unknown (no layer tensors, no num_hidden_layers)")
    _row(overview, "attention", f"{doc['attention'].upper()} ({doc['attention_evidence']})")
    _row(overview, "EAGLE version", doc["eagle_version"] + ("  [MoE draft]" if doc["moe"] else ""))
    for name, value in doc["flags"].items():
        _row(overview, name, f"{str(value).lower()} ({doc['flag_sources'][name]})")
    console.print(overview)
    console.print()
    if doc["eagle_version"] != "eagle1":  # EAGLE-1/2 drafts read no aux hidden states
        _render_aux(doc, console)
    _render_dims(doc, console)
    _render_tensors(doc, console)
    render_findings(console, report.findings)


def _render_aux(doc: dict[str, Any], console: Console) -> None:
    aux = doc["aux_layers"]
    layers = _kv_table("Aux-layer ids")
    _row(layers, "ids", aux["ids"])
    _row(layers, "location", aux["location"])
    _row(layers, "convention", f"{aux['convention']} ({aux['confidence']} confidence)")
    for line in aux["evidence"]:
        _row(layers, "", f"- {line}")
    _row(layers, "trained on", f"hs{aux['hidden_state_indices']}" if aux["hidden_state_indices"] else None)
    for convention, picked in aux["readings"].items():
        _row(layers, f"if {convention}", f"hs{picked}")
    for engine, read in aux["engines"].items():
        if "@" not in engine:
            continue  # "vllm"/"sglang" repeat the newest releases, listed by name below
        picked = f"hs{read['hidden_state_indices']}" if read["hidden_state_indices"] is not None else "unknown"
        _row(layers, engine, f"reads {read['ids_from']} ({read['rule']}) -> {picked}")
    target = doc["target"]
    _row(
        layers,
        "target",
        f"family {target['family'] or '?'} from {target['family_source']}; N={target['num_hidden_layers'] or '?'}",
    )
    _row(layers, "K aux states", f"{doc['num_aux_hidden_states']} ({doc['num_aux_hidden_states_source']})")
    console.print(layers)
    console.print()


def _render_dims(doc: dict[str, Any], console: Console) -> None:
    vocab = doc["vocab"]
    mla = doc["attention"] == "mla"
    dims = _kv_table("Dimensions and vocabulary")
    for key, value in doc["dims"].items():
        if key == "head_dim" and mla and not doc["dims"]["head_dim_explicit"]:
            continue  # hidden_size / heads means nothing for MLA: its head dims are the qk_*/v_head_dim rows
        if value is not None and key != "draft_vocab_size_key":
            _row(dims, key, value)
    _row(dims, "target_hidden_size (effective)", doc["target_hidden_size"])
    _row(
        dims,
        "vocab",
        f"V={plain(vocab['vocab_size'])}, Vd={plain(vocab['draft_vocab_size'])} "
        f"(draft_vocab_size {vocab['draft_vocab_size_key']}), d2t={plain(vocab['has_d2t'])}, "
        f"t2d={plain(vocab['has_t2d'])}, lm_head={plain(vocab['has_lm_head'])}, "
        f"embed_tokens={plain(vocab['has_embed_tokens'])}",
    )
    console.print(dims)
    console.print()


def _render_tensors(doc: dict[str, Any], console: Console) -> None:
    tensors = doc["tensors"]
    if tensors["count"]:
        table = Table(
            title=f"Tensors: {tensors['count']}, {_human_bytes(tensors['total_bytes'])}", title_justify="left"
        )
        table.add_column("module")
        table.add_column("tensors", justify="right")
        table.add_column("dtypes")
        table.add_column("size", justify="right")
        for g in tensors["groups"]:
            table.add_row(Text(g["group"]), str(g["count"]), ", ".join(g["dtypes"]), _human_bytes(g["bytes"]))
        console.print(table)
        console.print()


def render_error(message: str, hint: str | None) -> None:
    """``Error: ...`` and ``Hint: ...`` on stderr, each on exactly one line (never wrapped, never marked up)."""
    sys.stderr.write(f"Error: {message}\n")
    if hint:
        sys.stderr.write(f"Hint: {hint}\n")


PLAIN_INTERVAL = 10.0  # seconds between plain progress lines when stderr is not a terminal
_UNITS = {TENSOR_VALUES: "tensors"}  # anything else reported as (what, done, total) counts target layers


class PlainProgress:
    """Progress as plain lines on a stream that is not a terminal (a CI log, a file): a line every ``interval``
    seconds while a piece of work runs, and its last line when it ends; work quicker than that prints nothing."""

    def __init__(self, stream: TextIO, interval: float = PLAIN_INTERVAL) -> None:
        self.stream, self.interval = stream, interval
        self.started: dict[str, float] = {}
        self.printed: set[str] = set()
        self.last = time.monotonic()

    def line(self, what: str, text: str, *, last: bool) -> None:
        now = time.monotonic()
        start = self.started.setdefault(what, now)
        if now - self.last >= self.interval or (last and what in self.printed):
            self.last = now
            self.printed.add(what)
            self.stream.write(f"{what}: {text} ({_clock(now - start)} elapsed)\n")
            self.stream.flush()

    def steps(self, what: str, done: int, total: int) -> None:
        self.line(what, f"{done}/{total} {_UNITS.get(what, 'layers')}", last=done >= total)

    def bytes(self, what: str, done: int, total: int | None) -> None:
        of = f" of {_human_bytes(total)} ({done / total:.0%})" if total else ""
        self.line(what, f"{_human_bytes(done)}{of}", last=total is not None and done >= total)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


@contextmanager
def progress_bar(
    enabled: bool, label: str = "writing", total: int | None = None
) -> Iterator[Callable[[int], None] | None]:
    """Bytes progress on stderr, ``total`` bytes when known: a bar on a terminal, plain periodic lines otherwise
    (the first after ``PLAIN_INTERVAL`` seconds, so quick work prints nothing). Yields the callback to advance it."""
    if not enabled:
        yield None
        return
    if not sys.stderr.isatty():
        plain, done = PlainProgress(sys.stderr), [0]

        def advance(n: int) -> None:
            done[0] += n
            plain.bytes(label, done[0], total)

        yield advance
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    with Progress(
        label,
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=Console(file=sys.stderr),
        transient=True,
    ) as bar:
        task = bar.add_task("write", total=total)
        yield lambda n: bar.advance(task, n)


@contextmanager
def steps_bar(enabled: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    """Progress on stderr for long computations reported as ``(what, done, total)``: on a terminal one bar per
    ``what`` with elapsed and remaining time; otherwise plain lines (start, end, and every ``PLAIN_INTERVAL`` s)."""
    if not enabled:
        yield None
        return
    if not sys.stderr.isatty():
        yield PlainProgress(sys.stderr).steps
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

    tasks: dict[str, Any] = {}
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        "{task.fields[unit]}",
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(file=sys.stderr),
        transient=True,
    ) as bar:

        def update(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total, unit=_UNITS.get(what, "layers"))
            bar.update(tasks[what], completed=done, total=total)

        yield update


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render_normalize(report: NormalizeReport, console: Console) -> None:
    doc = report.to_dict()
    verb = "Plan (dry run, nothing written)" if report.dry_run else "Written"
    head = _kv_table(f"{verb}: {report.source} -> {report.out}")
    _row(head, "source", f"{report.producer} layout {report.layout}")
    _row(head, "profile", report.profile)
    sem = doc["semantics"]
    _row(head, "trained on", f"hs{sem['hidden_states']}" if sem["hidden_states"] else "engine defaults (no ids)")
    _row(
        head,
        "ids written",
        f"top-level {doc['config'].get('eagle_aux_hidden_state_layer_ids')}, "
        f"eagle_config {(doc['config'].get('eagle_config') or {}).get('eagle_aux_hidden_state_layer_ids')}",
    )
    _row(head, "files", ", ".join(doc["files"]))
    _row(head, "bytes", _human_bytes(doc["total_bytes"]))
    console.print(head)
    console.print()
    changes = Table(title="Config changes", title_justify="left")
    for column in ("key", "old", "new", "why"):
        changes.add_column(column, overflow="fold")
    for c in doc["config_changes"]:
        old = "(absent)" if c["change"] == "added" else _short(c["old"])
        new = "(removed)" if c["change"] == "removed" else _short(c["new"])
        changes.add_row(Text(c["key"]), Text(old), Text(new), Text(c["why"]))
    console.print(changes)
    console.print()
    moved = [t for t in doc["tensors"] if t["action"] != "keep"]
    table = Table(title=f"Tensors: {len(doc['tensors'])} ({len(moved)} changed)", title_justify="left")
    for column in ("action", "source", "target", "why"):
        table.add_column(column, overflow="fold")
    for t in moved:
        table.add_row(t["action"], Text(t["source"] or "-"), Text(t["target"] or "-"), Text(t["why"]))
    console.print(table)
    console.print()
    render_findings(console, report.findings)


def render_verify(report: VerifyReport, console: Console) -> None:
    doc = report.to_dict()
    table = Table(title=f"verify {report.path} (level {report.level}, engine {report.engine})", title_justify="left")
    for column in ("rule", "severity", "where", "message"):
        table.add_column(column, overflow="fold")
    for f in report.findings:
        where = " ".join(p for p in (f.file, f.pointer) if p)
        table.add_row(
            _rule_cell(f.rule_id),
            Text(f.severity, style=_SEVERITY_STYLE.get(f.severity, "")),
            Text(where),
            _message(f.rule_id, f.message),
        )
    if report.findings:
        console.print(table)
        _fixable_footer(console, [f.rule_id for f in report.findings])
    if report.probe is not None:
        console.print(_probe_table(report.probe.result))
    need_target = [c["rule_id"] for c in doc["checks"] if c["reason"] == "needs --target"]
    if need_target:
        console.print(
            Text(
                f"No --target: {', '.join(need_target)} skipped (rope, context length and embeddings against "
                "the target), and EC104/EC105 judged the aux-layer ids without the target's layer count (and "
                "family, unless the draft's config names it), which decide what each engine feeds the draft; "
                "pass --target PATH (its config.json is enough for static checks)."
            )
        )
    if report.engine_run:
        render_engine_run(report.engine_run, console)
    ran = sum(c["outcome"] != "skipped" for c in doc["checks"])
    s = doc["summary"]
    verdict = Text(
        "PASS" if report.status == "pass" else "FAIL", style="bold green" if report.status == "pass" else "bold red"
    )
    console.print(
        verdict,
        Text(
            f" {s['errors']} error(s), {s['warnings']} warning(s), {s['infos']} info; "
            f"{ran} of {len(doc['checks'])} rules ran; fail level {report.fail_level}"
        ),
    )


def render_engine_run(run: dict[str, Any], console: Console) -> None:
    """The engine level's table: what the engine measured and what it fed the draft."""
    table = Table(
        title=f"Engine run: {run['engine']} {run['version']} (runner {run['runner']}), {run['prompts']} prompts, "
        f"{run['tokens']} tokens, greedy",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_header=False,
    )
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")
    per_position = " / ".join(f"{r:.3f}" for r in run["acceptance_per_position"]) or "-"
    lossless = {True: "yes", False: "NO", None: "not checked"}[run["lossless"]]
    fed = f"hs{run['hidden_states']}" if run["hidden_states"] is not None else "not captured"
    flags = ", ".join(f"{k} {str(v).lower()}" for k, v in run["flags"].items() if isinstance(v, bool)) or "-"
    rows = (
        ("mean acceptance length", f"{run['mean_acceptance_length']:.3f} over {run['drafts']} drafts"),
        ("the probe on the same run", _same_run(run)),
        ("accept rate per position", per_position),
        ("output equals target alone", lossless),
        ("hidden states fed to the draft", fed),
        ("flags the engine built", flags),
        ("load / generate", f"{run['load_s']:.1f} s / {run['generate_s']:.1f} s"),
        ("engine peak memory", f"{run['peak_rss_mib']:.0f} MiB RSS"),
    )
    for what, value in rows:
        table.add_row(what, Text(value))
    console.print(table)


def _same_run(run: dict[str, Any]) -> str:
    if run.get("probe_acceptance_length") is None:
        return "not measured (the reference forward cannot run this draft)"
    text = "" if run.get("probe_same_text") else " (its greedy text differs from the engine's in places)"
    return f"acceptance length {run['probe_acceptance_length']:.3f}{text}"


def _probe_table(p: ProbeResult) -> Table:
    """The acceptance probe: each reading's top-1 and acceptance length with 95% intervals, and its paired
    comparison with the configured reading (difference, sign test, verdict; "inconclusive" says so)."""
    text = {"given": "given text", "sampled": "the target's sampled text", "greedy": "the target's greedy text"}
    undecided = "" if p.decided else "; some comparisons are inconclusive"
    probe = Table(
        title=f"Acceptance probe: {p.positions} positions of {text.get(p.text, 'text')}, "
        f"{p.steps}-step greedy chains ({p.device}, {p.dtype}){undecided}",
        title_justify="left",
        caption=f"norm_output {str(p.rows[0].norm_output).lower()} unless the reading says otherwise; "
        "[ ]: 95% intervals; accept len: 1 + accepted tokens per draft/verify cycle; Δ top-1: paired difference "
        "from the configured reading; p: sign test; diagnostic readings never raise a finding",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
    )
    probe.add_column("reading", ratio=1)
    for column in ("hidden states", "top-1 [95% CI]", "accept len [95% CI]", "Δ top-1 [95% CI]", "p", "verdict"):
        probe.add_column(column, no_wrap=True)
    for row in p.rows:
        configured = row.reading == p.configured
        mark = " (configured)" if configured and row.reading != "configured" else ""
        mark += " (diagnostic)" if row.diagnostic else ""
        lo, hi = row.top1_ci
        alo, ahi = row.acceptance_length_ci
        verdict = row.verdict
        if verdict == "inconclusive" and row.positions_needed:
            verdict += f" (~{row.positions_needed} positions needed)"
        dlo, dhi = row.delta_top1_ci
        probe.add_row(
            Text(row.reading + mark, style="bold" if row.reading == p.best else ""),
            f"hs{row.hidden_states}",
            f"{row.top1:.1%} [{lo:.1%}, {hi:.1%}]",
            f"{row.acceptance_length:.3f} [{alo:.3f}, {ahi:.3f}]",
            "" if configured else f"{row.delta_top1:+.1%} [{dlo:+.1%}, {dhi:+.1%}]",
            "" if configured else f"{row.p_value:.0e}",
            Text(verdict, style={"better": "bold red", "inconclusive": "yellow"}.get(verdict.split(" ")[0], "")),
        )
    return probe
