"""The lines ``-q`` keeps (verify's verdict, inspect's summary) and the tables ``-v`` adds (every check with its
outcome, every tensor). Builders only: each command's tables module prints them, and the console
(:mod:`eagle_convert.render.console`) escapes every string (input stays a string here; a ``Text`` holds this module's
words only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from eagle_convert.read.config import PROVENANCE_KEY

if TYPE_CHECKING:
    from eagle_convert.inspect_api import InspectReport
    from eagle_convert.normalize.plan import NormalizeReport
    from eagle_convert.verify.report import VerifyReport


def verdict(report: VerifyReport) -> Text:
    """``PASS 0 error(s), 1 warning(s), 2 info; 60 of 75 rules ran; fail level error``."""
    checks = report.checks
    ran = sum(c.outcome != "skipped" for c in checks)
    s = report.summary()
    passed = report.status == "pass"
    line = Text("PASS" if passed else "FAIL", style="bold green" if passed else "bold red")
    line.append(
        f" {s['errors']} error(s), {s['warnings']} warning(s), {s['infos']} info; "
        f"{ran} of {len(checks)} rules ran; fail level {report.fail_level}"
    )
    return line


def inspect_summary(report: InspectReport) -> str:
    """What the findings above say, and which releases the gate findings among them were checked against."""
    s = report.summary()
    checked = f"engine releases checked: {', '.join(report.engines)}" if report.engines else "no engine release checked"
    if not report.findings:
        return f"No findings; {checked}."
    return f"{s['errors']} error(s), {s['warnings']} warning(s), {s['infos']} info; {checked}."


def engines_note(report: VerifyReport) -> str | None:
    """Where the releases checked came from, when the draft chose them (None: --engine or the default did)."""
    if report.engine_source != "draft":
        return None
    return (
        f"Checked against {report.engine.replace(',', ', ')}: the engines this draft was normalized for (its "
        f"config.json {PROVENANCE_KEY}.engines); --engine checks others."
    )


def normalize_summary(report: NormalizeReport) -> str:
    """``Written: SRC -> OUT (3 config changes, 5 of 12 tensors changed, 0 findings)``."""
    verb = "Plan (dry run, nothing written)" if report.dry_run else "Written"
    moved = sum(t.action != "keep" for t in report.tensors)
    line = (
        f"{verb}: {report.source} -> {report.out} ({len(report.config_changes)} config change(s), {moved} of "
        f"{len(report.tensors)} tensor(s) changed, {len(report.findings)} finding(s))"
    )
    if report.verify is None:
        return line
    passed = sum(v.status == "pass" for v in report.verify.releases)
    return f"{line}; verify: {report.verify.status.upper()} ({passed} of {len(report.verify.releases)} release(s) pass)"


def verify_verdicts(report: NormalizeReport) -> Table | None:
    """What ``verify OUT`` says of the written draft, per release it checks (None: nothing was written)."""
    verdicts = report.verify
    if verdicts is None:
        return None
    passed = sum(v.status == "pass" for v in verdicts.releases)
    table = Table(
        title=f"What `{verdicts.command}` says (level {verdicts.level}): {passed} of {len(verdicts.releases)} "
        "release(s) pass",
        title_justify="left",
    )
    for column in ("release", "verdict", "errors", "warnings"):
        table.add_column(column, overflow="fold")
    for v in verdicts.releases:
        style = "green" if v.status == "pass" else "red"
        table.add_row(
            v.release, Text(v.status.upper(), style=style), ", ".join(v.errors) or "-", ", ".join(v.warnings) or "-"
        )
    return table


def checks_table(report: VerifyReport) -> Table:
    """Every rule with its outcome, and why it was skipped (-v)."""
    table = Table(title=f"Every rule: {len(report.checks)}", title_justify="left")
    for column in ("rule", "name", "outcome", "why skipped"):
        table.add_column(column, overflow="fold")
    for c in report.checks:
        table.add_row(c.rule_id, c.name, c.outcome, c.reason)
    return table


def tensors_table(doc: dict[str, Any]) -> Table:
    """Every tensor of an inspect report (``doc["tensors"]["items"]``) with dtype, shape, bytes and file (-v)."""
    table = Table(title="Every tensor", title_justify="left")
    for column in ("name", "dtype", "shape", "bytes", "file"):
        table.add_column(column, overflow="fold", justify="right" if column == "bytes" else "left")
    for t in doc["tensors"]["items"]:
        table.add_row(t["name"], t["dtype"], str(t["shape"]), str(t["bytes"]), str(t["shard"] or ""))
    return table
