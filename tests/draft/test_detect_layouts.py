"""Detection on every generated producer layout, single file and sharded, with and without a target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.verify.run import verify_checkpoint
from fixtures.layouts import INPUT_TO_IDS, LAYOUTS, OUTPUT_OF_IDS

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "eagle_convert" / "schemas"
SCHEMA = json.loads((SCHEMAS / "inspect-report.schema.json").read_text())
VALIDATOR = Draft202012Validator(SCHEMA)


def test_schema_is_valid_draft_2020_12() -> None:
    Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("kind", ["layouts", "layouts-sharded"])
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_layout_detected(fx: Path, name: str, kind: str) -> None:
    expect = LAYOUTS[name].expect
    doc = inspect_checkpoint(fx / kind / name).to_dict()
    VALIDATOR.validate(doc)
    assert doc["format"]["producer"] == expect.producer
    assert doc["attention"] == expect.attention
    assert doc["eagle_version"] == expect.eagle_version
    assert doc["moe"] == expect.moe
    assert doc["flags"] == {
        "fc_norm": expect.fc_norm,
        "norm_output": expect.norm_output,
        "norm_before_fc": expect.norm_before_fc,
        "norm_before_residual": expect.norm_before_residual,
    }
    assert doc["aux_layers"]["location"] == expect.ids_location
    assert doc["aux_layers"]["convention"] == expect.convention
    assert doc["format"]["layer_prefix"] == LAYOUTS[name].prefix
    assert doc["format"]["sharded"] == (kind == "layouts-sharded")
    assert doc["tensors"]["count"] == len(LAYOUTS[name].tensors())
    assert doc["num_aux_hidden_states"] == (2 if expect.producer == "eagle1" else 3)
    assert doc["vocab"]["has_d2t"] == LAYOUTS[name].d2t and doc["vocab"]["has_t2d"] == LAYOUTS[name].t2d


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_hidden_state_indices_with_target(fx: Path, name: str) -> None:
    target = fx / "targets" / ("target-kimi" if LAYOUTS[name].attention == "mla" else "target-llama")
    doc = inspect_checkpoint(fx / "layouts" / name, target=target).to_dict()
    VALIDATOR.validate(doc)
    aux = doc["aux_layers"]
    assert doc["target"]["num_hidden_layers"] == 12
    if aux["convention"] == "ambiguous":
        assert aux["hidden_state_indices"] is None
        assert aux["readings"] == {"output-of": [3, 7, 10], "input-to": [2, 6, 9]}
    else:  # every fixture layout was trained on the default states of a 12-layer target
        assert aux["hidden_state_indices"] == [2, 6, 9]


def test_specforge_ids_misread_by_vllm_v1_only(fx: Path) -> None:
    """SpecForge writes output-of ids [1, 5, 8] in eagle_config (trained on hs[2, 6, 9] of a 12-layer target).
    vLLM's V1 runner reads them as-is (VL/v1/worker/gpu_model_runner.py:5190-5221): hs[1, 5, 8], a misread. V2 never
    reads them (VL/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113-150) and captures the defaults hs[2, 6, 9]."""
    draft, target = fx / "layouts" / "specforge-mha", fx / "targets" / "target-llama"
    v1 = verify_checkpoint(draft, target=target, engine="vllm@0.33-v1", compute_hashes=False)
    misreads = [f for f in v1.findings if f.rule_id == "EC104"]
    assert [f.actual for f in misreads] == [[1, 5, 8]] and v1.status == "fail"
    assert "vllm@0.33-v1" in misreads[0].message and misreads[0].severity == "error"
    v2 = verify_checkpoint(draft, target=target, engine="vllm@0.33", compute_hashes=False)
    assert not [f for f in v2.findings if f.rule_id == "EC104"]


def test_kimi_target_uses_text_config_and_deepseek_rule(fx: Path) -> None:
    doc = inspect_checkpoint(fx / "layouts" / "torchspec-mla", target=fx / "targets" / "target-kimi").to_dict()
    assert doc["target"]["family"] == "deepseek"
    engines = doc["aux_layers"]["engines"]
    assert engines["sglang"]["hidden_state_indices"] == [2, 6, 9]  # SG/models/deepseek_v2.py:3458-3473: +1
    assert engines["vllm@0.33-v1"]["hidden_state_indices"] == OUTPUT_OF_IDS  # V1 reads eagle_config as-is
    assert engines["vllm"]["hidden_state_indices"] == engines["vllm@0.33"]["hidden_state_indices"] == [2, 6, 9]


def test_explicit_convention_overrides_detection(fx: Path) -> None:
    name = "torchspec-mla-eagle3.1-vllm"
    ambiguous = inspect_checkpoint(fx / "layouts" / name).to_dict()
    assert ambiguous["aux_layers"]["convention"] == "ambiguous"
    assert any(f["rule_id"] == "EC101" for f in ambiguous["findings"])
    decided = inspect_checkpoint(
        fx / "layouts" / name, target=fx / "targets" / "target-kimi", aux_convention="input-to"
    ).to_dict()
    assert decided["aux_layers"]["convention"] == "input-to"
    assert decided["aux_layers"]["hidden_state_indices"] == INPUT_TO_IDS
    assert decided["aux_layers"]["evidence"] == ["set by --aux-convention input-to"]
    assert not any(f["rule_id"] == "EC101" for f in decided["findings"])


def test_every_inference_states_evidence(fx: Path) -> None:
    for name in LAYOUTS:
        doc = inspect_checkpoint(fx / "layouts" / name).to_dict()
        assert doc["format"]["evidence"] and doc["aux_layers"]["evidence"] and doc["attention_evidence"]
        assert set(doc["flag_sources"]) == set(doc["flags"])


def test_legacy_eagle31_names_are_reported(fx: Path) -> None:
    doc = inspect_checkpoint(fx / "layouts" / "specforge-mha-legacy-eagle3.1").to_dict()
    assert doc["flag_sources"]["fc_norm"] == "use_aux_norm (legacy)"
    assert "EC202" in {f["rule_id"] for f in doc["findings"]}


def test_eagle1_and_moe_are_labelled_as_errors(fx: Path) -> None:
    for name, rule in (("eagle1-mha", "EC001"), ("specforge-moe", "EC002")):
        doc = inspect_checkpoint(fx / "layouts" / name).to_dict()
        assert any(f["rule_id"] == rule and f["severity"] == "error" for f in doc["findings"]), name


def test_flag_weight_disagreement(tmp_path: Path) -> None:
    from fixtures.generate import write_layout
    from fixtures.layouts import LAYOUTS as L

    lay = L["specforge-mha-eagle3.1"]
    flagless = type(lay)(**{**lay.__dict__, "config": {k: v for k, v in lay.config.items() if k != "fc_norm"}})
    flagless_doc = inspect_checkpoint(write_layout(tmp_path / "a", flagless)).to_dict()
    assert flagless_doc["flags"]["fc_norm"] is True and flagless_doc["flag_sources"]["fc_norm"] == "weights"
    weightless = type(lay)(**{**lay.__dict__, "fc_norm": ()})
    doc = inspect_checkpoint(write_layout(tmp_path / "b", weightless)).to_dict()
    assert any(f["rule_id"] == "EC201" and f["severity"] == "error" for f in doc["findings"])


def test_k_from_fc_width_disagreeing_with_config(tmp_path: Path) -> None:
    from fixtures.generate import write_layout

    lay = LAYOUTS["specforge-mha"]
    odd = type(lay)(**{**lay.__dict__, "config": {**lay.config, "num_aux_hidden_states": 4}})
    doc = inspect_checkpoint(write_layout(tmp_path / "k", odd)).to_dict()
    assert doc["num_aux_hidden_states"] == 3
    assert any(f["rule_id"] == "EC107" for f in doc["findings"])
