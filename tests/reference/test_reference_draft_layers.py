"""The reference draft beyond one layer (eagle_convert/reference/eagle3_draft.py): 2 to 4 draft layers, K = 3, 4, 5
and 9 aux states, sliding-window draft attention, MHA (Llama, Qwen3 with q/k norms) and MLA.

Layer 0 is the EAGLE3 layer (2H input), tested in tests/reference/test_reference_draft.py. Layers 1.. are plain decoder
layers
over H: here transformers' own ``LlamaModel`` / ``Qwen3Model`` / ``DeepseekV3Model`` holding the draft's ``layers.{i}.``
weights and its final norm run them (their masks, sliding windows included, built by transformers), fed layer 0's
output; the draft's whole step must give the same normed state and logits.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
import torch
from torch import Tensor

from eagle_convert.errors import ConfigError
from eagle_convert.reference.eagle3_config import Eagle3Config, load_draft, parameter_shapes
from eagle_convert.reference.eagle3_draft import ChainRow, attention, chain, chains, draft_step
from tests.reference.test_reference_draft import EPS, INTER, MLA_DIMS, NH, NKV, VD, YARN, H, V, mha_config, mla_config

T = 11
TOL = {"rtol": 1e-5, "atol": 1e-5}
WINDOW = 4


def _layers(raw: dict[str, Any], layers: int, k: int, **extra: Any) -> dict[str, Any]:
    return {**raw, "num_hidden_layers": layers, "num_aux_hidden_states": k, **extra}


CASES: dict[str, tuple[dict[str, Any], bool]] = {  # name -> (draft config, q/k norms)
    "llama-2-layers-k3": (_layers(mha_config(), 2, 3), False),
    "llama-4-layers-k9-fc-norm-norm-output": (_layers(mha_config(fc_norm=True, norm_output=True), 4, 9), False),
    "llama-2-layers-k5-norm-before-fc-and-residual": (
        _layers(mha_config(norm_before_fc=True, norm_before_residual=True, bias=True), 2, 5),
        False,
    ),
    "qwen3-3-layers-k4-sliding": (
        _layers(
            mha_config(model_type="qwen3", architectures=["Eagle3Qwen3ForCausalLM"]),
            3,
            4,
            layer_types=["full_attention", "sliding_attention", "sliding_attention"],
            sliding_window=WINDOW,
        ),
        True,
    ),
    "mla-yarn-2-layers-k3": (_layers(mla_config({"rope_type": "yarn", **YARN}), 2, 3), False),
}


def _state(cfg: Eagle3Config, qk_norm: bool, seed: int = 0) -> dict[str, Tensor]:
    """Random tensors of every required shape (and q/k norms when asked): norms near 1, unit-variance activations."""
    required, optional = parameter_shapes(cfg)
    shapes = dict(required)
    shapes |= {
        n: s
        for n, s in optional.items()
        if n == "embed_tokens.weight" or (qk_norm and n.endswith(("q_norm.weight", "k_norm.weight")))
    }
    shapes.pop("d2t", None)
    g = torch.Generator().manual_seed(seed)
    state = {
        n: 1 + 0.2 * torch.randn(s, generator=g) if "norm" in n else torch.randn(s, generator=g)
        for n, s in shapes.items()
    }
    for n, t in state.items():
        if t.dim() == 2 and n != "embed_tokens.weight":
            state[n] = t / math.sqrt(t.shape[-1])
    state["d2t"] = torch.randperm(V, generator=g)[:VD].sort().values - torch.arange(VD)
    return state


def _transformers_layers(raw: dict[str, Any], cfg: Eagle3Config, state: dict[str, Tensor]) -> Any:
    """Draft layers 1.. and the final norm as a transformers model of the draft's own family (eager attention)."""
    from transformers import DeepseekV3Config, DeepseekV3Model, LlamaConfig, LlamaModel, Qwen3Config, Qwen3Model

    n = cfg.num_layers - 1
    rope = {"rope_type": "default", **(raw.get("rope_scaling") or {}), "rope_theta": raw["rope_theta"]}
    common = {"hidden_size": H, "intermediate_size": INTER, "num_hidden_layers": n, "vocab_size": V}
    common |= {"rms_norm_eps": EPS, "max_position_embeddings": 4096, "rope_parameters": rope}
    if cfg.attention == "mla":
        hc: Any = DeepseekV3Config(
            **common, num_attention_heads=NH, num_key_value_heads=NH, first_k_dense_replace=n, rope_interleave=True,
            **MLA_DIMS,
        )  # fmt: skip
        model: Any = DeepseekV3Model(hc)
    elif raw["model_type"] == "qwen3":
        types = raw["layer_types"][1:]
        hc = Qwen3Config(
            **common, num_attention_heads=NH, num_key_value_heads=NKV, head_dim=raw["head_dim"], layer_types=types,
            sliding_window=raw["sliding_window"], use_sliding_window=True,
        )  # fmt: skip
        model = Qwen3Model(hc)
    else:
        hc = LlamaConfig(**common, num_attention_heads=NH, num_key_value_heads=NKV, head_dim=raw["head_dim"])
        model = LlamaModel(hc)
    hc._attn_implementation = "eager"
    weights = {
        f"layers.{int(k.split('.')[1]) - 1}.{k.split('.', 2)[2]}": t
        for k, t in state.items()
        if k.startswith("layers.")
    }
    weights["norm.weight"] = state["norm.weight"]
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert (missing, unexpected) == (["embed_tokens.weight"], []), (missing, unexpected)
    return model.eval()


@pytest.mark.parametrize("name", list(CASES))
@torch.no_grad()
def test_later_layers_are_transformers_decoder_layers(name: str) -> None:
    raw, qk_norm = CASES[name]
    cfg = Eagle3Config.from_config(raw)
    assert cfg.num_layers == raw["num_hidden_layers"] and cfg.num_aux == raw["num_aux_hidden_states"]
    state = _state(cfg, qk_norm)
    weights = load_draft(cfg, state)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, V, (T,), generator=g)
    aux = torch.randn(T, cfg.num_aux * cfg.target_hidden_size, generator=g)
    positions = torch.arange(T)
    got = draft_step(cfg, weights, tokens, aux, first_step=True, positions=positions)
    first = draft_step(replace(cfg, num_layers=1), weights, tokens, aux, first_step=True, positions=positions)
    model = _transformers_layers(raw, cfg, state)
    want = model(inputs_embeds=first.hidden_prenorm[None], position_ids=positions[None]).last_hidden_state[0]
    print(f"{name}: max abs error {(got.hidden_postnorm - want).abs().max().item():.3e}")
    torch.testing.assert_close(got.hidden_postnorm, want, **TOL)
    torch.testing.assert_close(got.logits, want @ state["lm_head.weight"].T, **TOL)
    assert len(got.kv) == cfg.num_layers
    # the later layers matter: layer 0 alone gives another state
    assert (got.hidden_prenorm - first.hidden_prenorm).abs().max() > 1e-2


@torch.no_grad()
def test_a_sliding_layer_sees_its_window_in_every_chain_step() -> None:
    """Layer 1 of the sliding Qwen3 case, steps 0-2 of the chain from rows t: what transformers' Qwen3 attention
    gives for the sequence prefix 0..t, then the two drafted positions, under transformers' own sliding mask."""
    from transformers import Qwen3Config
    from transformers.masking_utils import sliding_window_causal_mask_function
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3RotaryEmbedding

    raw, _ = CASES["qwen3-3-layers-k4-sliding"]
    cfg = Eagle3Config.from_config(raw)
    assert cfg.windows == (None, WINDOW, WINDOW)
    state = _state(cfg, qk_norm=True)
    weights = load_draft(cfg, state)
    x0, x1, x2 = torch.randn(3, T, H, generator=torch.Generator().manual_seed(2))
    positions = torch.arange(T)
    o0, kv0 = attention(cfg, weights, x0, positions, layer=1)
    o1, kv1 = attention(cfg, weights, x1, positions + 1, past=[kv0], layer=1)
    o2, _ = attention(cfg, weights, x2, positions + 2, past=[kv0, kv1], layer=1)
    rope = {"rope_type": "default", "rope_theta": raw["rope_theta"]}
    hc = Qwen3Config(
        hidden_size=H, num_attention_heads=NH, num_key_value_heads=NKV, head_dim=raw["head_dim"], rms_norm_eps=EPS,
        rope_parameters=rope, sliding_window=WINDOW, use_sliding_window=True, max_position_embeddings=4096,
    )  # fmt: skip
    hc._attn_implementation = "eager"
    hf = Qwen3Attention(hc, layer_idx=0)
    hf.load_state_dict({n: state["layers.1.self_attn." + n] for n in hf.state_dict()}, strict=True)
    rotary, allowed = Qwen3RotaryEmbedding(hc), sliding_window_causal_mask_function(WINDOW)
    for t in (1, 5, T - 1):
        seq = torch.cat([x0[: t + 1], x1[t : t + 1], x2[t : t + 1]])
        pos = torch.cat([positions[: t + 1], positions[t : t + 1] + 1, positions[t : t + 1] + 2])
        n = len(seq)
        mask = torch.tensor(
            [[bool(allowed(0, 0, torch.tensor(i), torch.tensor(j))) for j in range(n)] for i in range(n)]
        )
        bias = torch.zeros(n, n).masked_fill(~mask, float("-inf"))[None, None]
        want = hf(seq[None], position_embeddings=rotary(seq[None], pos[None]), attention_mask=bias)[0][0]
        torch.testing.assert_close(torch.stack([o0[t], o1[t], o2[t]]), want[-3:], **TOL)
    full, _ = attention(replace(cfg, windows=(None,) * 3), weights, x0, positions, layer=1)
    assert (full[WINDOW:] - o0[WINDOW:]).abs().max() > 1e-3  # the window matters where rows reach past it
    torch.testing.assert_close(full[:WINDOW], o0[:WINDOW], rtol=0, atol=0)


@torch.no_grad()
def test_a_multi_layer_chain_keeps_each_layers_keys() -> None:
    """chain() and chains() over a 3-layer sliding draft: step s of row t equals step s of the chain run from the
    prefix 0..t alone, and the batched readings equal the one-reading chain."""
    raw, _ = CASES["qwen3-3-layers-k4-sliding"]
    cfg = Eagle3Config.from_config(raw)
    weights = load_draft(cfg, _state(cfg, qk_norm=True))
    g = torch.Generator().manual_seed(3)
    tokens, aux = torch.randint(0, V, (T,), generator=g), torch.randn(T, cfg.num_aux * H, generator=g)
    full = chain(cfg, weights, tokens, aux, 3)
    assert all(len(step.kv) == 3 for step in full)
    for t in (0, 5, T - 1):
        prefix = chain(cfg, weights, tokens[: t + 1], aux[: t + 1], 3)
        for a, b in zip(full, prefix, strict=True):
            torch.testing.assert_close(a.logits[t], b.logits[-1], **TOL)
    rows = [ChainRow(norm_output=False, head_norm=True, steps=3), ChainRow(norm_output=True, head_norm=True, steps=2)]
    batched = chains(cfg, weights, tokens, torch.stack([aux, aux]), rows)
    assert all(torch.equal(a, s.target_tokens) for a, s in zip(batched[0], full, strict=True))
    post = chain(replace(cfg, norm_output=True), weights, tokens, aux, 2)
    assert all(torch.equal(a, s.target_tokens) for a, s in zip(batched[1], post, strict=True))


def test_layer_types_and_windows_are_read_as_the_engines_read_them() -> None:
    base = _layers(mha_config(model_type="qwen3"), 2, 3)
    assert Eagle3Config.from_config(base).windows == (None, None)
    qwen_rule = {**base, "use_sliding_window": True, "max_window_layers": 1, "sliding_window": 8}
    assert Eagle3Config.from_config(qwen_rule).windows == (None, 8)  # transformers' Qwen3: layers >= max_window_layers
    llama = {**qwen_rule, "model_type": "llama"}
    assert Eagle3Config.from_config(llama).windows == (None, None)  # LlamaConfig does not derive layer_types
    with pytest.raises(ConfigError, match="sliding_window"):
        Eagle3Config.from_config({**base, "layer_types": ["sliding_attention", "full_attention"]})
    with pytest.raises(ConfigError, match="layer_types"):
        Eagle3Config.from_config({**base, "layer_types": ["full_attention"]})


def test_a_later_layer_without_its_weights_is_refused_by_name() -> None:
    raw, qk = CASES["llama-2-layers-k3"]
    cfg = Eagle3Config.from_config(raw)
    state = _state(cfg, qk)
    with pytest.raises(ConfigError, match=r"layers\.1\.self_attn\.k_proj\.weight"):
        load_draft(cfg, {n: t for n, t in state.items() if n != "layers.1.self_attn.k_proj.weight"})
    with pytest.raises(ConfigError, match=r"layers\.1\.self_attn\.q_proj\.weight"):
        load_draft(cfg, {**state, "layers.1.self_attn.q_proj.weight": torch.zeros(NH * 16, 2 * H)})  # a 2H input
