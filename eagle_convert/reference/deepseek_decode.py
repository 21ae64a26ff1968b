"""KV-cached generation for the reference DeepSeek-V3 / Kimi-K2 target (MLA), capturing hidden states on the way.

The decoder layer of ``reference/deepseek.py`` (its norms, YaRN RoPE, routing and experts, read through the same
per-tensor loader) run over a left-padded batch: the prompts in one prefill, then one token per sequence per step.
Each step reads the weights once for the whole batch, layer by layer through reference/stream.py (the next layer's
attention, norms, router and shared experts read while the current one computes; nothing stays resident but the
caches and the embedding rows a step takes), and of a MoE layer only the experts some token was routed to, as they
are routed; padding never reaches the experts. Greedy (argmax) or sampled at temperature 1 with the draws of
``probe/target.Target.generate``.

The cache is MLA's own, as DeepSeek-V3's ``inference/model.py`` keeps it (``attn_impl="absorb"``): per layer and
position the normalized kv latent ``c`` ``[rkv]`` and the rotated key part shared by all heads ``[dr]``, 576 numbers
per position on DeepSeek-V3 where expanded keys and values take nh * (dn + dr + dv) = 40,960. Attention runs in the
weight-absorbed form: with kv_b_proj = [W_uk; W_uv] per head (no bias), ``q_nope . (W_uk c) = (W_uk^T q_nope) . c``
and ``sum_s p_s W_uv c_s = W_uv (sum_s p_s c_s)``, so each step reads the latents once, never expanding the cache.
This is reference/deepseek.py's attention up to float rounding (tests/test_reference_deepseek_decode.py: the same
tokens as the uncached path, states equal at float32 tolerance).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F

from eagle_convert.errors import InputError
from eagle_convert.reference import fp8
from eagle_convert.reference.decoding import Choices, Generated, Padded, check_request
from eagle_convert.reference.deepseek import (
    DeepseekConfig,
    WeightSource,
    _Loader,
    apply_rope,
    linear,
    mlp,
    moe,
    query,
    rms_norm,
    rope_tables,
    softmax_scale,
)
from eagle_convert.reference.stream import Group, LayerStream

ATTENTION_ELEMENTS = 2**26
"""Scores (or absorbed queries) computed at once: the batch's rows go through attention in groups of at most this
many elements, so a long prefill holds no [B, S, nh, L] tensor."""


@torch.no_grad()
def generate(
    cfg: DeepseekConfig,
    weights: WeightSource,
    prompts: Sequence[Sequence[int]],
    new_tokens: int,
    *,
    capture: Iterable[int] = (),
    eos: int | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    on_step: Callable[[int], None] | None = None,
    sample_seed: int | None = None,
) -> Generated:
    """Continuations of ``prompts`` (all in one batch), ``new_tokens`` each unless ``eos`` ends them: greedy, or with
    ``sample_seed`` drawn from the softmax of each sequence's logits in batch order from one generator seeded so.
    ``on_step(step)`` after each step."""
    c, n_layers, b, H = cfg, cfg.num_hidden_layers, len(prompts), cfg.hidden_size
    wanted = sorted(set(capture))
    check_request(n_layers, c.vocab_size, prompts, new_tokens, wanted)
    load = _Streamed(weights, device, dtype)
    table = _embedding(c, load)  # as stored (a mapped file gives up only the rows' pages): each step takes its rows
    head_name = "model.embed_tokens.weight" if c.tie_word_embeddings else "lm_head.weight"
    groups = step_groups(c, load.available, head_name)
    stream = LayerStream(weights, device, None)  # as stored: the loader casts (a float32 router bias stays float32)
    choices = Choices(sample_seed)
    batch = Padded.of(prompts, new_tokens, device)
    total = batch.total
    # Fixed-size buffers for what grows with the text, written in place (see reference/llama_decode.py).
    latents = [torch.zeros(b, total, c.kv_lora_rank, device=device, dtype=dtype) for _ in range(n_layers)]
    rotated = [torch.zeros(b, total, c.qk_rope_head_dim, device=device, dtype=dtype) for _ in range(n_layers)]
    kept = {j: torch.zeros(b, total, H, device=device, dtype=dtype) for j in wanted}
    try:
        for step in range(new_tokens):
            s, past = batch.ids.shape[1], batch.past
            seen, mask = batch.mask()  # attention reads the cache up to ``seen``
            live = batch.valid[:, past:seen].reshape(-1).nonzero().squeeze(-1)  # [<= B*S] rows that are not padding
            cos, sin = (t.to(device) for t in rope_tables(c, batch.positions.reshape(-1)))  # [B*S, dr/2]
            x = table[batch.ids.reshape(-1)].to(device=device, dtype=dtype)  # [B*S, H]
            layers = stream.walk(groups)
            for i in range(n_layers):
                load.current = next(layers)
                if i in kept:
                    kept[i][:, past:seen] = x.view(b, s, H)
                p = f"model.layers.{i}"
                h = rms_norm(x, load(f"{p}.input_layernorm.weight", H), c.rms_norm_eps)
                x = x + attention(c, load, h, f"{p}.self_attn", cos, sin, (latents[i], rotated[i]), past, mask)
                y = rms_norm(x, load(f"{p}.post_attention_layernorm.weight", H), c.rms_norm_eps)
                if i < c.first_k_dense_replace:
                    x = x + mlp(load, y, f"{p}.mlp", H, c.intermediate_size)
                else:
                    x = x.index_add(0, live, moe(c, load, y[live], f"{p}.mlp"))
            if n_layers in kept:
                kept[n_layers][:, past:seen] = x.view(b, s, H)
            load.current = next(layers)
            last = rms_norm(x.view(b, s, H)[:, -1], load("model.norm.weight", H), c.rms_norm_eps)  # [B, H]
            logits = F.linear(last, load(head_name, c.vocab_size, H)).float().cpu()  # [B, V]
            load.current = {}
            layers.close()  # the walk ends: the head's slot released
            batch.advance(seen, choices.pick(logits))
            if on_step is not None:
                on_step(step)
            if choices.ended(eos):
                break
    finally:
        stream.close()
    return choices.result(prompts, batch.pad, kept, eos)


def attention(
    c: DeepseekConfig,
    load: _Loader,
    x: torch.Tensor,
    p: str,
    cos: torch.Tensor,
    sin: torch.Tensor,
    cache: tuple[torch.Tensor, torch.Tensor],
    past: int,
    mask: torch.Tensor,
) -> torch.Tensor:
    """Multi-head latent attention of x [B*S, H] (S new positions per sequence after ``past`` cached ones) -> [B*S, H].

    Writes the new positions' latents and rotated keys into ``cache`` (``[B, L_max, rkv]``, ``[B, L_max, dr]``) and
    attends over its first L slots with ``mask`` [B, S, L] (True = may attend)."""
    b, s, length = mask.shape
    T, H, nh = x.shape[0], c.hidden_size, c.num_attention_heads
    dn, dr, dv, rkv, bias = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank, c.attention_bias
    q_nope, q_rope = query(c, load, x, p)
    q_rope = apply_rope(q_rope, cos, sin, c.rope_interleave)  # [T, nh, dr]

    kv_a = linear(load, x, f"{p}.kv_a_proj_with_mqa", rkv + dr, H, bias)  # [T, rkv+dr]
    latent, k_rope = torch.split(kv_a, [rkv, dr], dim=-1)  # [T, rkv], [T, dr] (one k_pe shared by all heads)
    latents, rotated = cache
    latents[:, past : past + s] = rms_norm(latent, load(f"{p}.kv_a_layernorm.weight", rkv), 1e-6).view(b, s, rkv)
    rotated[:, past : past + s] = apply_rope(k_rope, cos, sin, c.rope_interleave).view(b, s, dr)

    w_kv = load(f"{p}.kv_b_proj.weight", nh * (dn + dv), rkv).view(nh, dn + dv, rkv)  # [nh*(dn+dv), rkv] -> per head
    w_uk, w_uv = torch.split(w_kv, [dn, dv], dim=1)  # [nh, dn, rkv], [nh, dv, rkv]
    q_nope = q_nope.reshape(b, s, nh, dn)  # [T, nh, dn] -> [B, S, nh, dn]
    q_rope = q_rope.reshape(b, s * nh, dr)  # [T, nh, dr] -> [B, S*nh, dr]
    rows = max(1, ATTENTION_ELEMENTS // (s * nh * max(length, rkv)))  # sequences per group
    out = torch.cat(
        [
            _attend(
                q_nope[a : a + rows],
                q_rope[a : a + rows],
                latents[a : a + rows, :length],
                rotated[a : a + rows, :length],
                mask[a : a + rows],
                w_uk,
                w_uv,
                softmax_scale(c),
            )
            for a in range(0, b, rows)
        ]
    ).reshape(T, nh * dv)  # [B, S, nh, dv] -> [T, nh*dv]
    return linear(load, out, f"{p}.o_proj", H, nh * dv, bias)


def _attend(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    latents: torch.Tensor,
    rotated: torch.Tensor,
    mask: torch.Tensor,
    w_uk: torch.Tensor,
    w_uv: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Absorbed attention of ``g`` sequences: q_nope [g, S, nh, dn], q_rope [g, S*nh, dr] against latents
    [g, L, rkv] and rotated keys [g, L, dr] under mask [g, S, L] -> [g, S, nh, dv]."""
    g, s, nh, _ = q_nope.shape
    length, rkv = latents.shape[1], latents.shape[2]
    absorbed = torch.einsum("gshd,hdc->gshc", q_nope, w_uk).reshape(g, s * nh, rkv)  # W_uk^T q_nope: [g, S*nh, rkv]
    scores = absorbed @ latents.transpose(1, 2) + q_rope @ rotated.transpose(1, 2)  # [g, S*nh, L]
    scores = (scores * scale).view(g, s, nh, length).masked_fill(~mask[:, :, None], -math.inf)  # [g, S, nh, L]
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q_nope.dtype)
    mixed = probs.view(g, s * nh, length) @ latents  # sum_s p_s c_s: [g, S*nh, rkv]
    return torch.einsum("gshc,hvc->gshv", mixed.view(g, s, nh, rkv), w_uv)  # W_uv (sum_s p_s c_s): [g, S, nh, dv]


class _Streamed(_Loader):
    """The loader of reference/deepseek.py serving the group at hand from the stream (``current``, read one group
    ahead), and anything else (the routed experts, the embedding) when it is asked for."""

    def __init__(self, weights: WeightSource, device: str | torch.device, dtype: torch.dtype) -> None:
        super().__init__(weights, device, dtype)
        self.current: dict[str, torch.Tensor] = {}

    def __call__(self, name: str, *shape: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        t = self.current.get(name)
        if t is None:
            return super().__call__(name, *shape, dtype=dtype)
        if tuple(t.shape) != shape:
            raise InputError(f"DeepSeek target tensor {name!r} has shape {list(t.shape)}, expected {list(shape)}")
        return t.to(device=self.device, dtype=dtype or self.dtype)


def step_groups(c: DeepseekConfig, names: set[str], head_name: str) -> list[Group]:
    """What one step reads ahead, in order: each layer's tensors but its routed experts (read as tokens are routed
    to them) and FP8 scales (read with their weights), then the final norm and the head."""
    layers: list[dict[str, tuple[int, ...] | None]] = [{} for _ in range(c.num_hidden_layers)]
    for name in sorted(names):
        parts = name.split(".", 3)  # model, layers, i, rest
        if parts[:2] != ["model", "layers"] or not parts[2].isdigit() or int(parts[2]) >= c.num_hidden_layers:
            continue
        if ".experts." not in name and not name.endswith(fp8.SCALE_SUFFIX):
            layers[int(parts[2])][name] = None  # shapes checked by the loader, where they are used
    return [*layers, {"model.norm.weight": None, head_name: None}]


def _embedding(c: DeepseekConfig, load: _Loader) -> torch.Tensor:
    """The input embedding [V, H] as stored (read once; a step casts only the rows it takes)."""
    name = "model.embed_tokens.weight"
    if name not in load.available:
        raise InputError(f"DeepSeek target weights have no tensor {name!r}")
    table = load.weights.get(name)
    if tuple(table.shape) != (c.vocab_size, c.hidden_size):
        expected = [c.vocab_size, c.hidden_size]
        raise InputError(f"DeepSeek target tensor {name!r} has shape {list(table.shape)}, expected {expected}")
    return table
