"""`eagle-convert rules`: every rule id with its severity, level and meaning."""

from __future__ import annotations

import typer


def rules(as_json: bool = typer.Option(False, "--json", help="Write the registry as a JSON list.")) -> None:
    """List every rule verify can report (ids are stable: select and ignore them in CI)."""
    from dataclasses import asdict

    from rich.table import Table
    from rich.text import Text

    from eagle_convert.console import stdout_console, write_json_value
    from eagle_convert.rules import RULES

    if as_json:
        write_json_value([asdict(r) for r in RULES.values()])
        return
    table = Table(title=f"{len(RULES)} rules", title_justify="left")
    for column in ("id", "name", "severity", "level", "summary"):
        table.add_column(column, overflow="fold")
    for r in RULES.values():
        table.add_row(r.id, r.name, r.severity, r.level, Text(r.summary))
    stdout_console().print(table)


def register(app: typer.Typer) -> None:
    app.command("rules")(rules)
