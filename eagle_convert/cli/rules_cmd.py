"""`eagle-convert rules [CODE...]` and `eagle-convert rule CODE`: every rule id, its meaning and its fix."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from eagle_convert.rules.rule import Rule


def rules(
    codes: list[str] | None = typer.Argument(
        None, metavar="CODE", help="Only these rule ids (EC104); every rule when none is given."
    ),
    as_json: bool = typer.Option(False, "--json", help="Write the registry as a JSON list."),
) -> None:
    """List every rule verify can report (ids are stable: select and ignore them in CI)."""
    from dataclasses import asdict

    from rich.table import Table
    from rich.text import Text

    from eagle_convert.render.console import stdout_console
    from eagle_convert.render.json_output import write_json_value
    from eagle_convert.rules.registry import RULES, find_rule

    chosen = [find_rule(c) for c in codes] if codes else list(RULES.values())
    if as_json:
        write_json_value([asdict(r) for r in chosen])
        return
    if codes:
        for r in chosen:
            _explain(r)
        return
    table = Table(title=f"{len(RULES)} rules ([*]: fixed by `eagle-convert normalize`)", title_justify="left")
    for column in ("id", "name", "severity", "level", "summary"):
        table.add_column(column, overflow="fold")
    for r in chosen:
        table.add_row(r.id + (" [*]" if r.fixable else ""), r.name, r.severity, r.level, Text(r.summary))
    stdout_console().print(table)


def rule(
    code: str = typer.Argument(..., metavar="CODE", help="A rule id, e.g. EC104."),
    as_json: bool = typer.Option(False, "--json", help="Write the rule as one JSON object."),
) -> None:
    """Explain one rule: what it means, its severity and level, and how to fix a finding."""
    from dataclasses import asdict

    from eagle_convert.render.json_output import write_json_value
    from eagle_convert.rules.registry import find_rule

    found = find_rule(code)
    if as_json:
        write_json_value(asdict(found))
    else:
        _explain(found)


def _explain(r: Rule) -> None:
    fixable = "yes, `eagle-convert normalize` fixes it" if r.fixable else "no"
    sys.stdout.write(
        f"# {r.id} {r.name}\n\n{r.summary}\n\nseverity: {r.severity}\nlevel: {r.level}\nfixable: {fixable}\n"
        + (f"fix: {r.fix}\n" if r.fix else "")
        + f"engines: {', '.join(r.engines)}\ndocs: {r.docs}\n\n"
    )


def register(app: typer.Typer) -> None:
    app.command("rules")(rules)
    app.command("rule")(rule)
