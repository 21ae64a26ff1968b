"""Every vendored real config under every modelled release: the hidden states the release's code captures.

The oracle below is a line-by-line transcription of the released code (cited per branch), kept apart from the
package's engine model on purpose: the test fails when the model drifts from what the code does. Targets are the
public models each config was trained for (N = their num_hidden_layers; None where the config does not say which
size, so only explicit ids can be checked)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eagle_convert.releases import RELEASES, engine_view
from fixtures.real import real_config_paths

PATHS = real_config_paths()
IDS = "eagle_aux_hidden_state_layer_ids"

# (target model_type, N) by the first keyword found in the file name.
TARGETS: list[tuple[str, str | None, int | None]] = [
    ("deepseek-v2-lite", "deepseek_v2", 27),
    ("deepseek", "deepseek_v3", 61),
    ("kimi_k3", None, None),  # Kimi-K3: no target class modelled (TorchSpec's vLLM recipe)
    ("kimi_k25", "kimi_k25", 61),
    ("kimi-k25", "kimi_k25", 61),
    ("kimi", "kimi_k2", 61),
    ("gemma3-1b", "gemma3_text", 26),
    ("gemma3-27b", "gemma3_text", 62),
    ("gemma4", "gemma4_text", None),
    ("glm4-flash", "glm4_moe_lite", None),
    ("glm4_moe", "glm4_moe", 46),  # TorchSpec's GLM-4-MoE draft: hidden 4096 and vocab 151552 are GLM-4.5-Air's
    ("smolvlm", "llama", 30),  # SmolVLM-256M: an Idefics3 VLM whose text_config is a 30-layer Llama
    ("gpt-oss-120b", "gpt_oss", 36),
    ("gpt-oss-20b", "gpt_oss", 24),
    ("ling-flash", "bailing_moe", 32),
    ("llama3-70b", "llama", 80),
    ("llama33_70b", "llama", 80),  # Llama-3.3-70B (speculators research onlineEagle3)
    ("llama4-scout", "llama4_text", 48),
    ("llama3", "llama", 32),
    ("llama", "llama", 32),
    ("vicuna", "llama", 32),
    ("longcat", "longcat_flash", None),
    ("mistral-small", "mistral", 40),
    ("phi4-mini", "phi3", 32),
    ("phi4", "phi3", 40),
    ("qwen2-5-vl-3b", "qwen2_5_vl", 36),
    ("qwen2-5-vl-7b", "qwen2_5_vl", 28),
    ("qwen2.5-vl-32b", "qwen2_5_vl", 64),
    ("qwen2-5-vl", "qwen2_5_vl", None),
    ("qwen2.5-0.5b", "qwen2", 24),
    ("qwen2.5-7b", "qwen2", 28),
    ("qwq-32b", "qwen2", 64),
    ("qwen3-vl-235b", "qwen3_vl_moe", 94),
    ("qwen3-vl-30b", "qwen3_vl_moe", 48),
    ("qwen3-vl-8b", "qwen3_vl", 36),
    ("qwen3-235b", "qwen3_moe", 94),
    ("qwen3-coder-480b", "qwen3_moe", 62),
    ("qwen3-coder-30b", "qwen3_moe", 48),
    ("qwen3-coder-next", "qwen3_next", 48),
    ("qwen3-next", "qwen3_next", 48),
    ("qwen3-coder", "qwen3_moe", None),
    ("qwen3-30b", "qwen3_moe", 48),
    ("qwen3.5", "qwen3_5_moe", None),
    ("qwen3-32b", "qwen3", 64),
    ("qwen3-4b", "qwen3", 36),
    ("qwen3_8b", "qwen3", 36),
    ("qwen3-8b", "qwen3", 36),
    ("minimax_m25", "minimax_m2", 62),
    ("step-3.5", "step3p5", 45),
]


def target_of(name: str) -> tuple[str | None, int | None]:
    low = name.lower()
    return next(((mt, n) for key, mt, n in TARGETS if key in low), (None, None))


# ---- the oracle: the released code, transcribed ------------------------------------------------------------------


def sglang_ids(raw: dict[str, Any]) -> list[int] | None:
    # SG/model_executor/model_runner_components/spec_aux_hidden_state.py:185-196 (0.5.16: :80-94): eagle_config[...]
    # inside try/except -> None
    try:
        ids = raw["eagle_config"][IDS]
    except (KeyError, TypeError):
        return None
    return ids if isinstance(ids, list) else None


PLUS1 = {
    "llama",
    "mistral",
    "phi3",
    "llama4_text",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_vl",
    "qwen3_vl_moe",
    "qwen2_5_vl",
    "gemma3_text",
    "gemma4_text",
    "glm4_moe",
    "minimax_m2",
    "bailing_moe",
    "longcat_flash",
    "qwen3_5_moe",
}
FIRST_IS_1 = {"deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25", "glm4_moe_lite"}


def sglang_capture(version: str, raw: dict[str, Any], mt: str | None, n: int | None) -> list[int] | None:
    if mt == "step3p5":
        return None  # no set_eagle3_layers_to_capture: ValueError (attention_backend_setup.py:55-60)
    if version == "0.5.16" and mt == "qwen3_5_moe":
        return None  # no such target class in 0.5.16
    if (
        raw.get("eagle_config", {}).get("use_aux_hidden_state", True) is False
        if isinstance(raw.get("eagle_config"), dict)
        else False
    ):
        return []
    ids = sglang_ids(raw)
    if ids is None:
        return sorted({2, n // 2, n - 3}) if n else None  # every set_eagle3_layers_to_capture: no ids
    if mt in PLUS1:  # SG/models/llama.py:929-941, qwen3_moe.py:1128-1143, ...: [val + 1 for val in layer_ids]
        return sorted({v + 1 for v in ids})
    if mt in FIRST_IS_1:  # SG/models/deepseek_v2.py:3458-3473: +1 only when layer_ids[0] == 1
        return sorted({v + 1 for v in ids} if ids and ids[0] == 1 else set(ids))
    if mt == "gpt_oss":
        if version == "0.5.16":  # 0.5.16 gpt_oss.py:1284-1296
            return sorted({v + 1 for v in ids})
        if n is None:
            return None
        # SG/models/gpt_oss.py:1337-1352: as-is when max(layer_ids) == num_layers
        return sorted(set(ids) if ids and max(ids) == n else {v + 1 for v in ids})
    return None


def vllm_ids_v1(raw: dict[str, Any]) -> list[int] | None:
    # VL/v1/worker/gpu_model_runner.py:5190-5221
    layer_ids = raw.get(IDS)
    if not layer_ids:
        dflash, eagle = raw.get("dflash_config"), raw.get("eagle_config")
        if dflash and isinstance(dflash, dict):
            layer_ids = [i + 1 for i in (dflash.get("target_layer_ids") or [])]
        if eagle and isinstance(eagle, dict):
            layer_ids = eagle.get(IDS)
    return list(layer_ids) if layer_ids and isinstance(layer_ids, list) else None


def vllm_ids_v2(raw: dict[str, Any]) -> list[int] | None:
    # VL/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113-150
    layer_ids = raw.get(IDS)
    if not layer_ids and isinstance(raw.get("dflash_config"), dict):
        layer_ids = [i + 1 for i in (raw["dflash_config"].get("target_layer_ids") or [])]
    if not layer_ids and raw.get("dspark_target_layer_ids"):
        layer_ids = [i + 1 for i in raw["dspark_target_layer_ids"]]
    if not layer_ids and raw.get("target_layer_ids"):
        layer_ids = [i + 1 for i in raw["target_layer_ids"]]
    if not layer_ids:
        for name in ("dflash_config", "eagle_config"):
            cfg = raw.get(name)
            if cfg and isinstance(cfg, dict) and cfg.get("layer_ids"):
                layer_ids = cfg["layer_ids"]
                break
    return list(layer_ids) if layer_ids and isinstance(layer_ids, list) else None


V1_UNDER_0_28 = {  # MoE targets not on the default-V2 list (VL 0.28 config/vllm.py:691-712, :69-78)
    "deepseek_v3",
    "glm4_moe",
    "kimi_k2",
    "kimi_k25",
    "qwen3_moe",
    "qwen3_vl_moe",
    "qwen3_next",
    "gpt_oss",
    "glm4_moe_lite",
    "minimax_m2",
    "llama4_text",
    "bailing_moe",
    "longcat_flash",
    "qwen3_5_moe",
}


# Target classes without SupportsEagle3 in 0.33 and 0.28 (VL/model_executor/models/gemma3.py:367,
# glm4_moe.py:534, glm4_moe_lite.py:543-545, longcat_flash.py:551, step3p5.py:848 in 0.33): start-up raises
# RuntimeError("Model does not support EAGLE3 interface") (VL/v1/worker/gpu_model_runner.py:5173-5177), nothing
# is captured.
VLLM_WITHOUT_EAGLE3 = {"gemma3_text", "glm4_moe", "glm4_moe_lite", "longcat_flash", "step3p5"}


def vllm_capture(release: str, raw: dict[str, Any], mt: str | None, n: int | None) -> list[int] | None:
    if mt in VLLM_WITHOUT_EAGLE3:
        return None
    if release == "vllm@0.28":
        if mt is None or mt == "step3p5":
            return None
        ids = vllm_ids_v1(raw) if mt in V1_UNDER_0_28 else vllm_ids_v2(raw)
    else:
        ids = vllm_ids_v1(raw) if release == "vllm@0.33-v1" else vllm_ids_v2(raw)
    if ids is None:  # VL/model_executor/models/interfaces.py:1751-1764
        return sorted({2, n // 2, n - 3}) if n else None
    return sorted(set(ids))  # interfaces.py:1616-1617: sorted(set(layers))


def trtllm_capture(n: int | None) -> list[int] | None:
    # eagle3.py@f933a60:129-137 (eagle3_layers_to_capture unset; the draft's ids are never read): layer outputs
    # (1, N//2 - 1, N - 4), each the state hs[i + 1]; N == 1 captures layer 0; N <= 5 raises ValueError
    if n is None or 1 < n <= 5:
        return None
    return [1] if n == 1 else sorted(i + 1 for i in {1, n // 2 - 1, n - 4})


def tokenspeed_ids(raw: dict[str, Any]) -> list[int] | None:
    # tokenspeed/runtime/execution/factory.py:47-78 (_eagle_aux_layer_ids): the config, then its text_config; an
    # eagle_config object decides alone (its ids or None), else the top-level list; the first non-empty list wins
    text = raw.get("text_config")
    for config in [raw, *([text] if isinstance(text, dict) else [])]:
        eagle = config.get("eagle_config")
        if isinstance(eagle, dict):
            ids = eagle.get(IDS)
        elif eagle is not None:
            ids = None
        else:
            ids = config.get(IDS)
        if ids:
            return list(ids)
    return None


# TokenSpeed 0.1.1 target classes, by model_type: BaseTransformerModel's loop (models/base/causal_lm.py:271-282,
# transformer_model.py:207-253: index id + 1 before each layer, and index N + 1 once more for hs[N]); their own
# loops that capture before each layer only (deepseek_v3.py:1995-2010, qwen3_5.py:1019-1036, longcat_flash.py:912-918)
TOKENSPEED_BASE_LOOP = {"llama", "gpt_oss"}
TOKENSPEED_PLUS1 = {"deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_k25", "glm_moe_dsa", "qwen3_5_moe", "longcat_flash"}


def tokenspeed_capture(raw: dict[str, Any], mt: str | None, n: int | None) -> list[int] | None:
    # qwen2/qwen3/qwen3_moe: the model never captures (qwen3.py:357-389); any other: not registered (registry.py:48-60)
    if mt not in TOKENSPEED_BASE_LOOP | TOKENSPEED_PLUS1 | {"kimi_k3"}:
        return None
    ids = tokenspeed_ids(raw)  # execution/factory.py:197-200: the server argument unset
    if ids is None:  # causal_lm.py:275-278, deepseek_v3.py:2076-2078, kimi_k3.py:3642-3646: [2, N//2, N-3]
        return sorted({2, n // 2, n - 3}) if n else None
    if mt == "kimi_k3":  # kimi_k3.py:3639-3658: one-based completed-layer ids, unchanged
        return sorted(set(ids))
    if mt in TOKENSPEED_BASE_LOOP:
        if n is None:
            return None
        return sorted({v + 1 for v in ids if 0 <= v + 1 < n} | ({n} if n in ids else set()))
    return sorted({v + 1 for v in ids})  # {val + 1 for val in layer_ids}


def expected(release: str, raw: dict[str, Any], mt: str | None, n: int | None) -> list[int] | None:
    if release.startswith("tokenspeed@"):
        return tokenspeed_capture(raw, mt, n)
    if release.startswith("trtllm@"):
        return trtllm_capture(n)
    if release.startswith("sglang@"):
        return sglang_capture(release.split("@")[1], raw, mt, n)
    return vllm_capture(release, raw, mt, n)


@pytest.mark.parametrize("path", PATHS, ids=[f"{p.parent.name}/{p.name}" for p in PATHS])
def test_every_release_captures_what_its_code_computes(path: Path) -> None:
    raw = json.loads(path.read_text())
    mt, n = target_of(path.name)
    for release in RELEASES:
        view = engine_view(release, raw, target_model_type=mt, target_num_layers=n)
        assert view.hidden_state_indices == expected(release, raw, mt, n), (release, mt, n)


def test_every_real_config_has_a_target() -> None:
    unknown = [p.name for p in PATHS if target_of(p.name)[0] is None]
    # configs that name no target model: ModelOpt's generic defaults/templates, a test draft, LLaVA/MiniCPM/Omni VLMs
    assert len(unknown) <= 10, unknown


# Anchors worked out by hand from the cited lines (not from the oracle above).
ANCHORS = [
    # SpecForge gpt-oss-120B, eagle_config [1, 17, 33], N=36
    ("specforge__gpt-oss-120B-eagle3.json", "sglang@0.5.23", [2, 18, 34]),  # max 33 != 36: +1
    ("specforge__gpt-oss-120B-eagle3.json", "vllm@0.33", [2, 18, 33]),  # V2 ignores eagle_config: defaults
    ("specforge__gpt-oss-120B-eagle3.json", "vllm@0.33-v1", [1, 17, 33]),  # V1: eagle_config as-is
    # SpecForge DeepSeek-V3 671B, eagle_config [1, 29, 57], N=61
    ("specforge__deepseek-v3-671b-eagle3.json", "sglang@0.5.23", [2, 30, 58]),  # first id 1: +1
    ("specforge__deepseek-v3-671b-eagle3.json", "vllm@0.33", [2, 30, 58]),  # V2 defaults = the trained states
    ("specforge__deepseek-v3-671b-eagle3.json", "vllm@0.33-v1", [1, 29, 57]),
    ("specforge__deepseek-v3-671b-eagle3.json", "vllm@0.28", [1, 29, 57]),  # MoE target: V1 under 0.28
    # SpecForge gemma3-27b: eagle_config [1, 29, 61], N=62: +1 reaches hs[62], which gemma3 captures
    ("specforge__pr553_gemma3-27b-eagle3_use_aux_norm.json", "sglang@0.5.23", [2, 30, 62]),
]


@pytest.mark.parametrize(("name", "release", "hidden"), ANCHORS)
def test_anchor(name: str, release: str, hidden: list[int]) -> None:
    path = next(p for p in PATHS if p.name == name)
    raw = json.loads(path.read_text())
    mt, n = target_of(name)
    assert engine_view(release, raw, target_model_type=mt, target_num_layers=n).hidden_state_indices == hidden
    assert expected(release, raw, mt, n) == hidden
