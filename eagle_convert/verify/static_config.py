"""Static verify checks (config and headers only) on the vocabulary and the config fields (EC4xx, EC5xx).

Registered by rule id like the checks of ``static.py``; see ``context.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eagle_convert.read.config import IDS_KEY
from eagle_convert.read.config_types import DRAFT_FLAGS
from eagle_convert.releases import EngineView
from eagle_convert.rules.finding import Finding
from eagle_convert.verify.context import Context, cfg_finding, check, tensor_finding

# Config fields whose null value strict config classes reject (FORMATS.md section 8, item 15).
TYPED_FIELDS = (
    "use_cache",
    "tie_word_embeddings",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_hidden_layers",
    "rms_norm_eps",
    "vocab_size",
    "max_position_embeddings",
    "hidden_act",
)

# ---- vocabulary --------------------------------------------------------------------------------------------------


@check("EC401")
def _lm_head(ctx: Context) -> list[Finding]:
    d = ctx.spec.dims
    if d.draft_vocab_size_key == "null" or "lm_head.weight" in ctx.canonical:
        return []
    return [
        cfg_finding(
            "EC401",
            f"no lm_head.weight but draft_vocab_size is {d.draft_vocab_size}: {ctx.releases()} build "
            "a randomly initialised head",
            "draft_vocab_size",
            expected="lm_head.weight present",
        )
    ]


@check("EC402")
def _lm_head_rows(ctx: Context) -> list[Finding]:
    shape, vd = ctx.shape("lm_head.weight"), ctx.spec.dims.draft_vocab_size
    if shape is None or vd is None or shape[0] == vd:
        return []
    return [
        tensor_finding(
            ctx,
            "EC402",
            f"lm_head has {shape[0]} rows but draft_vocab_size is {vd}",
            "lm_head.weight",
            expected=vd,
            actual=shape[0],
        )
    ]


@check("EC403")
def _tied(ctx: Context) -> list[Finding]:
    if ctx.cfg.get("tie_word_embeddings") is not True:
        return []
    return [
        cfg_finding(
            "EC403",
            "tie_word_embeddings is true: the V-row embedding would replace the draft head",
            "tie_word_embeddings",
            expected=False,
            actual=True,
        )
    ]


@check("EC404")
def _d2t_missing(ctx: Context) -> list[Finding]:
    d = ctx.spec.dims
    if "d2t" in ctx.canonical or d.draft_vocab_size is None or d.vocab_size is None:
        return []
    if d.draft_vocab_size >= d.vocab_size:
        return []
    return [
        cfg_finding(
            "EC404",
            f"draft_vocab_size {d.draft_vocab_size} < vocab_size {d.vocab_size} but there is no "
            "d2t: draft token ids would be taken as target ids",
            "draft_vocab_size",
            expected="d2t present",
        )
    ]


@check("EC405")
def _draft_vocab_key(ctx: Context) -> list[Finding]:
    key = ctx.spec.dims.draft_vocab_size_key
    failing = [v.release for v in ctx.views if "draft_vocab_size" in v.required_keys]
    if key == "absent" and failing:
        return [
            cfg_finding(
                "EC405",
                f"draft_vocab_size is missing: {', '.join(failing)} fail(s) to load the draft",
                "draft_vocab_size",
                expected="an integer",
            )
        ]
    reading = [f"{v.release} {v.null_draft_vocab_size}" for v in ctx.views if v.null_draft_vocab_size]
    if key == "null" and reading:
        return [
            cfg_finding(
                "EC405",
                f"draft_vocab_size is null: {'; '.join(reading)}",
                "draft_vocab_size",
                severity="warning",
            )
        ]
    return []


@check("EC411")
def _embed_needed(ctx: Context) -> list[Finding]:
    ths, h = ctx.spec.target_hidden_size, ctx.spec.dims.hidden_size
    if ths is None or h is None or ths == h or "embed_tokens.weight" in ctx.canonical:
        return []
    return [
        cfg_finding(
            "EC411",
            f"target_hidden_size {ths} differs from hidden_size {h} but no embed_tokens is "
            "shipped: the target's embedding has the wrong width",
            "target_hidden_size",
        )
    ]


# ---- config fields -----------------------------------------------------------------------------------------------


@check("EC501")
def _target_hidden_size(ctx: Context) -> list[Finding]:
    cfg, h = ctx.cfg, ctx.spec.dims.hidden_size
    if "target_hidden_size" in cfg and cfg["target_hidden_size"] is None:
        crash = [v for v in ctx.views if v.null_target_hidden_size == "crash"]
        return [
            cfg_finding(
                "EC501",
                f"target_hidden_size is null: {ctx.releases(crash)} crash reading it"
                if crash
                else "target_hidden_size is null; typed config classes reject it",
                "target_hidden_size",
                expected="an integer",
                actual=None,
            )
        ]
    fc = ctx.shape("fc.weight")
    k = ctx.spec.num_aux_hidden_states
    if "target_hidden_size" not in cfg and fc and h and k and fc[1] != k * h:
        return [
            cfg_finding(
                "EC501",
                f"target_hidden_size is missing, so {ctx.releases()} assume {h}, but fc.weight {list(fc)} is "
                f"{fc[1]} wide",
                "target_hidden_size",
                expected=fc[1] // k,
                actual=None,
            )
        ]
    return []


def null_typed_fields(cfg: dict[str, Any]) -> list[str]:
    """The typed config fields present with a null value (a template config, a botched export)."""
    return [key for key in TYPED_FIELDS if key in cfg and cfg[key] is None]


@check("EC502")
def _typed_null(ctx: Context) -> list[Finding]:
    return [
        cfg_finding("EC502", f"{key} is null; typed config classes reject it", key, actual=None)
        for key in null_typed_fields(ctx.cfg)
    ]


def _flag(name: str) -> Callable[[EngineView], str]:
    return lambda v: f"reads {name} as {str(getattr(v, name)).lower()}"


def _ids_read(v: EngineView) -> str:
    states = f"hs{v.hidden_state_indices}" if v.hidden_state_indices is not None else "states that depend on the target"
    read = "its default ids" if v.ids is None else f"{v.ids_from} ids {v.ids}"
    return f"reads {read} and captures {states}"


# What each release does with a null flag or null ids, asked of its view (read as false, as absent: releases/).
_NULL_READINGS: dict[str, Callable[[EngineView], str]] = {
    IDS_KEY: _ids_read,
    f"eagle_config.{IDS_KEY}": _ids_read,
    "fc_norm": _flag("fc_norm"),
    "use_aux_norm": _flag("fc_norm"),
    "norm_output": _flag("norm_output"),
    "norm_before_fc": _flag("norm_before_fc"),
    "eagle_config.norm_before_fc": _flag("norm_before_fc"),
    "norm_before_residual": _flag("norm_before_residual"),
    "eagle_config.use_aux_hidden_state": _flag("use_aux_hidden_state"),
    "bias": lambda v: f"builds no {v.bias_is or 'fc'} bias",
    "num_aux_hidden_states": lambda v: f"builds fc for K={v.num_aux_hidden_states} ({v.num_aux_from})",
}


def _false(_view: EngineView) -> str:
    return "reads it as false"


def _null(cfg: dict[str, Any], key: str) -> bool:
    parent, _, leaf = key.rpartition(".")
    holder = cfg.get(parent) if parent else cfg
    return isinstance(holder, dict) and leaf in holder and holder[leaf] is None


def null_findings(cfg: dict[str, Any], views: list[EngineView]) -> list[Finding]:
    """EC508: each null flag or null ids of ``cfg`` with what each of ``views`` reads it as (inspect, verify and
    normalize report them; EC502 has the nulls typed config classes refuse)."""
    out = []
    for key in dict.fromkeys([*_NULL_READINGS, *DRAFT_FLAGS]):
        if key in TYPED_FIELDS or not _null(cfg, key):
            continue
        reading = _NULL_READINGS.get(key, _false)
        said = "; ".join(f"{v.release} {reading(v)}" for v in views) or "the releases read it as absent"
        out.append(cfg_finding("EC508", f"{key} is null: {said}", key, actual=None))
    return out


@check("EC508")
def _null_read_as_default(ctx: Context) -> list[Finding]:
    return null_findings(ctx.cfg, ctx.views)


def _rope_kind(scaling: dict[str, Any] | None) -> tuple[Any, Any]:
    if not scaling:
        return None, None
    return scaling.get("rope_type") or scaling.get("type"), scaling.get("factor")


@check("EC503")
def _rope(ctx: Context) -> list[Finding]:
    if ctx.target is None:
        return []
    draft, target = _rope_kind(ctx.spec.config.rope_scaling), _rope_kind(ctx.target.rope_scaling)
    if draft == target or target[0] in (None, "default"):
        return []
    what = "was dropped" if draft[0] is None else f"is {draft[0]} x{draft[1]}"
    return [
        cfg_finding(
            "EC503",
            f"the target uses {target[0]} rope scaling x{target[1]} but the draft's {what}",
            "rope_scaling",
            expected={"type": target[0], "factor": target[1]},
            actual={"type": draft[0], "factor": draft[1]},
        )
    ]


@check("EC504")
def _max_positions(ctx: Context) -> list[Finding]:
    if ctx.target is None or ctx.target.max_position_embeddings is None:
        return []
    mine = ctx.spec.dims.max_position_embeddings
    refusing = [f"{v.release} {v.caveats['max-positions']}" for v in ctx.views if "max-positions" in v.caveats]
    if mine is None or mine >= ctx.target.max_position_embeddings or not refusing:
        return []
    return [
        cfg_finding(
            "EC504",
            f"max_position_embeddings {mine} is below the target's {ctx.target.max_position_embeddings}: "
            + "; ".join(refusing),
            "max_position_embeddings",
            expected=ctx.target.max_position_embeddings,
            actual=mine,
        )
    ]


@check("EC505")
def _quant_leak(ctx: Context) -> list[Finding]:
    quant = ctx.cfg.get("quantization_config")
    if not isinstance(quant, dict) or any(
        t.dtype.startswith(("F8", "F4", "F6", "I8", "U8")) and not t.name.endswith(("d2t", "t2d"))
        for t in ctx.ckpt.tensors.values()
    ):
        return []
    if not ctx.ckpt.tensors:
        return []
    return [
        cfg_finding(
            "EC505",
            f"quantization_config ({quant.get('quant_method')}) in a draft whose weights are not "
            f"quantized: {ctx.releases()} would build quantized layers and misread the weights",
            "quantization_config",
            expected=None,
            actual=quant.get("quant_method"),
        )
    ]


@check("EC506")
def _q_lora_rank(ctx: Context) -> list[Finding]:
    if ctx.spec.attention != "mla" or ctx.spec.dims.q_lora_rank is not None:
        return []
    mla = [v for v in ctx.views if v.attention == "mla"]
    return [
        cfg_finding(
            "EC506",
            f"an MLA draft needs q_lora_rank (the EAGLE3 MLA layers of {ctx.releases(mla or None)} project queries "
            "through it)",
            "q_lora_rank",
            expected="an integer",
            actual=None,
        )
    ]
