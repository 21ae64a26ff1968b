"""The JSON schemas, shipped in the package: of the documents the tool writes (the reports, a public contract) and
of the JSON a user writes (``--token-ids``, ``[tool.eagle-convert]``, the header of saved hidden states).

The files are package data (``eagle_convert/schemas/*.json``), so :func:`schema_file` finds them the same way in a
checkout and in an installed wheel. :func:`violation` checks user input against one of them with jsonschema
(imported on first use) and says where it fails: the field's location and what is wrong there, on one line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

# The schemas of what the user writes (validated at run time); the rest describe the tool's output.
TOKEN_IDS = "token-ids"
SETTINGS = "settings"
SAVED_STATES = "saved-hidden-states"


def schema_file(name: str) -> Traversable:
    """``eagle_convert/schemas/<name>.schema.json`` (or ``<name>.json`` for a vendored schema such as SARIF's)."""
    here = files(__name__)
    named = here / f"{name}.schema.json"
    return named if named.is_file() else here / f"{name}.json"


@cache
def load(name: str) -> dict[str, Any]:
    """The schema ``name`` as a dict (read once)."""
    doc: dict[str, Any] = json.loads(schema_file(name).read_text(encoding="utf-8"))
    return doc


@dataclass(frozen=True)
class Violation:
    """Where ``instance`` breaks its schema: ``location`` (``[2][5]``, ``.hidden_states.shape``, ``fail-level``;
    empty for the document itself), the keyword that failed (``type``, ``minimum``, ``additionalProperties``...),
    the offending value, and a one-line ``reason``."""

    location: tuple[str | int, ...]
    keyword: str
    value: Any
    reason: str
    subschema: dict[str, Any]

    def where(self) -> str:
        """``[2][5]`` for list items, ``.key`` for object members (nothing for the document itself)."""
        return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in self.location)


def violation(instance: Any, name: str) -> Violation | None:
    """The first place, in document order, where ``instance`` breaks schema ``name`` (the most relevant error there,
    as jsonschema's ``best_match`` picks it), or None."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    errors = list(Draft202012Validator(load(name)).iter_errors(instance))
    if not errors:
        return None
    first = min((tuple(e.absolute_path) for e in errors), key=_document_order)
    error = best_match(e for e in errors if tuple(e.absolute_path) == first)
    assert error is not None  # errors at ``first`` exist by construction
    subschema = error.schema if isinstance(error.schema, dict) else {}
    return Violation(tuple(error.absolute_path), str(error.validator), error.instance, _reason(error), subschema)


def _document_order(path: tuple[str | int, ...]) -> tuple[tuple[int, int, str], ...]:
    """A sort key for locations: list items by index, members by name, a parent before its children."""
    return tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in path)


_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer"}


def json_kind(value: Any) -> str:
    """``a list``, ``a string``, ``null``... as JSON names the value's type."""
    if value is None:
        return "null"
    if isinstance(value, float):
        return "a number"
    return next((name for t, name in _JSON_TYPES.items() if isinstance(value, t)), type(value).__name__)


def _reason(error: Any) -> str:
    """jsonschema's message, kept to one short line: a large offending value is named by its kind, not printed."""
    keyword, expected, value = error.validator, error.validator_value, error.instance
    if keyword == "type":
        wanted = expected if isinstance(expected, list) else [expected]
        return f"expected {' or '.join(str(w) for w in wanted)}, found {json_kind(value)}"
    if keyword in ("minItems", "maxItems") and isinstance(value, list):
        return f"expected {'at least' if keyword == 'minItems' else 'at most'} {expected} item(s), found {len(value)}"
    if keyword == "enum":
        return f"{value!r} is not one of {', '.join(repr(e) for e in expected)}"
    message = " ".join(str(error.message).split())
    if len(message) > 160:  # the message repeats the whole value: say which check failed instead
        return f"{json_kind(value)} that fails the schema's {keyword!r} check"
    return message
