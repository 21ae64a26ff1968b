"""Strings from input made safe to show. A tensor name, a config value, a directory name or a server's answer may
hold anything; none may move the cursor, send an escape sequence, start a line of its own, show its text in another
order than it is, or stop a UTF-8 stream. Light to import: the JSON and CI formats use it without rich.

Every renderer for people or line tools goes through :func:`one_line` (the rich console's strings, ``Error:`` and
``Hint:``, the concise lines, GitHub workflow commands, the Markdown summary, JUnit's text); JSON keeps each string as
it is, with the same characters written as JSON escapes (:func:`json_text`). Markdown (the GitHub step summary, the
model card) takes its strings through :func:`markdown_text` or :func:`markdown_code` too.
"""

from __future__ import annotations

import re

# C0 and C1 controls (ESC, BEL, newlines, carriage returns, tabs, DEL); the Unicode line and paragraph separators;
# the bidirectional embeddings, overrides and isolates, which show text in another order than it is ("Trojan
# Source", CVE-2021-42574); and lone surrogates (a JSON "\ud800" escape, a file name's undecodable byte), which no
# UTF-8 stream can write.
_PAST_C0 = r"\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
UNSAFE = re.compile(rf"[\x00-\x1f{_PAST_C0}]")
_LEFT_BY_JSON = re.compile(rf"[{_PAST_C0}]")  # json.dumps escapes C0 itself (a raw newline there is layout)


def _escape(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(text: str) -> str:
    """``text`` safe for one terminal line: every character of :data:`UNSAFE` written as a ``\\xNN``/``\\uNNNN``
    escape, so no input can move the cursor, retitle the terminal, forge a line of its own or reorder what is shown."""
    return UNSAFE.sub(_escape, text)


def json_text(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) with the characters of :data:`UNSAFE` that json.dumps
    writes raw (DEL, C1, separators, bidi controls, lone surrogates) written as JSON ``\\uXXXX`` escapes: the same
    strings once parsed, and nothing a terminal acts on or a UTF-8 stream refuses. Such a character stands only
    inside a JSON string, so the escape is always valid there."""
    return _LEFT_BY_JSON.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


# Markdown (CommonMark and GitHub's tables): the characters that start an inline construct. ``&``, ``<`` and ``>``
# become entities (no raw HTML, no autolink); the rest are backslash-escaped, which CommonMark allows for every ASCII
# punctuation character: no link or image (``[``, ``]``: ``!`` alone starts nothing), code span (a backtick),
# emphasis or strikethrough (``*``, ``_``, ``~``), or cell boundary (``|``) can come from input.
_MD_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MD_ACTIVE = re.compile(r"[&<>\\`*_\[\]|~]")


def markdown_text(text: str) -> str:
    """``text`` as literal Markdown inline text on one line: what GitHub shows is ``text`` itself (control characters
    escaped as :func:`one_line` does, line breaks as ``<br>``), never HTML, a link, an image or formatting."""
    lines = [
        _MD_ACTIVE.sub(lambda m: _MD_ENTITIES.get(m[0], "\\" + m[0]), one_line(line))
        for line in re.split(r"\r\n?|\n", text)
    ]
    return "<br>".join(lines)


def markdown_code(text: str, *, table: bool = True) -> str:
    """``text`` as one Markdown code span, whatever backticks it holds: the fence is one backtick longer than the
    longest run inside (CommonMark 6.1), so the span cannot be closed early and what follows read as HTML. In a GFM
    ``table`` a ``|`` still ends the cell, so it is escaped there (GitHub removes the backslash inside the span)."""
    text = one_line(" ".join(text.splitlines()))
    text = text.replace("|", "\\|") if table else text
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


__all__ = ["UNSAFE", "json_text", "markdown_code", "markdown_text", "one_line"]
