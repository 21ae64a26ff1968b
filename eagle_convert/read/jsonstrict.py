"""Strict JSON: duplicate keys at any depth and non-standard literals are errors, not silently resolved.

The stdlib ``json`` keeps the last of two duplicate keys and accepts ``NaN``/``Infinity``; a checkpoint file that
relies on either means different things to different readers, so this module refuses both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eagle_convert.errors import InputError
from eagle_convert.read.regular import read_regular


class JsonSyntaxError(ValueError):
    """Raised inside the parser hooks; turned into the caller's typed error with the file name."""


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise JsonSyntaxError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise JsonSyntaxError(f"non-standard JSON literal {name}")


def loads_strict(text: str) -> Any:
    """Parse ``text``; raise :class:`JsonSyntaxError` with a one-line cause on anything non-strict."""
    try:
        return json.loads(text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant)
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
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonSyntaxError(f"not valid UTF-8 (byte {exc.start})") from None


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
    try:
        value = loads_strict(decode_utf8(data))
    except JsonSyntaxError as exc:
        raise error(f"{what} is not valid: {exc}", path=path) from None
    if not isinstance(value, dict):
        raise error(f"{what} must be a JSON object, found {type(value).__name__}", path=path)
    return value
