"""docs/formats.md's engine tables, one per modelled release, rendered from the records (``python -m
eagle_convert.engines.docs`` rewrites the block between the markers; tests check it has not drifted)."""

from __future__ import annotations

import sys
from pathlib import Path

from eagle_convert.engines import RELEASES
from eagle_convert.engines.model import Release

BEGIN, END = "<!-- engine tables: begin (generated) -->", "<!-- engine tables: end -->"


def _release_table(r: Release) -> list[str]:
    lines = [
        f"#### `{r.name}`" + (" (newest)" if r.newest else ""),
        "",
        f"{r.summary}. Read from: `{r.source}`."
        + (
            f" Builds that behave as this record: {', '.join(f'`{b}`' for b in r.installed_as)}."
            if r.installed_as
            else ""
        ),
        "",
        "| behaviour | what the release does | released code |",
        "|---|---|---|",
    ]
    lines += [f"| `{b.key}` | {b.does} | `{b.cite}` |" for b in r.behaviours]
    return [*lines, ""]


def render_tables() -> str:
    out = [BEGIN, ""]
    for release in RELEASES.values():
        out += _release_table(release)
    out.append(END)
    return "\n".join(out) + "\n"


def splice(text: str) -> str:
    """``text`` with the generated block replaced by the current tables."""
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END + "\n")
    return head + render_tables() + tail


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/formats.md")
    path.write_text(splice(path.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":
    main()
