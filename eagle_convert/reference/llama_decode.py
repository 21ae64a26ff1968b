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
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from eagle_convert.errors import InputError
from eagle_convert.reference.llama import (
    LlamaConfig,
    WeightSource,
    _expert_loader,
    _linear,
    apply_rope,
    layer_shapes,
    mlp,
    rms_norm,
    rope_cos_sin,
    sparse_mlp,
)
from eagle_convert.reference.stream import Group, LayerStream


@dataclass(frozen=True)
class Generated:
    """Each prompt and its continuation (through ``eos`` when it came), and what the target computed on the way:
    ``hidden[i][j]`` is boundary j of sequence i ``[T_i - 1, H]`` (every position but the last token's) and
    ``greedy[i]`` the target's argmax token after each of those positions (the next text token inside the prompt)."""

    sequences: list[list[int]]
    prompt_lengths: list[int]
    hidden: list[dict[int, torch.Tensor]]
    greedy: list[list[int]]


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


def step_groups(cfg: LlamaConfig) -> list[Group]:
    """What one step reads, in order: each decoder layer's tensors (experts aside), then the final norm and lm_head."""
    layers: list[Group] = [
        {f"model.layers.{i}.{k}": shape for k, shape in layer_shapes(cfg, i).items()} for i in range(cfg.num_layers)
    ]
    head = "model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
    return [*layers, {"model.norm.weight": (cfg.hidden_size,), head: (cfg.vocab_size, cfg.hidden_size)}]


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
    _check(cfg, prompts, new_tokens, wanted)
    nh, nkv, hd, H = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size
    stream = LayerStream(weights, device, dtype)
    groups = step_groups(cfg)
    draws = torch.Generator().manual_seed(sample_seed) if sample_seed is not None else None

    width = max(len(p) for p in prompts)
    pad = [width - len(p) for p in prompts]
    # Fixed-size buffers for what grows with the text (the cache, the captured states), written in place, and
    # attention that never copies the cache per query head: a tensor grown by a token each step is a new size each
    # step, and the allocator's heap fragments (6 GB resident for 400 MB of captured states on SmolLM2).
    total = width + new_tokens - 1  # positions the target runs: the prompts, then each new token but the last
    ids = torch.tensor([[0] * n + list(p) for n, p in zip(pad, prompts, strict=True)])  # [B, W] on the CPU
    valid = torch.ones(b, total, dtype=torch.bool, device=device)  # [B, L]: padding slots are never attended to
    for row, n in enumerate(pad):
        valid[row, :n] = False
    positions = (valid[:, :width].long().cumsum(-1) - 1).clamp(min=0).cpu()  # [B, W]
    slots = torch.arange(total, device=device)
    keys = [torch.zeros(b, nkv, total, hd, device=device, dtype=dtype) for _ in range(n_layers)]
    values = [torch.zeros(b, nkv, total, hd, device=device, dtype=dtype) for _ in range(n_layers)]
    kept = {j: torch.zeros(b, total, H, device=device, dtype=dtype) for j in wanted}
    tokens: list[torch.Tensor] = []  # [B] per step: the next token of each sequence
    argmax: list[torch.Tensor] = []  # [B] per step: the target's argmax (the same as tokens when greedy)
    past = 0
    try:
        for step in range(new_tokens):
            s = ids.shape[1]
            cos, sin = rope_cos_sin(cfg, positions.reshape(-1), device, dtype)  # [B*S, hd]
            seen = past + s  # the slots filled once these tokens are in: attention reads the cache up to here
            here, filled = slots[past:seen], slots[:seen]
            # causal over the valid slots; a padding slot sees itself only
            mask = ((filled[None, :] <= here[:, None]) & valid[:, None, :seen]) | (filled[None, :] == here[:, None])
            x = _rows(cfg, weights, ids, device, dtype)  # [B, S, H]
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
            past = seen
            final = next(layers)
            norm, head = final.values()  # step_groups' order: the norm, then lm_head
            logits = F.linear(rms_norm(x[:, -1], norm, cfg.rms_norm_eps), head).float().cpu()  # [B, V]
            del final, norm, head
            layers.close()  # the walk ends: the head's slot released
            best = logits.argmax(-1)  # [B]
            argmax.append(best)
            if draws is None:
                tokens.append(best)
            else:  # Target.generate's draws: one per sequence, in batch order
                tokens.append(torch.cat([torch.multinomial(row.softmax(-1), 1, generator=draws) for row in logits]))
            ids = tokens[-1].view(b, 1)  # [B, 1]
            positions = positions[:, -1:] + 1
            if on_step is not None:
                on_step(step)
            if eos is not None and all(eos in t for t in torch.stack(tokens, dim=-1).tolist()):
                break
    finally:
        stream.close()
    new, best_after = torch.stack(tokens, dim=-1).tolist(), torch.stack(argmax, dim=-1).tolist()  # [B, steps run]
    sequences, hidden, greedy = [], [], []
    for row, (prompt, cont) in enumerate(zip(prompts, new, strict=True)):
        cont = cont[: cont.index(eos) + 1] if eos is not None and eos in cont else cont
        t = len(prompt) + len(cont)
        sequences.append(list(prompt) + cont)
        hidden.append({j: kept[j][row, pad[row] : pad[row] + t - 1] for j in wanted})
        greedy.append(list(prompt[1:]) + best_after[row][: len(cont)])
    return Generated(sequences, [len(p) for p in prompts], hidden, greedy)


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


def _check(cfg: LlamaConfig, prompts: Sequence[Sequence[int]], new_tokens: int, wanted: list[int]) -> None:
    n, vocab = cfg.num_layers, cfg.vocab_size
    if bad := [j for j in wanted if not 0 <= j <= n]:
        raise InputError(f"capture boundaries {bad} must lie in 0..{n} (N = {n} layers)")
    if new_tokens < 1:
        raise InputError(f"new_tokens is {new_tokens}; generation needs at least 1")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise InputError("generation needs at least one prompt, and every prompt at least one token")
    if any(not 0 <= t < vocab for p in prompts for t in p):
        raise InputError(f"prompt token ids must lie in 0..{vocab - 1} (the target's vocabulary)")
