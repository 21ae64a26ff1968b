"""Findings as people read them: the rule (marked ``[*]`` when normalize fixes it), the severity, the message and
its fix, and the footer that names what ``eagle-convert normalize`` fixes."""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from eagle_convert.render.grouping import More, table_rows
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import NOT_EAGLE3, RECORD_CONTRADICTED, Fixes

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


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
            rule_cell(f.rule_id, fixes),
            severity_cell(f.severity),
            message_cell(f.rule_id, f.message, fixes),
        )
    console.print(table)
    fixable_footer(console, findings)


def rule_cell(rule_id: str, fixes: Fixes) -> Text:
    """The rule id, marked ``[*]`` when ``eagle-convert normalize`` fixes it (as ruff marks fixable findings)."""
    return Text(rule_id + (" [*]" if fixes.fixable(rule_id) else ""))


def severity_cell(severity: str) -> Text:
    """The severity in its colour (error red, warning yellow, info cyan)."""
    return Text(severity, style=_SEVERITY_STYLE.get(severity, ""))


def message_cell(rule_id: str, message: str, fixes: Fixes) -> RenderableType:
    """The finding's message, then what to do about it (the rule's fix, read among the report's findings) for
    errors and warnings."""
    fix = fixes.fields(rule_id)["fix"]
    if not fix:
        return message
    return Group(message, Text(f"fix: {fix}", style="dim"))


def fixable_footer(console: Console, findings: list[Finding]) -> None:
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
