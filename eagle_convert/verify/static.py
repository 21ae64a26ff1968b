"""Static verify checks (config and headers only): one function per rule, registered by rule id.

Each check gets the same :class:`Context` and returns findings that name the file and the config key (a JSON
pointer) or tensor they are about, with what was expected and what was found. What an engine does is asked of the
selected releases' views (``ctx.views``, from ``eagle_convert.engines``); a message names those releases only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eagle_convert.draft.detect import DraftSpec
from eagle_convert.draft.expected import Expected
from eagle_convert.draft.mapping import map_key
from eagle_convert.engines import EngineView
from eagle_convert.errors import InputError
from eagle_convert.read.checkpoint import Checkpoint
from eagle_convert.read.config import IDS_KEY, TargetConfig
from eagle_convert.read.safetensors_header import FLOAT_DTYPES, INT_DTYPES
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import RULES

CONFIG = "config.json"
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


@dataclass
class Context:
    ckpt: Checkpoint
    spec: DraftSpec
    target: TargetConfig | None
    engines: tuple[str, ...]  # engine names of the selected releases
    strict: bool
    expected: dict[str, Expected]
    canonical: dict[str, str] = field(default_factory=dict)  # canonical name -> stored tensor name
    unplaced: list[str] = field(default_factory=list)  # stored names no layout table places
    views: list[EngineView] = field(default_factory=list)  # what each selected release builds from the config

    @property
    def cfg(self) -> dict[str, Any]:
        return self.spec.config.raw

    def shard_of(self, canonical_name: str) -> str | None:
        stored = self.canonical.get(canonical_name)
        return self.ckpt.tensors[stored].shard if stored else None

    def shape(self, canonical_name: str) -> tuple[int, ...] | None:
        stored = self.canonical.get(canonical_name)
        return self.ckpt.tensors[stored].shape if stored else None

    def releases(self, views: list[EngineView] | None = None) -> str:
        """The selected releases (or ``views``), named for a message: 'sglang@0.5.23, vllm@0.33'."""
        return ", ".join(v.release for v in (self.views if views is None else views)) or "the selected releases"


def map_names(ckpt: Checkpoint, spec: DraftSpec) -> tuple[dict[str, str], list[str]]:
    """Canonical name -> stored name for every tensor a layout table can place; the rest are returned apart."""
    canonical: dict[str, str] = {}
    unplaced: list[str] = []
    layout = spec.layer_prefix or "midlayer."
    for name in ckpt.tensors:
        try:
            mapped = map_key(name, layout)
        except InputError:
            unplaced.append(name)
            continue
        if mapped.action != "drop":
            canonical[mapped.target] = name
    return canonical, unplaced


def cfg_finding(
    rule_id: str,
    message: str,
    key: str | None,
    *,
    expected: Any = None,
    actual: Any = None,
    severity: str | None = None,
) -> Finding:
    pointer = "/" + key.replace(".", "/") if key else None
    return Finding(rule_id, severity or RULES[rule_id].severity, message, CONFIG, pointer, expected, actual)


def tensor_finding(
    ctx: Context,
    rule_id: str,
    message: str,
    name: str,
    *,
    expected: Any = None,
    actual: Any = None,
    severity: str | None = None,
) -> Finding:
    stored = ctx.canonical.get(name, name)
    info = ctx.ckpt.tensors.get(stored)
    return Finding(
        rule_id, severity or RULES[rule_id].severity, message, info.shard if info else None, stored, expected, actual
    )


Check = Callable[[Context], list[Finding]]
STATIC_CHECKS: dict[str, Check] = {}


def check(rule_id: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        STATIC_CHECKS[rule_id] = fn
        return fn

    return register


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
    """The architecture that routes to the right draft class in every modelled release (engines/)."""
    from eagle_convert.engines import draft_architecture

    portable = draft_architecture("mla" if ctx.spec.attention == "mla" else "mha", False)
    return portable[0] if portable else "an EAGLE3 draft class"


@check("EC015")
def _layer_prefix(ctx: Context) -> list[Finding]:
    prefix = ctx.spec.layer_prefix or ""
    caveats = [f"{v.release}: {v.caveats['layers-prefix']}" for v in ctx.views if "layers-prefix" in v.caveats]
    if not caveats or "layers." not in prefix:
        return []
    return [
        Finding(
            "EC015",
            "warning",
            f"decoder layer stored as {prefix}*: " + "; ".join(caveats),
            ctx.ckpt.shards[0].name if ctx.ckpt.shards else None,
            prefix,
            "midlayer.",
            prefix,
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
                Finding(
                    "EC301",
                    "error",
                    f"{name} is missing ({exp.why}): {consequence}",
                    None,
                    name,
                    list(exp.shape) if exp.shape else None,
                    None,
                )
            )
    return out


def _unknown_tensor(ctx: Context) -> str:
    """What the selected releases do with a tensor they have no parameter for."""
    refusing = [v.release for v in ctx.views if v.unknown_tensors == "refused"]
    dropping = [v.release for v in ctx.views if v.unknown_tensors == "dropped"]
    return "; ".join(
        part
        for part in (
            f"{', '.join(refusing)} refuse to load it" if refusing else "",
            f"{', '.join(dropping)} drop it silently" if dropping else "",
        )
        if part
    )


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
