"""Absurd values in a draft's own config (issue 29): every size, epsilon, rope factor and list the tool reads has a
range; a value outside it, or sizes that must agree and do not, is EC020 (an error at the static level) in inspect
and verify, and normalize refuses the draft with nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eagle_convert.errors import NormalizeRefused
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.verify.run import verify_checkpoint
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS

SIZES = [
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "draft_vocab_size",
    "max_position_embeddings",
    "target_hidden_size",
    "num_hidden_layers",
    "num_aux_hidden_states",
]
CASES: dict[str, tuple[dict[str, Any], str]] = {
    **{f"{key}={value}": ({key: value}, key) for key in SIZES for value in (0, -8, 2**40)},
    "rms_norm_eps negative": ({"rms_norm_eps": -1e-6}, "rms_norm_eps"),
    "rms_norm_eps 2": ({"rms_norm_eps": 2.0}, "rms_norm_eps"),
    "rope_theta 0": ({"rope_theta": 0}, "rope_theta"),
    "rope factor 0": ({"rope_scaling": {"rope_type": "linear", "factor": 0}}, "rope_scaling.factor"),
    "rope factor a string": ({"rope_scaling": {"rope_type": "linear", "factor": "4"}}, "rope_scaling.factor"),
    "empty aux ids": ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": []}}, "eagle_aux_hidden_state_layer_ids"),
    "100k architectures": ({"architectures": ["LlamaForCausalLMEagle3"] * 100_000}, "architectures"),
    "heads do not divide hidden": ({"num_attention_heads": 3, "head_dim": None}, "head_dim"),
    "kv heads do not divide heads": ({"num_key_value_heads": 3}, "num_key_value_heads"),
    "draft vocab over vocab": ({"draft_vocab_size": 100_000}, "draft_vocab_size"),
}


def _draft(tmp: Path, change: dict[str, Any]) -> Path:
    draft = write_layout(tmp / "draft", LAYOUTS["canonical-mha"])
    config = json.loads((draft / "config.json").read_text(encoding="utf-8"))
    for key, value in change.items():
        if value is None:
            config.pop(key, None)
        elif isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    (draft / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return draft


def test_the_unchanged_draft_has_no_ec020(tmp_path: Path) -> None:
    assert not [f for f in inspect_checkpoint(_draft(tmp_path, {})).findings if f.rule_id == "EC020"]


@pytest.mark.parametrize("case", list(CASES))
def test_an_absurd_value_is_ec020_and_normalize_refuses(tmp_path: Path, case: str) -> None:
    change, key = CASES[case]
    draft = _draft(tmp_path, change)
    before = {p.name: p.read_bytes() for p in draft.iterdir()}
    ec020 = [f for f in inspect_checkpoint(draft).findings if f.rule_id == "EC020"]
    assert ec020 and any(key in f.message for f in ec020), (case, ec020)
    report = verify_checkpoint(draft, compute_hashes=False)
    assert report.status == "fail" and "EC020" in {f.rule_id for f in report.findings}
    with pytest.raises(NormalizeRefused) as refused:  # EC020, or a blocking finding the same value causes first
        normalize_checkpoint(draft, tmp_path / "out", aux_convention="output-of")
    assert "EC020" in refused.value.message or key in refused.value.message
    assert not (tmp_path / "out").exists()
    assert {p.name: p.read_bytes() for p in draft.iterdir()} == before


def test_a_draft_sized_for_another_target_is_ec020_against_the_target(tmp_path: Path) -> None:
    """A real config from a trainer's history: hidden_size 5120, 28 heads, no head_dim and no target_hidden_size,
    for a 3584-wide Qwen2.5-7B target (its config as transformers writes it)."""
    sizes = {"hidden_size": 5120, "num_attention_heads": 28, "num_key_value_heads": 4}
    draft = _draft(tmp_path, {**sizes, "head_dim": None, "target_hidden_size": None})
    target = tmp_path / "target"
    target.mkdir()
    config = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584}
    config |= {"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064}
    (target / "config.json").write_text(json.dumps(config), encoding="utf-8")
    found = [f for f in inspect_checkpoint(draft, target=target).findings if f.rule_id == "EC020"]
    messages = " ".join(f.message for f in found)
    assert "not a multiple of num_attention_heads 28" in messages
    assert "differs from the target's 3584 and no target_hidden_size" in messages
