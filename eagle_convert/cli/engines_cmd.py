"""`eagle-convert engines`: the modelled engine releases, where each was read from, and (for one) its behaviours."""

from __future__ import annotations

import typer


def engines(
    release: str | None = typer.Argument(
        None, metavar="[RELEASE]", help="One release (e.g. vllm@0.33-v1): list its behaviours with file:line."
    ),
    as_json: bool = typer.Option(False, "--json", help="Write the records as JSON."),
) -> None:
    """List the engine releases verify can check against (--engine), with the released code each was read from."""
    from rich.table import Table
    from rich.text import Text

    from eagle_convert.releases import RELEASES, resolve_engines
    from eagle_convert.render.console import stdout_console
    from eagle_convert.render.json_output import write_json_value

    chosen = resolve_engines(release) if release else list(RELEASES.values())
    docs = [
        {
            "release": r.name,
            "engine": r.engine,
            "version": r.version,
            "runner": r.runner,
            "newest": r.newest,
            "deployed": r.deployed,
            "summary": r.summary,
            "source": r.source,
            "installed_as": list(r.installed_as),
            "behaviours": [{"key": b.key, "does": b.does, "cite": str(b.cite)} for b in r.behaviours],
        }
        for r in chosen
    ]
    if as_json:
        write_json_value(docs)
        return
    console = stdout_console()
    if release is None:
        title = f"{len(docs)} modelled releases (deployed: what --engine checks by default)"
        table = Table(title=title, title_justify="left")
        for column in ("release", "runner", "deployed", "summary", "source"):
            table.add_column(column, overflow="fold")
        for d in docs:
            name = str(d["release"]) + (" (newest)" if d["newest"] else "")
            deployed = "yes" if d["deployed"] else "no"
            table.add_row(name, str(d["runner"] or ""), deployed, Text(str(d["summary"])), Text(str(d["source"])))
        console.print(table)
        return
    for r in chosen:
        table = Table(title=f"{r.name}: {r.summary}", title_justify="left")
        for column in ("behaviour", "does", "where"):
            table.add_column(column, overflow="fold")
        for b in r.behaviours:
            table.add_row(b.key, Text(b.does), Text(str(b.cite)))
        console.print(table)


def register(app: typer.Typer) -> None:
    app.command("engines")(engines)
