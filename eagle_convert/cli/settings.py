"""``[tool.eagle-convert]``: the settings the commands read from the nearest pyproject.toml (``engine``, ``select``,
``ignore``, ...), checked whole against eagle_convert/schemas/settings.schema.json and then against the values the
schema cannot know (release names, rule ids). The command line wins over them; the library never reads them (a
library caller passes its options).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from eagle_convert.errors import UsageError
from eagle_convert.read.regular import read_text
from eagle_convert.releases import resolve_engines
from eagle_convert.schemas import SETTINGS as SETTINGS_SCHEMA
from eagle_convert.schemas import Violation, violation
from eagle_convert.schemas import load as load_schema
from eagle_convert.verify.request import parse_rule_list
from eagle_convert.version import docs_url


def load_settings(start: Path) -> dict[str, Any]:
    """``[tool.eagle-convert]`` from the nearest pyproject.toml at or above ``start`` (empty when none)."""
    for directory in (start.resolve(), *start.resolve().parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            try:
                doc = tomllib.loads(read_text(candidate, "pyproject.toml"))
            except tomllib.TOMLDecodeError as exc:
                raise UsageError(f"cannot read [tool.eagle-convert]: {exc}", path=candidate) from None
            settings = doc.get("tool", {}).get("eagle-convert", {})
            if not isinstance(settings, dict):
                raise UsageError("[tool.eagle-convert] must be a table", path=candidate)
            _check_settings(settings, candidate)
            return settings
    return {}


def _check_settings(settings: dict[str, Any], path: Path) -> None:
    """The table against eagle_convert/schemas/settings.schema.json, then the values the schema cannot know (engine
    releases, rule ids); every mistake is a usage error naming pyproject.toml and the key (a typo must not be
    ignored silently)."""
    wrong = violation(settings, SETTINGS_SCHEMA)
    if wrong is not None:
        raise _settings_error(wrong, path)
    if "engine" in settings:
        try:
            resolve_engines(settings["engine"])
        except UsageError as exc:
            raise UsageError(
                f"[tool.eagle-convert] engine = {settings['engine']!r}: {exc.cause}", path=path, hint=exc.hint
            ) from None
    for key in ("select", "ignore"):
        try:
            parse_rule_list(settings.get(key))
        except UsageError as exc:
            raise UsageError(f"[tool.eagle-convert] {key}: {exc.cause}", path=path, hint=exc.hint) from None


def _settings_error(wrong: Violation, path: Path) -> UsageError:
    """A schema violation of [tool.eagle-convert] said as the user wrote it: the key, its value, what it must be."""
    keys = tuple(load_schema(SETTINGS_SCHEMA)["properties"])
    if wrong.keyword == "additionalProperties":
        unknown = next(k for k in wrong.value if k not in keys)
        close = [k for k in keys if k.replace("-", "") == unknown.replace("-", "").replace("_", "")]
        return UsageError(
            f"unknown key {unknown!r} in [tool.eagle-convert]",
            path=path,
            hint=(f"did you mean {close[0]!r}? " if close else "")
            + f"the keys are {', '.join(keys)} ({docs_url('docs/ci.md')})",
        )
    key = str(wrong.location[0]) if wrong.location else ""
    spec = load_schema(SETTINGS_SCHEMA)["properties"].get(key, {})
    if "enum" in spec:
        choices = ", ".join(spec["enum"])
        return UsageError(
            f"[tool.eagle-convert] {key} = {wrong.value!r} is not one of {choices}",
            path=path,
            hint=f"set {key} to one of {choices}",
        )
    examples = spec.get("examples", [])
    return UsageError(
        f"[tool.eagle-convert] {key}{wrong.where()[len(key) + 1 :]} must be {spec.get('title', 'valid')}: "
        f"{wrong.reason}",
        path=path,
        hint=f"write it like {key} = {json.dumps(examples[0])}"
        if examples
        else f"see {key} in {docs_url('docs/ci.md')}",
    )
