"""Static verify checks (config and headers only) on the draft's model: architecture, aux layers, flags, tensors.

One function per rule, registered by rule id (``context.check``); each gets the same :class:`Context` and returns
findings that name the file and the config key (a JSON pointer) or tensor they are about. What an engine does is
asked of the selected releases' views (``ctx.views``); a message names those releases only.
"""

from __future__ import annotations

from eagle_convert.gate.findings import unknown_tensor_fates
from eagle_convert.gate.located import cfg_finding
from eagle_convert.read.config import IDS_KEY
from eagle_convert.read.safetensors_header import FLOAT_DTYPES, INT_DTYPES
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import finding
from eagle_convert.verify.context import Context, check, tensor_finding

# ---- architecture and engine acceptance ----------------------------------------------------------------------------


@check("EC011")
def _target_class(ctx: Context) -> list[Finding]:
    archs = ctx.spec.config.architectures
    built = [v for v in ctx.views if v.target_model_class]
    if not archs or not built:
        return []
    return [
        cfg_finding(
            "EC011",
            f"architectures {list(archs)} is a target model class: "
            + "; ".join(f"{v.release}: {v.target_model_class}" for v in built),
            "architectures",
            expected=_draft_class(ctx),
            actual=list(archs),
        )
    ]


def _draft_class(ctx: Context) -> str:
    """The architecture that routes to the right draft class in every modelled release (releases/)."""
    from eagle_convert.releases import draft_architecture

    portable = draft_architecture("mla" if ctx.spec.attention == "mla" else "mha", False)
    return portable[0] if portable else "an EAGLE3 draft class"


@check("EC015")
def _layer_prefix(ctx: Context) -> list[Finding]:
    prefix = ctx.spec.layer_prefix or ""
    caveats = [f"{v.release}: {v.caveats['layers-prefix']}" for v in ctx.views if "layers-prefix" in v.caveats]
    if not caveats or "layers." not in prefix:
        return []
    return [
        finding(
            "EC015",
            f"decoder layer stored as {prefix}*: " + "; ".join(caveats),
            file=ctx.ckpt.shards[0].name if ctx.ckpt.shards else None,
            pointer=prefix,
            expected="midlayer.",
            actual=prefix,
        )
    ]


# ---- aux layers ------------------------------------------------------------------------------------------------------


@check("EC109")
def _ids_location(ctx: Context) -> list[Finding]:
    aux = ctx.spec.aux
    if aux.location != "top-level":
        return []
    return [
        cfg_finding(
            "EC109",
            f"aux-layer ids {aux.ids} are only at the top level: {view.release} does not read them there and "
            f"captures {'hs' + str(view.hidden_state_indices) if view.hidden_state_indices else 'its defaults'}",
            IDS_KEY,
            actual=aux.ids,
        )
        for view in ctx.views
        if view.ids_from == "defaults" and view.hidden_state_indices != aux.hidden_state_indices
    ]


@check("EC110")
def _k_without_ids(ctx: Context) -> list[Finding]:
    if ctx.spec.num_aux_hidden_states == 3 or ctx.spec.aux.ids:
        return []
    defaults = [v for v in ctx.views if v.ids_from == "defaults"]
    return [
        cfg_finding(
            "EC110",
            f"K={ctx.spec.num_aux_hidden_states} aux states ({ctx.spec.num_aux_source}) but no "
            f"ids: {ctx.releases(defaults or None)} capture three default layers",
            IDS_KEY,
            expected=f"{ctx.spec.num_aux_hidden_states} ids",
            actual=None,
        )
    ]


# ---- flags -------------------------------------------------------------------------------------------------------


@check("EC209")
def _bias(ctx: Context) -> list[Finding]:
    flag, has = ctx.spec.config.bias, "fc.bias" in ctx.canonical
    out = []
    fc_bias = [v for v in ctx.views if v.bias_is == "fc"]
    if flag and not has and fc_bias:
        out.append(
            cfg_finding(
                "EC209",
                f"bias is true but there is no fc.bias: {ctx.releases(fc_bias)} build(s) fc with a bias the "
                "checkpoint does not have and run it uninitialised",
                "bias",
                expected=False,
                actual=True,
            )
        )
    if has and not flag:
        out.append(
            tensor_finding(
                ctx,
                "EC209",
                f"fc.bias is stored but bias is not true: {_unknown_tensor(ctx)}",
                "fc.bias",
                expected="bias: true",
            )
        )
    for view in ctx.views:
        if flag and view.bias_is == "o_proj":
            out.append(
                cfg_finding(
                    "EC209",
                    f"bias: true: {view.release} builds it as an o_proj bias the checkpoint does not have",
                    "bias",
                    expected=False,
                    actual=True,
                )
            )
    return out


@check("EC210")
def _mla_norm_before_fc(ctx: Context) -> list[Finding]:
    if ctx.spec.attention != "mla" or not ctx.spec.flags.norm_before_fc.value:
        return []
    mla = [v for v in ctx.views if v.attention == "mla"]
    return [
        cfg_finding(
            "EC210",
            f"norm_before_fc on an MLA draft: the MLA draft class of {ctx.releases(mla or None)} has no input_norm",
            ctx.spec.flags.norm_before_fc.source if "." in ctx.spec.flags.norm_before_fc.source else "norm_before_fc",
            expected=False,
            actual=True,
        )
    ]


# ---- tensor set, shapes and dtypes ---------------------------------------------------------------------------------

_OWN_RULE = {"lm_head.weight": "EC401", "d2t": "EC404"}  # missing tensors another rule explains better


@check("EC301")
def _missing(ctx: Context) -> list[Finding]:
    out = []
    for name, exp in ctx.expected.items():
        if exp.required and name not in ctx.canonical and name not in _OWN_RULE:
            consequence = f"{ctx.releases()} leave the parameter at its random initialisation (or fail to load)"
            out.append(
                finding(
                    "EC301",
                    f"{name} is missing ({exp.why}): {consequence}",
                    pointer=name,
                    expected=list(exp.shape) if exp.shape else None,
                )
            )
    return out


def _unknown_tensor(ctx: Context) -> str:
    """What the selected releases do with a tensor they have no parameter for."""
    return unknown_tensor_fates(ctx.views, "refuse to load it", "drop it silently")


@check("EC302")
def _unexpected(ctx: Context) -> list[Finding]:
    severity = "error" if any(v.unknown_tensors == "refused" for v in ctx.views) else "warning"
    consequence = _unknown_tensor(ctx)
    out = [
        tensor_finding(ctx, "EC302", f"tensor {name} matches no known layout: {consequence}", name, severity=severity)
        for name in ctx.unplaced
    ]
    for name in ctx.canonical:
        if name in ctx.expected or any(
            name.endswith(p) for p in ("qkv_proj.weight", "gate_up_proj.weight", "fused_qkv_a_proj_with_mqa.weight")
        ):
            continue  # pre-fused tensors are EC009
        out.append(
            tensor_finding(
                ctx,
                "EC302",
                f"{name} has no place in this draft's configuration: {consequence}",
                name,
                severity=severity,
            )
        )
    return out


@check("EC303")
def _shapes(ctx: Context) -> list[Finding]:
    out = []
    for name, exp in ctx.expected.items():
        actual = ctx.shape(name)
        if actual is not None and exp.shape is not None and tuple(actual) != exp.shape:
            out.append(
                tensor_finding(
                    ctx,
                    "EC303",
                    f"{name} is {list(actual)} but the config implies {list(exp.shape)} ({exp.why})",
                    name,
                    expected=list(exp.shape),
                    actual=list(actual),
                )
            )
    return out


@check("EC304")
def _dtypes(ctx: Context) -> list[Finding]:
    out = []
    for name, stored in ctx.canonical.items():
        dtype = ctx.ckpt.tensors[stored].dtype
        role = ctx.expected[name].role if name in ctx.expected else "weight"
        if role == "d2t" and dtype not in INT_DTYPES:
            out.append(
                tensor_finding(
                    ctx, "EC304", f"d2t is {dtype}; it holds integer offsets (I64)", name, expected="I64", actual=dtype
                )
            )
        elif role == "t2d" and dtype != "BOOL":
            out.append(
                tensor_finding(
                    ctx,
                    "EC304",
                    f"t2d is {dtype}; it is a boolean mask",
                    name,
                    expected="BOOL",
                    actual=dtype,
                    severity="warning",
                )
            )
        elif role in ("weight", "norm", "bias") and dtype not in FLOAT_DTYPES and not name.endswith("_scale_inv"):
            out.append(
                tensor_finding(
                    ctx,
                    "EC304",
                    f"{name} is {dtype}; weights must be floating point",
                    name,
                    expected="BF16/F16/F32",
                    actual=dtype,
                )
            )
    return out


@check("EC305")
def _fp8(ctx: Context) -> list[Finding]:
    fp8 = [n for n, t in ctx.ckpt.tensors.items() if t.dtype.startswith("F8")]
    quant = ctx.cfg.get("quantization_config")
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    if not fp8 or method in ("fp8", "modelopt", "compressed-tensors"):
        return []
    return [
        tensor_finding(
            ctx,
            "EC305",
            f"{len(fp8)} FP8 tensor(s), e.g. {fp8[0]}, but quantization_config is "
            f"{'absent' if quant is None else method!r}: {ctx.releases()} would read raw FP8 bytes as "
            "weights",
            fp8[0],
            expected="quantization_config.quant_method fp8",
            actual=method,
        )
    ]


@check("EC306")
def _head_dim(ctx: Context) -> list[Finding]:
    d = ctx.spec.dims
    if not d.head_dim_explicit or not d.hidden_size or not d.num_attention_heads or ctx.spec.attention == "mla":
        return []
    derived = d.hidden_size // d.num_attention_heads
    if d.head_dim == derived:
        return []
    return [
        cfg_finding(
            "EC306",
            f"head_dim is {d.head_dim}, not hidden_size / num_attention_heads = {derived}; "
            "q/k/v widths follow head_dim",
            "head_dim",
            expected=derived,
            actual=d.head_dim,
        )
    ]
