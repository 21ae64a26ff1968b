"""Tensor-name tables: the prefixes and local names EAGLE3 drafts use in the wild (FORMATS.md section 2).

A tensor name is ``<outer prefix><layer prefix><local name>``: the outer prefix wraps a whole state dict
(``model.`` in NeMo Automodel, ``draft_model.``/``eagle_module.`` in raw trainer dumps), the layer prefix names the
draft's decoder layer (``midlayer.``, ``layers.0.``, ``midlayer.0.``), and the local name is what is left.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from eagle_convert.read.safetensors_header import MAX_TENSORS

OUTER_PREFIXES = ("model.", "draft_model.", "eagle_module.")
CANONICAL_LAYER_PREFIX = "midlayer."
LATER_LAYER_PREFIX = "layers."  # canonical draft layer i >= 1 is ``layers.{i}.`` (layer 0 stays ``midlayer.``)
MAX_DRAFT_LAYERS = 64  # the most layers a draft config may declare: more is EC020, and never sizes a loop

# Local names of tensors outside the decoder layer -> module group shown by `inspect`.
TOP_LEVEL_NAMES = {
    "fc.weight": "fc",
    "fc.bias": "fc",
    "input_norm.weight": "fc",
    "norm.weight": "head",
    "lm_head.weight": "head",
    "embed_tokens.weight": "embed",
    "d2t": "vocab map",
    "t2d": "vocab map",
}
FC_NORM_RE = re.compile(r"fc_norm\.(\d+)\.weight")
# Legacy SpecForge EAGLE3.1 names, in chunk order.
LEGACY_FC_NORM_NAMES = ("aux_norm_low.weight", "aux_norm_mid.weight", "aux_norm_high.weight")

_NORMS = ("input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight")
_MLP = ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
MHA_NAMES = (
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
)
MHA_OPTIONAL = (
    "self_attn.q_proj.bias",
    "self_attn.k_proj.bias",
    "self_attn.v_proj.bias",
    "self_attn.o_proj.bias",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
)
MLA_NAMES = (
    "self_attn.q_a_proj.weight",
    "self_attn.q_a_layernorm.weight",
    "self_attn.q_b_proj.weight",
    "self_attn.kv_a_proj_with_mqa.weight",
    "self_attn.kv_a_layernorm.weight",
    "self_attn.kv_b_proj.weight",
    "self_attn.o_proj.weight",
)
MLA_ONLY = frozenset(MLA_NAMES) - {"self_attn.o_proj.weight"}
# Engine-internal fusions a checkpoint should not carry (normalize splits them).
PREFUSED_NAMES = frozenset(
    {
        "self_attn.qkv_proj.weight",
        "mlp.gate_up_proj.weight",
        "self_attn.fused_qkv_a_proj_with_mqa.weight",
    }
)
LAYER_NAMES = (
    frozenset(_NORMS + _MLP + MHA_NAMES + MHA_OPTIONAL + MLA_NAMES)
    | PREFUSED_NAMES
    | {
        "self_attn.q_proj.weight",  # MLA without q compression
        "self_attn.rotary_emb.inv_freq",  # a buffer old exports saved; both engines skip it
    }
)
# Quantization side tensors stored next to a known weight (FP8 block scales, activation scales).
QUANT_SUFFIXES = (".weight_scale_inv", ".weight_scale", ".input_scale")
MOE_RE = re.compile(
    r"mlp\.(experts|shared_experts?|shared_expert_gate|gate\.weight|gate\.e_score_correction_bias|router)"
)

_LAYER_RE = re.compile(r"(?P<prefix>midlayer\.(?:(?P<mid>\d+)\.)?|layers\.(?P<idx>\d+)\.)(?P<local>.+)")


@dataclass(frozen=True)
class TensorName:
    """A tensor name split into its parts. ``layer`` is None for tensors outside the decoder layer."""

    name: str
    outer: str
    layer_prefix: str  # e.g. "midlayer." or "layers.0."; "" outside the layer
    layer: int | None
    local: str

    @property
    def prefix(self) -> str:
        return self.outer + self.layer_prefix

    @property
    def base(self) -> str:
        """The local name of the weight this tensor belongs to (a quantization scale maps to its weight)."""
        for suffix in QUANT_SUFFIXES:
            if self.local.endswith(suffix):
                return self.local[: -len(suffix)] + ".weight"
        return self.local

    @property
    def known(self) -> bool:
        if self.base != self.local:
            return split_name(self.outer + self.layer_prefix + self.base).known
        if self.layer is not None:
            return self.local in LAYER_NAMES or bool(MOE_RE.match(self.local))
        return (
            self.local in TOP_LEVEL_NAMES
            or self.local in LEGACY_FC_NORM_NAMES
            or bool(FC_NORM_RE.fullmatch(self.local))
        )

    @property
    def group(self) -> str:
        """The module a tensor belongs to, for grouping in reports (quantization scales join their weight)."""
        local = self.base
        if self.layer is not None:
            module = local.split(".", 1)[0] if "." in local else local
            if module.endswith(("layernorm", "_norm")):
                module = "norms"
            return f"{self.prefix}{module}"
        if local in TOP_LEVEL_NAMES:
            return TOP_LEVEL_NAMES[local]
        if local in LEGACY_FC_NORM_NAMES or FC_NORM_RE.fullmatch(local):
            return "fc_norm"
        return "other"


# detection and the report's grouping both split every name of a checkpoint: the cache holds them all (a smaller one
# missed every call past its size, four times the work per tensor beyond 131,072 tensors)
@lru_cache(maxsize=MAX_TENSORS)
def split_name(name: str) -> TensorName:
    outer, rest = "", name
    while rest.startswith(OUTER_PREFIXES):
        prefix = next(p for p in OUTER_PREFIXES if rest.startswith(p))
        outer, rest = outer + prefix, rest[len(prefix) :]
    m = _LAYER_RE.fullmatch(rest)
    if m is None:
        return TensorName(name, outer, "", None, rest)
    index = m.group("mid") or m.group("idx") or "0"
    return TensorName(name, outer, m.group("prefix"), int(index), m.group("local"))
