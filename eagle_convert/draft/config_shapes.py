"""Config shapes outside the stock EAGLE3 layout, read or reported (never silently misread): K declared by other
keys, aux-layer ids under other trainers' keys, and the findings for shapes this tool reads but no engine does.

Each check is a fact about the config the trainer wrote; what an engine release does with the same config is the
engine model's business (``eagle_convert.releases``). Sources are cited where the meaning was read:

- the AngelSlim research fork (github.com/HangerYang/Angel, ``angelslim/compressor/speculative/train/models/draft/
  llama_eagle3.py``): ``eagle_aux_injection_mode`` / ``eagle_aux_layer_bands``;
- speculators research trainers (github.com/vllm-project/speculators ``research/``): ``target_vocab_size``;
- transformers 5.23 (``modeling_rope_utils.py:776-777``) for ``rope_scaling`` beside ``rope_parameters``, and its
  config classes for the defaults a foreign ``model_type`` brings.
"""

from __future__ import annotations

import math
from typing import Any

from eagle_convert.draft.aux_layers import to_hidden_states
from eagle_convert.draft.layouts import MAX_DRAFT_LAYERS
from eagle_convert.read.config import (
    BANDS_KEY,
    INJECTION_MODE_KEY,
    MODEL_SIZE_RANGES,
    STOCK_INJECTION,
    TARGET_LAYER_IDS_KEY,
    TRAINER_IDS_KEY,
    DraftConfig,
    TargetConfig,
)
from eagle_convert.read.config_types import shown
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import finding

# What each non-stock injection mode of the AngelSlim research fork builds instead of one fc over K states
# (llama_eagle3.py Eagle3LlamaForCausalLM.__init__ and combine_hidden_states; banded_mix_fc at commit 3dac8f0,
# progressive and hawk on its experiment branch, ec25978).
_MODES = {
    "banded_mix_fc": "mixes the {n} aux states into {b} streams, one learned softmax per band (band{{i}}_mix_logits), "
    "and feeds those to an fc {b} x H wide",
    "progressive_banded_mix": "mixes the {n} aux states into one stream per band and injects band i into draft "
    "layer i (no fc)",
    "progressive_staged": "injects aux state i into draft layer i (no fc; one fc per layer with "
    "progressive_per_layer_fc)",
    "hawk": "fuses each aux state with fuse_w1/fuse_w2 (no fc)",
    "real_hawk": "fuses aux states with fuse_w1/fuse_w2 into frozen target-layer copies with LoRA (no fc)",
    "layer_skip_lora": "fuses aux states with fuse_w1/fuse_w2 into frozen target-layer copies with LoRA (no fc)",
}

# Defaults a config class brings for keys a config leaves out, where they differ from LlamaConfig's (transformers
# 5.23, models/<family>/configuration_<family>.py). kimi_k2 is parsed as DeepseekV3Config by both engines (SGLang
# utils/hf_transformers/common.py:230-233, vLLM transformers_utils/config.py:141).
_DEEPSEEK = (("head_dim", "qk_rope_head_dim (64), not hidden_size // heads", "configuration_deepseek_v3.py:124"),)
_CLASS_DEFAULTS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "gpt_oss": (
        ("head_dim", "64", "configuration_gpt_oss.py:55"),
        ("attention_bias", "true", "configuration_gpt_oss.py:76"),
        ("sliding_window", "128 (every layer sliding)", "configuration_gpt_oss.py:58, 83-86"),
        ("rope_parameters", "yarn x32, theta 150000", "configuration_gpt_oss.py:36, 88-91"),
    ),
    "glm4_moe": (("partial_rotary_factor", "0.5 (rotary on half of each head)", "configuration_glm4_moe.py:123"),),
    "kimi_k2": _DEEPSEEK,
    "deepseek_v3": _DEEPSEEK,
    "deepseek_v32": _DEEPSEEK,
}
_ROPE_KEYS = ("rope_parameters", "rope_scaling")


def non_stock_injection(cfg: DraftConfig) -> bool:
    """The trainer combines aux states some other way than one fc over K concatenated states."""
    return cfg.injection_mode not in (None, STOCK_INJECTION) or bool(cfg.aux_layer_bands)


def config_shape_findings(cfg: DraftConfig, attention: str, target: TargetConfig | None = None) -> list[Finding]:
    return [
        *_types(cfg),
        *_ranges(cfg),
        *_agreement(cfg, target),
        *_injection(cfg),
        *_vocab(cfg),
        *_rope(cfg),
        *_foreign_model_type(cfg, attention),
    ]


# Every size the tool reads from a draft config: (least, most), a model's (read/config.py) plus the draft's own keys.
# A draft has a few layers.
SIZE_RANGES: dict[str, tuple[int, int]] = {
    **MODEL_SIZE_RANGES,
    "num_hidden_layers": (1, MAX_DRAFT_LAYERS),
    "target_hidden_size": MODEL_SIZE_RANGES["hidden_size"],
    "draft_vocab_size": MODEL_SIZE_RANGES["vocab_size"],
    "num_aux_hidden_states": (1, 64),
}
MAX_ARCHITECTURES = 16  # architecture names a config may list (engines read the first)


def _ranges(cfg: DraftConfig) -> list[Finding]:
    """Each size, norm epsilon, rope setting and list the tool reads, against its type's range (EC020)."""
    d, out = cfg.dims, []

    def bad(key: str, value: Any, why: str) -> None:
        shown = repr(value) if not isinstance(value, list) else f"a list of {len(value)}"
        out.append(
            finding("EC020", f"{key} is {shown}: {why}", subject=key, actual=None if isinstance(value, list) else value)
        )

    layer = cfg.raw.get("transformer_layer_config")
    scopes = [cfg.raw, layer] if isinstance(layer, dict) else [cfg.raw]
    written = {key: next((s[key] for s in scopes if s.get(key) is not None), None) for key in SIZE_RANGES}
    # as written (a 0 the parser reads as "absent" is still a 0), else as read
    values = {key: written[key] if isinstance(written[key], int) else getattr(d, key, None) for key in SIZE_RANGES}
    if not isinstance(written["num_aux_hidden_states"], int):
        values["num_aux_hidden_states"] = cfg.num_aux_hidden_states
    for key, (least, most) in SIZE_RANGES.items():
        value = values[key]
        if value is not None and not least <= value <= most:
            bad(key, value, f"must lie in {least}..{most}")
    eps = d.rms_norm_eps
    if eps is not None and not (math.isfinite(eps) and 0 < eps < 1):
        bad("rms_norm_eps", eps, "must be a positive number below 1")
    theta = cfg.rope_theta
    if theta is not None and not (math.isfinite(theta) and theta > 0):
        bad("rope_theta", theta, "must be a positive number")
    for key in ("rope_scaling", "rope_parameters"):
        rope = cfg.raw.get(key) if key == "rope_scaling" else cfg.rope_parameters
        factor = rope.get("factor") if isinstance(rope, dict) else None
        if factor is not None and (
            isinstance(factor, bool)
            or not isinstance(factor, int | float)
            or not (math.isfinite(factor) and factor > 0)
        ):
            bad(f"{key}.factor", factor, "must be a positive number")
    for key, ids in (
        ("eagle_aux_hidden_state_layer_ids", cfg.top_level_ids),
        ("eagle_config.eagle_aux_hidden_state_layer_ids", cfg.eagle_config_ids),
    ):
        if ids is not None and not ids:
            bad(key, ids, "an empty list names no aux state (omit the key for the defaults)")
    if len(cfg.architectures) > MAX_ARCHITECTURES:
        bad("architectures", cfg.architectures, f"at most {MAX_ARCHITECTURES} names")
    return out


def _types(cfg: DraftConfig) -> list[Finding]:
    """Each key read with a value of the wrong type (EC507), which the config reader set aside as absent."""
    return [
        finding(
            "EC507",
            f"{p.message} ({p.kind.misread}); read here as absent",
            subject=p.key,
            actual=p.value if isinstance(p.value, bool | int | float) else shown(p.value),
        )
        for p in cfg.type_problems
    ]


def _agreement(cfg: DraftConfig, target: TargetConfig | None) -> list[Finding]:
    """Sizes that must agree with each other, and with the target when it is given (EC020)."""
    d, out = cfg.dims, []
    hidden, heads, kv = d.hidden_size, d.num_attention_heads, d.num_key_value_heads
    if hidden and heads and not d.head_dim_explicit and hidden % heads:
        out.append(
            finding(
                "EC020",
                f"hidden_size {hidden} is not a multiple of num_attention_heads {heads} and no head_dim is given: "
                "the engines' head_dim (hidden_size // heads) leaves part of every projection unread",
                subject="head_dim",
                actual=hidden / heads,
            )
        )
    if heads and kv and heads % kv:
        out.append(
            finding(
                "EC020",
                f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}: no engine groups them",
                subject="num_key_value_heads",
                actual=kv,
            )
        )
    if d.vocab_size and d.draft_vocab_size and d.draft_vocab_size > d.vocab_size:
        out.append(
            finding(
                "EC020",
                f"draft_vocab_size {d.draft_vocab_size} exceeds vocab_size {d.vocab_size}: the draft vocabulary is a "
                "subset of the target's",
                subject="draft_vocab_size",
                expected=d.vocab_size,
                actual=d.draft_vocab_size,
            )
        )
    width = target.hidden_size if target is not None else None
    if width and hidden and d.target_hidden_size is None and hidden != width:
        out.append(
            finding(
                "EC020",
                f"hidden_size {hidden} differs from the target's {width} and no target_hidden_size is given: the "
                f"engines build fc for {hidden}-wide aux states and the target gives {width}-wide ones",
                subject="target_hidden_size",
                expected=width,
                actual=None,
            )
        )
    return out


def _injection(cfg: DraftConfig) -> list[Finding]:
    if not non_stock_injection(cfg):
        return []
    mode = cfg.injection_mode or STOCK_INJECTION
    bands = cfg.aux_layer_bands or []
    ids = cfg.trainer_ids or cfg.top_level_ids or cfg.eagle_config_ids or []
    does = _MODES.get(mode)
    what = (
        does.format(n=len(ids), b=len(bands))
        if does
        else (
            "is a mode this tool has not seen"
            if mode != STOCK_INJECTION
            else f"sets {BANDS_KEY} {bands} with the stock fused_fc mode, which the trainer ignores"
        )
    )
    return [
        finding(
            "EC016",
            f"{INJECTION_MODE_KEY} {mode!r}"
            + (f" with {BANDS_KEY} {bands}" if bands and mode != STOCK_INJECTION else "")
            + f": the trainer {what}; no engine reads these keys, so an engine feeds the captured states to one "
            "fc unmixed; eagle-convert does not model this draft",
            subject=INJECTION_MODE_KEY if mode != STOCK_INJECTION else BANDS_KEY,
            actual=mode,
        )
    ]


def _vocab(cfg: DraftConfig) -> list[Finding]:
    if not cfg.aliases or "target_vocab_size" not in cfg.raw:
        return []
    d = cfg.dims
    return [
        finding(
            "EC017",
            f"vocab_size {d.draft_vocab_size} is the draft's vocabulary and target_vocab_size {d.vocab_size} the "
            "target's (no draft_vocab_size): engines read vocab_size as the target's and draft_vocab_size as the "
            f"draft's; write vocab_size {d.vocab_size} and draft_vocab_size {d.draft_vocab_size}",
            subject="vocab_size",
            expected=d.vocab_size,
            actual=d.draft_vocab_size,
        )
    ]


def _rope_view(rope: dict[str, Any]) -> dict[str, Any]:
    return {("rope_type" if k == "type" else k): v for k, v in rope.items()}


def _rope(cfg: DraftConfig) -> list[Finding]:
    scaling, params = cfg.raw.get("rope_scaling"), cfg.rope_parameters
    if not (isinstance(scaling, dict) and scaling and isinstance(params, dict) and params):
        return []
    a, b = _rope_view(scaling), _rope_view(params)
    differ = sorted(k for k in set(a) & set(b) if a[k] != b[k])
    if not differ:
        return []
    return [
        finding(
            "EC018",
            "rope_scaling and rope_parameters disagree on "
            + ", ".join(f"{k} ({a[k]!r} vs {b[k]!r})" for k in differ)
            + ": transformers 5 applies rope_scaling, transformers 4 never reads rope_parameters",
            subject="rope_parameters",
            expected=a,
            actual=b,
        )
    ]


def _foreign_model_type(cfg: DraftConfig, attention: str) -> list[Finding]:
    defaults = _CLASS_DEFAULTS.get(cfg.model_type or "")
    llama_class = bool(cfg.architectures) and "Llama" in cfg.architectures[0]
    if not defaults or attention != "mha" or not llama_class:
        return []
    has = set(cfg.raw) | set(cfg.raw.get("transformer_layer_config") or {})
    missing = [
        (key, value, cite)
        for key, value, cite in defaults
        if key not in has and not (key in _ROPE_KEYS and has & set(_ROPE_KEYS))
    ]
    if not missing:
        return []
    return [
        finding(
            "EC019",
            f"model_type {cfg.model_type!r} on a {cfg.architectures[0]} draft: a loader parses the config with "
            f"the {cfg.model_type} config class, which brings "
            + ", ".join(f"{key} {value} ({cite})" for key, value, cite in missing)
            + " for keys this config leaves out; the Llama layer the draft was trained as has none of them",
            subject="model_type",
            expected="llama",
            actual=cfg.model_type,
        )
    ]


def declared_k(cfg: DraftConfig, width: int | None, out: list[Finding]) -> tuple[int | None, str]:
    """(K the config declares, the key that says so): num_aux_hidden_states, else the fc streams of a banded_mix_fc
    draft (one per band), else a speculators research block's concat_factor (checked against its fc dims)."""
    if cfg.num_aux_hidden_states is not None:
        return cfg.num_aux_hidden_states, "num_aux_hidden_states"
    if cfg.injection_mode == "banded_mix_fc" and cfg.aux_layer_bands:
        return len(cfg.aux_layer_bands), f"{BANDS_KEY} (banded_mix_fc: one fc stream per band)"
    block = cfg.research_block or {}
    k = block.get("concat_factor")
    if not isinstance(k, int) or isinstance(k, bool):
        return None, ""
    fc_in, fc_out, hidden = block.get("fc_in_dim"), block.get("fc_out_dim"), cfg.dims.hidden_size
    if (isinstance(fc_in, int) and width and fc_in != k * width) or (
        isinstance(fc_out, int) and hidden and fc_out != hidden
    ):
        out.append(
            finding(
                "EC007",
                f"eagle3 block: concat_factor {k}, fc_in_dim {fc_in}, fc_out_dim {fc_out} do not describe an fc of "
                f"[{hidden}, {k} x {width}]",
                subject="eagle3",
                expected=[hidden, k * width if width else None],
                actual=[fc_out, fc_in],
            )
        )
    return k, "eagle3.concat_factor (a speculators research block; no engine reads it)"


def declared_states(cfg: DraftConfig) -> tuple[str, list[int], list[int]] | None:
    """(key, the hs[] it names, its ids) for a config whose trainer wrote its aux layers under another key."""
    if cfg.trainer_ids:
        key = f"{TRAINER_IDS_KEY} {cfg.trainer_ids} (the AngelSlim trainer's list, read as hs[id+1])"
        return key, to_hidden_states(cfg.trainer_ids, "output-of"), cfg.trainer_ids
    if cfg.target_layer_ids:
        key = (
            f"{TARGET_LAYER_IDS_KEY} {cfg.target_layer_ids} (DFlash's key, the output of layer id; vLLM's V2 runner "
            "reads it +1)"
        )
        return key, to_hidden_states(cfg.target_layer_ids, "output-of"), cfg.target_layer_ids
    return None
