"""KV-cached generation for the reference Llama-family target, greedy or sampled, capturing hidden states on the way.

The same layer as ``reference/llama.py`` (its norms, RoPE, MLPs and expert routing), run over a left-padded batch:
the prompts in one prefill, then one token per sequence per step against the cached keys and values. Every
boundary in ``capture`` is kept for every position that gets computed, so the probe needs no second pass over the
target's own text.

Each step (the prefill and every new token) streams the weights once for the whole batch (reference/stream.py):
the embedding rows the step needs, then layer by layer with the next layer's read overlapping the current one's
compute, then the final norm and lm_head. Nothing stays resident but the KV caches and the captured states (in the
compute dtype), so the memory is two layers plus the caches, whatever the depth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F

from eagle_convert.errors import InputError
from eagle_convert.reference.decoding import Choices, Generated, Padded, check_request
from eagle_convert.reference.llama import (
    LlamaConfig,
    WeightSource,
    _expert_loader,
    _linear,
    apply_rope,
    layer_groups,
    mlp,
    rms_norm,
    rope_cos_sin,
    sparse_mlp,
)
from eagle_convert.reference.stream import LayerStream


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
def generate(
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
    sample_seed: int | None = None,
) -> Generated:
    """Continuations of ``prompts`` (all in one batch), ``new_tokens`` each unless ``eos`` ends them: greedy, or with
    ``sample_seed`` drawn from the softmax of each sequence's float32 logits in batch order from one generator seeded
    so (``probe/target.Target.generate``'s draws). ``on_step(step)`` after each step."""
    wanted, n_layers, b = sorted(set(capture)), cfg.num_layers, len(prompts)
    check_request(n_layers, cfg.vocab_size, prompts, new_tokens, wanted)
    nh, nkv, hd, H = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size
    stream = LayerStream(weights, device, dtype)
    groups = layer_groups(cfg)
    choices = Choices(sample_seed)
    batch = Padded.of(prompts, new_tokens, device)
    total = batch.total
    # Fixed-size buffers for what grows with the text (the cache, the captured states), written in place, and
    # attention that never copies the cache per query head: a tensor grown by a token each step is a new size each
    # step, and the allocator's heap fragments (6 GB resident for 400 MB of captured states on SmolLM2).
    keys = [torch.zeros(b, nkv, total, hd, device=device, dtype=dtype) for _ in range(n_layers)]
    values = [torch.zeros(b, nkv, total, hd, device=device, dtype=dtype) for _ in range(n_layers)]
    kept = {j: torch.zeros(b, total, H, device=device, dtype=dtype) for j in wanted}
    try:
        for step in range(new_tokens):
            s, past = batch.ids.shape[1], batch.past
            cos, sin = rope_cos_sin(cfg, batch.positions.reshape(-1), device, dtype)  # [B*S, hd]
            seen, mask = batch.mask()  # attention reads the cache up to ``seen``
            x = _rows(cfg, weights, batch.ids, device, dtype)  # [B, S, H]
            layers = stream.walk(groups)
            for i in range(n_layers):
                if i in kept:
                    kept[i][:, past:seen] = x
                w = {name.removeprefix(f"model.layers.{i}."): t for name, t in next(layers).items()}
                y = rms_norm(x, w["input_layernorm.weight"], cfg.rms_norm_eps).reshape(b * s, -1)
                q = _linear(y, w, "self_attn.q_proj").view(b * s, nh, hd)
                k = _linear(y, w, "self_attn.k_proj").view(b * s, nkv, hd)
                v = _linear(y, w, "self_attn.v_proj").view(b, s, nkv, hd).transpose(1, 2)  # [B, nkv, S, hd]
                if cfg.qk_norm:
                    q = rms_norm(q, w["self_attn.q_norm.weight"], cfg.rms_norm_eps)
                    k = rms_norm(k, w["self_attn.k_norm.weight"], cfg.rms_norm_eps)
                q = apply_rope(q, cos, sin).view(b, s, nh, hd).transpose(1, 2)  # [B, nh, S, hd]
                keys[i][:, :, past:seen] = apply_rope(k, cos, sin).view(b, s, nkv, hd).transpose(1, 2)
                values[i][:, :, past:seen] = v
                out = _attend(q, keys[i][:, :, :seen], values[i][:, :, :seen], mask, hd)
                out = out.transpose(1, 2).reshape(b * s, nh * hd)  # [B, nh, S, hd] -> [B*S, nh*hd]
                h = x.reshape(b * s, -1) + _linear(out, w, "self_attn.o_proj")
                z = rms_norm(h, w["post_attention_layernorm.weight"], cfg.rms_norm_eps)
                if "mlp.gate.weight" in w:  # a sparse layer: experts read as tokens are routed to them
                    h = h + sparse_mlp(cfg, z, w, _expert_loader(cfg, weights, i, device, dtype))
                else:
                    h = h + mlp(z, w)
                x = h.view(b, s, H)
                del w
            if n_layers in kept:
                kept[n_layers][:, past:seen] = x
            final = next(layers)
            norm, head = final.values()  # layer_groups' order: the norm, then lm_head
            logits = F.linear(rms_norm(x[:, -1], norm, cfg.rms_norm_eps), head).float().cpu()  # [B, V]
            del final, norm, head
            layers.close()  # the walk ends: the head's slot released
            batch.advance(seen, choices.pick(logits))
            if on_step is not None:
                on_step(step)
            if choices.ended(eos):
                break
    finally:
        stream.close()
    return choices.result(prompts, batch.pad, kept, eos)


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
    """:func:`generate` without sampling (the name bench/bench_probe.py and older callers use)."""
    return generate(
        cfg, weights, prompts, new_tokens, capture=capture, eos=eos, device=device, dtype=dtype, on_step=on_step
    )


def _rows(
    cfg: LlamaConfig, weights: WeightSource, ids: torch.Tensor, device: str | torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """The embedding rows of ``ids`` ``[B, S]`` -> ``[B, S, H]`` (a mapped table gives up only the pages read)."""
    name = "model.embed_tokens.weight"
    table = weights.get(name)
    if tuple(table.shape) != (cfg.vocab_size, cfg.hidden_size):
        expected = [cfg.vocab_size, cfg.hidden_size]
        raise InputError(f"tensor {name!r} has shape {list(table.shape)}, the config implies {expected}")
    return table[ids].to(device=device, dtype=dtype)
