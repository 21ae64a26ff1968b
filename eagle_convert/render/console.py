"""The console people read: every string from input escaped once, lines that end where their text ends.

Input reaches people as plain strings, never as a ``Text`` built by a renderer: the console escapes every string it is
given (:class:`EscapingConsole`), before layout. A ``Text`` carries the renderers' own words only (a style, a line
break of their own). Off a terminal nothing wraps and no line carries trailing blanks; errors are one line each.
"""

from __future__ import annotations

import copy
import os
import sys
from typing import Any, TextIO

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from eagle_convert.render.escape import one_line

UNWRAPPED = 100_000  # the width of a stream that is not a terminal: one line per row, greppable, never wrapped
_SGR_PARAMS = frozenset("0123456789;")


def without_trailing_blanks(line: str) -> str:
    """``line`` without the blanks at its end, before any closing colour codes (which stay). Linear in the line: a
    regular expression for the same (blanks, then codes, then the end) backtracked over every run of blanks inside
    the line, quadratic in a run, and rich pads a cell to the width of its longest value."""
    end = len(line)
    while end >= 3 and line[end - 1] == "m":  # peel the closing ESC [ ... m codes off the end
        start = line.rfind("\x1b[", max(0, end - 64), end)
        if start < 0 or not _SGR_PARAMS.issuperset(line[start + 2 : end - 1]):
            break
        end = start
    return line[:end].rstrip(" \t") + line[end:]


class NoTrailingBlanks:
    """A text stream that drops the blanks rich pads each line with (to the table's or the console's width): what
    goes to a pipe, a file or a CI log ends where its text ends. Lines are written whole; a partial one waits for
    its end or a flush."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.pending = stream, ""

    def write(self, text: str) -> int:
        whole, newline, self.pending = (self.pending + text).rpartition("\n")
        if newline:
            self.stream.write("\n".join(map(without_trailing_blanks, whole.split("\n"))) + "\n")
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.stream.write(self.pending)
            self.pending = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"


class EscapingConsole(Console):
    """A console that shows every string as its characters: each is escaped by ``one_line`` where rich turns it into
    text (table cells, titles, captions, printed lines; measured and laid out as escaped, so columns stay aligned),
    and read without markup or emoji codes. Colour stays: rich's own style codes are not in the strings."""

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(one_line(text), **options)

    def print(self, *objects: Any, **options: Any) -> None:
        """A table's title and caption are lines of their own: rich wraps them at the table's width, which broke
        paths (``.../for/th`` / ``e/normalized/draft``) and split ``[`` from ``]`` even where the line had room. At a
        width (a terminal, COLUMNS) they wrap at the console's, between words; off a terminal, never."""
        whole = self.width >= UNWRAPPED
        super().print(*(_annotations_apart(o, whole) for o in objects), **options)


def _annotations_apart(renderable: Any, whole: bool) -> Any:
    """A table with its title above it and its caption below it as lines (the table itself unchanged)."""
    if not isinstance(renderable, Table) or (renderable.title is None and renderable.caption is None):
        return renderable
    table = copy.copy(renderable)
    table.title = table.caption = None
    title = [] if renderable.title is None else [_line(renderable.title, renderable.title_style, whole)]
    caption = [] if renderable.caption is None else [_line(renderable.caption, renderable.caption_style, whole)]
    return Group(*title, table, *caption)


def _line(annotation: Any, style: Any, whole: bool) -> Text:
    text = annotation.copy() if isinstance(annotation, Text) else Text(one_line(str(annotation)))
    if style:
        text.stylize(style)
    if whole:
        text.no_wrap, text.overflow = True, "ignore"
    return text


def _console(stream: TextIO) -> Console:
    """A terminal's width; COLUMNS when set; otherwise (a pipe, a file) no wrapping at all. Off a terminal, lines
    carry no trailing blanks."""
    tty = stream.isatty()
    if os.environ.get("COLUMNS", "").isdigit():
        width: int | None = int(os.environ["COLUMNS"])
    else:
        width = None if tty else UNWRAPPED
    return EscapingConsole(
        file=stream if tty else NoTrailingBlanks(stream),  # type: ignore[arg-type]
        highlight=False,
        markup=False,
        emoji=False,
        width=width,
    )


def stdout_console() -> Console:
    return _console(sys.stdout)


def render_error(message: str, hint: str | None) -> None:
    """``Error: ...`` and ``Hint: ...`` on stderr, each on exactly one line (never wrapped, never marked up, control
    characters escaped)."""
    sys.stderr.write(f"Error: {one_line(message)}\n")
    if hint:
        sys.stderr.write(f"Hint: {one_line(hint)}\n")
