"""Parity of the reference EAGLE3 draft (eagle_convert/reference/eagle3_draft.py).

Attention and MLP against transformers' LlamaAttention / Qwen3Attention / DeepseekV3Attention whose first projections
are replaced by 2H-input linears holding the draft's weights; whole steps against a straight-line computation of the
FORMATS.md section 1 equations written here; chain recurrence, d2t mapping and strict loading.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eagle_convert.errors import ConfigError
from eagle_convert.reference.eagle3_config import DraftWeights, Eagle3Config, load_draft
from eagle_convert.reference.eagle3_draft import attention, chain, draft_step, mlp

H, NH, NKV, HD, INTER, K, V, VD, T, EPS = 64, 4, 2, 16, 128, 3, 256, 128, 9, 1e-6
MLA_DIMS = {"q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 16}
YARN = {"factor": 4.0, "original_max_position_embeddings": 1024, "beta_fast": 32.0, "beta_slow": 1.0}
LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}
POSITIONS = torch.arange(T) * 250 + 3  # reaches past original_max_position_embeddings
TOL = {"rtol": 1e-5, "atol": 1e-5}
A = "midlayer.self_attn."


def mha_config(*, head_dim: int = HD, ht: int = H, rope: dict[str, Any] | None = None, **flags: Any) -> dict[str, Any]:
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": H,
        "intermediate_size": INTER,
        "num_attention_heads": NH,
        "num_key_value_heads": NKV,
        "head_dim": head_dim,
        "num_hidden_layers": 1,
        "max_position_embeddings": 4096,
        "rms_norm_eps": EPS,
        "rope_theta": 500000.0,
        "rope_scaling": rope,
        "vocab_size": V,
        "draft_vocab_size": VD,
        "target_hidden_size": ht,
        "num_aux_hidden_states": K,
        "bias": False,
        "fc_norm": False,
        "norm_before_fc": False,
        "norm_before_residual": False,
        "norm_output": False,
    }
    return {**cfg, **flags}


def mla_config(rope: dict[str, Any]) -> dict[str, Any]:
    cfg = mha_config(architectures=["Eagle3DeepseekV2ForCausalLM"], model_type="deepseek_v3", rope_scaling=rope)
    del cfg["head_dim"], cfg["num_key_value_heads"]
    return {**cfg, "num_key_value_heads": NH, "rope_theta": 50000.0, **MLA_DIMS}


def random_state(raw: dict[str, Any], seed: int = 0, *, qk_norm: bool = False, embed: bool = True) -> dict[str, Tensor]:
    """Canonical tensors with random values (norm weights near 1, sorted random d2t), named here by hand."""
    g = torch.Generator().manual_seed(seed)
    h, ht, hd = raw["hidden_size"], raw["target_hidden_size"], raw.get("head_dim", 0)
    shapes: dict[str, tuple[int, ...]] = {"fc.weight": (h, K * ht), "norm.weight": (h,), "lm_head.weight": (VD, h)}
    shapes |= {f"midlayer.{n}.weight": (h,) for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm")}
    shapes |= {"midlayer.mlp.gate_proj.weight": (INTER, h), "midlayer.mlp.up_proj.weight": (INTER, h)}
    shapes |= {"midlayer.mlp.down_proj.weight": (h, INTER)}
    shapes |= {"embed_tokens.weight": (V, h)} if embed else {}
    shapes |= {"fc.bias": (h,)} if raw["bias"] else {}
    shapes |= {f"fc_norm.{k}.weight": (ht,) for k in range(K)} if raw["fc_norm"] else {}
    shapes |= {"input_norm.weight": (K * ht,)} if raw["norm_before_fc"] else {}
    if "kv_lora_rank" in raw:
        rq, rkv, dn, dr, dv = MLA_DIMS.values()
        shapes |= {A + "q_a_proj.weight": (rq, 2 * h), A + "q_a_layernorm.weight": (rq,)}
        shapes |= {A + "q_b_proj.weight": (NH * (dn + dr), rq), A + "kv_a_layernorm.weight": (rkv,)}
        shapes |= {A + "kv_a_proj_with_mqa.weight": (rkv + dr, 2 * h), A + "kv_b_proj.weight": (NH * (dn + dv), rkv)}
        shapes |= {A + "o_proj.weight": (h, NH * dv)}
    else:
        shapes |= {A + "q_proj.weight": (NH * hd, 2 * h), A + "o_proj.weight": (h, NH * hd)}
        shapes |= {A + "k_proj.weight": (NKV * hd, 2 * h), A + "v_proj.weight": (NKV * hd, 2 * h)}
        shapes |= {A + "q_norm.weight": (hd,), A + "k_norm.weight": (hd,)} if qk_norm else {}
    state = {
        n: 1 + 0.2 * torch.randn(s, generator=g) if n.endswith("norm.weight") else torch.randn(s, generator=g)
        for n, s in shapes.items()
    }
    for n, t in state.items():
        if t.dim() == 2 and n != "embed_tokens.weight":
            state[n] = t / math.sqrt(t.shape[-1])  # unit-variance activations
    targets = torch.randperm(V, generator=g)[:VD].sort().values
    state["d2t"] = targets - torch.arange(VD)  # offsets: target = d + d2t[d]
    return state


def causal_mask(n: int = T) -> Tensor:
    return torch.full((n, n), float("-inf")).triu(1)[None, None]  # [1, 1, n, n]


def linear_2h(out_features: int, weight: Tensor) -> nn.Linear:
    layer = nn.Linear(2 * H, out_features, bias=False)
    layer.weight.data.copy_(weight)
    return layer


def hf_mha(raw: dict[str, Any], state: dict[str, Tensor], *, qwen3: bool = False) -> Any:
    """(attention(x [T, 2H]) -> [T, H], MLP) from transformers with 2H-input q/k/v holding the draft's weights."""
    from transformers import LlamaConfig, Qwen3Config
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRotaryEmbedding
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3RotaryEmbedding

    rope = {"rope_type": "default", **(raw["rope_scaling"] or {}), "rope_theta": raw["rope_theta"]}
    keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim")
    kwargs = {k: raw[k] for k in keys} | {"rms_norm_eps": EPS, "max_position_embeddings": 4096}
    hc = (Qwen3Config if qwen3 else LlamaConfig)(**kwargs, rope_parameters=rope)
    hc._attn_implementation = "eager"
    attn = (Qwen3Attention if qwen3 else LlamaAttention)(hc, layer_idx=0)
    for name, rows in (("q_proj", NH), ("k_proj", NKV), ("v_proj", NKV)):
        setattr(attn, name, linear_2h(rows * raw["head_dim"], state[A + name + ".weight"]))
    attn.load_state_dict({n: state[A + n] for n in attn.state_dict()}, strict=True)
    rotary = (Qwen3RotaryEmbedding if qwen3 else LlamaRotaryEmbedding)(hc)
    hf_mlp = LlamaMLP(LlamaConfig(**kwargs))
    hf_mlp.load_state_dict({n: state["midlayer.mlp." + n] for n in hf_mlp.state_dict()}, strict=True)

    def run(x: Tensor, positions: Tensor = POSITIONS) -> Tensor:
        cos_sin = rotary(x[None], positions[None])
        return attn(x[None], position_embeddings=cos_sin, attention_mask=causal_mask(len(x)))[0][0]

    return run, hf_mlp


def hf_mla(raw: dict[str, Any], state: dict[str, Tensor]) -> Any:
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding

    rope = {**raw["rope_scaling"], "rope_theta": raw["rope_theta"]}
    hc = DeepseekV3Config(
        hidden_size=H, num_attention_heads=NH, num_key_value_heads=NH, rope_parameters=rope, rope_interleave=True,
        max_position_embeddings=4096, rms_norm_eps=EPS, attention_bias=False, **MLA_DIMS,
    )  # fmt: skip
    hc._attn_implementation = "eager"
    attn = DeepseekV3Attention(hc, layer_idx=0)
    attn.q_a_proj = linear_2h(MLA_DIMS["q_lora_rank"], state[A + "q_a_proj.weight"])
    kv_rows = MLA_DIMS["kv_lora_rank"] + MLA_DIMS["qk_rope_head_dim"]
    attn.kv_a_proj_with_mqa = linear_2h(kv_rows, state[A + "kv_a_proj_with_mqa.weight"])
    attn.load_state_dict({n: state[A + n] for n in attn.state_dict()}, strict=True)
    rotary = DeepseekV3RotaryEmbedding(hc)

    def run(x: Tensor) -> Tensor:
        cos_sin = rotary(x[None], POSITIONS[None])
        return attn(x[None], position_embeddings=cos_sin, attention_mask=causal_mask())[0][0]

    return run


def build(raw: dict[str, Any], **kw: Any) -> tuple[Eagle3Config, DraftWeights, dict[str, Tensor]]:
    cfg = Eagle3Config.from_config(raw)
    state = random_state(raw, **kw)
    return cfg, load_draft(cfg, state), state


def report(name: str, got: Tensor, want: Tensor) -> None:
    print(f"{name}: max abs error {(got - want).abs().max().item():.3e}")
    torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize(
    ("rope", "head_dim", "qwen3"),
    [(None, HD, False), ({"rope_type": "llama3", **LLAMA3}, HD, False), ({"rope_type": "yarn", **YARN}, HD, False),
     (None, 24, True)],
    ids=["default-rope", "llama3-rope", "yarn-rope", "qwen3-qk-norm-head-dim-24"],
)  # fmt: skip
@torch.no_grad()
def test_mha_attention_and_mlp_match_transformers(rope: dict[str, Any] | None, head_dim: int, qwen3: bool) -> None:
    raw = mha_config(head_dim=head_dim, rope=rope)
    cfg, weights, state = build(raw, qk_norm=qwen3)
    hf_attention, hf_mlp = hf_mha(raw, state, qwen3=qwen3)
    x = torch.randn(T, 2 * H, generator=torch.Generator().manual_seed(1))
    got, _ = attention(cfg, weights, x, POSITIONS)
    report(f"mha attention {rope and rope['rope_type']}", got, hf_attention(x))
    y = torch.randn(T, H, generator=torch.Generator().manual_seed(2))
    report("mlp", mlp(weights, y), hf_mlp(y))


@pytest.mark.parametrize(
    "rope",
    [{"rope_type": "yarn", **YARN, "mscale": 1.0, "mscale_all_dim": 1.0},
     {"rope_type": "yarn", **YARN, "mscale": 0.9, "mscale_all_dim": 0.7}, {"rope_type": "default"}],
    ids=["yarn-deepseek-v3", "yarn-unequal-mscales", "no-scaling"],
)  # fmt: skip
@torch.no_grad()
def test_mla_attention_matches_transformers_deepseek_v3(rope: dict[str, Any]) -> None:
    raw = mla_config(rope)
    cfg, weights, state = build(raw)
    assert cfg.attention == "mla"
    x = torch.randn(T, 2 * H, generator=torch.Generator().manual_seed(1))
    got, _ = attention(cfg, weights, x, POSITIONS)
    report(f"mla attention {rope}", got, hf_mla(raw, state)(x))


def straight_line(raw: dict[str, Any], state: dict[str, Tensor], tokens: Tensor, hidden: Tensor, first: bool) -> Any:
    """FORMATS.md section 1, steps 1-6, written out; attention from transformers."""

    def rms(x: Tensor, w: Tensor) -> Tensor:
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))

    ht, m = raw["target_hidden_size"], "midlayer."
    e = state["embed_tokens.weight"][tokens]
    h = hidden
    if first:
        if raw["norm_before_fc"]:
            h = rms(h, state["input_norm.weight"])
        if raw["fc_norm"]:
            h = torch.cat([rms(h[:, k * ht : (k + 1) * ht], state[f"fc_norm.{k}.weight"]) for k in range(K)], -1)
        h = h @ state["fc.weight"].T + (state["fc.bias"] if raw["bias"] else 0)
    en, hn = rms(e, state[m + "input_layernorm.weight"]), rms(h, state[m + "hidden_norm.weight"])
    residual = hn if raw["norm_before_residual"] else h
    s1 = hf_mha(raw, state)[0](torch.cat([en, hn], -1)) + residual
    y = rms(s1, state[m + "post_attention_layernorm.weight"])
    g, u, dn = (state[f"{m}mlp.{n}_proj.weight"] for n in ("gate", "up", "down"))
    s = (F.silu(y @ g.T) * (y @ u.T)) @ dn.T + s1
    out = rms(s, state["norm.weight"])
    logits = out @ state["lm_head.weight"].T
    d = logits.argmax(-1)
    return logits, d + state["d2t"][d], s, out


FLAG_CASES = {
    "eagle3": {},
    "eagle3.1-fc-norm-norm-output": {"fc_norm": True, "norm_output": True},
    "fc-norm-ht-48": {"fc_norm": True, "ht": 48},
    "norm-before-fc": {"norm_before_fc": True},
    "fc-bias": {"bias": True},
    "norm-before-residual": {"norm_before_residual": True},
}


@pytest.mark.parametrize("first_step", [True, False], ids=["first-step", "later-step"])
@pytest.mark.parametrize("flags", FLAG_CASES.values(), ids=FLAG_CASES.keys())
@torch.no_grad()
def test_draft_step_matches_straight_line_equations(flags: dict[str, Any], first_step: bool) -> None:
    raw = mha_config(**flags)
    cfg, weights, state = build(raw)
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, V, (T,), generator=g)
    hidden = torch.randn(T, K * raw["target_hidden_size"] if first_step else H, generator=g)
    got = draft_step(cfg, weights, tokens, hidden, first_step=first_step, positions=POSITIONS)
    logits, target, pre, post = straight_line(raw, state, tokens, hidden, first_step)
    report(f"step logits {flags} first={first_step}", got.logits, logits)
    torch.testing.assert_close(got.hidden_prenorm, pre, **TOL)
    torch.testing.assert_close(got.hidden_postnorm, post, **TOL)
    assert torch.equal(got.target_tokens, target)
    assert got.next_hidden is (got.hidden_postnorm if raw["norm_output"] else got.hidden_prenorm)


@pytest.mark.parametrize("norm_output", [True, False], ids=["post-norm", "pre-norm"])
@torch.no_grad()
def test_chain_feeds_hidden_per_norm_output_and_mapped_tokens(norm_output: bool) -> None:
    raw = mha_config(fc_norm=True, norm_output=norm_output)
    cfg = Eagle3Config.from_config(raw)
    state = random_state(raw, embed=False)
    weights = load_draft(cfg, state)
    embed = torch.randn(V, H, generator=torch.Generator().manual_seed(4))
    g = torch.Generator().manual_seed(5)
    tokens, aux = torch.randint(0, V, (T,), generator=g), torch.randn(T, K * H, generator=g)
    steps = chain(cfg, weights, tokens, aux, 3, embed=embed, positions=POSITIONS)
    first = steps[0]
    d = first.logits.argmax(-1)
    assert torch.equal(first.target_tokens, d + state["d2t"][d])
    assert (first.target_tokens != d).any()  # the mapping matters for this test to mean anything

    def second(hidden: Tensor, toks: Tensor) -> Tensor:
        kw: Any = {"first_step": False, "positions": POSITIONS + 1, "embed": embed, "past": [first.kv]}
        return draft_step(cfg, weights, toks, hidden, **kw).logits

    fed, other = (first.hidden_postnorm, first.hidden_prenorm)[:: 1 if norm_output else -1]
    torch.testing.assert_close(steps[1].logits, second(fed, first.target_tokens), rtol=0, atol=0)
    assert (steps[1].logits - second(other, first.target_tokens)).abs().max() > 1e-3
    assert (steps[1].logits - second(fed, d)).abs().max() > 1e-3


@torch.no_grad()
def test_later_steps_attend_like_an_engine_kv_cache() -> None:
    """Row t of steps 1 and 2 = the draft decoding two more tokens after prefix 0..t, as one causal sequence."""
    raw = mha_config()
    cfg, weights, state = build(raw)
    hf_attention, _ = hf_mha(raw, state)
    x0, x1, x2 = torch.randn(3, T, 2 * H, generator=torch.Generator().manual_seed(7))
    o0, kv0 = attention(cfg, weights, x0, POSITIONS)
    o1, kv1 = attention(cfg, weights, x1, POSITIONS + 1, past=[kv0])
    o2, _ = attention(cfg, weights, x2, POSITIONS + 2, past=[kv0, kv1])
    for t in (0, 4, T - 1):
        seq = torch.cat([x0[: t + 1], x1[t : t + 1], x2[t : t + 1]])  # [t+3, 2H]
        positions = torch.cat([POSITIONS[: t + 1], POSITIONS[t : t + 1] + 1, POSITIONS[t : t + 1] + 2])
        want = hf_attention(seq, positions)
        torch.testing.assert_close(torch.stack([o0[t], o1[t], o2[t]]), want[-3:], **TOL)


@torch.no_grad()
def test_chain_rows_are_independent_prefix_chains() -> None:
    raw = mha_config(norm_output=True)
    cfg, weights, _ = build(raw)
    g = torch.Generator().manual_seed(6)
    tokens, aux = torch.randint(0, V, (T,), generator=g), torch.randn(T, K * H, generator=g)
    full = chain(cfg, weights, tokens, aux, 3, positions=POSITIONS)
    for t in (0, 4, T - 1):
        prefix = chain(cfg, weights, tokens[: t + 1], aux[: t + 1], 3, positions=POSITIONS[: t + 1])
        for a, b in zip(full, prefix, strict=True):
            torch.testing.assert_close(a.logits[t], b.logits[-1], **TOL)


def test_load_draft_refuses_unknown_missing_and_misshapen_tensors() -> None:
    raw = mha_config()
    cfg, state = Eagle3Config.from_config(raw), random_state(raw)
    for extra in (A + "qkv_proj.weight", "fc_norm.0.weight", "layers.0.hidden_norm.weight"):
        with pytest.raises(ConfigError, match=extra.replace(".", r"\.")):
            load_draft(cfg, {**state, extra: torch.zeros(1)})
    for name in ("midlayer.mlp.up_proj.weight", "d2t", "lm_head.weight"):
        with pytest.raises(ConfigError, match=name.replace(".", r"\.")):
            load_draft(cfg, {n: t for n, t in state.items() if n != name})
    with pytest.raises(ConfigError, match=r"fc\.weight"):
        load_draft(cfg, {**state, "fc.weight": torch.zeros(H, 2 * H)})
    with pytest.raises(ConfigError, match="embed_tokens"):
        weights = load_draft(cfg, {n: t for n, t in state.items() if n != "embed_tokens.weight"})
        tokens, aux = torch.zeros(T, dtype=torch.long), torch.zeros(T, K * H)
        draft_step(cfg, weights, tokens, aux, first_step=True, positions=POSITIONS)


def test_from_config_refuses_what_it_cannot_run_and_records_defaults() -> None:
    with pytest.raises(ConfigError, match="mutually exclusive"):
        Eagle3Config.from_config(mha_config(fc_norm=True, norm_before_fc=True))
    with pytest.raises(ConfigError, match="q_lora_rank"):
        Eagle3Config.from_config({k: v for k, v in mla_config({"rope_type": "default"}).items() if k != "q_lora_rank"})
    with pytest.raises(ConfigError, match="dynamic"):
        Eagle3Config.from_config(mha_config(rope={"rope_type": "dynamic", "factor": 2.0}))
    raw = {k: v for k, v in mha_config().items() if k not in ("rope_theta", "norm_output", "target_hidden_size")}
    cfg = Eagle3Config.from_config(raw)
    assert (cfg.rope_theta, cfg.norm_output, cfg.target_hidden_size) == (10000.0, False, H)
    assert {"rope_theta=10000.0", "norm_output=False", "target_hidden_size=64"} <= set(cfg.defaults)
