"""Parity of eagle_convert.reference.deepseek against transformers' DeepseekV3ForCausalLM on tiny random configs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from eagle_convert.errors import ConfigError, InputError  # noqa: E402
from eagle_convert.reference.deepseek import DeepseekConfig, forward_streaming  # noqa: E402

TOL = 1e-5
YARN = {
    "type": "yarn",
    "factor": 4.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 64,
    "beta_fast": 32,
    "beta_slow": 1,
}
YARN_NO_MSCALE = {k: v for k, v in YARN.items() if not k.startswith("mscale")}  # cos/sin scaled, softmax scale not


def tiny(**overrides: Any) -> dict[str, Any]:
    """The brief's tiny config; dict values are copied (transformers' config writes into the rope dict it is given)."""
    overrides = {k: dict(v) if isinstance(v, dict) else v for k, v in overrides.items()}
    return {
        "vocab_size": 128,
        "hidden_size": 64,
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 3,
        "first_k_dense_replace": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "q_lora_rank": 32,
        "kv_lora_rank": 16,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "n_group": 2,
        "topk_group": 1,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "max_position_embeddings": 256,
        "rope_theta": 10000.0,
        **overrides,
    }


class DictWeights:
    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self.tensors = tensors

    def get(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    def names(self) -> list[str]:
        return list(self.tensors)


def save_random_target(kwargs: dict[str, Any], out: Path) -> Any:
    """A DeepseekV3ForCausalLM with O(1) activations, saved with HF's checkpoint names (per-expert tensors)."""
    torch.manual_seed(0)
    config = transformers.DeepseekV3Config(**kwargs, attn_implementation="eager")
    model = transformers.DeepseekV3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif "embed" in name:
                p.copy_(torch.randn_like(p))
            else:  # init_std = fan_in^-1/2 so every branch contributes at the scale of the residual
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn_like(b))
    model.save_pretrained(out)
    return model


@pytest.mark.parametrize(
    "overrides",
    [{}, {"rope_scaling": YARN}, {"rope_scaling": YARN_NO_MSCALE}, {"q_lora_rank": None, "rope_scaling": YARN}],
    ids=["plain", "yarn", "yarn-no-mscale", "no-q-lora"],
)
def test_parity_with_transformers(overrides: dict[str, Any], tmp_path: Path) -> None:
    kwargs = tiny(**overrides)
    model = save_random_target(kwargs, tmp_path)
    config = DeepseekConfig.from_hf(json.loads((tmp_path / "config.json").read_text()))
    weights = DictWeights(safetensors_torch.load_file(tmp_path / "model.safetensors"))
    assert "model.layers.1.mlp.experts.7.gate_proj.weight" in weights.names()  # the checkpoint's names, not HF's fused

    ids = torch.randint(0, 128, (1, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(ids, output_hidden_states=True)
    N = kwargs["num_hidden_layers"]
    out = forward_streaming(config, weights, ids, capture=range(N + 1))

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).abs().max() / b.abs().max())

    for j in range(N):
        assert rel(out.hidden[j], ref.hidden_states[j][0]) <= TOL, j
    final_norm = model.model.norm
    with torch.no_grad():
        assert rel(final_norm(out.hidden[N]), ref.hidden_states[N][0]) <= TOL
    assert rel(out.final_hidden, ref.hidden_states[N][0]) <= TOL
    assert rel(out.logits, ref.logits[0]) <= TOL
    assert out.logits.shape == (24, 128) and out.hidden[N].shape == (24, 64)


def test_hidden_n_is_before_the_final_norm(tmp_path: Path) -> None:
    save_random_target(tiny(), tmp_path)
    config = DeepseekConfig.from_hf(json.loads((tmp_path / "config.json").read_text()))
    weights = DictWeights(safetensors_torch.load_file(tmp_path / "model.safetensors"))
    out = forward_streaming(config, weights, torch.arange(8), capture=[3])
    assert set(out.hidden) == {3}
    assert not torch.allclose(out.hidden[3], out.final_hidden)
    with pytest.raises(InputError, match=r"outside 0\.\.3"):
        forward_streaming(config, weights, torch.arange(8), capture=[4])
    del weights.tensors["model.layers.2.mlp.gate.e_score_correction_bias"]
    with pytest.raises(InputError, match="e_score_correction_bias"):
        forward_streaming(config, weights, torch.arange(8))


def test_from_hf_reads_kimi_text_config_and_legacy_rope_scaling() -> None:
    text = tiny(rope_scaling=YARN, model_type="kimi_k2", scoring_func="sigmoid", topk_method="noaux_tc")
    config = DeepseekConfig.from_hf(
        {"model_type": "kimi_k25", "vision_config": {"hidden_size": 1}, "text_config": text}
    )
    assert (config.hidden_size, config.num_hidden_layers, config.n_group) == (64, 3, 2)
    assert config.yarn is not None and config.yarn.factor == 4.0 and config.yarn.mscale_all_dim == 1.0
    assert config.rope_theta == 10000.0 and config.q_lora_rank == 32
    assert "rms_norm_eps=1e-06" in config.defaults
    flat = DeepseekConfig.from_hf(
        tiny(rope_parameters={"rope_type": "yarn", "rope_theta": 5e4, **YARN})
    )  # theta inside (transformers 5)
    assert flat.rope_theta == 5e4 and flat.yarn == config.yarn


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ({k: v for k, v in tiny().items() if k != "kv_lora_rank"}, "kv_lora_rank"),
        (tiny(hidden_size="64"), "hidden_size"),
        (tiny(scoring_func="softmax"), "scoring_func"),
        (tiny(rope_scaling={"type": "dynamic", "factor": 2.0}), "dynamic"),
        (tiny(n_group=3), "groups"),
        (tiny(quantization_config={"quant_method": "fp8"}), "quantized"),
        ({"text_config": {k: v for k, v in tiny().items() if k != "q_lora_rank"}}, "q_lora_rank"),
    ],
)
def test_from_hf_rejects_missing_and_bad_keys(raw: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        DeepseekConfig.from_hf(raw)


def test_packed_sequences_equal_separate_runs(tmp_path: Path) -> None:
    save_random_target(tiny(rope_scaling=YARN), tmp_path)
    config = DeepseekConfig.from_hf(json.loads((tmp_path / "config.json").read_text()))
    weights = DictWeights(safetensors_torch.load_file(tmp_path / "model.safetensors"))
    ids = torch.randint(0, 128, (24,), generator=torch.Generator().manual_seed(2))
    layers: list[int] = []
    packed = forward_streaming(config, weights, ids, capture=[1, 3], lengths=[10, 14], on_layer=layers.append)
    assert layers == [0, 1, 2]
    for a, b in ((0, 10), (10, 24)):
        alone = forward_streaming(config, weights, ids[a:b], capture=[1, 3])
        for j in (1, 3):
            torch.testing.assert_close(packed.hidden[j][a:b], alone.hidden[j], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(packed.logits[a:b], alone.logits, rtol=1e-5, atol=1e-5)
    joined = forward_streaming(config, weights, ids)
    assert not torch.allclose(joined.logits[10:], packed.logits[10:], rtol=1e-3, atol=1e-3)


def _quantize_fp8(w: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek's block FP8: per-block amax / 448 as the scale; returns (float8_e4m3fn weight, float32 scale_inv)."""
    out, inp = w.shape
    rows, cols = -(-out // block[0]), -(-inp // block[1])
    scale = torch.zeros(rows, cols)
    for r in range(rows):
        for c in range(cols):
            tile = w[r * block[0] : (r + 1) * block[0], c * block[1] : (c + 1) * block[1]]
            scale[r, c] = tile.abs().max().clamp_min(1e-12) / 448.0
    full = scale.repeat_interleave(block[0], 0)[:out].repeat_interleave(block[1], 1)[:, :inp]
    return (w / full).to(torch.float8_e4m3fn), scale


def test_block_fp8_targets_are_dequantized(tmp_path: Path) -> None:
    """A DeepSeek-V3-style FP8 checkpoint (quant_method fp8, weight_block_size, *_scale_inv) runs as its
    dequantized weights; FP8 without the config, or another quantization, is refused."""
    from safetensors.torch import save_file

    from eagle_convert.probe.target import Target
    from eagle_convert.reference.llama import SafetensorsWeights

    save_random_target(tiny(), tmp_path / "bf")
    raw = json.loads((tmp_path / "bf" / "config.json").read_text())
    full = safetensors_torch.load_file(tmp_path / "bf" / "model.safetensors")
    block = (16, 24)  # 24 does not divide 64: partial blocks at the edges
    quantized, dequantized = {}, {}
    for name, t in full.items():
        if name.endswith("proj.weight") and "kv_a_proj" not in name:  # like DeepSeek, leave some weights as they are
            q, s = _quantize_fp8(t, block)
            quantized |= {name: q, name + "_scale_inv": s}
            full_scale = s.repeat_interleave(16, 0)[: t.shape[0]].repeat_interleave(24, 1)[:, : t.shape[1]]
            dequantized[name] = q.float() * full_scale
        else:
            quantized[name] = dequantized[name] = t
    assert sum(t.dtype == torch.float8_e4m3fn for t in quantized.values()) > 30
    qdir = tmp_path / "fp8"
    qdir.mkdir()
    save_file(quantized, str(qdir / "model.safetensors"))
    fp8_config = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [16, 24]}
    (qdir / "config.json").write_text(json.dumps(raw | {"quantization_config": fp8_config}))

    config = DeepseekConfig.from_hf(raw)
    ids = torch.randint(0, 128, (20,), generator=torch.Generator().manual_seed(4))
    ours = forward_streaming(config, SafetensorsWeights(qdir, block), ids, capture=[1, 3])
    expected = forward_streaming(config, DictWeights(dequantized), ids, capture=[1, 3])
    torch.testing.assert_close(ours.logits, expected.logits, rtol=1e-5, atol=1e-5)
    original = forward_streaming(config, DictWeights(full), ids, capture=[1, 3]).logits
    unscaled = {k: v.float() for k, v in quantized.items() if not k.endswith("_scale_inv")}  # FP8 read as plain floats
    naive = forward_streaming(config, DictWeights(unscaled), ids).logits

    def rel(a: torch.Tensor) -> float:
        return float((a - original).norm() / original.norm())

    assert rel(ours.logits) < 0.3 < 1.0 < rel(naive)  # FP8 rounding (and a few re-routed tokens), not garbage
    target = Target(qdir)  # the block size comes from the config
    torch.testing.assert_close(target.run(ids, capture=[3]).hidden[3], expected.hidden[3], rtol=1e-5, atol=1e-5)

    with pytest.raises(InputError, match="is FP8"):
        forward_streaming(config, SafetensorsWeights(qdir), ids)
    (qdir / "config.json").write_text(json.dumps(raw | {"quantization_config": {"quant_method": "awq", "bits": 4}}))
    with pytest.raises(ConfigError, match="quant_method 'awq'"):
        Target(qdir)
