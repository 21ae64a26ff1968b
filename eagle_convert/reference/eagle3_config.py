"""What the reference EAGLE3 draft (reference/eagle3_draft.py) is built from: :class:`Eagle3Config`, read from a
canonical draft config (``normalize`` output) with every default it applies named, the canonical tensors and shapes
that config asks for (docs/FORMATS.md section 2), and :func:`load_draft`, which checks a state against them. A
missing or unsupported setting, and an unknown, missing or misshapen tensor, is a ConfigError naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from eagle_convert.draft.layouts import CANONICAL_LAYER_PREFIX, LATER_LAYER_PREFIX, MAX_DRAFT_LAYERS
from eagle_convert.errors import ConfigError
from eagle_convert.read.config import DraftConfig as ParsedConfig

HINT = "write the draft with `eagle-convert normalize` (canonical config and tensor names) and retry"
_ROPE_PARAMS = {  # rope type -> parameters it needs (transformers' ROPE_INIT_FUNCTIONS)
    "default": (),
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings"),
}
FIRST = CANONICAL_LAYER_PREFIX  # layer 0's canonical prefix; layer i >= 1 is ``layers.{i}.`` (LATER_LAYER_PREFIX)


@dataclass(frozen=True)
class Eagle3Config:
    """What the forward pass needs from a canonical draft config; ``defaults`` names every default applied."""

    attention: str  # "mha" or "mla"
    hidden_size: int  # H
    target_hidden_size: int  # Ht
    num_aux: int  # K
    intermediate_size: int  # I
    num_heads: int  # nh
    num_kv_heads: int  # nkv (MHA; nh for MLA)
    head_dim: int  # hd (MHA; 0 for MLA)
    vocab_size: int  # V
    draft_vocab_size: int  # Vd
    rms_norm_eps: float
    rope_theta: float
    rope_type: str  # default | linear | llama3 | yarn
    rope_params: dict[str, Any]
    q_lora_rank: int | None  # rq, dn, dr, dv, rkv: MLA only
    kv_lora_rank: int | None
    qk_nope_head_dim: int | None
    qk_rope_head_dim: int | None
    v_head_dim: int | None
    rope_interleave: bool  # MLA: DeepSeek pairs (x0, x1), (x2, x3)...
    fc_norm: bool
    norm_before_fc: bool
    fc_bias: bool
    norm_before_residual: bool
    norm_output: bool
    defaults: tuple[str, ...]
    head_norm: bool = True  # lm_head reads norm(s); False: s itself (SpecForge 0.2.0 with norm_output false)
    num_layers: int = 1  # L: layer 0 (2H input) and L - 1 plain decoder layers over H
    windows: tuple[int | None, ...] = (None,)  # per layer: its sliding window in positions (None: full attention)

    def layer(self, i: int) -> str:
        """Layer i's canonical prefix."""
        return FIRST if i == 0 else f"{LATER_LAYER_PREFIX}{i}."

    def mla_dims(self) -> tuple[int, int, int, int, int]:
        """(rq, rkv, dn, dr, dv); all set for MLA by ``from_config``."""
        dims = (self.q_lora_rank, self.kv_lora_rank, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim)
        return (dims[0] or 0, dims[1] or 0, dims[2] or 0, dims[3] or 0, dims[4] or 0)

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> Eagle3Config:
        """Read a canonical config dict (``normalize`` output); a missing or unsupported setting is a ConfigError."""
        return cls.from_parsed(ParsedConfig.from_dict(raw), raw)

    @classmethod
    def from_parsed(cls, p: ParsedConfig, raw: dict[str, Any]) -> Eagle3Config:
        """:meth:`from_config` on a config already parsed (``p``, from ``raw``): nothing is parsed twice."""
        defaults: list[str] = []
        d = p.dims

        def need(value: Any, key: str) -> Any:
            if value is None:
                raise ConfigError(f"config has no {key}; the reference draft needs it", hint=HINT)
            return value

        def default(value: Any, key: str, fallback: Any) -> Any:
            if value is None:
                defaults.append(f"{key}={fallback!r}")
                return fallback
            return value

        if p.use_aux_norm is not None or p.eagle_config_norm_before_fc is not None:
            raise ConfigError("config uses use_aux_norm or eagle_config.norm_before_fc (not canonical)", hint=HINT)
        if p.attention_bias or raw.get("hidden_act", "silu") != "silu":
            raise ConfigError("reference draft supports a silu MLP and no attention_bias", hint=HINT)
        layers = d.num_hidden_layers or 1
        if not 1 <= layers <= MAX_DRAFT_LAYERS:
            raise ConfigError(f"num_hidden_layers is {layers}: a draft has 1..{MAX_DRAFT_LAYERS} layers", hint=HINT)
        hidden, heads = need(d.hidden_size, "hidden_size"), need(d.num_attention_heads, "num_attention_heads")
        ids = p.top_level_ids or p.eagle_config_ids
        mla = d.kv_lora_rank is not None or (p.model_type or "").startswith("deepseek")
        rope = raw.get("rope_scaling") if isinstance(raw.get("rope_scaling"), dict) else raw.get("rope_parameters")
        rope = dict(rope) if isinstance(rope, dict) else {}
        rope_type = str(rope.get("rope_type") or rope.get("type") or "default")
        missing = [k for k in _ROPE_PARAMS.get(rope_type, ()) if not isinstance(rope.get(k), int | float)]
        if rope_type not in _ROPE_PARAMS or missing:
            raise ConfigError(f"rope type {rope_type!r} unsupported or missing {missing}", hint=HINT)
        fc_norm, norm_before_fc = bool(p.fc_norm), bool(p.norm_before_fc)
        if fc_norm and norm_before_fc:
            raise ConfigError("fc_norm and norm_before_fc are mutually exclusive", hint=HINT)
        for flag in ("fc_norm", "norm_before_fc", "bias", "norm_before_residual", "norm_output"):
            default(getattr(p, flag), flag, False)
        vocab = need(d.vocab_size, "vocab_size")
        return cls(
            attention="mla" if mla else "mha",
            hidden_size=hidden,
            target_hidden_size=default(d.target_hidden_size, "target_hidden_size", hidden),
            num_aux=p.num_aux_hidden_states or default(None, "num_aux_hidden_states", len(set(ids)) if ids else 3),
            intermediate_size=need(d.intermediate_size, "intermediate_size"),
            num_heads=heads,
            num_kv_heads=heads if mla else default(raw.get("num_key_value_heads"), "num_key_value_heads", heads),
            head_dim=0 if mla else default(raw.get("head_dim"), "head_dim", hidden // heads),
            vocab_size=vocab,
            draft_vocab_size=default(d.draft_vocab_size, "draft_vocab_size", vocab),
            rms_norm_eps=default(d.rms_norm_eps, "rms_norm_eps", 1e-6),
            rope_theta=default(p.rope_theta, "rope_theta", 10000.0),
            rope_type=rope_type,
            rope_params=rope,
            q_lora_rank=need(d.q_lora_rank, "q_lora_rank") if mla else None,
            kv_lora_rank=need(d.kv_lora_rank, "kv_lora_rank") if mla else None,
            qk_nope_head_dim=need(d.qk_nope_head_dim, "qk_nope_head_dim") if mla else None,
            qk_rope_head_dim=need(d.qk_rope_head_dim, "qk_rope_head_dim") if mla else None,
            v_head_dim=need(d.v_head_dim, "v_head_dim") if mla else None,
            rope_interleave=bool(default(raw.get("rope_interleave"), "rope_interleave", True)) if mla else False,
            fc_norm=fc_norm,
            norm_before_fc=norm_before_fc,
            fc_bias=bool(p.bias),
            norm_before_residual=bool(p.norm_before_residual),
            norm_output=bool(p.norm_output),
            defaults=tuple(defaults),
            num_layers=layers,
            windows=_windows(raw, layers),
        )


_QWEN_WINDOW_RULE = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")  # config classes that derive layer_types


def _windows(raw: dict[str, Any], layers: int) -> tuple[int | None, ...]:
    """Each draft layer's sliding window: ``sliding_window`` where ``layer_types[i]`` is ``sliding_attention``, as
    vLLM's draft layers read it (``llama.py`` LlamaAttention and ``qwen3_eagle3.py``: the draft-relative index into
    ``layer_types``); without ``layer_types``, the rule of transformers' Qwen2/Qwen3 config classes, which compute
    them (``use_sliding_window``: the layers from ``max_window_layers`` on; other families' classes ignore the key)."""
    types, window = raw.get("layer_types"), raw.get("sliding_window")
    if types is None and raw.get("use_sliding_window") and raw.get("model_type") in _QWEN_WINDOW_RULE:
        start = raw.get("max_window_layers")
        start = start if isinstance(start, int) else layers
        types = ["sliding_attention" if i >= start else "full_attention" for i in range(layers)]
    if types is None:
        return (None,) * layers
    if not isinstance(types, list) or len(types) < layers:
        raise ConfigError(f"layer_types {types!r} does not name each of the {layers} draft layers", hint=HINT)
    sliding = [t == "sliding_attention" for t in types[:layers]]
    if any(sliding) and not (isinstance(window, int) and window > 0):
        raise ConfigError(f"layer_types has sliding layers but sliding_window is {window!r}", hint=HINT)
    return tuple(window if s else None for s in sliding)


def parameter_shapes(c: Eagle3Config) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """(required, optional) canonical tensor name -> shape for this config (FORMATS.md section 2)."""
    h, ht, k, i, two_h = c.hidden_size, c.target_hidden_size, c.num_aux, c.intermediate_size, 2 * c.hidden_size
    req: dict[str, tuple[int, ...]] = {
        "fc.weight": (h, k * ht),
        "norm.weight": (h,),
        "lm_head.weight": (c.draft_vocab_size, h),
    }
    req |= {"fc.bias": (h,)} if c.fc_bias else {}
    req |= {f"fc_norm.{j}.weight": (ht,) for j in range(k)} if c.fc_norm else {}
    req |= {"input_norm.weight": (k * ht,)} if c.norm_before_fc else {}
    opt = {"t2d": (c.vocab_size,), "embed_tokens.weight": (c.vocab_size, h)}
    for n in range(c.num_layers):
        p, width = c.layer(n), two_h if n == 0 else h  # layer 0 reads cat(embed, hidden), later layers H
        req |= {p + f"{norm}.weight": (h,) for norm in ("input_layernorm", "post_attention_layernorm")}
        (req if n == 0 else opt)[p + "hidden_norm.weight"] = (h,)  # later layers: SGLang's, unused here
        req |= {
            p + "mlp.gate_proj.weight": (i, h),
            p + "mlp.up_proj.weight": (i, h),
            p + "mlp.down_proj.weight": (h, i),
        }
        a = p + "self_attn."
        if c.attention == "mha":
            nh, nkv, hd = c.num_heads, c.num_kv_heads, c.head_dim
            req |= {a + "q_proj.weight": (nh * hd, width), a + "o_proj.weight": (h, nh * hd)}
            req |= {a + "k_proj.weight": (nkv * hd, width), a + "v_proj.weight": (nkv * hd, width)}
            opt |= {a + "q_norm.weight": (hd,), a + "k_norm.weight": (hd,)}
        else:
            rq, rkv, dn, dr, dv = c.mla_dims()
            req |= {a + "q_a_proj.weight": (rq, width), a + "q_a_layernorm.weight": (rq,)}
            req |= {a + "q_b_proj.weight": (c.num_heads * (dn + dr), rq), a + "o_proj.weight": (h, c.num_heads * dv)}
            req |= {a + "kv_a_proj_with_mqa.weight": (rkv + dr, width), a + "kv_a_layernorm.weight": (rkv,)}
            req |= {a + "kv_b_proj.weight": (c.num_heads * (dn + dv), rkv)}
    (req if c.draft_vocab_size < c.vocab_size else opt)["d2t"] = (c.draft_vocab_size,)
    return req, opt


@dataclass(frozen=True)
class DraftWeights:
    """The draft's tensors by canonical name, checked against the config; ``d2t`` always there (zeros if V == Vd)."""

    tensors: dict[str, Tensor]

    def __getitem__(self, name: str) -> Tensor:
        return self.tensors[name]

    def get(self, name: str) -> Tensor | None:
        return self.tensors.get(name)


def load_draft(
    config: Eagle3Config,
    state: Mapping[str, Tensor],
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> DraftWeights:
    """Check names and shapes (unknown, missing, misshapen -> ConfigError naming them); move to ``device`` and cast
    floats to ``dtype``."""
    required, optional = parameter_shapes(config)
    unknown = sorted(set(state) - set(required) - set(optional))
    missing = sorted(set(required) - set(state))
    if unknown or missing:
        raise ConfigError(f"draft tensors do not match the config: unknown {unknown}, missing {missing}", hint=HINT)
    shapes = required | optional
    wrong = [f"{n} {tuple(t.shape)} != {shapes[n]}" for n, t in state.items() if tuple(t.shape) != shapes[n]]
    lone: list[str] = []
    for n in range(config.num_layers):
        present = [f"{config.layer(n)}self_attn.{qk}.weight" for qk in ("q_norm", "k_norm")]
        present = [name for name in present if name in state]
        lone += present if len(present) == 1 else []
    if wrong or lone:
        raise ConfigError(f"draft tensors have wrong shapes or a lone q/k norm {lone}: {wrong}", hint=HINT)
    out = {n: t.to(device, dtype if t.is_floating_point() else torch.int64) for n, t in state.items()}
    out.setdefault("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.int64, device=device))
    return DraftWeights(out)
