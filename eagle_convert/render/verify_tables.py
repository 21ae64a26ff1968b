"""``eagle-convert verify`` for people: the findings with where each is, the probe, the rules that did not run, the
engine run and the verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from eagle_convert.gate.deployment import DEPLOYMENT_SUBJECTS
from eagle_convert.render import detail
from eagle_convert.render.cells import kv_table
from eagle_convert.render.engine_tables import render_engine_run
from eagle_convert.render.findings_table import fixable_footer, message_cell, rule_cell, severity_cell
from eagle_convert.render.grouping import More, table_rows
from eagle_convert.render.probe_table import probe_conclusion, probe_table
from eagle_convert.rules.registry import Fixes

if TYPE_CHECKING:  # the report's module is imported by the command that makes it
    from eagle_convert.verify.report import VerifyReport


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
            rule_cell(f.rule_id, fixes),
            severity_cell(f.severity),
            where,
            message_cell(f.rule_id, f.message, fixes),
        )
    if report.findings:
        console.print(table)
        fixable_footer(console, report.findings)
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
    table = kv_table(f"Rules not run: {sum(map(len, why.values()))} of {len(checks)}")
    for reason, ids in why.items():
        shown = f"{len(ids)} rule(s)" if reason == "not selected" else ", ".join(ids)
        table.add_row(reason + (" (--select/--ignore)" if reason == "not selected" else ""), shown)
    console.print(table)
