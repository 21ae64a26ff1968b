"""Rendering of results: rich tables for people, JSON for machines (plain stdout writes, never through rich).

Input reaches people as plain strings, never as a ``Text`` built here: the console escapes every string it is given
(:class:`EscapingConsole`), before layout. A ``Text`` carries this module's own words only (a style, a line break of
its own).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO, assert_never

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from eagle_convert.render import detail
from eagle_convert.render.escape import one_line
from eagle_convert.render.grouping import More, table_rows
from eagle_convert.render.probe_table import probe_conclusion, probe_table
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import NOT_EAGLE3, RECORD_CONTRADICTED, Fixes
from eagle_convert.verify.deployment import DEPLOYMENT_SUBJECTS
from eagle_convert.verify.report import TENSOR_VALUES

if TYPE_CHECKING:  # the reports' modules are imported by the commands that make them
    from eagle_convert.inspect_api import InspectReport
    from eagle_convert.normalize.plan import NormalizeReport
    from eagle_convert.probe.result import ProbeResult
    from eagle_convert.real_engine.base import EngineObservation
    from eagle_convert.real_engine.record import EngineRun, InProcessRun, LoadOnlyRun, ServedRun
    from eagle_convert.verify.report import VerifyReport

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


UNWRAPPED = 100_000  # the width of a stream that is not a terminal: one line per row, greppable, never wrapped
_SGR_PARAMS = frozenset("0123456789;")


def without_trailing_blanks(line: str) -> str:
    """``line`` without the blanks at its end, before any closing colour codes (which stay). Linear in the line: a
    regular expression for the same (blanks, then codes, then the end) backtracked over every run of blanks inside
    the line, quadratic in a run, and rich pads a cell to the width of its longest value."""
    end = len(line)
    while end >= 3 and line[end - 1] == "m":  # peel the closing ESC [ ... m codes off the end
        start = line.rfind("\x1b[", max(0, end - 64), end)
        if start < 0 or not _SGR_PARAMS.issuperset(line[start + 2 : end - 1]):
            break
        end = start
    return line[:end].rstrip(" \t") + line[end:]


class NoTrailingBlanks:
    """A text stream that drops the blanks rich pads each line with (to the table's or the console's width): what
    goes to a pipe, a file or a CI log ends where its text ends. Lines are written whole; a partial one waits for
    its end or a flush."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.pending = stream, ""

    def write(self, text: str) -> int:
        whole, newline, self.pending = (self.pending + text).rpartition("\n")
        if newline:
            self.stream.write("\n".join(map(without_trailing_blanks, whole.split("\n"))) + "\n")
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.stream.write(self.pending)
            self.pending = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"


class EscapingConsole(Console):
    """A console that shows every string as its characters: each is escaped by ``one_line`` where rich turns it into
    text (table cells, titles, captions, printed lines; measured and laid out as escaped, so columns stay aligned),
    and read without markup or emoji codes. Colour stays: rich's own style codes are not in the strings."""

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(one_line(text), **options)

    def print(self, *objects: Any, **options: Any) -> None:
        """A table's title and caption are lines of their own: rich wraps them at the table's width, which broke
        paths (``.../for/th`` / ``e/normalized/draft``) and split ``[`` from ``]`` even where the line had room. At a
        width (a terminal, COLUMNS) they wrap at the console's, between words; off a terminal, never."""
        whole = self.width >= UNWRAPPED
        super().print(*(_annotations_apart(o, whole) for o in objects), **options)


def _annotations_apart(renderable: Any, whole: bool) -> Any:
    """A table with its title above it and its caption below it as lines (the table itself unchanged)."""
    if not isinstance(renderable, Table) or (renderable.title is None and renderable.caption is None):
        return renderable
    table = copy.copy(renderable)
    table.title = table.caption = None
    title = [] if renderable.title is None else [_line(renderable.title, renderable.title_style, whole)]
    caption = [] if renderable.caption is None else [_line(renderable.caption, renderable.caption_style, whole)]
    return Group(*title, table, *caption)


def _line(annotation: Any, style: Any, whole: bool) -> Text:
    text = annotation.copy() if isinstance(annotation, Text) else Text(one_line(str(annotation)))
    if style:
        text.stylize(style)
    if whole:
        text.no_wrap, text.overflow = True, "ignore"
    return text


def _console(stream: TextIO) -> Console:
    """A terminal's width; COLUMNS when set; otherwise (a pipe, a file) no wrapping at all. Off a terminal, lines
    carry no trailing blanks."""
    tty = stream.isatty()
    if os.environ.get("COLUMNS", "").isdigit():
        width: int | None = int(os.environ["COLUMNS"])
    else:
        width = None if tty else UNWRAPPED
    return EscapingConsole(
        file=stream if tty else NoTrailingBlanks(stream),  # type: ignore[arg-type]
        highlight=False,
        markup=False,
        emoji=False,
        width=width,
    )


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
    table.add_row(key, "-" if value is None else plain(value))


def render_findings(console: Console, findings: list[Finding]) -> None:
    if not findings:
        console.print("No findings.")
        return
    table = Table(title="Findings", title_justify="left")
    table.add_column("rule", no_wrap=True)
    table.add_column("severity", no_wrap=True)
    table.add_column("message", overflow="fold")
    fixes = Fixes.among(findings)
    for f in table_rows(findings):  # one row for a finding several releases share; ROWS_PER_RULE of a rule
        if isinstance(f, More):
            table.add_row(f.rule_id, "", f.message)
            continue
        table.add_row(
            _rule_cell(f.rule_id, fixes),
            Text(f.severity, style=_SEVERITY_STYLE.get(f.severity, "")),
            _message(f.rule_id, f.message, fixes),
        )
    console.print(table)
    _fixable_footer(console, findings)


def _rule_cell(rule_id: str, fixes: Fixes) -> Text:
    """The rule id, marked ``[*]`` when ``eagle-convert normalize`` fixes it (as ruff marks fixable findings)."""
    return Text(rule_id + (" [*]" if fixes.fixable(rule_id) else ""))


def _message(rule_id: str, message: str, fixes: Fixes) -> RenderableType:
    """The finding's message, then what to do about it (the rule's fix, read among the report's findings) for
    errors and warnings."""
    fix = fixes.fields(rule_id)["fix"]
    if not fix:
        return message
    return Group(message, Text(f"fix: {fix}", style="dim"))


def _fixable_footer(console: Console, findings: list[Finding]) -> None:
    if any(f.rule_id == NOT_EAGLE3 for f in findings):  # said once: the other findings read it as EAGLE3 would
        console.print(Text("EC001: this is not an EAGLE3 draft; the other findings read it as EAGLE3 would, and "
                           "`eagle-convert normalize` does not convert it."))  # fmt: skip
        return
    fixes = Fixes.among(findings)
    fixed = sorted(rule_id for rule_id in fixes.ids if fixes.fixable(rule_id))
    # beside EC113 normalize converts only once --aux-convention says which reading of the ids is true
    told = " --aux-convention output-of|input-to" if any(f.rule_id == RECORD_CONTRADICTED for f in findings) else ""
    if fixed:
        console.print(
            Text(
                f"[*] {len(fixed)} rule(s) fixed by `eagle-convert normalize SRC OUT{told}`: {', '.join(fixed)}; "
                f"`eagle-convert rule {fixed[0]}` tells how."
            )
        )


def render_inspect(report: InspectReport, console: Console, verbosity: int = 0) -> None:
    """The draft's tables, its findings and the summary line (-q: the summary line only; -v: also every tensor)."""
    if verbosity < 0:
        console.print(detail.inspect_summary(report), soft_wrap=True)
        return
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
    if verbosity > 0 and doc["tensors"]["items"]:
        console.print(detail.tensors_table(doc))
        console.print()
    if report.findings:
        render_findings(console, report.findings)
    console.print(detail.inspect_summary(report), soft_wrap=True)


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
        unchecked = "" if engine in doc["engines"] else "  (not checked: not in --engine)"
        _row(layers, engine, f"reads {read['ids_from']} ({read['rule']}) -> {picked}{_setting(read)}{unchecked}")
    target = doc["target"]
    _row(
        layers,
        "target",
        f"family {target['family'] or '?'} from {target['family_source']}; N={target['num_hidden_layers'] or '?'}",
    )
    _row(layers, "K aux states", f"{doc['num_aux_hidden_states']} ({doc['num_aux_hidden_states_source']})")
    console.print(layers)
    console.print()


def _setting(read: dict[str, Any]) -> str:
    """What a release that takes its capture from the deployment needs there to feed the trained states."""
    if read.get("capture_impossible"):
        return f"; no setting feeds the trained states: {read['capture_impossible']}"
    setting = read.get("capture_setting")
    return "".join(f"; set {k}: {v}" for k, v in setting.items()) if setting else ""


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
            table.add_row(g["group"], str(g["count"]), ", ".join(g["dtypes"]), _human_bytes(g["bytes"]))
        console.print(table)
        console.print()


def render_error(message: str, hint: str | None) -> None:
    """``Error: ...`` and ``Hint: ...`` on stderr, each on exactly one line (never wrapped, never marked up, control
    characters escaped)."""
    sys.stderr.write(f"Error: {one_line(message)}\n")
    if hint:
        sys.stderr.write(f"Hint: {one_line(hint)}\n")


PLAIN_INTERVAL = 10.0  # seconds between plain progress lines when stderr is not a terminal
# What each piece of long work reported as (what, done, total) counts (probe/target.py's GENERATING counts steps,
# probe/run.py's chains count chains); anything else counts target layers.
_UNITS = {TENSOR_VALUES: "tensors", "target: generating probe text": "steps", "probe: draft chains": "chains"}


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


class ByteProgress:
    """The callback ``progress_bar`` yields: ``progress(n)`` advances it by n bytes; ``progress.total(n)`` sets the
    bytes there are when the work learns it only once it starts (normalize plans before it writes)."""

    def __init__(self, advance: Callable[[int], None], total: Callable[[int], None]) -> None:
        self._advance, self._total = advance, total

    def __call__(self, n: int) -> None:
        self._advance(n)

    def total(self, n: int) -> None:
        self._total(n)


@contextmanager
def progress_bar(enabled: bool, label: str = "writing", total: int | None = None) -> Iterator[ByteProgress | None]:
    """Bytes progress on stderr, ``total`` bytes when known (or once ``.total(n)`` says): a bar on a terminal, plain
    periodic lines otherwise (the first after ``PLAIN_INTERVAL`` seconds, so quick work prints nothing)."""
    if not enabled:
        yield None
        return
    if not sys.stderr.isatty():
        plain, done, size = PlainProgress(sys.stderr), [0], [total]

        def advance(n: int) -> None:
            done[0] += n
            plain.bytes(label, done[0], size[0])

        yield ByteProgress(advance, lambda n: size.__setitem__(0, n))
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
        task = bar.add_task("write", total=total, visible=total is not None)  # shown once its total is known
        yield ByteProgress(lambda n: bar.advance(task, n), lambda n: bar.update(task, total=n, visible=True))


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


def render_normalize(report: NormalizeReport, console: Console, verbosity: int = 0) -> None:
    """The plan or what was written, config changes, tensors and findings (-q: one summary line)."""
    if verbosity < 0:
        console.print(detail.normalize_summary(report), soft_wrap=True)
        return
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
    if doc["config_changes"]:
        changes = Table(title="Config changes", title_justify="left")
        for column in ("key", "old", "new", "why"):
            changes.add_column(column, overflow="fold")
        for c in doc["config_changes"]:
            old = "(absent)" if c["change"] == "added" else _short(c["old"])
            new = "(removed)" if c["change"] == "removed" else _short(c["new"])
            changes.add_row(c["key"], old, new, c["why"])
        console.print(changes)
    else:
        console.print("Config changes: none (the config already says everything explicitly)")
    console.print()
    moved = [t for t in doc["tensors"] if t["action"] != "keep"]
    title = f"Tensors: {len(doc['tensors'])} ({len(moved)} changed)"
    if moved:
        table = Table(title=title, title_justify="left")
        for column in ("action", "source", "target", "why"):
            table.add_column(column, overflow="fold")
        for t in moved:
            table.add_row(t["action"], t["source"] or "-", t["target"] or "-", t["why"])
        console.print(table)
    else:
        console.print(f"{title}: every tensor keeps its name and bytes")
    console.print()
    render_findings(console, report.findings)
    if (verdicts := detail.verify_verdicts(report)) is not None:
        console.print()
        console.print(verdicts)


def render_verify(report: VerifyReport, console: Console, verbosity: int = 0) -> None:
    """Findings, the probe, the rules that did not run, the engine run and the verdict (-q: the verdict only; -v:
    also every rule with its outcome)."""
    if verbosity < 0:
        console.print(detail.verdict(report), soft_wrap=True)
        return
    doc = report.to_dict()
    table = Table(title=f"verify {report.path} (level {report.level}, engine {report.engine})", title_justify="left")
    for column in ("rule", "severity", "where", "message"):
        table.add_column(column, overflow="fold")
    fixes = Fixes.among(report.findings)
    for f in table_rows(report.findings):  # one row for a finding several releases share; ROWS_PER_RULE of a rule
        if isinstance(f, More):
            table.add_row(f.rule_id, "", "", f.message)
            continue
        where = " ".join(p for p in (f.file, f.pointer) if p)
        where = f"deployment: {f.subject}" if f.subject in DEPLOYMENT_SUBJECTS else where
        table.add_row(
            _rule_cell(f.rule_id, fixes),
            Text(f.severity, style=_SEVERITY_STYLE.get(f.severity, "")),
            where,
            _message(f.rule_id, f.message, fixes),
        )
    if report.findings:
        console.print(table)
        _fixable_footer(console, report.findings)
    if report.probe is not None:
        console.print(probe_table(report.probe.result, console.width))
        console.print(Text(probe_conclusion(report.probe.result)))
    _render_not_run(doc["checks"], console)
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
    if report.engine_run is not None:
        render_engine_run(report.engine_run, console, report.probe.result if report.probe is not None else None)
    if verbosity > 0:
        console.print(detail.checks_table(report))
    if (note := detail.engines_note(report)) is not None:
        console.print(note)
    console.print(detail.verdict(report), soft_wrap=True)


def _render_not_run(checks: list[dict[str, Any]], console: Console) -> None:
    """The rules that did not run, grouped by why (the level, the engines, a missing input); rules left out by
    --select/--ignore are counted, not listed."""
    why: dict[str, list[str]] = {}
    for c in checks:
        if c["outcome"] == "skipped":
            why.setdefault(c["reason"], []).append(c["rule_id"])
    if not why:
        return
    table = _kv_table(f"Rules not run: {sum(map(len, why.values()))} of {len(checks)}")
    for reason, ids in why.items():
        shown = f"{len(ids)} rule(s)" if reason == "not selected" else ", ".join(ids)
        table.add_row(reason + (" (--select/--ignore)" if reason == "not selected" else ""), shown)
    console.print(table)


def render_engine_run(run: EngineRun, console: Console, probe: ProbeResult | None = None) -> None:
    """The engine level's table, one per kind of run: what the engine measured and what it fed the draft; each
    acceptance length says which text it was measured on (the probe table's, above, is on other text than the
    engine run)."""
    from eagle_convert.real_engine.record import InProcessRun, LoadOnlyRun, ServedRun

    match run:
        case LoadOnlyRun():
            render_engine_load(run, console)
        case ServedRun():
            render_engine_server(run, console, probe)
        case InProcessRun():
            render_engine_in_process(run, console, probe)
        case _:
            assert_never(run)


def render_engine_in_process(run: InProcessRun, console: Console, probe: ProbeResult | None = None) -> None:
    """A run the engine decoded in its own environment: acceptance, the probe on the same run, the fed states."""
    o = run.observation
    prompts, tokens = len(o.outputs), sum(len(out) for out in o.outputs)
    table = Table(
        title=f"Engine run: {o.engine} {o.version} (runner {o.runner}), {prompts} prompts, {tokens} tokens, greedy",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_header=False,
    )
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")
    doc = run.to_dict()
    per_position = " / ".join(f"{r:.3f}" for r in doc["acceptance_per_position"]) or "-"
    lossless = {True: "yes", False: "NO", None: "not checked"}[doc["lossless"]]
    fed = f"hs{run.hidden_states}" if run.hidden_states is not None else "not captured"
    flags = ", ".join(f"{k} {str(v).lower()}" for k, v in o.flags.items() if isinstance(v, bool)) or "-"
    rows = (
        (
            "mean acceptance length",
            f"{run.mean_acceptance_length:.3f} over {o.drafts} drafts: the engine on its {prompts} prompts, {tokens} "
            "new tokens",
        ),
        ("the probe on the same run", _same_run(run.probe_acceptance_length, run.probe_same_text)),
        *_probe_elsewhere(probe),
        ("accept rate per position", per_position),
        ("output equals target alone", lossless),
        ("hidden states fed to the draft", fed),
        ("flags the engine built", flags),
        ("load / generate", f"{o.load_s:.1f} s / {o.generate_s:.1f} s"),
        ("engine peak memory", f"{o.peak_rss_mib:.0f} MiB RSS"),
        *(("not observed", line) for line in o.not_observed),
    )
    for what, value in rows:
        table.add_row(what, value)
    console.print(table)


def render_engine_server(run: ServedRun, console: Console, probe: ProbeResult | None = None) -> None:
    """The engine level against a running server (--engine-url): what the server measured for this run, which
    draft it serves, other clients' traffic, and what a client cannot observe."""
    m, server = run.measured, run.measured.server
    table = Table(
        title=f"Engine run on a server: {server.engine} {server.version} at {server.url}, {m.prompts} prompts, "
        f"{sum(len(o) for o in m.outputs)} tokens, greedy",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_header=False,
    )
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")
    per_position = " / ".join(f"{r:.3f}" for r in m.acceptance_per_position) or "-"
    foreign = "; ".join(f"{c.counter} moved {c.observed:g}, this run {c.expected:g}" for c in m.foreign_traffic)
    k = server.num_speculative_tokens
    same_run = (
        _same_run(run.probe_acceptance_length, run.probe_same_text)
        if run.probe_not_run is None
        else f"not run: {run.probe_not_run}"
    )
    rows = (
        (
            "mean acceptance length",
            f"{m.mean_acceptance_length:.3f} over {m.drafts} drafts ({m.measured_from}; "
            f"{m.concurrency} requests in flight at most)",
        ),
        ("the probe on the same run", same_run),
        *_probe_elsewhere(probe),
        ("accept rate per position", per_position),
        ("speculative settings", f"{server.method or '?'}, {k if k is not None else '?'} draft tokens per step"),
        ("draft served", f"{m.draft_identity}: {m.draft_identity_note}"),
        ("other traffic", foreign or "none: the counters moved by this run's requests only"),
        ("requests", f"{m.wall_s:.1f} s"),
        *(("not observed", line) for line in run.not_observed),
    )
    for what, value in rows:
        table.add_row(what, value)
    console.print(table)


def _load_table(title: str, o: EngineObservation) -> Table:
    """The two-column table of a load-only engine run, captioned with why nothing was measured."""
    table = Table(
        title=title,
        title_justify="left",
        caption=o.not_measured,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_header=False,
    )
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")
    return table


def render_engine_load(run: LoadOnlyRun, console: Console) -> None:
    """An engine run that loaded the draft and set up the capture without decoding (SGLang on a CPU): what the
    engine read and built, where each file tensor went, and why acceptance was not measured; or an engine that
    refused the draft (EC728): its own error."""
    o = run.observation
    if run.refused is not None:
        table = _load_table(f"Engine load: {o.engine} {o.version} refused the draft; acceptance not measured", o)
        table.add_row("the engine's error", run.refused)
        table.add_row("load", f"{o.load_s:.1f} s until the refusal")
        console.print(table)
        return
    built = o.built or {}
    table = _load_table(
        f"Engine load: {o.engine} {o.version}, target {o.target_class or '?'}; acceptance not measured", o
    )
    ids = o.requested_layers
    tensors = o.tensors or {}
    dropped = run.dropped_tensors or []
    hot = built.get("hot_token_id")
    rows = (
        ("ids the engine read", str(ids) if ids is not None else "none: the engine's defaults"),
        ("hidden states it captures", f"hs{run.hidden_states}" if run.hidden_states is not None else "-"),
        ("draft class", str(built.get("class", "-"))),
        ("K (fc)", f"{built.get('num_aux')}, fc {built.get('fc_shape')}"),
        (
            "norms built",
            ", ".join(f"{k} {str(built.get(k)).lower()}" for k in ("fc_norm", "input_norm", "norm_output")),
        ),
        ("lm_head", str(built.get("lm_head", "-"))),
        ("hot tokens (d2t)", f"{hot}" if hot is not None else "none"),
        ("file tensors loaded", f"{len(tensors) - len(dropped)} of {len(tensors)}"),
        ("dropped", ", ".join(dropped) or "none"),
        ("load", f"{o.load_s:.1f} s, engine peak memory {o.peak_rss_mib:.0f} MiB RSS"),
    )
    for what, value in rows:
        table.add_row(what, value)
    console.print(table)


def _same_run(acceptance_length: float | None, same_text: bool | None) -> str:
    if acceptance_length is None:
        return "not measured (the reference forward cannot run this draft)"
    text = (
        "the same text as the engine's"
        if same_text
        else "the reference target's greedy text, which differs from the engine's in places"
    )
    return (
        f"{acceptance_length:.3f}: the reference forward on the same prompts and new tokens, {text}; "
        "equal to the engine's when the engine runs the draft as the weights need"
    )


def _probe_elsewhere(probe: ProbeResult | None) -> tuple[tuple[str, str], ...]:
    """The probe table's configured acceptance length, and why it differs from the two above: other text."""
    if probe is None or not any(r.reading == probe.configured for r in probe.rows):
        return ()
    row = probe.row(probe.configured)
    return (
        (
            "the probe table above",
            f"{row.acceptance_length:.3f} ({row.reading} row): measured on other text ({probe.positions} positions "
            f"of {probe.sequences} sequences of its own prompts), so it differs from the two above",
        ),
    )
