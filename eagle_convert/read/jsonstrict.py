"""Strict JSON: duplicate keys at any depth and non-standard literals are errors, not silently resolved.

The stdlib ``json`` keeps the last of two duplicate keys, accepts ``NaN``/``Infinity`` and reads a number too large
for a float (``1e400``) as infinity; a checkpoint file that relies on any of them means different things to different
readers, so this module refuses them all. So is a string holding a lone surrogate escape (``"\\ud800"``): not a
Unicode character, refused by the safetensors loader's JSON reader (serde_json) and unwritable as UTF-8.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from eagle_convert.errors import InputError
from eagle_convert.read.lfs import refuse_pointer
from eagle_convert.read.regular import NotUtf8Error, read_regular
from eagle_convert.read.regular import decode_utf8 as _decode


class JsonSyntaxError(ValueError):
    """Raised inside the parser hooks; turned into the caller's typed error with the file name (and ``hint``, when
    the cause has a fix of its own)."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)  # built in C: a header's every tensor entry is an object, so this runs per tensor
    if len(out) != len(pairs):  # a key repeated: name the first one that is
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise JsonSyntaxError(f"duplicate key {key!r}")
            seen.add(key)
    return out


def _reject_constant(name: str) -> Any:
    raise JsonSyntaxError(f"non-standard JSON literal {name}")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise JsonSyntaxError(f"the number {literal[:40]} is too large for a 64-bit float (it would read as infinity)")
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # only an escape can put a surrogate in decoded UTF-8 text
_SURROGATE = re.compile("[\ud800-\udfff]")  # what is left of one after parsing: a pair became one character


def _reject_lone_surrogates(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item
        elif isinstance(item, str) and (hit := _SURROGATE.search(item)):
            raise JsonSyntaxError(f"a string holds the lone surrogate \\u{ord(hit.group()):04x} (not a character)")


def loads_strict(text: str) -> Any:
    """Parse ``text``; raise :class:`JsonSyntaxError` with a one-line cause on anything non-strict."""
    try:
        value = json.loads(
            text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant, parse_float=_finite_float
        )
        if _SURROGATE_ESCAPE.search(text):
            _reject_lone_surrogates(value)
        return value
    except json.JSONDecodeError as exc:
        # the stdlib's own sentence: "Unterminated string starting at: line 1 column 10 (char 9)"
        raise JsonSyntaxError(f"invalid JSON: {exc}") from None
    except RecursionError:  # the C scanner stops cleanly at the interpreter's recursion limit
        raise JsonSyntaxError("invalid JSON: nesting too deep") from None
    except JsonSyntaxError:
        raise
    except ValueError as exc:  # e.g. integers longer than Python's digit limit
        raise JsonSyntaxError(f"invalid JSON: {exc}") from None


def decode_utf8(data: bytes) -> str:
    try:
        return _decode(data)
    except NotUtf8Error as exc:
        raise JsonSyntaxError(str(exc), exc.hint) from None


def load_json_object(path: Path, error: type[InputError], what: str) -> dict[str, Any]:
    """Read ``path`` as one strict JSON object, raising ``error`` (naming the file) on any problem."""
    try:
        data = read_regular(path)
    except OSError as exc:
        raise error(f"cannot read {what}: {exc.strerror or exc}", path=path) from None
    return parse_json_object(data, error, what, str(path))


def parse_json_object(data: bytes, error: type[InputError], what: str, source: str) -> dict[str, Any]:
    """``data`` as one strict JSON object, raising ``error`` (naming ``source``) on any problem."""
    path = source
    refuse_pointer(data, source)  # read_regular asked already; bytes from elsewhere (a Hub repo) are asked here
    try:
        value = loads_strict(decode_utf8(data))
    except JsonSyntaxError as exc:
        raise error(f"{what} is not valid: {exc}", path=path, hint=exc.hint) from None
    if not isinstance(value, dict):
        raise error(f"{what} must be a JSON object, found {type(value).__name__}", path=path)
    return value
