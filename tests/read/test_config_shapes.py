"""Config shapes now in the field (issue 19), each read correctly or reported clearly, never a crash.

Synthetic configs stand in where no public example was found (K of 4 and 5, target_layer_ids on an EAGLE3 draft,
rope_parameters, a target's model_type on a Llama draft, the new architecture names, free-text keys); the vendored
real ones (fixtures/real-configs, SOURCES.md) are checked in tests/draft/test_real_configs.py. Weights are header-only
files of the shapes the config implies (fixtures/real.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from eagle_convert.draft.expected import expected_tensors
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.read.config import DraftConfig, TargetConfig
from eagle_convert.releases import engine_view
from eagle_convert.rules.registry import RULES
from eagle_convert.verify.run import verify_checkpoint
from fixtures.generate import write_specs
from fixtures.real import real_shape_specs

SCHEMAS = Path(__file__).resolve().parents[2] / "eagle_convert" / "schemas"
VALIDATOR = Draft202012Validator(json.loads((SCHEMAS / "inspect-report.schema.json").read_text()))
H = 64
BASE: dict[str, Any] = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": H,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "vocab_size": 256,
    "draft_vocab_size": 256,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "target_hidden_size": H,
}
TARGET_RAW = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 12, "hidden_size": H}
TARGET = TargetConfig.from_dict(TARGET_RAW, "target.json")


def target_dir(tmp_path: Path, raw: dict[str, Any] = TARGET_RAW) -> Path:
    out = tmp_path / "target"
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(raw))
    return out


def draft(tmp_path: Path, weights: bool = True, **overrides: Any) -> Path:
    """A draft directory: BASE updated with ``overrides`` (a None value removes the key), plus real-shape weights."""
    cfg = {k: v for k, v in {**BASE, **overrides}.items() if v is not None}
    out = tmp_path / "draft"
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg))
    specs = real_shape_specs(cfg) if weights else None
    if specs is not None:
        write_specs(out, specs, sparse=True)
    return out


def inspect(path: Path, target: TargetConfig | None = TARGET) -> dict[str, Any]:
    doc = inspect_checkpoint(path, target=target, engine="all").to_dict()
    VALIDATOR.validate(doc)
    return doc


def rules(doc: dict[str, Any]) -> set[str]:
    return {f["rule_id"] for f in doc["findings"]}


# ---- aux counts other than 3 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [4, 5, 9])
def test_k_other_than_3_in_eagle_config(tmp_path: Path, k: int) -> None:
    ids = [1, *range(3, 3 + k - 1)]  # first id 1: output-of, hs[id + 1]
    doc = inspect(draft(tmp_path, eagle_config={"eagle_aux_hidden_state_layer_ids": ids}))
    assert doc["num_aux_hidden_states"] == k
    assert doc["num_aux_hidden_states_source"] == f"fc.weight width / {H}"
    assert doc["aux_layers"]["hidden_state_indices"] == [i + 1 for i in ids]
    by_engine = {f["rule_id"] for f in doc["findings"] if (f["engine"] or "").startswith(("sglang@", "vllm@"))}
    assert {"EC107", "EC211"}.isdisjoint(by_engine)  # SGLang and vLLM count eagle_config ids: an fc K wide
    # TokenSpeed's Llama draft counts the top-level ids only, else 3 (llama_eagle3.py:413-417): an fc 3 wide
    tokenspeed = [
        f["message"] for f in doc["findings"] if f["engine"] == "tokenspeed@0.1.1" and f["rule_id"] == "EC211"
    ]
    assert len(tokenspeed) == 1 and "builds fc for K=3" in tokenspeed[0] and f"the weights hold K={k}" in tokenspeed[0]
    # TensorRT-LLM reads no ids from the draft: unset, its setting captures 3 layers, and the finding names the K ids
    trtllm = {f["rule_id"] for f in doc["findings"] if (f["engine"] or "").startswith("trtllm@")}
    assert trtllm == {"EC114", "EC211"}
    shapes = {t["name"]: t["shape"] for t in doc["tensors"]["items"]}
    assert shapes["fc.weight"] == [H, k * H]


@pytest.mark.parametrize("k", [4, 5, 9])
def test_k_other_than_3_declared_with_top_level_ids(tmp_path: Path, k: int) -> None:
    ids = list(range(2, 2 + k))
    path = draft(tmp_path, num_aux_hidden_states=k, eagle_aux_hidden_state_layer_ids=ids, fc_norm=True)
    doc = inspect(path)
    assert doc["num_aux_hidden_states"] == k and "EC107" not in rules(doc)
    spec = inspect_checkpoint(path, target=TARGET).spec
    expected = expected_tensors(spec)
    assert expected["fc.weight"].shape == (H, k * H)
    assert sorted(n for n in expected if n.startswith("fc_norm.")) == [f"fc_norm.{i}.weight" for i in range(k)]


def test_k_declared_without_ids_is_reported(tmp_path: Path) -> None:
    """Every engine's default capture is three states: a K=4 draft without ids cannot be fed."""
    path = draft(tmp_path, num_aux_hidden_states=4)
    doc = inspect(path)
    assert doc["num_aux_hidden_states"] == 4 and doc["aux_layers"]["location"] == "absent"
    report = verify_checkpoint(path, target=target_dir(tmp_path), engine="all").to_dict()
    assert "EC110" in {f["rule_id"] for f in report["findings"]}


def test_ids_count_against_declared_k(tmp_path: Path) -> None:
    doc = inspect(draft(tmp_path, weights=False, num_aux_hidden_states=5, eagle_aux_hidden_state_layer_ids=[2, 4, 6]))
    ec107 = [f for f in doc["findings"] if f["rule_id"] == "EC107"]
    assert ec107 and "3 aux-layer ids but K=5" in ec107[0]["message"]


# ---- banded aux layers -------------------------------------------------------------------------------------------

BANDS = [[2, 4, 8, 10], [15, 18, 20], [26, 28]]
FLAT = [i for band in BANDS for i in band]


def test_banded_mix_fc_is_reported_not_modelled(tmp_path: Path) -> None:
    doc = inspect(
        draft(
            tmp_path,
            eagle_aux_injection_mode="banded_mix_fc",
            aux_hidden_states_layer_ids=FLAT,
            eagle_aux_layer_bands=BANDS,
            fc_norm=True,
        )
    )
    ec016 = [f for f in doc["findings"] if f["rule_id"] == "EC016"]
    assert len(ec016) == 1 and ec016[0]["severity"] == "error"
    assert "mixes the 9 aux states into 3 streams" in ec016[0]["message"]
    assert "no engine reads these keys" in ec016[0]["message"]
    assert doc["num_aux_hidden_states"] == 3  # one fc stream per band
    assert doc["aux_layers"]["hidden_state_indices"] == [i + 1 for i in FLAT]  # the trainer's hs[id + 1]
    assert "EC107" not in rules(doc)  # 9 ids for a 3-stream fc is the mode, which EC016 explains
    assert RULES["EC016"].blocks_normalize
    assert "band0_mix_logits" in {t["name"] for t in doc["tensors"]["items"]}


@pytest.mark.parametrize("mode", ["progressive_staged", "progressive_banded_mix", "hawk", "a_future_mode"])
def test_other_injection_modes_are_reported(tmp_path: Path, mode: str) -> None:
    doc = inspect(
        draft(tmp_path, weights=False, num_hidden_layers=3, eagle_aux_injection_mode=mode, eagle_config=None),
        target=None,
    )
    assert "EC016" in rules(doc) and "EC006" in rules(doc)


def test_bands_without_a_mode_are_reported(tmp_path: Path) -> None:
    doc = inspect(draft(tmp_path, weights=False, eagle_aux_layer_bands=BANDS))
    (f,) = [f for f in doc["findings"] if f["rule_id"] == "EC016"]
    assert "stock fused_fc mode, which the trainer ignores" in f["message"]


# ---- ids under other keys ----------------------------------------------------------------------------------------


def test_trainer_key_alone(tmp_path: Path) -> None:
    """AngelSlim's aux_hidden_states_layer_ids, read by no engine: the trainer took hs[id + 1]."""
    doc = inspect(draft(tmp_path, aux_hidden_states_layer_ids=[1, 5, 8]))
    aux = doc["aux_layers"]
    assert aux["ids"] == [1, 5, 8] and aux["convention"] == "output-of" and aux["confidence"] == "high"
    assert aux["hidden_state_indices"] == [2, 6, 9]
    assert any("aux_hidden_states_layer_ids" in e for e in aux["evidence"])
    # no engine reads the key: every release captures its defaults hs[2, 6, 9] for N=12 -- the same states here
    assert aux["engines"]["vllm@0.33"]["hidden_state_indices"] == [2, 6, 9]


def test_trainer_key_beside_top_level_ids_reads_them_input_to(tmp_path: Path) -> None:
    doc = inspect(draft(tmp_path, aux_hidden_states_layer_ids=[1, 4, 8], eagle_aux_hidden_state_layer_ids=[2, 5, 9]))
    aux = doc["aux_layers"]
    assert aux["convention"] == "input-to" and aux["hidden_state_indices"] == [2, 5, 9]
    assert "EC104" not in {f["rule_id"] for f in doc["findings"] if (f.get("engine") or "").startswith("vllm@0.33")}


def test_trainer_key_that_contradicts_the_ids_is_a_conflict(tmp_path: Path) -> None:
    doc = inspect(draft(tmp_path, aux_hidden_states_layer_ids=[1, 4, 8], eagle_aux_hidden_state_layer_ids=[3, 6, 10]))
    assert doc["aux_layers"]["convention"] == "ambiguous" and "EC108" in rules(doc)


def test_target_layer_ids_alone(tmp_path: Path) -> None:
    """DFlash's key on an EAGLE3 draft: the output of layer id; vLLM's V2 runner reads it +1 (eagle3_utils.py)."""
    doc = inspect(draft(tmp_path, target_layer_ids=[1, 5, 8]))
    aux = doc["aux_layers"]
    assert aux["convention"] == "output-of" and aux["hidden_state_indices"] == [2, 6, 9]
    assert aux["engines"]["vllm@0.33"]["ids_from"] == "target_layer_ids+1"
    assert aux["engines"]["vllm@0.33"]["hidden_state_indices"] == [2, 6, 9]


def test_num_aux_hidden_states_only(tmp_path: Path) -> None:
    doc = inspect(draft(tmp_path, num_aux_hidden_states=3))
    assert doc["num_aux_hidden_states"] == 3 and doc["aux_layers"]["convention"] == "default"


# ---- drafts of 2 to 4 layers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("layers", [2, 3, 4])
def test_multi_layer_drafts(tmp_path: Path, layers: int) -> None:
    doc = inspect(
        draft(tmp_path, num_hidden_layers=layers, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 5, 8]})
    )
    assert doc["format"]["num_draft_layers"] == layers
    assert "EC006" in rules(doc) and "EC007" not in rules(doc)
    view = engine_view(
        "vllm@0.33-v1",
        json.loads((tmp_path / "draft" / "config.json").read_text()),
        target_model_type="llama",
        target_num_layers=12,
    )
    assert view.num_layers == layers


def test_declared_layers_the_weights_lack(tmp_path: Path) -> None:
    path = draft(tmp_path)
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 3}))
    doc = inspect(path)
    (f,) = [f for f in doc["findings"] if f["rule_id"] == "EC007" and f.get("subject") == "num_hidden_layers"]
    assert "num_hidden_layers is 3 but the weights hold 1 decoder layer" in f["message"]


# ---- speculators research configs --------------------------------------------------------------------------------


def test_nested_eagle3_block_declares_k(tmp_path: Path) -> None:
    block = {"concat_factor": 4, "fc_in_dim": 4 * H, "fc_out_dim": H}
    doc = inspect(draft(tmp_path, weights=False, eagle3=block, architectures=["LlamaForCausalLM"]))
    assert doc["num_aux_hidden_states"] == 4
    assert doc["num_aux_hidden_states_source"].startswith("eagle3.concat_factor")
    assert doc["format"]["producer"] == "speculators" and "EC007" not in rules(doc)


def test_nested_eagle3_block_with_wrong_dims(tmp_path: Path) -> None:
    block = {"concat_factor": 3, "fc_in_dim": 4 * H, "fc_out_dim": H}
    doc = inspect(draft(tmp_path, weights=False, eagle3=block))
    assert any(f["rule_id"] == "EC007" and f.get("subject") == "eagle3" for f in doc["findings"])


def test_vocab_size_is_the_drafts_beside_target_vocab_size(tmp_path: Path) -> None:
    path = draft(
        tmp_path, architectures=["LlamaForCausalLM"], vocab_size=64, draft_vocab_size=None, target_vocab_size=256
    )
    doc = inspect(path)
    assert doc["vocab"]["vocab_size"] == 256 and doc["vocab"]["draft_vocab_size"] == 64
    assert doc["eagle_version"] == "eagle3" and doc["format"]["producer"] == "speculators"  # not EAGLE-1
    (f,) = [f for f in doc["findings"] if f["rule_id"] == "EC017"]
    assert "write vocab_size 256 and draft_vocab_size 64" in f["message"]
    assert doc["vocab"]["has_d2t"]  # the reduced head ships its map


# ---- HF v5 rope_parameters ---------------------------------------------------------------------------------------

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "rope_theta": 50000.0}


def test_rope_parameters_instead_of_rope_scaling() -> None:
    cfg = DraftConfig.from_dict({**BASE, "rope_theta": None, "rope_parameters": YARN})
    assert cfg.rope_scaling == YARN and cfg.rope_theta == 50000.0
    plain = DraftConfig.from_dict({**BASE, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})
    assert plain.rope_scaling is None and plain.rope_theta == 1e6  # theta inside the dict wins (transformers 5)


def test_rope_parameters_on_the_target() -> None:
    target = TargetConfig.from_dict({"num_hidden_layers": 4, "hidden_size": H, "rope_parameters": YARN})
    assert target.rope_scaling == YARN and target.rope_theta == 50000.0


def test_rope_parameters_match_the_targets_rope_scaling(tmp_path: Path) -> None:
    target = target_dir(tmp_path, {**TARGET_RAW, "rope_scaling": {"type": "yarn", "factor": 4.0}})
    path = draft(tmp_path, rope_parameters=YARN)
    report = verify_checkpoint(path, target=target, engine="all").to_dict()
    assert "EC503" not in {f["rule_id"] for f in report["findings"]}


def test_rope_keys_that_agree_and_disagree(tmp_path: Path) -> None:
    agree = inspect(
        draft(tmp_path / "a", weights=False, rope_scaling={"type": "yarn", "factor": 4.0}, rope_parameters=YARN)
    )
    assert "EC018" not in rules(agree)
    disagree = inspect(
        draft(tmp_path / "b", weights=False, rope_scaling={"rope_type": "yarn", "factor": 8.0}, rope_parameters=YARN)
    )
    (f,) = [f for f in disagree["findings"] if f["rule_id"] == "EC018"]
    assert "factor (8.0 vs 4.0)" in f["message"]


# ---- a target's model_type on a plain Llama draft ----------------------------------------------------------------


@pytest.mark.parametrize("model_type", ["kimi_k2", "gpt_oss", "glm4_moe"])
def test_target_model_type_on_a_llama_draft(tmp_path: Path, model_type: str) -> None:
    path = draft(tmp_path, model_type=model_type, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 5, 8]})
    doc = inspect(path, target=None)
    assert doc["attention"] == "mha" and doc["target"]["family"] is None  # not read as an MLA or a target hint
    assert doc["moe"] is False
    (f,) = [f for f in doc["findings"] if f["rule_id"] == "EC019"]
    assert f"model_type {model_type!r}" in f["message"]
    raw = json.loads((path / "config.json").read_text())
    view = engine_view("vllm@0.33", raw, target_model_type=None, target_num_layers=None)
    assert view.draft_class == "llama_eagle3.Eagle3LlamaForCausalLM" and view.mla_built is None


def test_target_model_type_with_every_key_spelled_out(tmp_path: Path) -> None:
    explicit = {
        "head_dim": 16,
        "attention_bias": False,
        "sliding_window": None,
        "rope_scaling": {"rope_type": "default"},
    }
    doc = inspect(draft(tmp_path, weights=False, model_type="gpt_oss", **explicit), target=None)
    assert "EC019" in rules(doc)  # sliding_window absent (None removes it): still brought by GptOssConfig
    doc = inspect(draft(tmp_path / "b", weights=False, model_type="gpt_oss", **{**explicit, "sliding_window": 0}))
    assert "EC019" not in rules(doc)


# ---- architecture names trainers now write -----------------------------------------------------------------------

MLA = {"kv_lora_rank": 32, "q_lora_rank": 48, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}


@pytest.mark.parametrize(
    ("arch", "extra", "attention", "moe", "vllm_class"),
    [
        ("GptOssForCausalLMEagle3", {"num_local_experts": 8}, "mha", True, None),
        ("Glm4MoeForCausalLMEagle3", {}, "mha", False, None),
        (
            "Eagle3DeepseekV3ForCausalLM",
            {**MLA, "model_type": "deepseek_v3"},
            "mla",
            False,
            "deepseek_eagle3.Eagle3DeepseekV2ForCausalLM",
        ),
        ("DeepSeekForCausalLMEagle3", {**MLA, "model_type": "deepseek_v3"}, "mla", False, None),
        ("LlamaForCausalLMEagle3Gated", {}, "mha", True, None),
    ],
)
def test_new_architecture_names(
    tmp_path: Path, arch: str, extra: dict[str, Any], attention: str, moe: bool, vllm_class: str | None
) -> None:
    path = draft(tmp_path, weights=False, architectures=[arch], **extra)
    doc = inspect(path, target=None)
    assert doc["attention"] == attention and doc["moe"] is moe
    raw = json.loads((path / "config.json").read_text())
    for release in ("sglang@0.5.23", "sglang@0.5.16"):
        view = engine_view(release, raw, target_model_type=None, target_num_layers=None)
        assert view.draft_class is None
        assert "start-up fails (sglang/srt/model_loader/utils.py:15" in view.citations["draft_class"]
    vllm = engine_view("vllm@0.33", raw, target_model_type=None, target_num_layers=None)
    assert vllm.draft_class == vllm_class
    if vllm_class is None:
        assert "which is not registered" in vllm.citations["draft_class"]
    accepted = {f["engine"] for f in doc["findings"] if f["rule_id"] == "EC012"}
    assert {"sglang@0.5.23", "sglang@0.5.16"} <= accepted


# ---- free-text keys ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "notes",
    [
        {"_comment_for_humans": "trained on 4 nodes; ids are output-of"},
        {"note": "eagle_config ids are SpecForge's"},
        {"note": {"nested": ["free", 1, None]}, "_comment_for_humans": ["a", "list"]},
    ],
)
def test_free_text_keys_change_nothing(tmp_path: Path, notes: dict[str, Any]) -> None:
    ids = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 5, 8]}}
    plain = draft(tmp_path / "plain", **ids)
    noted = draft(tmp_path / "noted", **ids, **notes)
    target = target_dir(tmp_path)
    for level in ("static", "tensors"):
        a = verify_checkpoint(plain, target=target, engine="all", level=level).to_dict()
        b = verify_checkpoint(noted, target=target, engine="all", level=level).to_dict()
        assert sorted(f["rule_id"] for f in a["findings"]) == sorted(f["rule_id"] for f in b["findings"])
    assert rules(inspect(plain)) == rules(inspect(noted))
