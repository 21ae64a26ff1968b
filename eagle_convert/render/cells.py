"""How a value reads in a table for people: JSON's words, sizes in KiB/MiB, the two-column key/value table."""

from __future__ import annotations

import json

from rich.table import Table


def plain(value: object) -> str:
    """A value as people read it in this tool's output: JSON's true/false/null, not Python's True/False/None."""
    return json.dumps(value) if value is None or isinstance(value, bool) else str(value)


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def kv_table(title: str) -> Table:
    table = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    return table


def kv_row(table: Table, key: str, value: object) -> None:
    table.add_row(key, "-" if value is None else plain(value))
