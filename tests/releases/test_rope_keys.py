"""A draft whose rotary settings are in rope_parameters alone (transformers 5's save_pretrained): each release record
says how it reads one (releases/rope.py, read from the wheels), and normalize writes both keys, so transformers 4
readers, which never read rope_parameters, keep a YaRN draft's scaling too (issue 39)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.normalize.profiles import PROFILE_ENGINES
from eagle_convert.releases import RELEASES
from eagle_convert.verify.run import verify_checkpoint
from fixtures.generate import write_layout, write_targets
from fixtures.layouts import LAYOUTS

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}
THETA = 500000.0


def _draft(root: Path, **rope: Any) -> Path:
    """The canonical draft with these rotary keys (and no others)."""
    base = LAYOUTS["canonical-mha"]
    config = {k: v for k, v in base.config.items() if k not in ("rope_scaling", "rope_parameters", "rope_theta")}
    draft = write_layout(root / "draft", replace(base, config={**config, **rope}))
    write_targets(root / "targets")
    return draft


def _layer(config: dict[str, Any]) -> dict[str, Any]:
    """Where a profile writes the layer's settings (speculators: transformer_layer_config)."""
    layer = config.get("transformer_layer_config")
    return layer if isinstance(layer, dict) else config


def test_each_sglang_and_vllm_record_says_how_it_reads_rope_parameters_alone() -> None:
    for release in RELEASES.values():
        found = [b for b in release.behaviours if b.key == "rope-parameters-only"]
        if release.engine not in ("sglang", "vllm"):  # read for SGLang's and vLLM's wheels only: no claim elsewhere
            assert found == [], release.name
            continue
        (said,) = found
        assert said.cite.file.endswith("models/llama.py") and "-" in said.cite.lines, release.name
        assert "keeps its scaling" in said.does and "transformers" in said.does and "rope_parameters" in said.does


@pytest.mark.parametrize("profile", list(PROFILE_ENGINES))
def test_normalize_writes_rope_parameters_alone_under_both_keys(tmp_path: Path, profile: str) -> None:
    draft = _draft(tmp_path, rope_parameters={**YARN, "rope_theta": THETA})
    report = normalize_checkpoint(draft, tmp_path / "out", profile=profile, target=tmp_path / "targets/target-llama")
    layer = _layer(json.loads((tmp_path / "out" / "config.json").read_text()))
    assert layer["rope_parameters"] == {**YARN, "rope_theta": THETA}  # kept as written
    assert layer["rope_scaling"] == YARN and layer["rope_theta"] == THETA  # what transformers 4 reads
    if profile != "speculators":  # its config changes are the layer's, as one key
        changed = {c.key: c.change for c in report.config_changes}
        assert changed["rope_scaling"] == "added" and changed["rope_theta"] == "added"
    verified = verify_checkpoint(tmp_path / "out", target=tmp_path / "targets/target-llama", compute_hashes=False)
    assert not [f for f in verified.findings if f.rule_id == "EC018"]  # the two keys agree


def test_normalize_writes_rope_scaling_alone_under_both_keys(tmp_path: Path) -> None:
    draft = _draft(tmp_path, rope_scaling={"type": "yarn", **{k: v for k, v in YARN.items() if k != "rope_type"}})
    draft_config = json.loads((draft / "config.json").read_text())
    draft_config["rope_theta"] = THETA
    (draft / "config.json").write_text(json.dumps(draft_config))
    normalize_checkpoint(draft, tmp_path / "out", target=tmp_path / "targets/target-llama")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["rope_parameters"] == {**YARN, "rope_theta": THETA}
    assert config["rope_scaling"]["type"] == "yarn"  # kept as written


def test_a_default_rope_gets_its_theta_at_the_top_level_and_no_scaling(tmp_path: Path) -> None:
    draft = _draft(tmp_path, rope_parameters={"rope_type": "default", "rope_theta": THETA})
    normalize_checkpoint(draft, tmp_path / "out", target=tmp_path / "targets/target-llama")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["rope_theta"] == THETA and "rope_scaling" not in config


def test_transformers_reads_the_normalized_config_with_its_scaling(tmp_path: Path) -> None:
    """transformers (5 here) reads the output as the source: the same YaRN, whichever key it takes."""
    from transformers import LlamaConfig

    draft = _draft(tmp_path, rope_parameters={**YARN, "rope_theta": THETA})
    normalize_checkpoint(draft, tmp_path / "out", target=tmp_path / "targets/target-llama")
    source = LlamaConfig.from_pretrained(draft).rope_parameters
    assert LlamaConfig.from_pretrained(tmp_path / "out").rope_parameters == source
    assert source["rope_type"] == "yarn" and source["factor"] == YARN["factor"]
