"""Reference Llama-family **target** model, run layer by layer: Llama 3.x, Qwen2, Qwen3 and Qwen3-MoE (GQA, SwiGLU).

Matches transformers' ``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM`` and ``Qwen3MoeForCausalLM``
(full causal attention, no KV cache; several sequences run packed end to end): default RoPE and Llama 3
``rope_scaling`` (``rope_type: llama3``), q/k/v biases (Qwen2, or ``attention_bias``), per-head ``q_norm``/``k_norm``
before RoPE with an explicit ``head_dim`` (Qwen3), tied embeddings, and Qwen3-MoE's softmax-routed top-k experts
(read one at a time, only those some token was routed to).
Tested for parity against transformers in ``tests/test_reference_llama.py``.

Boundary ``j`` (0..N) is the input of decoder layer ``j``: boundary 0 is the embeddings, boundary ``j < N`` equals
HF ``output_hidden_states[j]``, and boundary ``N`` is the last layer's output *before* the final norm (what engines
capture for EAGLE3; HF's ``hidden_states[N]`` is ``norm(boundary N)``). See docs/FORMATS.md §3.

Peak memory is one decoder layer's weights plus activations: each layer's tensors are read from a
:class:`WeightSource`, used for every token, and dropped before the next layer is read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from eagle_convert.errors import ConfigError, InputError
from eagle_convert.read.checkpoint import open_weights
from eagle_convert.reference import fp8
from eagle_convert.reference.packing import pack
from eagle_convert.reference.stream import LayerStream, MappedShards

MODEL_TYPES = ("llama", "qwen2", "qwen3", "qwen3_moe")
_CONFIG_HINT = "fix the target's config.json (a Llama, Qwen2 or Qwen3 text model config)"
_WEIGHTS_HINT = "the target's config.json and weights disagree; point at the checkpoint the config belongs to"


# ---------------------------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class Llama3RopeScaling:
    """``rope_scaling``/``rope_parameters`` with ``rope_type: llama3`` (Llama 3.1+)."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


@dataclass(frozen=True)
class MoeSettings:
    """Qwen3-MoE's sparse MLP: a softmax router over E experts, top-k per token (renormalised when
    ``norm_topk_prob``), each expert a SwiGLU MLP of ``intermediate_size``; the other layers keep the dense MLP."""

    num_experts: int  # E
    top_k: int  # k
    intermediate_size: int  # Ie
    norm_topk_prob: bool
    sparse_layers: frozenset[int]


@dataclass(frozen=True)
class LlamaConfig:
    """What the forward pass needs from a HF config; build it with :meth:`from_hf`."""

    model_type: str
    vocab_size: int  # V
    hidden_size: int  # H
    intermediate_size: int  # I
    num_layers: int  # N
    num_heads: int  # nh
    num_kv_heads: int  # nkv
    head_dim: int  # hd (Qwen3: explicit, may differ from H // nh)
    rms_norm_eps: float
    rope_theta: float
    rope_llama3: Llama3RopeScaling | None
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    tie_word_embeddings: bool
    defaults: tuple[str, ...] = ()  # every default applied, as "key=value"
    moe: MoeSettings | None = None  # Qwen3-MoE only

    @classmethod
    def from_hf(cls, raw: Mapping[str, Any]) -> LlamaConfig:
        """Read a HF ``config.json`` dict (or its ``text_config``); raise :class:`ConfigError` on missing/bad keys."""
        text = raw.get("text_config") or raw
        if not isinstance(text, Mapping):
            raise ConfigError("text_config must be a JSON object", hint=_CONFIG_HINT)
        model_type = text.get("model_type")
        if model_type not in MODEL_TYPES:
            raise ConfigError(f"model_type {model_type!r} is not one of {', '.join(MODEL_TYPES)}", hint=_CONFIG_HINT)
        if text.get("hidden_act", "silu") != "silu":
            raise ConfigError(f"hidden_act {text.get('hidden_act')!r} is not supported (only silu)", hint=_CONFIG_HINT)
        layer_types = text.get("layer_types") or []
        if text.get("use_sliding_window") or not all(t == "full_attention" for t in layer_types):
            raise ConfigError("sliding-window attention is not supported by the reference model", hint=_CONFIG_HINT)
        applied: list[str] = []
        hidden, heads = _int(text, "hidden_size", applied), _int(text, "num_attention_heads", applied)
        if model_type.startswith("qwen3"):  # HF's Qwen3 default (128) is not H // nh: never guess it
            head_dim = _int(text, "head_dim", applied)
        else:
            head_dim = _int(text, "head_dim", applied, hidden // heads if hidden % heads == 0 else None)
        kv_heads = _int(text, "num_key_value_heads", applied, heads)
        if heads % kv_heads:
            msg = f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
            raise ConfigError(msg, hint=_CONFIG_HINT)
        fp8.block_size(text.get("quantization_config") or raw.get("quantization_config"))  # refuses other schemes
        theta, llama3 = _rope(text, applied)
        attention_bias = _bool(text, "attention_bias", applied, False)
        tie_source = text if "tie_word_embeddings" in text else raw
        layers = _int(text, "num_hidden_layers", applied)
        return cls(
            model_type=model_type,
            vocab_size=_int(text, "vocab_size", applied),
            hidden_size=hidden,
            intermediate_size=_int(text, "intermediate_size", applied),
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=_float(text, "rms_norm_eps", applied, 1e-6),
            rope_theta=theta,
            rope_llama3=llama3,
            qkv_bias=model_type == "qwen2" or attention_bias,  # Qwen2 always has q/k/v biases and no o_proj bias
            o_bias=model_type != "qwen2" and attention_bias,
            mlp_bias=_bool(text, "mlp_bias", applied, False),
            qk_norm=model_type.startswith("qwen3"),
            tie_word_embeddings=_bool(tie_source, "tie_word_embeddings", applied, False),
            defaults=tuple(applied),
            moe=_moe(text, layers, applied) if model_type == "qwen3_moe" else None,
        )


def _moe(text: Mapping[str, Any], layers: int, applied: list[str]) -> MoeSettings:
    """Qwen3-MoE: layer i is sparse unless listed in ``mlp_only_layers`` or (i + 1) % ``decoder_sparse_step`` != 0."""
    key = "num_experts" if "num_experts" in text else "num_local_experts"  # released configs; transformers 5 writes
    experts = _int(text, key, applied)
    dense = _value(text, "mlp_only_layers", applied, [])
    if not isinstance(dense, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in dense):
        raise ConfigError("mlp_only_layers must be a list of layer indices", hint=_CONFIG_HINT)
    step = _int(text, "decoder_sparse_step", applied, 1)
    top_k = _int(text, "num_experts_per_tok", applied)
    if top_k > experts:
        raise ConfigError(f"num_experts_per_tok {top_k} exceeds num_experts {experts}", hint=_CONFIG_HINT)
    return MoeSettings(
        num_experts=experts,
        top_k=top_k,
        intermediate_size=_int(text, "moe_intermediate_size", applied),
        norm_topk_prob=_bool(text, "norm_topk_prob", applied, False),
        sparse_layers=frozenset(i for i in range(layers) if i not in dense and (i + 1) % step == 0),
    )


def _rope(text: Mapping[str, Any], applied: list[str]) -> tuple[float, Llama3RopeScaling | None]:
    """Theta and scaling from ``rope_parameters`` (transformers 5) or ``rope_theta`` + ``rope_scaling`` (older)."""
    params = text.get("rope_parameters") or text.get("rope_scaling") or {}
    if not isinstance(params, Mapping) or any(isinstance(v, Mapping) for v in params.values()):
        raise ConfigError("rope_parameters must be one flat JSON object", hint=_CONFIG_HINT)
    theta = _float(params if "rope_theta" in params else text, "rope_theta", applied, 1e4)
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        raise ConfigError("partial_rotary_factor != 1 is not supported by the reference model", hint=_CONFIG_HINT)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return theta, None
    if rope_type != "llama3":
        raise ConfigError(f"rope type {rope_type!r} is not supported (default, llama3)", hint=_CONFIG_HINT)
    scaling = Llama3RopeScaling(
        _float(params, "factor", applied),
        _float(params, "low_freq_factor", applied),
        _float(params, "high_freq_factor", applied),
        _int(params, "original_max_position_embeddings", applied),
    )
    if scaling.high_freq_factor <= scaling.low_freq_factor:
        raise ConfigError("llama3 rope: high_freq_factor must exceed low_freq_factor", hint=_CONFIG_HINT)
    return theta, scaling


def _value(raw: Mapping[str, Any], key: str, applied: list[str], default: object) -> object:
    if raw.get(key) is not None:
        return raw[key]
    if default is None:
        raise ConfigError(f"config key {key!r} is missing", hint=_CONFIG_HINT)
    applied.append(f"{key}={default!r}")
    return default


def _int(raw: Mapping[str, Any], key: str, applied: list[str], default: int | None = None) -> int:
    value = _value(raw, key, applied, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"config key {key!r} must be a positive integer, found {value!r}", hint=_CONFIG_HINT)
    return value


def _float(raw: Mapping[str, Any], key: str, applied: list[str], default: float | None = None) -> float:
    value = _value(raw, key, applied, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"config key {key!r} must be a positive number, found {value!r}", hint=_CONFIG_HINT)
    return float(value)


def _bool(raw: Mapping[str, Any], key: str, applied: list[str], default: bool) -> bool:
    value = _value(raw, key, applied, default)
    if not isinstance(value, bool):
        raise ConfigError(f"config key {key!r} must be true or false, found {value!r}", hint=_CONFIG_HINT)
    return value


# ---------------------------------------------------------------------------------------------------- weights


class WeightSource(Protocol):
    """Tensors by HF name (``model.layers.{i}.self_attn.q_proj.weight``...), read when asked for."""

    def names(self) -> list[str]: ...
    def get(self, name: str) -> torch.Tensor: ...


class DictWeights:
    """A state dict in memory (tests)."""

    def __init__(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        self._tensors = dict(state_dict)

    def names(self) -> list[str]:
        return sorted(self._tensors)

    def get(self, name: str) -> torch.Tensor:
        if name not in self._tensors:
            raise InputError(f"tensor {name!r} is not in the state dict", hint=_WEIGHTS_HINT)
        return self._tensors[name]


class SafetensorsWeights:
    """A local checkpoint directory's safetensors weights, read through the strict reader of ``read/checkpoint.py``
    (the index, or every ``*.safetensors`` file; headers validated), each shard opened once and kept open.

    A tensor comes back as stored, viewing a private mapping of its pages (reference/stream.py): no copy, and the
    pages leave the process when its last view dies. With ``fp8_block`` (the target's ``weight_block_size``), FP8
    weights come back dequantized (reference/fp8.py)."""

    def __init__(self, directory: str | Path, fp8_block: tuple[int, int] | None = None) -> None:
        self.directory = Path(directory)
        self.fp8_block = fp8_block
        self._tensors = open_weights(self.directory)
        self._shards = MappedShards(self.directory)

    def names(self) -> list[str]:
        return sorted(self._tensors)

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The shape of ``name`` from its shard's header (no values read); None when it is not stored."""
        info = self._tensors.get(name)
        return info.shape if info is not None else None

    def nbytes(self, name: str) -> int:
        """Bytes of ``name`` as stored (0 when it is not stored)."""
        info = self._tensors.get(name)
        return info.nbytes if info is not None else 0

    def _read(self, name: str) -> torch.Tensor:
        info = self._tensors.get(name)
        if info is None:
            raise InputError(f"tensor {name!r} is not in the checkpoint", path=self.directory, hint=_WEIGHTS_HINT)
        return self._shards.map(info)

    def get(self, name: str) -> torch.Tensor:
        tensor = self._read(name)
        if tensor.dtype not in fp8.FP8_DTYPES:
            return tensor
        scale = name + fp8.SCALE_SUFFIX
        if self.fp8_block is None or scale not in self._tensors:
            raise InputError(
                f"tensor {name!r} is FP8, but the config declares no block quantization or {scale!r} is missing",
                path=self.directory,
                hint="the reference reads FP8 weights only as quant_method fp8 with weight_block_size",
            )
        return fp8.dequantize(tensor, self.get(scale), self.fp8_block, name)


def layer_shapes(cfg: LlamaConfig, layer: int = 0) -> dict[str, tuple[int, ...]]:
    """Decoder layer ``layer``'s tensors read up front: HF name after ``model.layers.{i}.`` -> shape (a sparse MoE
    layer lists its router; its experts are read when tokens are routed to them, see :func:`expert_shapes`)."""
    h, i, q, kv = cfg.hidden_size, cfg.intermediate_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "input_layernorm.weight": (h,),
        "self_attn.q_proj.weight": (q, h),
        "self_attn.k_proj.weight": (kv, h),
        "self_attn.v_proj.weight": (kv, h),
        "self_attn.o_proj.weight": (h, q),
        "post_attention_layernorm.weight": (h,),
        "mlp.gate_proj.weight": (i, h),
        "mlp.up_proj.weight": (i, h),
        "mlp.down_proj.weight": (h, i),
    }
    if cfg.qkv_bias:
        shapes |= {"self_attn.q_proj.bias": (q,), "self_attn.k_proj.bias": (kv,), "self_attn.v_proj.bias": (kv,)}
    if cfg.o_bias:
        shapes["self_attn.o_proj.bias"] = (h,)
    if cfg.mlp_bias:
        shapes |= {"mlp.gate_proj.bias": (i,), "mlp.up_proj.bias": (i,), "mlp.down_proj.bias": (h,)}
    if cfg.qk_norm:
        shapes |= {"self_attn.q_norm.weight": (cfg.head_dim,), "self_attn.k_norm.weight": (cfg.head_dim,)}
    if cfg.moe is not None and layer in cfg.moe.sparse_layers:
        for name in ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"):
            del shapes[name]
        shapes["mlp.gate.weight"] = (cfg.moe.num_experts, h)
    return shapes


def expert_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """One Qwen3-MoE expert's tensors: name after ``model.layers.{i}.mlp.experts.{e}.`` -> shape."""
    h, i = cfg.hidden_size, cfg.moe.intermediate_size if cfg.moe else 0
    return {"gate_proj.weight": (i, h), "up_proj.weight": (i, h), "down_proj.weight": (h, i)}


def _load(
    weights: WeightSource, name: str, shape: tuple[int, ...], device: str | torch.device, dtype: torch.dtype
) -> torch.Tensor:
    t = weights.get(name)
    if t.dtype in fp8.FP8_DTYPES:
        raise InputError(f"tensor {name!r} is FP8 without its scales applied (reference/fp8.py)", hint=_WEIGHTS_HINT)
    if tuple(t.shape) != shape:
        raise InputError(
            f"tensor {name!r} has shape {list(t.shape)}, the config implies {list(shape)}", hint=_WEIGHTS_HINT
        )
    return t.to(device=device, dtype=dtype)


def _load_layer(
    cfg: LlamaConfig, weights: WeightSource, i: int, device: str | torch.device, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    return {k: _load(weights, f"model.layers.{i}.{k}", s, device, dtype) for k, s in layer_shapes(cfg, i).items()}


Experts = Callable[[int], Mapping[str, torch.Tensor]]
"""Expert ``e`` of the layer at hand, read when asked for, under the dense MLP's names (``mlp.gate_proj.weight``...)."""


def _expert_loader(
    cfg: LlamaConfig, weights: WeightSource, i: int, device: str | torch.device, dtype: torch.dtype
) -> Experts:
    def load(e: int) -> dict[str, torch.Tensor]:
        p = f"model.layers.{i}.mlp.experts.{e}."
        return {f"mlp.{k}": _load(weights, p + k, s, device, dtype) for k, s in expert_shapes(cfg).items()}

    return load


# ---------------------------------------------------------------------------------------------------- model


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``w * x / sqrt(mean(x^2) + eps)``, statistics in fp32, cast back before the weight (HF ``LlamaRMSNorm``)."""
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


def rope_inv_freq(cfg: LlamaConfig) -> torch.Tensor:
    """``theta^(-2k/hd)`` for k < hd/2 ``[hd/2]`` fp32; Llama 3 slows low frequencies by ``factor``, smoothly."""
    hd = cfg.head_dim
    inv = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd)
    s = cfg.rope_llama3
    if s is None:
        return inv
    old_len, low, high = s.original_max_position_embeddings, s.low_freq_factor, s.high_freq_factor
    wavelen = 2 * math.pi / inv
    smooth = (old_len / wavelen - low) / (high - low)  # 0 at wavelength old_len/low, 1 at old_len/high
    scaled = torch.where(wavelen > old_len / low, inv / s.factor, inv)  # long wavelengths slowed, short unchanged
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, (1 - smooth) * inv / s.factor + smooth * inv, scaled)


def rope_cos_sin(
    cfg: LlamaConfig, positions: torch.Tensor, device: str | torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of ``position * inv_freq``, each ``[T, hd]`` (the hd/2 frequencies repeated, rotate-half layout)."""
    freqs = positions.float()[:, None] * rope_inv_freq(cfg)[None, :]  # [T, 1] * [1, hd/2]
    emb = torch.cat([freqs, freqs], dim=-1).to(device)  # [T, hd]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` for ``x`` ``[T, heads, hd]``, with ``rotate_half([a, b]) = [-b, a]``."""
    a, b = x.chunk(2, dim=-1)  # [T, heads, hd/2] each
    return x * cos[:, None, :] + torch.cat([-b, a], dim=-1) * sin[:, None, :]


def _linear(x: torch.Tensor, w: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
    """``x @ W^T + b`` with the layer's ``{name}.weight`` (and ``{name}.bias`` when the config has one)."""
    return F.linear(x, w[f"{name}.weight"], w.get(f"{name}.bias"))


def attention(
    cfg: LlamaConfig,
    x: torch.Tensor,
    w: Mapping[str, torch.Tensor],
    cos: torch.Tensor,
    sin: torch.Tensor,
    segments: Sequence[tuple[int, int]],
) -> torch.Tensor:
    """Causal GQA ``softmax(q k^T / sqrt(hd) + mask) v`` over ``x`` ``[T, H]`` -> ``[T, H]``, within each segment."""
    t, nh, nkv, hd = x.shape[0], cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    q = _linear(x, w, "self_attn.q_proj").view(t, nh, hd)  # [T, nh*hd] -> [T, nh, hd]
    k = _linear(x, w, "self_attn.k_proj").view(t, nkv, hd)  # [T, nkv*hd] -> [T, nkv, hd]
    v = _linear(x, w, "self_attn.v_proj").view(t, nkv, hd)  # [T, nkv*hd] -> [T, nkv, hd]
    if cfg.qk_norm:  # Qwen3: RMSNorm over each head's hd, before RoPE
        q = rms_norm(q, w["self_attn.q_norm.weight"], cfg.rms_norm_eps)
        k = rms_norm(k, w["self_attn.k_norm.weight"], cfg.rms_norm_eps)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    k = k.repeat_interleave(nh // nkv, dim=1)  # [T, nkv, hd] -> [T, nh, hd]: kv head j serves q heads j*g .. j*g+g-1
    v = v.repeat_interleave(nh // nkv, dim=1)  # [T, nkv, hd] -> [T, nh, hd]
    out = torch.cat([_causal(q[a:b], k[a:b], v[a:b], hd) for a, b in segments])  # [T, nh, hd]
    return _linear(out.reshape(t, nh * hd), w, "self_attn.o_proj")  # [T, nh, hd] -> [T, nh*hd] -> [T, H]


def _causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, hd: int) -> torch.Tensor:
    """One sequence's causal attention, ``[S, nh, hd]`` each -> ``[S, nh, hd]``."""
    s = q.shape[0]
    q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [S, nh, hd] -> [nh, S, hd]
    scores = (q @ k.transpose(1, 2)) * hd**-0.5  # [nh, S, S]
    future = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)  # [S, S], True above the diagonal
    probs = torch.softmax(scores.masked_fill(future, -math.inf).float(), dim=-1).to(q.dtype)  # [nh, S, S]
    return (probs @ v).transpose(0, 1)  # [nh, S, hd] -> [S, nh, hd]


def mlp(x: torch.Tensor, w: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """SwiGLU: ``down(silu(gate(x)) * up(x))``, ``[T, H]`` -> ``[T, I]`` -> ``[T, H]``."""
    return _linear(F.silu(_linear(x, w, "mlp.gate_proj")) * _linear(x, w, "mlp.up_proj"), w, "mlp.down_proj")


def sparse_mlp(cfg: LlamaConfig, x: torch.Tensor, w: Mapping[str, torch.Tensor], experts: Experts) -> torch.Tensor:
    """Qwen3-MoE: ``sum_k p_k * expert_{id_k}(x)`` with ``p = softmax(router(x))`` (fp32) over the top-k experts,
    renormalised when ``norm_topk_prob``; experts read one at a time, only those some token was routed to."""
    moe = cfg.moe
    assert moe is not None  # a sparse layer exists only with MoE settings
    probs = torch.softmax(F.linear(x, w["mlp.gate.weight"]), dim=-1, dtype=torch.float32)  # [T, E]
    top, ids = probs.topk(moe.top_k, dim=-1)  # [T, k]
    if moe.norm_topk_prob:
        top = top / top.sum(-1, keepdim=True)
    top = top.to(x.dtype)
    out = torch.zeros_like(x)
    for e in torch.unique(ids).tolist():  # ascending, like HF
        token, slot = torch.where(ids == e)  # the tokens routed to e, and in which of their k slots
        y = mlp(x[token], experts(e))  # [tokens routed to e, H]
        out.index_add_(0, token, (y * top[token, slot, None]).to(x.dtype))
    return out


def decoder_layer(
    cfg: LlamaConfig,
    x: torch.Tensor,
    w: Mapping[str, torch.Tensor],
    cos: torch.Tensor,
    sin: torch.Tensor,
    segments: Sequence[tuple[int, int]],
    experts: Experts,
) -> torch.Tensor:
    """Pre-norm block: ``h = x + attn(norm(x))``; ``out = h + mlp(norm(h))`` (sparse on Qwen3-MoE's MoE layers)."""
    h = x + attention(cfg, rms_norm(x, w["input_layernorm.weight"], cfg.rms_norm_eps), w, cos, sin, segments)
    y = rms_norm(h, w["post_attention_layernorm.weight"], cfg.rms_norm_eps)
    if "mlp.gate.weight" in w:  # a sparse layer (layer_shapes lists its router)
        return h + sparse_mlp(cfg, y, w, experts)
    return h + mlp(y, w)


@dataclass(frozen=True)
class TargetOutput:
    """What one forward pass of the target returns."""

    hidden: dict[int, torch.Tensor]  # boundary j -> [T, H] (j = input of layer j; j = N before the final norm)
    logits: torch.Tensor  # [T, V], lm_head(final_hidden)
    final_hidden: torch.Tensor  # [T, H], norm(boundary N) = HF hidden_states[N]


@torch.no_grad()
def forward_streaming(
    config: LlamaConfig,
    weights: WeightSource,
    input_ids: torch.Tensor,
    *,
    capture: Iterable[int] = (),
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    lengths: Sequence[int] | None = None,
    on_layer: Callable[[int], None] | None = None,
) -> TargetOutput:
    """Run ``input_ids`` ``[T]`` (or ``[1, T]``) through the target one layer at a time, keeping ``capture``.

    ``lengths``: several sequences packed end to end (reference/packing.py); ``on_layer(i)`` after layer ``i``."""
    cfg, n, h, vocab = config, config.num_layers, config.hidden_size, config.vocab_size
    wanted = set(capture)
    if any(not 0 <= j <= n for j in wanted):
        raise InputError(f"capture boundaries {sorted(wanted)} must lie in 0..{n} (N = {n} layers)")
    packed = pack(input_ids, lengths, vocab, device)

    table = weights.get("model.embed_tokens.weight")  # as stored (mapped: only the rows taken are read)
    if tuple(table.shape) != (vocab, h):
        raise InputError(
            f"tensor 'model.embed_tokens.weight' has shape {list(table.shape)}, the config implies {[vocab, h]}",
            hint=_WEIGHTS_HINT,
        )
    x = table[packed.ids.cpu()].to(device=device, dtype=dtype)  # [T, H]
    del table  # not kept through the layers
    cos, sin = rope_cos_sin(cfg, packed.positions, device, dtype)
    hidden: dict[int, torch.Tensor] = {}
    stream = LayerStream(weights, device, dtype)  # layer i + 1 is read (on CUDA: copied) while layer i runs
    try:
        layers = stream.walk(layer_groups(cfg))
        for i in range(n):
            if i in wanted:
                hidden[i] = x
            prefix = f"model.layers.{i}."
            w = {name.removeprefix(prefix): t for name, t in next(layers).items()}
            x = decoder_layer(cfg, x, w, cos, sin, packed.segments, _expert_loader(cfg, weights, i, device, dtype))
            del w  # layer i is released when layer i + 2 is read
            if on_layer is not None:
                on_layer(i)
        if n in wanted:
            hidden[n] = x
        norm, head = next(layers).values()  # layer_groups' order: the final norm, then lm_head
        final = rms_norm(x, norm, cfg.rms_norm_eps)
        logits = F.linear(final, head)  # [T, V]
        del norm, head
        layers.close()
    finally:
        stream.close()
    return TargetOutput(hidden, logits, final)


def layer_groups(cfg: LlamaConfig) -> list[dict[str, tuple[int, ...]]]:
    """What one pass reads, in order: each decoder layer's tensors (experts aside, read as tokens are routed to
    them), then the final norm and lm_head (the embedding when tied)."""
    layers = [
        {f"model.layers.{i}.{k}": shape for k, shape in layer_shapes(cfg, i).items()} for i in range(cfg.num_layers)
    ]
    head = "model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
    return [*layers, {"model.norm.weight": (cfg.hidden_size,), head: (cfg.vocab_size, cfg.hidden_size)}]
