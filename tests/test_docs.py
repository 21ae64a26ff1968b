"""Generated documentation must match the code it documents."""

from __future__ import annotations

from pathlib import Path

from eagle_convert.cli.docs import render_cli_markdown, render_rules_markdown

ROOT = Path(__file__).resolve().parent.parent


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
