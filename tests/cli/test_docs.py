"""Generated documentation must match the code it documents."""

from __future__ import annotations

import re
from pathlib import Path

from eagle_convert.cli.docs import render_cli_markdown, render_rules_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_cli_reference_is_up_to_date() -> None:
    current = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert current == render_cli_markdown(), "docs/cli.md drifted: run `python -m eagle_convert.cli.docs > docs/cli.md`"


def test_readme_commands_exist() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "scripts/demo" in readme and "scripts/test" in readme
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_rules_reference_is_up_to_date() -> None:
    current = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    assert current == render_rules_markdown(), "docs/rules.md drifted: run `python -m eagle_convert.cli.docs rules`"


def test_readme_rule_count_is_the_registry_s() -> None:
    """Every "N rules" the README states is the number of rules the tool has."""
    from eagle_convert.rules.registry import RULES

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    counts = [int(n) for n in re.findall(r"\b(\d+) rules\b", readme)]
    assert counts and all(n == len(RULES) for n in counts), (
        f"README.md says {counts} rules; the registry has {len(RULES)}: update README.md"
    )
