"""docs/architecture.md draws the layers that the import contracts in pyproject.toml enforce: they must agree."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import eagle_convert

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(eagle_convert.__file__).parent


def _contracts() -> dict[str, dict[str, object]]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["id"]: c for c in doc["tool"]["importlinter"]["contracts"]}


def _short(layer: str) -> str:
    return " | ".join(part.strip().removeprefix("eagle_convert.") for part in layer.split("|"))


def test_the_page_lists_the_contract_layers_in_order() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    drawn = re.search(r"<!-- layers: (.*?) -->", page)
    assert drawn, "docs/architecture.md lost its <!-- layers: ... --> line"
    layers = [_short(str(layer)) for layer in _contracts()["layers"]["layers"]]  # type: ignore[attr-defined]
    assert [s.strip() for s in drawn.group(1).split(",")] == layers
    diagram = page.split("```text", 1)[1].split("```", 1)[0]
    rows = [line.split()[0:3] for line in diagram.splitlines() if line.strip() and line.strip() != "│"]
    assert [" ".join(r[:3]) if r[1:2] == ["|"] else r[0] for r in rows] == layers


def test_every_part_of_the_package_is_in_a_layer() -> None:
    layered = {
        part.strip().removeprefix("eagle_convert.")
        for layer in _contracts()["layers"]["layers"]  # type: ignore[attr-defined]
        for part in str(layer).split("|")
    }
    parts = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    parts |= {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert parts <= layered, f"not in any layer of pyproject.toml [tool.importlinter]: {sorted(parts - layered)}"


def test_the_engine_model_contract_forbids_the_verdict_layer_and_torch() -> None:
    forbidden = set(_contracts()["engine-model"]["forbidden_modules"])  # type: ignore[arg-type]
    assert {"eagle_convert.verify", "eagle_convert.reference", "torch"} <= forbidden
