"""The rule registry is the contract behind every finding id."""

from __future__ import annotations

import re
from pathlib import Path

from eagle_convert.rules import registry
from eagle_convert.rules.finding import SEVERITIES
from eagle_convert.rules.registry import RULES

PACKAGE = Path(__file__).resolve().parents[2] / "eagle_convert"


def test_rule_ids_are_well_formed_and_unique() -> None:
    assert all(re.fullmatch(r"EC\d{3}", rule_id) for rule_id in RULES)
    assert len({rule.name for rule in RULES.values()}) == len(RULES)
    assert all(rule.severity in SEVERITIES and rule.summary.endswith(".") for rule in RULES.values())


def test_no_rule_id_is_declared_twice() -> None:
    """The records live in one module per topic and the table is keyed by id: a second record with an id would
    replace the first without a word."""
    declared = [rule.id for rule in registry._RULES]
    assert len(declared) == len(set(declared)) == len(RULES), sorted(i for i in set(declared) if declared.count(i) > 1)


def test_every_id_the_code_emits_is_registered() -> None:
    used = set()
    for path in PACKAGE.rglob("*.py"):
        used |= set(re.findall(r'"(EC\d{3})"', path.read_text(encoding="utf-8")))
    assert used, "the scan found no rule ids at all"
    assert used <= set(RULES), sorted(used - set(RULES))
