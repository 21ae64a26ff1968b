"""The acceptance probe's table for people: every reading's figures, what each number is, and a verdict that is
never cut. At a narrow console the less important columns are left out (intervals first, the verdict never), and
the caption says which; ``--format json`` keeps every figure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich import box
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # render never imports the probe (torch-free paths): its results come typed
    from eagle_convert.probe.result import ProbeResult, ProbeRow

_VERDICT_STYLE = {"better": "bold red", "inconclusive": "yellow"}
_READING_MIN = 20  # the reading's name wraps (at words) down to this width; every other column is never cut
_DIAGNOSTICS = "diagnostics (1-step chains):"
_TEXT = {"given": "the given text", "sampled": "the target's sampled text", "greedy": "the target's greedy text"}


@dataclass(frozen=True)
class _Column:
    key: str  # what the caption explains
    header: str
    cell: Callable[[ProbeRow, bool], str]  # (row, is the configured row) -> text


def _ci(interval: list[float], fmt: str) -> str:
    lo, hi = interval
    return f" [{lo:{fmt}}, {hi:{fmt}}]"


def _top1(ci: bool) -> _Column:
    return _Column(
        "top1",
        "top-1 [95% CI]" if ci else "top-1",
        lambda r, _: f"{r.top1:.1%}" + (_ci(r.top1_ci, ".1%") if ci else ""),
    )


def _accept(ci: bool) -> _Column:
    return _Column(
        "accept",
        "accept len [95% CI]" if ci else "accept\nlen",
        lambda r, _: f"{r.acceptance_length:.3f}" + (_ci(r.acceptance_length_ci, ".3f") if ci else ""),
    )


def _delta_top1(ci: bool) -> _Column:
    return _Column(
        "delta_top1",
        "Δ top-1 [95% CI]" if ci else "Δ\ntop-1",
        lambda r, conf: "" if conf else f"{r.delta_top1:+.1%}" + (_ci(r.delta_top1_ci, "+.1%") if ci else ""),
    )


def _delta_accepted(ci: bool) -> _Column:
    return _Column(
        "delta_accepted",
        "Δ accepted [95% CI]" if ci else "Δ\naccepted",
        lambda r, conf: "" if conf else f"{r.delta_accepted:+.3f}" + (_ci(r.delta_accepted_ci, "+.3f") if ci else ""),
    )


def _p(counts: bool) -> _Column:
    return _Column(
        "p",
        "p\n(better/worse)" if counts else "p",
        lambda r, conf: "" if conf else r.p_text + (f" ({r.wins}/{r.losses})" if counts else ""),
    )


_HIDDEN = _Column("hidden", "hidden states", lambda r, _: f"hs{r.hidden_states}")

# From the most detailed to the least: the first that fits the console is shown. Without its own column the
# hidden states go under the reading's name.
_LAYOUTS: tuple[tuple[_Column, ...], ...] = (
    (_HIDDEN, _top1(True), _accept(True), _delta_top1(True), _delta_accepted(True), _p(True)),
    (_HIDDEN, _top1(False), _accept(False), _delta_top1(False), _delta_accepted(False), _p(True)),
    (_HIDDEN, _top1(False), _accept(False), _delta_top1(False), _delta_accepted(False), _p(False)),
    (_top1(False), _accept(False), _delta_top1(False), _delta_accepted(False), _p(False)),
    (_top1(False), _accept(False), _delta_accepted(False), _p(False)),
    (_accept(False), _delta_accepted(False), _p(False)),
    (_accept(False),),
    (),
)
_ALL = ("hidden", "top1", "accept", "delta_top1", "delta_accepted", "p")
_NAMES = {"top1": "top-1", "accept": "accept len", "delta_top1": "Δ top-1", "delta_accepted": "Δ accepted", "p": "p"}


def _reading(p: ProbeResult, row: ProbeRow, hidden: bool) -> str:
    """The reading's name and marks, and its hidden states on a line of their own when they have no column."""
    mark = " (configured)" if row.reading == p.configured and row.reading != "configured" else ""
    name = row.reading + mark
    return name if hidden else f"{name}\nhs{row.hidden_states}"


def _len(text: str) -> int:
    return max(cell_len(line) for line in text.splitlines() or [""])


def _width(p: ProbeResult, columns: tuple[_Column, ...]) -> int:
    """The console width the table needs: every column whole but the reading's, which may wrap down to
    _READING_MIN (or its longest word); one blank each side of a cell, one between columns and at each edge."""
    widths = [max(_len(c.header), *(_len(c.cell(r, r.reading == p.configured)) for r in p.rows)) for c in columns]
    widths.append(max(_len("verdict"), *(_len(r.verdict) for r in p.rows)))
    names = [_reading(p, r, _HIDDEN in columns) for r in p.rows]
    words = max((cell_len(w) for name in names for w in name.split()), default=0)
    reading = min(max(_READING_MIN, words), max((_len(name) for name in names), default=0))
    return sum(widths) + reading + 3 * (len(widths) + 1) + 1


def _layout(p: ProbeResult, width: int) -> tuple[_Column, ...]:
    return next((cols for cols in _LAYOUTS if _width(p, cols) <= width), _LAYOUTS[-1])


def _caption(p: ProbeResult, columns: tuple[_Column, ...]) -> str:
    shown = {c.key for c in columns}
    ci = any("95% CI" in c.header for c in columns)
    counts = any("better/worse" in c.header for c in columns)
    norm = str(p.rows[0].norm_output).lower() if p.rows else "as configured"
    parts = [f"each row reads the draft's config one way (norm_output {norm} unless the row says otherwise)"]
    parts.append(
        "hidden states"
        + ("" if "hidden" in shown else " (under each name)")
        + ": the target's hs[j] that reading feeds the draft"
    )
    if "top1" in shown:
        parts.append("top-1: how often the draft's first token is the target's greedy next token")
    if "accept" in shown:
        parts.append(
            f"accept len: 1 + draft tokens accepted per draft/verify cycle ({p.steps}-step chains), as the "
            "engines report it"
        )
    if shown & {"delta_top1", "delta_accepted"}:
        parts.append(
            "Δ: this row minus the configured row, position by position over the same text"
            + ("; Δ accepted: draft tokens accepted per position" if "delta_accepted" in shown else "")
        )
    if "p" in shown:
        parts.append(
            "p: two-sided exact sign test over the positions where the two rows differ in accepted tokens (then, "
            "when equal, in the first token)"
            + ("; better/worse: those positions" if counts else "")
            + f"; `better` or `worse` needs p < {p.alpha} and Δ top-1 or Δ accepted past a floor "
            f"({p.top1_floor:.0%} top-1, {p.accept_floor} accepted); "
            "<1e-300: below what a float holds"
        )
    if ci:
        parts.append("[ ]: 95% intervals")
    if p.dtype_reason:  # why the reference ran in this dtype (--dtype auto's decision, with the memory figures)
        parts.append(f"dtype {p.dtype_reason}")
    if any(r.diagnostic for r in p.rows):
        parts.append(
            f"the rows under `{_DIAGNOSTICS[:-1]}` move one aux state alone and score the first draft token only "
            "(1-step chains: their accept len, Δ and p are first-token figures); they show which state the draft "
            "leans on and never raise a finding"
        )
    left_out = [_NAMES[k] for k in _ALL if k not in shown and k in _NAMES]
    if not ci:
        left_out.append("95% intervals")
    if left_out:
        parts.append(f"too narrow for {', '.join(left_out)}: widen the console or use --format json")
    undecided = [r for r in p.rows if r.verdict == "inconclusive" and r.positions_needed]
    if undecided:
        parts += [f"{r.reading}: ~{r.positions_needed} positions would settle it" for r in undecided]
    return "; ".join(parts)


def probe_table(p: ProbeResult, width: int) -> Table:
    """The acceptance probe at a console ``width``: each reading's top-1 and acceptance length, and its paired
    comparison with the configured reading (differences, the sign test and the counts it was on, the verdict)."""
    columns = _layout(p, width)
    undecided = "" if p.decided else "; some comparisons are inconclusive"
    diagnostic = "; diagnostics: 1 step" if any(r.diagnostic for r in p.rows) else ""
    table = Table(
        title=Text(
            f"Acceptance probe: {p.positions} positions of {_TEXT.get(p.text, 'text')} ({p.sequences} sequences), "
            f"{p.steps}-step greedy chains{diagnostic} ({p.device}, {p.dtype}){undecided}"
        ),
        title_justify="left",
        caption=Text(_caption(p, columns)),
        caption_justify="left",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("reading", overflow="fold", min_width=min(_READING_MIN, width // 3))
    for c in columns:
        table.add_column(Text(c.header), no_wrap=True)  # a Text: its line break is ours, not escaped
    table.add_column("verdict", no_wrap=True)
    rows = sorted(p.rows, key=lambda r: r.diagnostic)  # stable: the readings, then the diagnostics
    for i, row in enumerate(rows):
        if row.diagnostic and (not i or not rows[i - 1].diagnostic):
            table.add_row(Text(_DIAGNOSTICS, style="italic"))
        configured = row.reading == p.configured
        table.add_row(
            Text(_reading(p, row, _HIDDEN in columns), style="bold" if row.reading == p.best else ""),
            *(c.cell(row, configured) for c in columns),
            Text(row.verdict, style=_VERDICT_STYLE.get(row.verdict, "")),
        )
    return table


def probe_conclusion(p: ProbeResult) -> str:
    """The probe in one line, after its table: whether the configured reading holds, what beats it, or how many
    positions would settle what is undecided."""
    configured = p.row(p.configured)
    said = f"the configured reading ({p.configured}: accept len {configured.acceptance_length:.3f})"
    if p.best != p.configured:
        best = p.row(p.best)
        return (
            f"Conclusion: {said} is beaten by {p.best} (accept len {best.acceptance_length:.3f}, p {best.p_text}): "
            "the draft reads other target states than the ones it was trained on"
        )
    undecided = [r for r in p.rows if r.verdict == "inconclusive" and not r.diagnostic]
    if undecided:
        needed = max((r.positions_needed or 0) for r in undecided)
        more = f"; ~{needed} positions would settle it (--probe-positions)" if needed else ""
        return f"Conclusion: {said} is not beaten, but {len(undecided)} comparison(s) are inconclusive{more}"
    return f"Conclusion: {said} holds: no other reading does decisively better"
