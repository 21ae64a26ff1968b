"""Static verify checks (config and headers only) on the vocabulary and the config fields (EC4xx, EC5xx).

Registered by rule id like the checks of ``static.py``; see ``context.py``.
"""

from __future__ import annotations

from typing import Any

from eagle_convert.gate.located import cfg_finding
from eagle_convert.gate.nulls import null_findings, null_typed_fields
from eagle_convert.rules.finding import Finding
from eagle_convert.verify.context import Context, check, tensor_finding

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


@check("EC502")
def _typed_null(ctx: Context) -> list[Finding]:
    return [
        cfg_finding("EC502", f"{key} is null; typed config classes reject it", key, actual=None)
        for key in null_typed_fields(ctx.cfg)
    ]


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
