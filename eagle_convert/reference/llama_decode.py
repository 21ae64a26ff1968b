"""Greedy generation with a KV cache for the reference Llama-family target, capturing hidden states on the way.

The same layer as ``reference/llama.py`` (its norms, RoPE, MLPs and expert routing), run over a left-padded batch:
the prompts in one prefill, then one token per sequence per step against the cached keys and values. Every
boundary in ``capture`` is kept for every position that gets computed, so the probe needs no second pass over the
target's own text. All layers' weights stay in memory for the whole generation (one read from disk).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from eagle_convert.reference.llama import (
    LlamaConfig,
    WeightSource,
    _expert_loader,
    _linear,
    _load,
    _load_layer,
    apply_rope,
    mlp,
    rms_norm,
    rope_cos_sin,
    sparse_mlp,
)


@dataclass(frozen=True)
class Generated:
    """Each prompt and its greedy continuation (through ``eos`` when it came), and what the target computed on the
    way: ``hidden[i][j]`` is boundary j of sequence i ``[T_i - 1, H]`` (every position but the last token's)."""

    sequences: list[list[int]]
    prompt_lengths: list[int]
    hidden: list[dict[int, torch.Tensor]]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, hd: int) -> torch.Tensor:
    """``q`` [B, nh, S, hd] against the cache ``k``/``v`` [B, nkv, L, hd] (each KV head serves nh / nkv query heads)
    with ``mask`` [B, S, L] (True = may attend)."""
    b, nh, s, _ = q.shape
    nkv, length = k.shape[1], k.shape[2]
    g = nh // nkv
    q = q.reshape(b, nkv, g * s, hd)  # a KV head's query heads side by side
    scores = (q @ k.transpose(-1, -2)) * hd**-0.5  # [B, nkv, g*S, L]
    scores = scores.view(b, nkv, g, s, length).masked_fill(~mask[:, None, None], -math.inf)
    out = torch.softmax(scores.float(), dim=-1).to(q.dtype).view(b, nkv, g * s, length) @ v  # [B, nkv, g*S, hd]
    return out.view(b, nh, s, hd)


@torch.no_grad()
def generate_greedy(
    cfg: LlamaConfig,
    weights: WeightSource,
    prompts: Sequence[Sequence[int]],
    new_tokens: int,
    *,
    capture: Iterable[int] = (),
    eos: int | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    on_step: Callable[[int], None] | None = None,
) -> Generated:
    """Greedy continuations of ``prompts`` (all in one batch), ``new_tokens`` each unless ``eos`` ends them."""
    wanted, n_layers, b = sorted(set(capture)), cfg.num_layers, len(prompts)
    nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    layers = [_load_layer(cfg, weights, i, device, dtype) for i in range(n_layers)]
    experts = [_expert_loader(cfg, weights, i, device, dtype) for i in range(n_layers)]
    table = _load(weights, "model.embed_tokens.weight", (cfg.vocab_size, cfg.hidden_size), device, dtype)
    norm = _load(weights, "model.norm.weight", (cfg.hidden_size,), device, dtype)
    head_name = "model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
    head = table if cfg.tie_word_embeddings else _load(weights, head_name, tuple(table.shape), device, dtype)

    width = max(len(p) for p in prompts)
    pad = [width - len(p) for p in prompts]
    # Fixed-size buffers for what grows with the text (the cache, the captured states), written in place, and
    # attention that never copies the cache per query head: a tensor grown by a token each step is a new size each
    # step, and the allocator's heap fragments (6 GB resident for 400 MB of captured states on SmolLM2).
    total = width + max(new_tokens - 1, 0)  # positions the target runs: the prompts, then each new token but the last
    ids = torch.tensor([[0] * n + list(p) for n, p in zip(pad, prompts, strict=True)], device=device)  # [B, W]
    valid = torch.ones(b, total, dtype=torch.bool, device=device)  # [B, L]: padding slots are never attended to
    for row, n in enumerate(pad):
        valid[row, :n] = False
    positions = (valid[:, :width].long().cumsum(-1) - 1).clamp(min=0).cpu()  # [B, W]
    slots = torch.arange(total, device=device)
    keys = [torch.zeros(b, nkv, total, hd, device=device, dtype=dtype) for _ in range(n_layers)]
    values = [torch.zeros(b, nkv, total, hd, device=device, dtype=dtype) for _ in range(n_layers)]
    kept = {j: torch.zeros(b, total, cfg.hidden_size, device=device, dtype=dtype) for j in wanted}
    tokens: list[torch.Tensor] = []
    past = 0
    for step in range(new_tokens):
        s = ids.shape[1]
        cos, sin = rope_cos_sin(cfg, positions.reshape(-1), device, dtype)  # [B*S, hd]
        seen = past + s  # the slots filled once these tokens are in: attention reads the cache up to here
        here, filled = slots[past:seen], slots[:seen]
        # causal over the valid slots; a padding slot sees itself only
        mask = ((filled[None, :] <= here[:, None]) & valid[:, None, :seen]) | (filled[None, :] == here[:, None])
        x = table[ids]  # [B, S, H]
        for i in range(n_layers):
            if i in kept:
                kept[i][:, past : past + s] = x
            w = layers[i]
            y = rms_norm(x, w["input_layernorm.weight"], cfg.rms_norm_eps).reshape(b * s, -1)
            q = _linear(y, w, "self_attn.q_proj").view(b * s, nh, hd)
            k = _linear(y, w, "self_attn.k_proj").view(b * s, nkv, hd)
            v = _linear(y, w, "self_attn.v_proj").view(b, s, nkv, hd).transpose(1, 2)  # [B, nkv, S, hd]
            if cfg.qk_norm:
                q = rms_norm(q, w["self_attn.q_norm.weight"], cfg.rms_norm_eps)
                k = rms_norm(k, w["self_attn.k_norm.weight"], cfg.rms_norm_eps)
            q = apply_rope(q, cos, sin).view(b, s, nh, hd).transpose(1, 2)  # [B, nh, S, hd]
            keys[i][:, :, past : past + s] = apply_rope(k, cos, sin).view(b, s, nkv, hd).transpose(1, 2)
            values[i][:, :, past : past + s] = v
            k_used, v_used = keys[i][:, :, :seen], values[i][:, :, :seen]
            out = _attend(q, k_used, v_used, mask, hd).transpose(1, 2).reshape(b * s, nh * hd)  # [B*S, nh*hd]
            h = x.reshape(b * s, -1) + _linear(out, w, "self_attn.o_proj")
            z = rms_norm(h, w["post_attention_layernorm.weight"], cfg.rms_norm_eps)
            h = h + (sparse_mlp(cfg, z, w, experts[i]) if "mlp.gate.weight" in w else mlp(z, w))
            x = h.view(b, s, -1)
        if n_layers in kept:
            kept[n_layers][:, past : past + s] = x
        past += s
        last = rms_norm(x[:, -1], norm, cfg.rms_norm_eps)  # [B, H]
        ids = F.linear(last, head).argmax(-1, keepdim=True)  # [B, 1]
        tokens.append(ids.cpu())
        positions = positions[:, -1:] + 1
        if on_step is not None:
            on_step(step)
        if eos is not None and all(eos in t for t in torch.cat(tokens, dim=-1).tolist()):
            break
    new = torch.cat(tokens, dim=-1).tolist()  # [B, steps run]
    stacked = {j: kept[j][:, :past] for j in wanted}  # [B, W + steps - 1, H]
    sequences, hidden = [], []
    for row, (p, cont) in enumerate(zip(prompts, new, strict=True)):
        cont = cont[: cont.index(eos) + 1] if eos is not None and eos in cont else cont
        t = len(p) + len(cont)
        sequences.append(list(p) + cont)
        hidden.append({j: stacked[j][row, pad[row] : pad[row] + t - 1] for j in wanted})
    return Generated(sequences, [len(p) for p in prompts], hidden)
