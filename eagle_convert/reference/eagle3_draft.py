"""Reference EAGLE3 draft in pure PyTorch: the forward pass of docs/FORMATS.md section 1, read like the equations.

Matches the EAGLE3 draft classes of the engine records (``releases/``: ``LlamaForCausalLMEagle3``,
``Eagle3DeepseekV2ForCausalLM``, ``Eagle3LlamaForCausalLM``, ``Eagle3Qwen3ForCausalLM``): MHA attention as
transformers' ``LlamaAttention`` / ``Qwen3Attention`` (rotate-half RoPE incl. linear/llama3/yarn scaling, GQA, explicit
head_dim, optional per-head q_norm/k_norm) and MLA attention as transformers' ``DeepseekV3Attention``
(interleaved-pair RoPE on the ``dr`` slice, YaRN softmax scale). Layer 0 (``midlayer.``) has first projections that
take the 2H input ``cat([input_layernorm(embed), hidden_norm(h)])``; a draft of L > 1 layers continues with plain
pre-norm decoder layers over H (``layers.{i}.``: ``x + attn(input_layernorm(x))``, then the MLP), as the speculators
trainer builds them (``decoder_layer_class`` after ``first_layer_class``) and vLLM runs them (``LlamaDecoderLayer``
with ``layer_idx > 0``). A layer whose ``layer_types`` entry is ``sliding_attention`` sees its last ``sliding_window``
positions only. Flags: ``norm_before_fc``, ``fc_norm``, ``bias`` (fc.bias), ``norm_before_residual`` (layer 0),
``norm_output``; draft token d maps to ``d + d2t[d]``. Tensors use the canonical names of section 2, checked and
loaded with the config they go with by reference/eagle3_config.py. One sequence of T
tokens, optionally under leading batch dimensions ``...`` that share it (positions, causal mask): :func:`chains` runs
several readings of one draft over the same sequence as rows of one batch, one matmul per weight for all of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from eagle_convert.errors import ConfigError
from eagle_convert.reference.eagle3_config import FIRST, HINT, DraftWeights, Eagle3Config

KV = tuple[Tensor, Tensor]  # one step's (keys, values) of one layer after RoPE, [..., T, heads, d] each
LayersKV = tuple[KV, ...]  # one step's keys and values, a KV per draft layer


@dataclass(frozen=True)
class StepOutput:
    logits: Tensor  # [..., T, Vd], draft vocab
    target_tokens: Tensor  # [..., T], argmax d mapped to d + d2t[d]
    hidden_prenorm: Tensor  # [..., T, H], s
    hidden_postnorm: Tensor  # [..., T, H], norm(s)
    next_hidden: Tensor  # the one of them the next step takes (norm_output: post-norm)
    kv: LayersKV  # this step's keys and values, a KV per layer, for later chain steps


@dataclass(frozen=True)
class RowFlags:
    """Output flags per row of a batch ``[R, T]`` (each ``[R]`` bool), in place of the config's: row r's lm_head
    reads norm(s) when ``head_norm[r]``, and its next chain step takes norm(s) when ``norm_output[r]``."""

    norm_output: Tensor
    head_norm: Tensor

    def __getitem__(self, rows: Tensor) -> RowFlags:
        return RowFlags(self.norm_output[rows], self.head_norm[rows])


def _either(flag: bool | Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``a`` where ``flag`` else ``b``; a per-row flag ``[R]`` picks whole rows of ``[R, T, H]`` (values copied, never
    mixed)."""
    if isinstance(flag, bool):
        return a if flag else b
    return torch.where(flag[:, None, None], a, b)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """Llama RMSNorm over the last dim: ``x * rsqrt(mean(x^2) + eps) * w``, computed in fp32 (not ``1 + w``)."""
    xf = x.float()
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rope_inv_freq(c: Eagle3Config, dim: int) -> tuple[Tensor, float]:
    """Inverse frequencies [dim/2] and cos/sin scale, in the same float ops as transformers' ROPE_INIT_FUNCTIONS."""
    p, base = c.rope_params, c.rope_theta
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if c.rope_type == "linear":
        return inv / p["factor"], 1.0
    if c.rope_type == "llama3":
        factor, old = p["factor"], p["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / p["low_freq_factor"], old / p["high_freq_factor"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - p["low_freq_factor"]) / (p["high_freq_factor"] - p["low_freq_factor"])
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled), 1.0
    if c.rope_type == "yarn":
        factor, old = p["factor"], p["original_max_position_embeddings"]
        beta_fast, beta_slow = p.get("beta_fast") or 32, p.get("beta_slow") or 1

        def corr(rot: float) -> float:  # dimension at which a wavelength makes `rot` turns in the original context
            return (dim * math.log(old / (rot * 2 * math.pi))) / (2 * math.log(base))

        low, high = corr(beta_fast), corr(beta_slow)
        if p.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low or 0.001), 0, 1)
        pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
        extrapolate = 1 - ramp
        inv = 1.0 / (factor * pos_freqs) * (1 - extrapolate) + 1.0 / pos_freqs * extrapolate
        scale, mscale, mscale_all_dim = p.get("attention_factor"), p.get("mscale"), p.get("mscale_all_dim")
        if scale is None:  # cos/sin scale; with both mscales their ratio (1.0 for DeepSeek-V3's equal values)
            both = bool(mscale and mscale_all_dim)
            scale = _mscale(factor, mscale or 1) / _mscale(factor, mscale_all_dim or 1) if both else _mscale(factor, 1)
        return inv, float(scale)
    return inv, 1.0


def _mscale(factor: float, mscale: float) -> float:  # YaRN: 0.1 * mscale * ln(factor) + 1
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def rope(x: Tensor, positions: Tensor, c: Eagle3Config, *, interleaved: bool) -> Tensor:
    """Rotate pairs of ``x`` [..., T, heads, d] by ``position * inv_freq`` (positions [T]). Rotate-half pairs (x_i,
    x_{i+d/2}); interleaved (DeepSeek) pairs (x_{2i}, x_{2i+1}), written back de-interleaved like transformers'
    DeepseekV3 (same q.k)."""
    inv, scale = rope_inv_freq(c, x.shape[-1])
    angle = positions.float()[:, None] * inv.to(positions.device)  # [T, d/2]
    cos, sin = ((angle.cos() * scale).to(x.dtype)[:, None, :], (angle.sin() * scale).to(x.dtype)[:, None, :])
    x1, x2 = (x[..., 0::2], x[..., 1::2]) if interleaved else x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _attend(
    q: Tensor,
    keys: Sequence[Tensor],
    values: Sequence[Tensor],
    scale: float,
    at: Tensor | None = None,
    window: int | None = None,
) -> Tensor:
    """softmax(q.k * scale) v per head, q [..., N, nh, dq] at chain rows ``at`` [N] (default all T rows).
    ``keys[0]`` (the first step, [..., T, nh, dq]) is attended causally; each later chain step ``keys[s]`` (like q,
    [..., N, nh, dq]) only at the query's own row: row t is the chain that continues the prefix 0..t. Step s of row t
    sits at position t + s (one sequence: positions follow the rows); ``window``: it sees the keys less than
    ``window`` positions back only (transformers' and vLLM's sliding window)."""
    t, heads, step = keys[0].shape[-3], q.shape[-2], len(keys) - 1
    ks = [k.repeat_interleave(heads // k.shape[-2], dim=-2) for k in keys]  # GQA: [.., T, nkv, dq] -> [.., T, nh, dq]
    vs = [v.repeat_interleave(heads // v.shape[-2], dim=-2) for v in values]  # [..., T, nkv, dv] -> [..., T, nh, dv]
    rows = torch.arange(t, device=q.device)
    query = rows if at is None else at
    seen = rows[None, :] <= query[:, None]  # [N, T]
    if window is not None:
        seen &= rows[None, :] > query[:, None] + step - window
    context = torch.einsum("...qhd,...khd->...hqk", q, ks[0]) * scale  # [..., nh, N, T]
    context = context.masked_fill(~seen, float("-inf"))
    own = [torch.einsum("...thd,...thd->...ht", q, k)[..., None] * scale for k in ks[1:]]  # [..., nh, N, 1] per step
    if window is not None:  # chain step s' (1..step) sits step - s' positions back
        own = [o if step - s < window else torch.full_like(o, float("-inf")) for s, o in enumerate(own, start=1)]
    probs = torch.softmax(torch.cat([context, *own], dim=-1), dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.einsum("...hqk,...khd->...qhd", probs[..., :t], vs[0])  # [..., N, nh, dv]
    for s, v in enumerate(vs[1:]):
        out = out + probs[..., t + s].transpose(-1, -2)[..., None] * v  # [..., nh, N] -> [..., N, nh, 1]
    return out


def attention(
    c: Eagle3Config,
    w: DraftWeights,
    x: Tensor,
    positions: Tensor,
    past: Sequence[KV] = (),
    at: Tensor | None = None,
    layer: int = 0,
) -> tuple[Tensor, KV]:
    """Self-attention of layer ``layer`` on its input ``x`` [..., T, 2H] (layer 0; H after) -> ([..., T, H], this
    step's keys and values); ``past``: this layer's keys and values of the earlier chain steps; a later chain step may
    run on some rows only: ``x`` [..., N, 2H] at rows ``at`` [N] (see :func:`_attend`)."""
    a, lead, nh = c.layer(layer) + "self_attn.", x.shape[:-1], c.num_heads  # lead: (..., T)
    if c.attention == "mha":
        q = F.linear(x, w[a + "q_proj.weight"]).view(*lead, nh, c.head_dim)  # [.., T, nh*hd] -> [.., T, nh, hd]
        k = F.linear(x, w[a + "k_proj.weight"]).view(*lead, c.num_kv_heads, c.head_dim)  # -> [..., T, nkv, hd]
        v = F.linear(x, w[a + "v_proj.weight"]).view(*lead, c.num_kv_heads, c.head_dim)  # -> [..., T, nkv, hd]
        q_norm, k_norm = w.get(a + "q_norm.weight"), w.get(a + "k_norm.weight")
        if q_norm is not None and k_norm is not None:  # Qwen3: per-head RMSNorm before RoPE
            q, k = rms_norm(q, q_norm, c.rms_norm_eps), rms_norm(k, k_norm, c.rms_norm_eps)
        q, k = rope(q, positions, c, interleaved=False), rope(k, positions, c, interleaved=False)
        scale = c.head_dim**-0.5
    else:
        _, rkv, dn, dr, dv = c.mla_dims()
        q_latent = rms_norm(F.linear(x, w[a + "q_a_proj.weight"]), w[a + "q_a_layernorm.weight"], c.rms_norm_eps)
        q = F.linear(q_latent, w[a + "q_b_proj.weight"]).view(*lead, nh, dn + dr)  # -> [..., T, nh, dn+dr]
        q_nope, q_pe = torch.split(q, [dn, dr], dim=-1)
        kv_latent, k_pe = torch.split(F.linear(x, w[a + "kv_a_proj_with_mqa.weight"]), [rkv, dr], dim=-1)
        kv_latent = rms_norm(kv_latent, w[a + "kv_a_layernorm.weight"], c.rms_norm_eps)
        kv = F.linear(kv_latent, w[a + "kv_b_proj.weight"]).view(*lead, nh, dn + dv)  # -> [..., T, nh, dn+dv]
        k_nope, v = torch.split(kv, [dn, dv], dim=-1)
        q_pe = rope(q_pe, positions, c, interleaved=c.rope_interleave)
        k_pe = k_pe.view(*lead, 1, dr)  # [..., T, dr] -> [..., T, 1, dr]: one rope key shared by every head
        k_pe = rope(k_pe, positions, c, interleaved=c.rope_interleave)
        q, k = torch.cat([q_nope, q_pe], dim=-1), torch.cat([k_nope, k_pe.expand(*lead, nh, dr)], dim=-1)
        scale = (dn + dr) ** -0.5
        if c.rope_type == "yarn" and c.rope_params.get("mscale_all_dim"):
            scale *= _mscale(c.rope_params["factor"], c.rope_params["mscale_all_dim"]) ** 2
    keys, values = [kv_[0] for kv_ in past] + [k], [kv_[1] for kv_ in past] + [v]
    out = _attend(q, keys, values, scale, at, c.windows[layer])  # [..., T, nh, d_v]
    return F.linear(out.reshape(*lead, -1), w[a + "o_proj.weight"]), (k, v)  # -> [..., T, nh*d_v] -> [..., T, H]


def mlp(w: DraftWeights, y: Tensor, layer: str = FIRST) -> Tensor:
    """SwiGLU of the layer with prefix ``layer``: down(silu(gate(y)) * up(y))."""
    m = layer + "mlp."
    gate, up = F.linear(y, w[m + "gate_proj.weight"]), F.linear(y, w[m + "up_proj.weight"])
    return F.linear(F.silu(gate) * up, w[m + "down_proj.weight"])


def draft_step(
    config: Eagle3Config,
    weights: DraftWeights,
    token_ids: Tensor,
    hidden: Tensor,
    *,
    first_step: bool,
    positions: Tensor,
    embed: Tensor | None = None,
    past: Sequence[LayersKV] = (),
    rows: RowFlags | None = None,
    at: Tensor | None = None,
) -> StepOutput:
    """One draft forward over T tokens ``[..., T]``. ``hidden``: first step the K aux states ``[..., T, K*Ht]`` in
    ascending layer order (goes through norm_before_fc / fc_norm and fc), later steps the previous step's
    ``next_hidden`` [..., T, H]. ``past``: earlier chain steps' ``kv`` (first step first); empty means the T tokens
    form one causal sequence. ``rows``: per-row output flags of a batch ``[R, T]`` in place of the config's. ``at``: a
    later step on some chain rows only, ``[N]`` of them (tokens ``[..., N]``; ``past[0]`` all T rows, later steps'
    the same N)."""
    c, w, eps, lead = config, weights, config.rms_norm_eps, tuple(token_ids.shape)  # lead: (..., T)
    table = w.get("embed_tokens.weight")
    table = embed if table is None else table  # the draft's own embedding wins over the target's
    if table is None:
        raise ConfigError("the draft has no embed_tokens.weight and no target embedding was passed", hint=HINT)
    width = c.num_aux * c.target_hidden_size if first_step else c.hidden_size
    if tuple(hidden.shape) != (*lead, width):
        raise ConfigError(f"hidden input is {tuple(hidden.shape)}, expected {(*lead, width)}", hint=HINT)
    e = table[token_ids].to(w["norm.weight"].dtype)  # [..., T, H]
    h = hidden.to(e.dtype)
    if first_step:
        if c.norm_before_fc:
            h = rms_norm(h, w["input_norm.weight"], eps)
        if c.fc_norm:
            norms = torch.stack([w[f"fc_norm.{k}.weight"] for k in range(c.num_aux)])  # [K, Ht]
            h = rms_norm(h.view(*lead, c.num_aux, -1), norms, eps).view(*lead, -1)  # -> [..., T, K, Ht] -> back
        h = F.linear(h, w["fc.weight"], w.get("fc.bias"))  # [..., T, H]
    en, hn = rms_norm(e, w["midlayer.input_layernorm.weight"], eps), rms_norm(h, w["midlayer.hidden_norm.weight"], eps)
    residual = hn if c.norm_before_residual else h
    x = torch.cat([en, hn], dim=-1)  # [..., T, 2H], embeddings first
    o, kv = attention(c, w, x, positions, [p[0] for p in past], at)
    s1 = o + residual
    s = mlp(w, rms_norm(s1, w["midlayer.post_attention_layernorm.weight"], eps)) + s1
    kvs = [kv]
    for n in range(1, c.num_layers):  # a plain pre-norm decoder layer over H
        p = c.layer(n)
        o, kv = attention(
            c, w, rms_norm(s, w[p + "input_layernorm.weight"], eps), positions, [q[n] for q in past], at, n
        )
        y = o + s
        s = mlp(w, rms_norm(y, w[p + "post_attention_layernorm.weight"], eps), p) + y
        kvs.append(kv)
    out = rms_norm(s, w["norm.weight"], eps)
    head_norm, norm_output = (c.head_norm, c.norm_output) if rows is None else (rows.head_norm, rows.norm_output)
    logits = F.linear(_either(head_norm, out, s), w["lm_head.weight"])  # [..., T, Vd]
    d = logits.argmax(dim=-1)
    return StepOutput(logits, d + w["d2t"][d], s, out, _either(norm_output, out, s), tuple(kvs))


def chain(
    config: Eagle3Config,
    weights: DraftWeights,
    token_ids: Tensor,
    aux: Tensor,
    steps: int,
    *,
    embed: Tensor | None = None,
    positions: Tensor | None = None,
) -> list[StepOutput]:
    """Greedy chain drafting from every prefix at once: step s (at ``positions + s``) takes step s-1's ``next_hidden``
    and its argmax token mapped to target ids, and attends to the first step causally plus its own chain so far."""
    if steps < 1:
        raise ConfigError(f"chain needs at least one step, got {steps}")
    pos = torch.arange(token_ids.shape[-1], device=token_ids.device) if positions is None else positions
    outs: list[StepOutput] = []
    tokens, hidden = token_ids, aux
    for s in range(steps):
        step = draft_step(
            config,
            weights,
            tokens,
            hidden,
            first_step=s == 0,
            positions=pos + s,
            embed=embed,
            past=[o.kv for o in outs],
        )
        outs.append(step)
        tokens, hidden = step.target_tokens, step.next_hidden
    return outs


@dataclass(frozen=True)
class ChainRow:
    """How one row of :func:`chains` reads the draft: its output flags (in place of the config's) and its steps."""

    norm_output: bool
    head_norm: bool
    steps: int


def chains(
    config: Eagle3Config,
    weights: DraftWeights,
    token_ids: Tensor,
    aux: Tensor,
    readings: Sequence[ChainRow],
    *,
    embed: Tensor | None = None,
    needed: Callable[[int, Tensor, Tensor], Tensor] | None = None,
) -> list[list[Tensor]]:
    """:func:`chain` for R readings of the draft over one sequence, as the rows of one batch: ``token_ids`` [T] (the
    same for every row), ``aux`` [R, T, K*Ht] (row r's aux states). Each step runs one forward for every reading
    still drafting (a reading stops after its ``steps``), so each weight is read once per step for all of them; each
    reading's arithmetic is :func:`chain`'s under its flags.

    ``needed(s, at, drafted)``: for the step-s tokens ``drafted`` [R', N] of the readings still drafting at chain
    rows ``at`` [N], which rows each reading's chain goes on from (the probe: the token was accepted). Later steps
    then run only on rows some reading goes on from (rows are independent chains: dropping one changes no other).
    Returns each reading's draft tokens, [T] per step, -1 where a step did not run."""
    if not readings or min(r.steps for r in readings) < 1:
        raise ConfigError(f"chains need readings of at least one step, got {[r.steps for r in readings]}")
    device, t_len = token_ids.device, token_ids.shape[-1]
    at = torch.arange(t_len, device=device)  # the chain rows still running
    live = list(range(len(readings)))  # the readings still drafting
    norm_output = torch.tensor([r.norm_output for r in readings], device=device)
    flags = RowFlags(norm_output, torch.tensor([r.head_norm for r in readings], device=device))
    tokens, hidden = token_ids.expand(len(readings), -1), aux  # [T] -> [R, T]
    past: list[LayersKV] = []
    going: Tensor | None = None  # [R', N]: rows each live reading goes on from
    out: list[list[Tensor]] = [[] for _ in readings]
    for s in range(max(r.steps for r in readings)):
        still = [i for i, r in enumerate(live) if readings[r].steps > s]
        if len(still) < len(live):  # readings done: drop them from the batch and from the keys and values kept
            keep = torch.tensor(still, device=device)
            tokens, hidden, flags = tokens[keep], hidden[keep], flags[keep]
            past = [tuple((k[keep], v[keep]) for k, v in layers) for layers in past]
            going = None if going is None else going[keep]
            live = [live[i] for i in still]
        if going is not None and not bool(going.all()):  # rows no reading goes on from: drop them (not step 0's kv)
            rows = going.any(0).nonzero().squeeze(-1)  # [N']
            if rows.numel() == 0:
                break
            at, tokens, hidden, going = at[rows], tokens[:, rows], hidden[:, rows], going[:, rows]
            past = past[:1] + [tuple((k[:, rows], v[:, rows]) for k, v in layers) for layers in past[1:]]
        step = draft_step(
            config, weights, tokens, hidden, first_step=s == 0, positions=at + s, embed=embed, past=past, rows=flags,
            at=None if s == 0 else at,
        )  # fmt: skip
        for i, r in enumerate(live):
            out[r].append(torch.full((t_len,), -1, device=device).index_copy(0, at, step.target_tokens[i]))
        past.append(step.kv)
        tokens, hidden = step.target_tokens, step.next_hidden
        if needed is not None:
            going = needed(s, at, tokens) if going is None else going & needed(s, at, tokens)
    for r, row in enumerate(readings):  # steps that no row needed
        out[r] += [torch.full((t_len,), -1, device=device)] * (row.steps - len(out[r]))
    return out


def chain_elements(config: Eagle3Config, t: int, steps: int) -> int:
    """About the most activation elements one reading's chain over T tokens holds at once (to batch readings under a
    memory budget): the aux input and its norm, logits, the MLP, a few copies of the attention scores, and the
    chain's keys and values (after GQA's repeat)."""
    c = config
    head = max(c.head_dim, (c.qk_nope_head_dim or 0) + (c.qk_rope_head_dim or 0), c.v_head_dim or 0)
    per_token = 2 * c.num_aux * c.target_hidden_size + c.draft_vocab_size + 4 * c.intermediate_size + 8 * c.hidden_size
    per_token += 4 * c.num_heads * (t + steps) + steps * 2 * c.num_heads * head * c.num_layers
    return t * per_token
