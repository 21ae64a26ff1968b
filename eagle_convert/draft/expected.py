"""The exact tensor set a draft must ship, with every shape derived from its config (FORMATS.md sections 1-2).

Names are canonical (``midlayer.*`` for layer 0, ``layers.{i}.*`` after it, no prefix); a checkpoint in another
layout is compared after mapping its names through the layout tables. A shape is None where the config lacks the size
it depends on.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle_convert.draft.detect import DraftSpec
from eagle_convert.draft.layouts import CANONICAL_LAYER_PREFIX, LATER_LAYER_PREFIX, MAX_DRAFT_LAYERS
from eagle_convert.read.config import Dims

Shape = tuple[int, ...] | None


@dataclass(frozen=True)
class Expected:
    name: str
    shape: Shape
    role: str  # "weight", "norm", "bias", "d2t", "t2d"
    required: bool
    why: str


def _shape(*dims: int | None) -> Shape:
    return None if any(d is None for d in dims) else tuple(d for d in dims if d is not None)


def _mul(*values: int | None) -> int | None:
    out = 1
    for v in values:
        if v is None:
            return None
        out *= v
    return out


def _add(*values: int | None) -> int | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _attention(d: Dims, spec: DraftSpec, two_h: int | None, layer: str = CANONICAL_LAYER_PREFIX) -> list[Expected]:
    """Layer ``layer``'s attention; ``two_h``: the width its projections read (2H in layer 0, H after it)."""
    p = layer + "self_attn."
    h = d.hidden_size
    if spec.attention == "mla":
        nope, rope, v, heads = d.qk_nope_head_dim, d.qk_rope_head_dim, d.v_head_dim, d.num_attention_heads
        q_rows = _mul(heads, _add(nope, rope))
        out = []
        if d.q_lora_rank is not None:
            out += [
                Expected(
                    p + "q_a_proj.weight", _shape(d.q_lora_rank, two_h), "weight", True, "MLA query down-projection"
                ),
                Expected(p + "q_a_layernorm.weight", _shape(d.q_lora_rank), "norm", True, "MLA query latent norm"),
                Expected(
                    p + "q_b_proj.weight", _shape(q_rows, d.q_lora_rank), "weight", True, "MLA query up-projection"
                ),
            ]
        else:
            out.append(Expected(p + "q_proj.weight", _shape(q_rows, two_h), "weight", True, "MLA query projection"))
        out += [
            Expected(
                p + "kv_a_proj_with_mqa.weight",
                _shape(_add(d.kv_lora_rank, rope), two_h),
                "weight",
                True,
                "MLA latent KV plus shared rope key",
            ),
            Expected(p + "kv_a_layernorm.weight", _shape(d.kv_lora_rank), "norm", True, "MLA latent KV norm"),
            Expected(
                p + "kv_b_proj.weight",
                _shape(_mul(heads, _add(nope, v)), d.kv_lora_rank),
                "weight",
                True,
                "MLA KV up-projection",
            ),
            Expected(p + "o_proj.weight", _shape(h, _mul(heads, v)), "weight", True, "attention output"),
        ]
        return out
    heads, kv, hd = d.num_attention_heads, d.num_key_value_heads, d.head_dim
    out = [
        Expected(
            p + "q_proj.weight",
            _shape(_mul(heads, hd), two_h),
            "weight",
            True,
            "query projection (of 2H in layer 0, H after)",
        ),
        Expected(
            p + "k_proj.weight",
            _shape(_mul(kv, hd), two_h),
            "weight",
            True,
            "key projection (of 2H in layer 0, H after)",
        ),
        Expected(
            p + "v_proj.weight",
            _shape(_mul(kv, hd), two_h),
            "weight",
            True,
            "value projection (of 2H in layer 0, H after)",
        ),
        Expected(p + "o_proj.weight", _shape(h, _mul(heads, hd)), "weight", True, "attention output"),
        Expected(
            p + "q_norm.weight",
            _shape(hd),
            "norm",
            False,
            "Qwen3-style per-head query norm (see releases/: which classes have one)",
        ),
        Expected(
            p + "k_norm.weight",
            _shape(hd),
            "norm",
            False,
            "Qwen3-style per-head key norm (see releases/: which classes have one)",
        ),
    ]
    if spec.config.attention_bias:
        out += [
            Expected(p + f"{n}_proj.bias", _shape(rows), "bias", True, "attention_bias: true")
            for n, rows in (("q", _mul(heads, hd)), ("k", _mul(kv, hd)), ("v", _mul(kv, hd)))
        ]
    return out


def _mlp(d: Dims, layer: str) -> list[Expected]:
    h, inter = d.hidden_size, d.intermediate_size
    return [
        Expected(layer + "mlp.gate_proj.weight", _shape(inter, h), "weight", True, "SwiGLU gate"),
        Expected(layer + "mlp.up_proj.weight", _shape(inter, h), "weight", True, "SwiGLU up"),
        Expected(layer + "mlp.down_proj.weight", _shape(h, inter), "weight", True, "SwiGLU down"),
    ]


def expected_tensors(spec: DraftSpec) -> dict[str, Expected]:
    """Canonical name -> what the tensor must be, for the draft ``spec`` describes."""
    d = spec.dims
    h, k, ths = d.hidden_size, spec.num_aux_hidden_states, spec.target_hidden_size or d.hidden_size
    two_h = _mul(2, h)
    out: list[Expected] = []
    if spec.config.use_aux_hidden_state is not False:
        out.append(Expected("fc.weight", _shape(h, _mul(k, ths)), "weight", True, "fuses K aux states: [H, K*Ht]"))
    if spec.config.bias:
        out.append(Expected("fc.bias", _shape(h), "bias", True, "bias: true"))
    if spec.flags.fc_norm.value:
        out += [
            Expected(f"fc_norm.{i}.weight", _shape(ths), "norm", True, "fc_norm: one norm per aux chunk")
            for i in range(k)
        ]
    if spec.flags.norm_before_fc.value:
        out.append(Expected("input_norm.weight", _shape(_mul(k, ths)), "norm", True, "norm_before_fc"))
    out += [
        Expected(f"midlayer.{n}.weight", _shape(h), "norm", True, "decoder-layer norm")
        for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm")
    ]
    out += _attention(d, spec, two_h)
    out += _mlp(d, CANONICAL_LAYER_PREFIX)
    declared = d.num_hidden_layers if d.num_hidden_layers and d.num_hidden_layers <= MAX_DRAFT_LAYERS else 1
    for i in range(1, max(spec.num_draft_layers, declared)):  # an absurd count is EC020, never a loop bound
        # layers >= 1: a plain pre-norm decoder layer over H (speculators' decoder_layer_class, vLLM's
        # LlamaDecoderLayer with layer_idx > 0); SGLang builds hidden_norm there and norms with it (ENGINES.md E10)
        later = f"{LATER_LAYER_PREFIX}{i}."
        out += [
            Expected(later + "input_layernorm.weight", _shape(h), "norm", True, "decoder-layer norm"),
            Expected(later + "post_attention_layernorm.weight", _shape(h), "norm", True, "decoder-layer norm"),
            Expected(later + "hidden_norm.weight", _shape(h), "norm", False, "the norm SGLang applies in its place"),
        ]
        out += _attention(d, spec, h, later) + _mlp(d, later)
    out.append(Expected("norm.weight", _shape(h), "norm", True, "final norm"))
    vocab, draft_vocab = d.vocab_size, d.draft_vocab_size
    if d.draft_vocab_size_key != "null":
        out.append(
            Expected(
                "lm_head.weight",
                _shape(draft_vocab if draft_vocab is not None else vocab, h),
                "weight",
                True,
                "draft head over the draft vocabulary",
            )
        )
    reduced = draft_vocab is not None and vocab is not None and draft_vocab < vocab
    out.append(Expected("d2t", _shape(draft_vocab), "d2t", reduced, "draft -> target token offsets"))
    out.append(Expected("t2d", _shape(vocab), "t2d", False, "target -> draft membership mask"))
    out.append(Expected("embed_tokens.weight", _shape(vocab, h), "weight", False, "the draft's own embedding"))
    return {e.name: e for e in out}
