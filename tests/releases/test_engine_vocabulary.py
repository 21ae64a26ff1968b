"""One vocabulary of engines (eagle_convert/engines.py): every list of engines, label and schema enum is derived from
it or checked against it here, so a new engine is one entry there and these tests say what else it needs.

Before it (issue 39), the set of engines was spelled in seven places and they had drifted: the verify report's schema
allowed ``engine_run.engine`` vllm or sglang while an attached trtllm-serve run reports ``trtllm``, and the rules an
attached run reports (EC722, EC726, EC727) concerned vLLM and SGLang only, so ``--engine trtllm`` skipped them."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eagle_convert import engines
from eagle_convert.gate.deployment import DEPLOYMENT_KEYS
from eagle_convert.normalize.profiles import PROFILE_ENGINES, PROFILES
from eagle_convert.real_engine import attached
from eagle_convert.real_engine.attached.detect import PROTOCOLS
from eagle_convert.real_engine.base import ENGINE_VENVS
from eagle_convert.releases import RECORDS, RELEASES, resolve_engines
from eagle_convert.rules.registry import RULES
from tests.conftest import ROOT, SCHEMAS

PACKAGE = ROOT / "eagle_convert"
PUBLISHED = sorted(p for p in SCHEMAS.glob("*.schema.json"))
ENGINE_WORDS = set(engines.NAMES)


def _walk(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, (*path, str(key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, (*path, str(i)))


def _enums(schema: Path) -> list[tuple[str, list[Any]]]:
    """Every enum of ``schema`` that names an engine, with where it is."""
    doc = json.loads(schema.read_text(encoding="utf-8"))
    return [
        ("/".join(path), node["enum"])
        for path, node in _walk(doc)
        if isinstance(node.get("enum"), list) and ENGINE_WORDS & {v for v in node["enum"] if isinstance(v, str)}
    ]


# what each enum of the published schemas that names an engine may list, by where it is
ENUMS = {
    "inspect-report.schema.json:$defs/engine_read/properties/engine": engines.NAMES,  # every modelled engine's view
    "verify-report.schema.json:properties/engine_run/properties/engine": engines.MEASURED,  # started or attached
    "normalize-report.schema.json:properties/profile": tuple(PROFILES),
}


def test_every_schema_enum_of_engines_is_the_vocabulary() -> None:
    """Each enum in the published schemas that names an engine lists exactly the engines the vocabulary says a
    report can name there, in the declared order (the normalize report's profile enum lists the profiles); an enum
    this table does not know is a new place to derive."""
    seen = {}
    for schema in PUBLISHED:
        for where, values in _enums(schema):
            seen[f"{schema.name}:{where}"] = values
    assert set(seen) == set(ENUMS), sorted(seen)
    for place, values in seen.items():
        assert values == list(ENUMS[place]), f"{place}: {values} (the vocabulary: {list(ENUMS[place])})"


def test_schema_members_named_for_engines_are_the_default_engines() -> None:
    """inspect's aux_layers.engines has one member per default engine (its newest release) before the releases."""
    for schema in PUBLISHED:
        for path, node in _walk(json.loads(schema.read_text(encoding="utf-8"))):
            named = [k for k in node.get("properties", {}) if k in ENGINE_WORDS] if path[-1:] != ("$defs",) else []
            if named:
                assert named == list(engines.DEFAULT_NAMES), (schema.name, path)


def test_every_engine_has_release_records_and_every_record_an_engine() -> None:
    assert set(RECORDS) == ENGINE_WORDS
    assert {r.engine for r in RELEASES.values()} == ENGINE_WORDS
    for name in engines.NAMES:
        assert [r.newest for r in RELEASES.values() if r.engine == name].count(True) == 1, name
        assert [r.engine for r in resolve_engines(name)] == [name]
    assert [r.engine for r in resolve_engines("both")] == list(engines.DEFAULT_NAMES)


def test_each_part_covers_the_engines_it_serves() -> None:
    """The tables keyed by engine cover the engines the vocabulary says the part serves, and name no other."""
    assert set(PROTOCOLS) == set(attached.ENGINES) == set(engines.ATTACHABLE)
    assert set(ENGINE_VENVS) == set(engines.RUNNERS)
    assert set(DEPLOYMENT_KEYS) <= ENGINE_WORDS
    assert set(PROFILE_ENGINES) == set(PROFILES)
    assert all(set(e) <= ENGINE_WORDS and e for e in PROFILE_ENGINES.values())
    for rule in RULES.values():
        assert rule.engines and set(rule.engines) <= ENGINE_WORDS, rule.id
    # what an attached run reports (real_engine/served.py) concerns every engine --engine-url measures: with
    # --engine trtllm these rules ran nowhere while its server was measured
    for rule_id in ("EC722", "EC726", "EC727"):
        assert set(engines.ATTACHABLE) <= set(RULES[rule_id].engines), rule_id


def test_labels_come_from_the_vocabulary() -> None:
    assert [engines.label(n) for n in engines.NAMES] == ["vLLM", "SGLang", "TensorRT-LLM", "TokenSpeed"]
    assert engines.label("tokenspeed-unknown") == "tokenspeed-unknown"
    assert engines.spelled(["a"]) == "a" and engines.spelled(["a", "b", "c"], "and") == "a, b and c"


def _spelled_lists(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Tuple, list and set literals of two or more engine names in one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            named = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in ENGINE_WORDS]
            if len(named) >= 2:
                yield node.lineno, named


def test_no_module_spells_a_list_of_engines() -> None:
    """A second spelling of the set of engines is how they drifted: only eagle_convert/engines.py lists them."""
    modules = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "engines.py")
    spelled = [f"{p.relative_to(ROOT)}:{line} {names}" for p in modules for line, names in _spelled_lists(p)]
    assert spelled == [], "derive these from eagle_convert/engines.py"
