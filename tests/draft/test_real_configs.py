"""Detection on every vendored real trainer config, paired with header-only weights of its real shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from eagle_convert.inspect_api import inspect_checkpoint
from fixtures.real import REAL_CONFIGS, real_config_paths, write_real_checkpoint

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "eagle_convert" / "schemas"
VALIDATOR = Draft202012Validator(json.loads((SCHEMAS / "inspect-report.schema.json").read_text()))
PATHS = real_config_paths()

# What a careful reader of each annotated config concludes (SOURCES.md says where each came from).
EXPECTED: dict[str, dict[str, object]] = {
    "eagle1__train-config_vicuna_7B.json": {"producer": "eagle1", "eagle_version": "eagle1", "rule": "EC001"},
    "eagle1__train-config_EAGLE-LLaMA3-Instruct-8B.json": {
        "producer": "eagle1",
        "eagle_version": "eagle1",
        "rule": "EC001",
    },
    "eagle__traineagle3-config_llama3.1-8b.json": {"producer": "eagle", "attention": "mha", "convention": "default"},
    "specforge__branch-add-moe-draft-head_qwen3-30B-A3B-eagle3-moe-draft.json": {"moe": True, "rule": "EC002"},
    "specforge__pr574_qwen3.5-122b-a10b-eagle3-moe.json": {"moe": True, "rule": "EC002"},
    "specforge__pr186_deepseek-r1-eagle3_DeepseekV3ForCausalLMEagle3.json": {
        "producer": "specforge",
        "attention": "mla",
        "moe": False,
    },
    "specforge__mla-branch_TINY_MLA_DRAFT_CONFIG_DeepseekV3ForCausalLMEagle3.json": {
        "producer": "specforge",
        "attention": "mla",
    },
    "specforge__deepseek-v3-671b-eagle3.json": {
        "producer": "specforge",
        "convention": "output-of",
        "ids": [1, 29, 57],
        "location": "eagle_config",
    },
    "specforge__pr476_kimi-k25-eagle3.json": {"convention": "ambiguous", "rule": "EC101"},
    "specforge__pr530_step-3.5-flash-eagle3.json": {"convention": "ambiguous", "rule": "EC101"},
    "specforge__qwen3-30B-A3B-eagle3.1.json": {
        "eagle_version": "eagle3.1",
        "fc_norm": True,
        "norm_output": True,
        "rule": "EC206",
    },
    "specforge__pr553_gemma3-27b-eagle3_use_aux_norm.json": {
        "eagle_version": "eagle3.1",
        "fc_norm": True,
        "rule": "EC202",
    },
    "specforge__qwen3-8b-eagle3.json": {"producer": "specforge", "attention": "mha", "convention": "default"},
    "angelslim__qwen3-8b-eagle3.json": {"producer": "angelslim", "convention": "default"},
    "angelslim__qwen3-30b-a3b-eagle3.json": {"producer": "angelslim", "moe": False},
    "torchspec__kimi_k25_eagle3_mla.json": {"producer": "torchspec", "attention": "mla", "convention": "output-of"},
    "torchspec__qwen3_8b_eagle3_mla.json": {"attention": "mla"},
    "modelopt__TEMPLATE_kimik2_eagle_template_config.json": {"producer": "modelopt", "attention": "mla"},
    "modelopt__TEMPLATE_llama_eagle_template_config.json": {"producer": "modelopt"},
    "modelopt__ARCH-DEFAULT_default_eagle_config.json": {"producer": "modelopt"},
    "specforge__pr256_kimi-k2-eagle3_mtp-derived.json": {"attention": "mla", "moe": False},
    # Config shapes now in the field (issue 19), each expectation read off the producing trainer's code:
    # the AngelSlim fork's trainer takes hidden_states[id + 1] for every id of aux_hidden_states_layer_ids
    # (train/models/target/target_model_wrapper.py _extract_auxiliary_hidden_states, embed_offset = 1), so
    # [1, 14, 26] trained hs[2, 15, 27], which the top-level ids [2, 15, 27] name read input-to.
    "angelslim-fork__smolvlm-256m-eagle3_aux_hidden_states_layer_ids.json": {
        "producer": "angelslim",
        "convention": "input-to",
        "ids": [2, 15, 27],
        "hidden_states": [2, 15, 27],
    },
    # banded_mix_fc: 9 captured states, mixed into one stream per band (3) before an fc 3 x H wide (the fork's
    # llama_eagle3.py num_fusion_streams), fc_norm and norm_output on (EAGLE3.1)
    "angelslim-fork__smolvlm-256m-eagle3-banded-mix-fc-3.1.json": {
        "producer": "angelslim",
        "eagle_version": "eagle3.1",
        "hidden_states": [3, 5, 9, 11, 16, 19, 21, 27, 29],
        "num_aux": 3,
        "rule": "EC016",
    },
    "angelslim-fork__smolvlm-256m-eagle3-progressive_3-layers.json": {
        "hidden_states": [2, 15, 27],
        "layers": 3,
        "rule": "EC016",
    },
    "angelslim-fork__smolvlm-256m-eagle3-progressive-banded-mix-uninit_9-aux.json": {
        "hidden_states": [3, 5, 9, 11, 16, 19, 21, 27, 29],
        "layers": 3,
        "rule": "EC016",
    },
    "angelslim-fork__smolvlm-256m-eagle3-progressive-banded-mix-L4_12-aux.json": {
        "hidden_states": [3, 5, 7, 10, 12, 14, 17, 19, 21, 24, 27, 29],
        "layers": 4,
        "rule": "EC016",
    },
    # research/Eagle3Deepspeed model/llama_eagle3_full_grad.py:83-88: embed_tokens has target_vocab_size rows and
    # lm_head vocab_size rows, so the draft vocabulary is vocab_size (32000) and the target's 128256
    "speculators-research__Eagle3Deepspeed_llama3_8_B_target_vocab_size.json": {
        "producer": "speculators",
        "eagle_version": "eagle3",
        "vocab_size": 128256,
        "draft_vocab_size": 32000,
        "rule": "EC017",
    },
    # the nested eagle3 block: concat_factor 3, fc_in_dim 24576 = 3 x 8192, fc_out_dim 8192
    "speculators-research__onlineEagle3_llama33_70b_head_k3_nested-eagle3.json": {
        "producer": "speculators",
        "num_aux": 3,
        "convention": "default",
    },
    "torchspec__ci_qwen3_8_27b_eagle3_draft_num_aux_only.json": {"num_aux": 3, "location": "absent"},
    # TorchSpec's aux ids are output-of: its vLLM backend adds 1 before asking vLLM to capture
    # (torchspec/inference/engine/vllm_engine.py, "post-layer semantics"); its GLM-4-MoE draft class is the Llama
    # draft (GQA attention) with a DeepseekV3 MoE block when use_moe is set
    "torchspec__glm4_moe_eagle3_Glm4MoeForCausalLMEagle3.json": {
        "producer": "torchspec",
        "attention": "mha",
        "moe": True,
        "hidden_states": [2, 22, 43],
        "rule": "EC002",
    },
    "torchspec__kimi_k3_eagle3_mla.json": {"producer": "torchspec", "attention": "mla", "hidden_states": [2, 46, 90]},
}


def test_the_vendored_configs_are_there() -> None:
    assert len(PATHS) >= 90, REAL_CONFIGS
    assert set(EXPECTED) <= {p.name for p in PATHS}


@pytest.mark.parametrize("config", PATHS, ids=[f"{p.parent.name}/{p.name}" for p in PATHS])
def test_real_config_inspects_without_crash(tmp_path: Path, config: Path) -> None:
    ckpt = write_real_checkpoint(config, tmp_path / "draft")
    doc = inspect_checkpoint(ckpt).to_dict()
    VALIDATOR.validate(doc)
    assert (ckpt / "config.json").read_bytes() == config.read_bytes()
    raw = json.loads(config.read_text())
    if doc["tensors"]["count"]:  # the paired header carries the config's real widths
        sizes = {t["name"]: t["shape"] for t in doc["tensors"]["items"]}
        hidden = raw.get("hidden_size")
        assert sizes["norm.weight"] == [hidden]
    expected = EXPECTED.get(config.name if config.parent == REAL_CONFIGS else "", {})
    fields = {
        "producer": doc["format"]["producer"],
        "attention": doc["attention"],
        "eagle_version": doc["eagle_version"],
        "moe": doc["moe"],
        "convention": doc["aux_layers"]["convention"],
        "ids": doc["aux_layers"]["ids"],
        "location": doc["aux_layers"]["location"],
        "fc_norm": doc["flags"]["fc_norm"],
        "norm_output": doc["flags"]["norm_output"],
        "hidden_states": doc["aux_layers"]["hidden_state_indices"],
        "num_aux": doc["num_aux_hidden_states"],
        "vocab_size": doc["vocab"]["vocab_size"],
        "draft_vocab_size": doc["vocab"]["draft_vocab_size"],
        "layers": doc["format"]["num_draft_layers"],
    }
    for key, value in expected.items():
        if key == "rule":
            assert value in {f["rule_id"] for f in doc["findings"]}, doc["findings"]
        else:
            assert fields[key] == value, (key, fields[key])


def test_every_moe_config_is_labelled() -> None:
    """A config that routes its single layer to experts must never be reported as a dense draft."""
    for path in PATHS:
        raw = json.loads(path.read_text())
        routed = (raw.get("num_experts") or 0) > 0 and "Moe" in "".join(raw.get("architectures", []))
        if routed:
            doc = inspect_checkpoint(path).to_dict()
            assert doc["moe"], path.name
