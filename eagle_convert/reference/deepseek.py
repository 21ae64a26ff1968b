"""Reference DeepSeek-V3 / Kimi-K2 target model: MLA attention, YaRN RoPE and sigmoid-routed MoE, in pure PyTorch.

Matches transformers' ``DeepseekV3ForCausalLM`` (5.x, eager attention) to fp32 rounding; tested in
``tests/test_reference_deepseek.py``. Runs one decoder layer at a time over all tokens (causal, no cache; several
sequences packed end to end), loading only that layer's tensors, and for MoE layers only the experts some token was
routed to, one expert at a time.

Notation (docs/FORMATS.md §1): ``T`` tokens, ``H`` hidden, ``nh`` heads, ``rq``/``rkv`` q/kv LoRA ranks, ``dn``/``dr``/
``dv`` nope/rope/value head dims, ``E`` routed experts, ``k`` experts per token, ``g`` expert groups.
Boundary ``j`` (0..N) is the input of layer ``j`` = HF ``output_hidden_states[j]``; boundary ``N`` is the last layer's
output *before* the final norm (HF's ``hidden_states[N]`` is after it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from eagle_convert.errors import ConfigError, InputError
from eagle_convert.reference import fp8
from eagle_convert.reference.packing import pack


class WeightSource(Protocol):
    """Tensors by their HF name (``model.layers.0.self_attn.q_a_proj.weight``...)."""

    def get(self, name: str) -> torch.Tensor: ...

    def names(self) -> list[str]: ...


@dataclass
class TargetOutput:
    hidden: dict[int, torch.Tensor]  # boundary j -> [T, H]
    logits: torch.Tensor  # [T, V]
    final_hidden: torch.Tensor  # [T, H], after the final norm (= HF hidden_states[N])


@dataclass(frozen=True)
class YarnRope:
    factor: float
    original_max_position_embeddings: int
    beta_fast: float
    beta_slow: float
    mscale: float | None
    mscale_all_dim: float | None
    attention_factor: float | None
    truncate: bool


@dataclass(frozen=True)
class DeepseekConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int  # dense layers
    num_hidden_layers: int
    num_attention_heads: int
    q_lora_rank: int | None  # None: a plain q_proj
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    n_routed_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    n_shared_experts: int
    first_k_dense_replace: int
    n_group: int
    topk_group: int
    norm_topk_prob: bool
    routed_scaling_factor: float
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    yarn: YarnRope | None = None
    rope_interleave: bool = True
    attention_bias: bool = False
    tie_word_embeddings: bool = False
    defaults: tuple[str, ...] = ()  # "key=value" for every default applied by from_hf

    @classmethod
    def from_hf(cls, raw: dict[str, Any]) -> DeepseekConfig:
        """Read a HF config.json dict (DeepSeek-V3, Kimi-K2; Kimi-K2.5 nests it under ``text_config``)."""
        text = raw.get("text_config")
        cfg: dict[str, Any] = text if isinstance(text, dict) else raw
        defaults: list[str] = []

        def need(key: str, kind: type, *, nullable: bool = False) -> Any:
            if key not in cfg:
                raise ConfigError(f"DeepSeek config has no {key!r}")
            value = cfg[key]
            if value is None and nullable:
                return None
            ok = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
            if kind is float:
                ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not ok or (kind is int and value < 0):
                raise ConfigError(f"DeepSeek config {key!r} is {value!r}, must be a {kind.__name__}")
            return float(value) if kind is float else value

        def optional(key: str, kind: type, default: Any) -> Any:
            if cfg.get(key) is None:
                defaults.append(f"{key}={default!r}")
                return default
            return need(key, kind)

        fp8.block_size(cfg.get("quantization_config") or raw.get("quantization_config"))  # refuses other schemes
        for key, allowed in (("hidden_act", "silu"), ("scoring_func", "sigmoid"), ("topk_method", "noaux_tc")):
            if cfg.get(key, allowed) != allowed:
                raise ConfigError(
                    f"DeepSeek config {key!r} is {cfg[key]!r}; the reference model implements {allowed!r}"
                )

        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        if not isinstance(rope, dict):
            raise ConfigError(f"DeepSeek config rope_parameters/rope_scaling is {rope!r}, must be an object")
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        theta = rope.get("rope_theta", cfg.get("rope_theta"))
        if theta is None:
            defaults.append("rope_theta=10000.0")
            theta = 10000.0
        yarn = None
        if rope_type == "yarn":
            if not isinstance(rope.get("factor"), int | float):
                raise ConfigError(f"DeepSeek yarn rope has factor {rope.get('factor')!r}, must be a number")
            original = rope.get("original_max_position_embeddings") or cfg.get("original_max_position_embeddings")
            if original is None:  # what transformers does
                original = need("max_position_embeddings", int)
                defaults.append(f"rope original_max_position_embeddings={original}")
            yarn = YarnRope(
                factor=float(rope["factor"]),
                original_max_position_embeddings=int(original),
                beta_fast=float(rope.get("beta_fast") or 32),
                beta_slow=float(rope.get("beta_slow") or 1),
                mscale=number_or_none(rope, "mscale"),
                mscale_all_dim=number_or_none(rope, "mscale_all_dim"),
                attention_factor=number_or_none(rope, "attention_factor"),
                truncate=bool(rope.get("truncate", True)),
            )
        elif rope_type != "default":
            raise ConfigError(f"DeepSeek rope type {rope_type!r} is not implemented (only default and yarn)")

        config = cls(
            vocab_size=need("vocab_size", int),
            hidden_size=need("hidden_size", int),
            intermediate_size=need("intermediate_size", int),
            num_hidden_layers=need("num_hidden_layers", int),
            num_attention_heads=need("num_attention_heads", int),
            q_lora_rank=need("q_lora_rank", int, nullable=True),
            kv_lora_rank=need("kv_lora_rank", int),
            qk_nope_head_dim=need("qk_nope_head_dim", int),
            qk_rope_head_dim=need("qk_rope_head_dim", int),
            v_head_dim=need("v_head_dim", int),
            n_routed_experts=need("n_routed_experts", int),
            num_experts_per_tok=need("num_experts_per_tok", int),
            moe_intermediate_size=need("moe_intermediate_size", int),
            n_shared_experts=need("n_shared_experts", int),
            first_k_dense_replace=need("first_k_dense_replace", int),
            n_group=need("n_group", int),
            topk_group=need("topk_group", int),
            norm_topk_prob=need("norm_topk_prob", bool),
            routed_scaling_factor=need("routed_scaling_factor", float),
            rms_norm_eps=optional("rms_norm_eps", float, 1e-6),
            rope_theta=float(theta),
            yarn=yarn,
            rope_interleave=optional("rope_interleave", bool, True),
            attention_bias=optional("attention_bias", bool, False),
            tie_word_embeddings=optional("tie_word_embeddings", bool, False),
            defaults=tuple(defaults),
        )
        E, g = config.n_routed_experts, config.n_group
        if g == 0 or E % g or E // g < 2 or not 0 < config.topk_group <= g or config.num_experts_per_tok > E:
            raise ConfigError(
                f"DeepSeek routing is inconsistent: {E} experts in {g} groups (>= 2 per group), "
                f"topk_group {config.topk_group}, num_experts_per_tok {config.num_experts_per_tok}"
            )
        return config


def number_or_none(d: dict[str, Any], key: str) -> float | None:
    value = d.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ConfigError(f"DeepSeek rope {key!r} is {value!r}, must be a number")
    return None if value is None else float(value)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x * rsqrt(mean(x^2) + eps) * w, computed in fp32 and cast back before the weight (as HF does)."""
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def rope_tables(config: DeepseekConfig, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, dr/2] for ``positions`` [T] (YaRN inv_freq blend and cos/sin attention factor when configured)."""
    dr, base = config.qk_rope_head_dim, config.rope_theta
    inv_freq = 1.0 / base ** (torch.arange(0, dr, 2, dtype=torch.float32) / dr)  # [dr/2]
    scale = 1.0
    if (y := config.yarn) is not None:

        def correction_dim(rotations: float) -> float:
            return dr * math.log(y.original_max_position_embeddings / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low, high = correction_dim(y.beta_fast), correction_dim(y.beta_slow)
        if y.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dr - 1)
        ramp = ((torch.arange(dr // 2, dtype=torch.float32) - low) / ((high - low) or 0.001)).clamp(0, 1)
        extrapolate = 1 - ramp  # 1: keep the original frequency, 0: interpolate it by `factor`
        inv_freq = (inv_freq / y.factor) * (1 - extrapolate) + inv_freq * extrapolate
        if y.attention_factor is not None:
            scale = y.attention_factor
        elif y.mscale and y.mscale_all_dim:
            scale = yarn_mscale(y.factor, y.mscale) / yarn_mscale(y.factor, y.mscale_all_dim)
        else:
            scale = yarn_mscale(y.factor)
    angles = positions.float()[:, None] * inv_freq  # [T, dr/2]
    return angles.cos() * scale, angles.sin() * scale


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleave: bool) -> torch.Tensor:
    """Rotate x [T, ..., dr]. Interleaved pairs (x0,x1),(x2,x3).. come out de-interleaved: [evens' | odds'] (as HF)."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    cos = cos.view(cos.shape[0], *([1] * (x.dim() - 2)), -1)  # [T, 1.., dr/2] to broadcast over heads
    sin = sin.view(sin.shape[0], *([1] * (x.dim() - 2)), -1)
    x1, x2 = (x[..., 0::2], x[..., 1::2]) if interleave else x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def softmax_scale(config: DeepseekConfig) -> float:
    """(dn + dr)^-0.5, times mscale(factor, mscale_all_dim)^2 under YaRN with mscale_all_dim."""
    scale = float((config.qk_nope_head_dim + config.qk_rope_head_dim) ** -0.5)
    if config.yarn is not None and config.yarn.mscale_all_dim:
        scale *= yarn_mscale(config.yarn.factor, config.yarn.mscale_all_dim) ** 2
    return scale


class _Loader:
    """Fetches tensors by name, checks their shapes, casts them to the compute device and dtype."""

    def __init__(self, weights: WeightSource, device: str | torch.device, dtype: torch.dtype) -> None:
        self.weights, self.device, self.dtype = weights, device, dtype
        self.available = set(weights.names())

    def __call__(self, name: str, *shape: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        if name not in self.available:
            raise InputError(f"DeepSeek target weights have no tensor {name!r}")
        t = self.weights.get(name)
        if t.dtype in fp8.FP8_DTYPES:
            raise InputError(f"DeepSeek target tensor {name!r} is FP8 without its scales applied (reference/fp8.py)")
        if tuple(t.shape) != shape:
            raise InputError(f"DeepSeek target tensor {name!r} has shape {list(t.shape)}, expected {list(shape)}")
        return t.to(device=self.device, dtype=dtype or self.dtype)


def linear(load: _Loader, x: torch.Tensor, name: str, out: int, inp: int, bias: bool = False) -> torch.Tensor:
    b = load(f"{name}.bias", out) if bias else None
    return F.linear(x, load(f"{name}.weight", out, inp), b)


def mlp(load: _Loader, x: torch.Tensor, p: str, H: int, inter: int) -> torch.Tensor:
    """SwiGLU: down(silu(gate x) * up x)."""
    gate, up = linear(load, x, f"{p}.gate_proj", inter, H), linear(load, x, f"{p}.up_proj", inter, H)
    return linear(load, F.silu(gate) * up, f"{p}.down_proj", H, inter)


def query(c: DeepseekConfig, load: _Loader, x: torch.Tensor, p: str) -> tuple[torch.Tensor, torch.Tensor]:
    """MLA's query of x [T, H], through the q LoRA when the config has one: (q_nope [T, nh, dn], q_rope [T, nh, dr]
    before RoPE)."""
    T, H, nh = x.shape[0], c.hidden_size, c.num_attention_heads
    dn, dr = c.qk_nope_head_dim, c.qk_rope_head_dim
    if c.q_lora_rank is None:
        q = linear(load, x, f"{p}.q_proj", nh * (dn + dr), H)
    else:
        rq = c.q_lora_rank
        q_a = linear(load, x, f"{p}.q_a_proj", rq, H, c.attention_bias)
        q_latent = rms_norm(q_a, load(f"{p}.q_a_layernorm.weight", rq), 1e-6)  # HF: fixed eps on the LoRA norms
        q = linear(load, q_latent, f"{p}.q_b_proj", nh * (dn + dr), rq)
    q_nope, q_rope = torch.split(q.view(T, nh, dn + dr), [dn, dr], dim=-1)  # [T, nh*(dn+dr)] -> [T, nh, dn+dr]
    return q_nope, q_rope


def attention(
    c: DeepseekConfig,
    load: _Loader,
    x: torch.Tensor,
    p: str,
    cos: torch.Tensor,
    sin: torch.Tensor,
    segments: Sequence[tuple[int, int]],
) -> torch.Tensor:
    """Multi-head latent attention over x [T, H] -> [T, H], causal within each packed segment."""
    T, H, nh = x.shape[0], c.hidden_size, c.num_attention_heads
    dn, dr, dv, rkv, bias = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank, c.attention_bias
    q_nope, q_rope = query(c, load, x, p)

    kv_a = linear(load, x, f"{p}.kv_a_proj_with_mqa", rkv + dr, H, bias)  # [T, rkv+dr]
    latent, k_rope = torch.split(kv_a, [rkv, dr], dim=-1)  # [T, rkv], [T, dr] (one k_pe shared by all heads)
    latent = rms_norm(latent, load(f"{p}.kv_a_layernorm.weight", rkv), 1e-6)
    kv = linear(load, latent, f"{p}.kv_b_proj", nh * (dn + dv), rkv).view(T, nh, dn + dv)  # -> [T, nh, dn+dv]
    k_nope, v = torch.split(kv, [dn, dv], dim=-1)

    q_rope = apply_rope(q_rope, cos, sin, c.rope_interleave)  # [T, nh, dr]
    k_rope = apply_rope(k_rope, cos, sin, c.rope_interleave)  # [T, dr]
    q = torch.cat([q_nope, q_rope], dim=-1)  # [T, nh, dn+dr]
    k = torch.cat([k_nope, k_rope[:, None, :].expand(T, nh, dr)], dim=-1)  # [T, nh, dn+dr]

    scale = softmax_scale(c)
    out = torch.cat([_causal(q[a:b], k[a:b], v[a:b], scale) for a, b in segments]).reshape(T, nh * dv)  # [T, nh*dv]
    return linear(load, out, f"{p}.o_proj", H, nh * dv, bias)


def _causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """One sequence: q, k [S, nh, dn+dr], v [S, nh, dv] -> [S, nh, dv]."""
    S = q.shape[0]
    scores = torch.einsum("thd,shd->hts", q, k) * scale  # [nh, S, S]
    causal = torch.ones(S, S, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.einsum("hts,shd->thd", probs, v)


def route(c: DeepseekConfig, load: _Loader, x: torch.Tensor, p: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Sigmoid scores, group-limited top-k on scores + e_score_correction_bias; returns weights [T, k], ids [T, k]."""
    E, g = c.n_routed_experts, c.n_group
    logits = F.linear(x.float(), load(f"{p}.gate.weight", E, c.hidden_size).float())  # [T, E] in fp32
    scores = logits.sigmoid()
    choice = scores + load(f"{p}.gate.e_score_correction_bias", E, dtype=torch.float32)  # bias picks, never weighs
    group_score = choice.view(-1, g, E // g).topk(2, dim=-1).values.sum(-1)  # [T, E] -> [T, g, E/g] -> [T, g]
    groups = group_score.topk(c.topk_group, dim=-1, sorted=False).indices  # [T, topk_group]
    group_mask = torch.zeros_like(group_score).scatter_(1, groups, 1.0).bool()  # [T, g]
    expert_mask = group_mask[:, :, None].expand(-1, g, E // g).reshape(-1, E)  # [T, g, E/g] -> [T, E]
    ids = choice.masked_fill(~expert_mask, float("-inf")).topk(c.num_experts_per_tok, dim=-1, sorted=False).indices
    weights = scores.gather(1, ids)  # [T, k]
    if c.norm_topk_prob:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    return weights * c.routed_scaling_factor, ids


def moe(c: DeepseekConfig, load: _Loader, x: torch.Tensor, p: str) -> torch.Tensor:
    """sum_k w_k * expert_{id_k}(x) + shared_experts(x); experts loaded one at a time, only those routed to."""
    H, inter = c.hidden_size, c.moe_intermediate_size
    weights, ids = route(c, load, x, p)
    out = torch.zeros_like(x)
    for e in torch.unique(ids).tolist():  # ascending, like HF
        token, slot = torch.where(ids == e)
        y = mlp(load, x[token], f"{p}.experts.{e}", H, inter)  # [tokens routed to e, H]
        out.index_add_(0, token, (y * weights[token, slot, None]).to(x.dtype))
    if c.n_shared_experts:
        out = out + mlp(load, x, f"{p}.shared_experts", H, inter * c.n_shared_experts)
    return out


@torch.no_grad()
def forward_streaming(
    config: DeepseekConfig,
    weights: WeightSource,
    input_ids: torch.Tensor,
    *,
    capture: Iterable[int] = (),
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    lengths: Sequence[int] | None = None,
    on_layer: Callable[[int], None] | None = None,
) -> TargetOutput:
    """Run the target layer by layer over ``input_ids`` ([T] or [1, T]); capture boundaries 0..N (N: before norm).

    ``lengths``: several sequences packed end to end (reference/packing.py); ``on_layer(i)`` after layer ``i``."""
    c, N = config, config.num_hidden_layers
    wanted = set(capture)
    if bad := sorted(j for j in wanted if not 0 <= j <= N):
        raise InputError(f"capture boundaries {bad} are outside 0..{N} for this {N}-layer DeepSeek target")
    packed = pack(input_ids, lengths, c.vocab_size, device)
    load = _Loader(weights, device, dtype)
    H = c.hidden_size

    x = load("model.embed_tokens.weight", c.vocab_size, H)[packed.ids]  # [T, H]
    cos, sin = (t.to(device) for t in rope_tables(c, packed.positions))
    hidden: dict[int, torch.Tensor] = {}
    for i in range(N):
        if i in wanted:
            hidden[i] = x
        p = f"model.layers.{i}"
        h = rms_norm(x, load(f"{p}.input_layernorm.weight", H), c.rms_norm_eps)
        x = x + attention(c, load, h, f"{p}.self_attn", cos, sin, packed.segments)
        y = rms_norm(x, load(f"{p}.post_attention_layernorm.weight", H), c.rms_norm_eps)
        dense = i < c.first_k_dense_replace
        x = x + (mlp(load, y, f"{p}.mlp", H, c.intermediate_size) if dense else moe(c, load, y, f"{p}.mlp"))
        if on_layer is not None:
            on_layer(i)
    if N in wanted:
        hidden[N] = x
    final = rms_norm(x, load("model.norm.weight", H), c.rms_norm_eps)
    head = "model.embed_tokens.weight" if c.tie_word_embeddings else "lm_head.weight"
    logits = F.linear(final, load(head, c.vocab_size, H))  # [T, V]
    return TargetOutput(hidden=hidden, logits=logits, final_hidden=final)
