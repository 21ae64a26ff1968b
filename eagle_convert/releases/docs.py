"""docs/formats.md's engine tables, one per modelled release, rendered from the records (``python -m
eagle_convert.releases.docs`` rewrites the block between the markers; tests check it has not drifted)."""

from __future__ import annotations

import sys
from pathlib import Path

from eagle_convert.releases import RELEASES
from eagle_convert.releases.model import Release

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
    return [*lines, "", *_target_classes(r)]


def _target_classes(r: Release) -> list[str]:
    """The target classes that capture, as one paragraph (``target-classes`` above says where the rest fail); a
    runner record of a version already listed refers to it."""
    classes = r.target_classes
    if classes is None:
        return []
    earlier = list(RELEASES.values())[: list(RELEASES.values()).index(r)]
    same = next((o for o in earlier if (o.engine, o.version) == (r.engine, r.version) and o.target_classes), None)
    if same is not None:
        return [f"Target classes that capture EAGLE3 aux states: those of `{same.name}`.", ""]
    names = ", ".join(f"`{a}`" for a in sorted(classes.eagle3))
    head = f"Target classes that capture EAGLE3 aux states ({len(classes.eagle3)} of {classes.registered} registered)"
    return [f"{head}: {names}.", ""]


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
