"""JSON on stdout for machines (plain writes, never through rich): light to import, so `--json` runs skip the
rich rendering stack entirely."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from eagle_convert.render.escape import json_text

__all__ = ["dumps", "json_errors", "stdout_indent", "write_json", "write_json_value"]


def dumps(value: Any, indent: int | None = 2) -> str:
    """``value`` as JSON text and a newline (``indent=None``: one line, json's fast C encoder), any string in it
    written safe for a terminal and a UTF-8 stream by :func:`~eagle_convert.render.escape.json_text`."""
    separators = None if indent is not None else (",", ":")
    return json_text(json.dumps(value, indent=indent, ensure_ascii=False, separators=separators)) + "\n"


def write_json(doc: dict[str, Any]) -> None:
    write_json_value(doc)


def stdout_indent() -> int | None:
    """How every command's ``--json`` lays out stdout: indented for a person at a terminal; one line otherwise (a
    pipe, a file), which is also json's fast C encoder: the indenting encoder is pure Python and cost seconds on a
    20,000-tensor table."""
    return 2 if sys.stdout.isatty() else None


def write_json_value(value: Any) -> None:
    """``value`` on stdout as JSON, laid out by :func:`stdout_indent`."""
    sys.stdout.write(dumps(value, indent=stdout_indent()))


@contextmanager
def json_errors(enabled: bool, command: str, path: object) -> Iterator[None]:
    """With ``--json``, bad input still gives one JSON object on stdout (eagle_convert/schemas/error.schema.json), as
    ``verify --format json`` does; the error is re-raised, so stderr and the exit code are unchanged."""
    from eagle_convert.errors import EagleConvertError
    from eagle_convert.version import SCHEMA_VERSION, TOOL, __version__

    try:
        yield
    except EagleConvertError as exc:
        if enabled:
            error = {"message": exc.message, "hint": exc.hint, "exit_code": exc.exit_code}
            versions = {"tool_version": __version__, "tool": TOOL, "version": __version__}  # as inspect's, verify's
            doc = {"schema_version": SCHEMA_VERSION, **versions, "command": command, "path": str(path)}
            write_json({**doc, "status": "error", "error": error})
        raise
