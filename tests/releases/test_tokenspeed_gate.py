"""TokenSpeed at the gate (verify, the JSON reports, the model card). Target: the 12-layer Llama fixture. TokenSpeed
reads the draft's eagle_config ids and adds 1 (models/base/causal_lm.py:271-282); index 12 (id 11) is never reached,
id 12 selects hs[12] (base/transformer_model.py:207-253); its server argument --eagle3-layers-to-capture replaces the
draft's ids (execution/factory.py:197-200)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from eagle_convert.cli.main import main
from eagle_convert.hub.model_card import engine_launch
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.releases import resolve_engines
from fixtures.generate import write_layout, write_targets
from fixtures.layouts import LAYOUTS
from tests.conftest import SCHEMAS

TS = "tokenspeed@0.1.1"
KEY = "eagle3_layers_to_capture"
VERIFY = Draft202012Validator(json.loads((SCHEMAS / "verify-report.schema.json").read_text()))


@pytest.fixture(scope="module")
def drafts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``last``: SpecForge ids [1, 5, 11] (output-of: hs[2, 6, 12]); ``three``: ids [3, 6, 9], read input-to
    (hs[3, 6, 9]) with --aux-convention."""
    root = tmp_path_factory.mktemp("tokenspeed")
    for name, ids in (("last", [1, 5, 11]), ("three", [3, 6, 9])):
        out = write_layout(root / name, LAYOUTS["specforge-mha"])
        config = json.loads((out / "config.json").read_text())
        config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
        (out / "config.json").write_text(json.dumps(config))
    write_targets(root / "targets")
    return root


def _verify(drafts: Path, name: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, Any]:
    code = main([
        "verify", str(drafts / name), "--target", str(drafts / "targets" / "target-llama"), "--engine", TS,
        "--json", "--no-hash", *extra,
    ])  # fmt: skip
    out, _ = capsys.readouterr()
    doc = json.loads(out)
    VERIFY.validate(doc)
    return code, doc


def test_the_last_layer_s_output_is_never_reached_and_the_server_argument_feeds_it(
    drafts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = _verify(drafts, "last", capsys)
    (ec105,) = [f for f in doc["findings"] if f["rule_id"] == "EC105"]
    assert code == 1 and "[11] are never reached" in ec105["message"] and ec105["engine"] == TS
    assert doc["capture_settings"] == {TS: {KEY: [1, 5, 12]}}
    code, doc = _verify(drafts, "last", capsys, "--engine-arg", f"{KEY}=[1,5,12]")
    assert code == 0 and doc["deployment"] == {KEY: [1, 5, 12]} and doc["findings"] == []


def test_ec104_names_the_server_argument(drafts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _verify(drafts, "three", capsys, "--aux-convention", "input-to")
    (ec104,) = [f for f in doc["findings"] if f["rule_id"] == "EC104"]
    assert code == 1 and ec104["actual"] == [4, 7, 10] and ec104["expected"] == [3, 6, 9]
    assert "serve it with --eagle3-layers-to-capture 2,5,8" in ec104["message"]


def test_the_model_card_launches_tokenspeed_with_the_advised_setting(drafts: Path) -> None:
    target = drafts / "targets" / "target-llama"
    other = inspect_checkpoint(drafts / "last", target=target, engine=TS)
    line = engine_launch("tokenspeed", other.spec, resolve_engines(TS), "org/target", "org/draft")
    assert line.startswith("tokenspeed serve org/target --speculative-algorithm EAGLE3")
    assert line.endswith("--eagle3-layers-to-capture 1,5,12")
    assert "eagle3-layers" not in engine_launch("sglang", other.spec, resolve_engines(TS), "t", "d")
