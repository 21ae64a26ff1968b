"""Parity of eagle_convert.reference.llama against transformers (the oracle) on tiny random Llama/Qwen2/Qwen3 models."""

from __future__ import annotations

import json
import re
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from eagle_convert.errors import ConfigError, InputError
from eagle_convert.reference.llama import (
    DictWeights,
    LlamaConfig,
    SafetensorsWeights,
    TargetOutput,
    forward_streaming,
    layer_shapes,
)
from tests.conftest import hf_forward

transformers = pytest.importorskip("transformers")

N_LAYERS, T = 4, 24
TINY: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": N_LAYERS,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 256,
}
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,  # hd=16: one band unchanged, two smoothed, five slowed by 8
}
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-default-rope": ("Llama", {}),
    "llama-llama3-rope": ("Llama", {"rope_parameters": LLAMA3_ROPE}),
    "llama-tied": ("Llama", {"tie_word_embeddings": True}),
    "qwen2-bias": ("Qwen2", {}),
    "qwen3-qk-norm": ("Qwen3", {"head_dim": 24}),  # 24 != 64 / 4
}


def _hf_model(case: str) -> Any:
    family, extra = CASES[case]
    torch.manual_seed(0)
    config = getattr(transformers, f"{family}Config")(**TINY, **extra)
    model = getattr(transformers, f"{family}ForCausalLM")(config).eval()
    with torch.no_grad():  # HF initialises norms to 1 and biases to 0: randomise them so they are tested
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.randn_like(p) * 0.2 + (1.0 if "norm" in name else 0.0))
    return model


def _input_ids() -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], (T,), generator=torch.Generator().manual_seed(1))


def _ours(model: Any, ids: torch.Tensor) -> TargetOutput:
    config = LlamaConfig.from_hf(model.config.to_dict())
    state = model.state_dict()
    if config.tie_word_embeddings:
        state.pop("lm_head.weight")  # tied checkpoints ship the embedding only
    return forward_streaming(config, DictWeights(state), ids, capture=range(N_LAYERS + 1))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("case", list(CASES))
def test_parity_with_transformers(case: str) -> None:
    model = _hf_model(case)
    ids = _input_ids()
    hf_hidden, hf_logits, hf_last_raw = hf_forward(model, ids)
    ours = _ours(model, ids)
    errors = {}
    for j in range(N_LAYERS):  # boundary j = input of layer j = HF hidden_states[j]
        torch.testing.assert_close(ours.hidden[j], hf_hidden[j], rtol=1e-5, atol=1e-5)
        errors[f"hs[{j}]"] = _rel(ours.hidden[j], hf_hidden[j])
    # boundary N is before the final norm: HF's hidden_states[N] is after it
    torch.testing.assert_close(ours.hidden[N_LAYERS], hf_last_raw, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.final_hidden, hf_hidden[N_LAYERS], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(ours.hidden[N_LAYERS], hf_hidden[N_LAYERS], rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(ours.logits, hf_logits, rtol=1e-5, atol=1e-5)
    errors |= {"boundary N": _rel(ours.hidden[N_LAYERS], hf_last_raw), "logits": _rel(ours.logits, hf_logits)}
    print(f"{case}: max relative error {max(errors.values()):.2e} ({max(errors, key=errors.__getitem__)})")


def test_config_features_are_read() -> None:
    qwen2 = LlamaConfig.from_hf(_hf_model("qwen2-bias").config.to_dict())
    assert (qwen2.qkv_bias, qwen2.o_bias, qwen2.qk_norm) == (True, False, False)
    qwen3 = LlamaConfig.from_hf(_hf_model("qwen3-qk-norm").config.to_dict())
    assert (qwen3.head_dim, qwen3.qk_norm, qwen3.qkv_bias) == (24, True, False)
    llama3 = LlamaConfig.from_hf(_hf_model("llama-llama3-rope").config.to_dict())
    assert llama3.rope_llama3 is not None and llama3.rope_llama3.factor == 8.0
    assert "qkv" not in layer_shapes(qwen2) and "self_attn.q_proj.bias" in layer_shapes(qwen2)


def test_config_legacy_rope_and_text_config_nesting() -> None:
    legacy = {
        **TINY,
        "model_type": "llama",
        "rope_theta": 500000.0,
        "rope_scaling": {
            "type": "llama3",
            **{k: v for k, v in LLAMA3_ROPE.items() if k not in ("rope_type", "rope_theta")},
        },
    }
    current = {**TINY, "model_type": "llama", "rope_parameters": {**LLAMA3_ROPE, "rope_theta": 500000.0}}
    wrapped = {"model_type": "llava", "tie_word_embeddings": False, "text_config": current}
    configs = [LlamaConfig.from_hf(raw) for raw in (legacy, current, wrapped)]
    assert configs[0] == configs[1] and configs[0].rope_theta == 500000.0
    assert configs[2] == replace(configs[1], defaults=configs[2].defaults)  # tie_word_embeddings read at top level
    assert configs[1].defaults == (*configs[2].defaults, "tie_word_embeddings=False")
    bare = LlamaConfig.from_hf({k: v for k, v in TINY.items() if k != "num_key_value_heads"} | {"model_type": "qwen2"})
    assert bare.num_kv_heads == 4 and bare.rope_theta == 10000.0
    assert {"num_key_value_heads=4", "rope_theta=10000.0", "rms_norm_eps=1e-06"} <= set(bare.defaults)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_size": None}, "'hidden_size' is missing"),
        ({"num_hidden_layers": "4"}, "must be a positive integer"),
        ({"model_type": "mixtral"}, "model_type 'mixtral'"),
        ({"model_type": "qwen3"}, "'head_dim' is missing"),
        ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, "rope type 'yarn'"),
        ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0}}, "'low_freq_factor' is missing"),
        ({"num_key_value_heads": 3}, "not a multiple"),
        ({"use_sliding_window": True}, "sliding-window"),
        ({"quantization_config": {"quant_method": "gptq", "bits": 4}}, "quantized (quant_method 'gptq'"),
    ],
)
def test_config_errors(change: dict[str, Any], message: str) -> None:
    raw = {**TINY, "model_type": "llama", **change}
    with pytest.raises(ConfigError, match=re.escape(message)):
        LlamaConfig.from_hf({k: v for k, v in raw.items() if v is not None})


def test_bad_inputs_are_typed_errors() -> None:
    model = _hf_model("llama-default-rope")
    config, state = LlamaConfig.from_hf(model.config.to_dict()), model.state_dict()
    with pytest.raises(InputError, match="capture boundaries"):
        forward_streaming(config, DictWeights(state), _input_ids(), capture=[N_LAYERS + 1])
    with pytest.raises(InputError, match="input_ids"):
        forward_streaming(config, DictWeights(state), torch.tensor([TINY["vocab_size"]]))
    state["model.layers.1.mlp.up_proj.weight"] = torch.zeros(95, 64)
    with pytest.raises(InputError, match=r"has shape \[95, 64\], the config implies \[96, 64\]"):
        forward_streaming(config, DictWeights(state), _input_ids())
    del state["model.norm.weight"]
    with pytest.raises(InputError, match=re.escape("'model.norm.weight' is not in the state dict")):
        forward_streaming(
            config, DictWeights(state | {"model.layers.1.mlp.up_proj.weight": torch.zeros(96, 64)}), _input_ids()
        )


def _save_sharded(state: dict[str, torch.Tensor], directory: Path) -> None:
    """Two shards (layers < 2 and the embedding in the first) plus model.safetensors.index.json."""
    first = {k: v for k, v in state.items() if k.startswith(("model.embed", "model.layers.0.", "model.layers.1."))}
    shards = {"model-00001-of-00002.safetensors": first}
    shards["model-00002-of-00002.safetensors"] = {k: v for k, v in state.items() if k not in first}
    weight_map = {}
    for shard, tensors in shards.items():
        save_file({k: v.clone().contiguous() for k, v in tensors.items()}, str(directory / shard))
        weight_map |= dict.fromkeys(tensors, shard)
    total = sum(v.numel() * v.element_size() for v in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("case", ["qwen3-qk-norm", "llama-tied"])
def test_safetensors_weights_match_state_dict(case: str, tmp_path: Path) -> None:
    model = _hf_model(case)
    config, state = LlamaConfig.from_hf(model.config.to_dict()), model.state_dict()
    if config.tie_word_embeddings:
        state.pop("lm_head.weight")
    _save_sharded(state, tmp_path)
    source = SafetensorsWeights(tmp_path)
    assert source.names() == sorted(state)
    ids = _input_ids()
    expected = forward_streaming(config, DictWeights(state), ids, capture=[0, 2, N_LAYERS])
    got = forward_streaming(config, source, ids, capture=[0, 2, N_LAYERS])
    assert torch.equal(got.logits, expected.logits) and torch.equal(got.final_hidden, expected.final_hidden)
    assert got.hidden.keys() == {0, 2, N_LAYERS}
    assert all(torch.equal(got.hidden[j], expected.hidden[j]) for j in got.hidden)

    single = tmp_path / "single"  # one file, no index
    single.mkdir()
    save_file({k: v.clone().contiguous() for k, v in state.items()}, str(single / "model.safetensors"))
    assert torch.equal(forward_streaming(config, SafetensorsWeights(single), ids).logits, expected.logits)
    with pytest.raises(InputError, match="not in the checkpoint"):
        source.get("model.layers.9.mlp.up_proj.weight")


class _Recording:
    """A WeightSource that hands out fresh copies and checks, at each read, that no layer before the one in use is
    alive: the pass reads layer i + 1 while layer i runs (reference/stream.py), never more."""

    def __init__(self, inner: DictWeights, num_layers: int = N_LAYERS) -> None:
        self.inner = inner
        self.num_layers = num_layers
        self.order: list[int | None] = []
        self.alive: dict[int, list[weakref.ref[torch.Tensor]]] = {}

    def names(self) -> list[str]:
        return self.inner.names()

    def get(self, name: str) -> torch.Tensor:
        match = re.match(r"model\.layers\.(\d+)\.", name)
        layer = int(match.group(1)) if match else None
        reading = self.num_layers if layer is None else layer  # the final norm and lm_head come after the layers
        for earlier, refs in self.alive.items():
            if earlier < reading - 1:
                assert all(r() is None for r in refs), f"layer {earlier} still referenced while reading {name}"
        tensor = self.inner.get(name).clone()
        if layer is not None:
            self.alive.setdefault(layer, []).append(weakref.ref(tensor))
        self.order.append(layer)
        return tensor


def test_streams_each_layer_once_reading_one_ahead() -> None:
    model = _hf_model("qwen3-qk-norm")
    config = LlamaConfig.from_hf(model.config.to_dict())
    source = _Recording(DictWeights(model.state_dict()))
    out = forward_streaming(config, source, _input_ids(), capture=[N_LAYERS])
    per_layer = len(layer_shapes(config))
    layers = [i for i in source.order if i is not None]
    assert layers == [i for i in range(N_LAYERS) for _ in range(per_layer)]  # each layer read once, in order
    assert source.order[0] is None and source.order[-2:] == [None, None]  # embedding first; norm and head last
    assert all(r() is None for refs in source.alive.values() for r in refs)  # nothing kept after the pass
    assert out.hidden.keys() == {N_LAYERS}


@pytest.mark.parametrize("case", ["llama-llama3-rope", "qwen3-qk-norm"])
def test_packed_sequences_equal_separate_runs(case: str) -> None:
    """Three sequences packed into one pass give each sequence exactly what its own pass gives (and HF's)."""
    model = _hf_model(case)
    config, weights = LlamaConfig.from_hf(model.config.to_dict()), DictWeights(model.state_dict())
    ids = _input_ids()
    lengths = [7, 1, T - 8]
    layers: list[int] = []
    packed = forward_streaming(config, weights, ids, capture=[0, 2, N_LAYERS], lengths=lengths, on_layer=layers.append)
    assert layers == list(range(N_LAYERS))
    start = 0
    for n in lengths:
        alone = forward_streaming(config, weights, ids[start : start + n], capture=[0, 2, N_LAYERS])
        for j in (0, 2, N_LAYERS):
            torch.testing.assert_close(packed.hidden[j][start : start + n], alone.hidden[j], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(packed.logits[start : start + n], alone.logits, rtol=1e-5, atol=1e-5)
        _, hf_logits, _ = hf_forward(model, ids[start : start + n])
        torch.testing.assert_close(packed.logits[start : start + n], hf_logits, rtol=1e-5, atol=1e-5)
        start += n
    # packing is not concatenation: the second sequence must not see the first
    joined = forward_streaming(config, weights, ids, capture=[N_LAYERS])
    assert not torch.allclose(joined.logits[7:8], packed.logits[7:8], rtol=1e-3, atol=1e-3)
    with pytest.raises(InputError, match="must be positive and add up"):
        forward_streaming(config, weights, ids, lengths=[T - 1])


def _qwen3_moe(tmp_path: Path, **extra: Any) -> tuple[Any, Path]:
    """A tiny Qwen3MoeForCausalLM saved by transformers (per-expert tensor names on disk, as released checkpoints)."""
    torch.manual_seed(0)
    settings = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": True}
    config = transformers.Qwen3MoeConfig(**TINY, head_dim=24, **(settings | extra))
    model = transformers.Qwen3MoeForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.randn_like(p) * 0.2 + (1.0 if "norm" in name else 0.0))
            elif "gate.weight" in name:  # a router that prefers some experts: routing matters
                p.copy_(torch.randn_like(p))
    model.save_pretrained(tmp_path)
    return model, tmp_path


@pytest.mark.parametrize(
    "extra",
    [{}, {"mlp_only_layers": [0, 2]}, {"decoder_sparse_step": 2, "norm_topk_prob": False}],
    ids=["all-sparse", "mlp-only-layers", "sparse-step"],
)
def test_qwen3_moe_parity_with_transformers(extra: dict[str, Any], tmp_path: Path) -> None:
    model, directory = _qwen3_moe(tmp_path, **extra)
    config = LlamaConfig.from_hf(json.loads((directory / "config.json").read_text()))
    assert config.moe is not None and config.qk_norm
    dense = set(range(N_LAYERS)) - config.moe.sparse_layers
    assert dense == set(extra.get("mlp_only_layers", [])) | ({0, 2} if extra.get("decoder_sparse_step") else set())
    weights = SafetensorsWeights(directory)
    assert "model.layers.1.mlp.experts.7.down_proj.weight" in weights.names()
    ids = _input_ids()
    hf_hidden, hf_logits, hf_last_raw = hf_forward(model, ids)
    ours = forward_streaming(config, weights, ids, capture=range(N_LAYERS + 1), lengths=[10, T - 10])
    first, _, _ = hf_forward(model, ids[:10])
    second_hidden, second_logits, _ = hf_forward(model, ids[10:])
    torch.testing.assert_close(ours.logits[:10], first[N_LAYERS] @ model.lm_head.weight.T, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.logits[10:], second_logits, rtol=1e-5, atol=1e-5)
    for j in range(N_LAYERS):
        torch.testing.assert_close(ours.hidden[j][10:], second_hidden[j], rtol=1e-5, atol=1e-5)
    alone = forward_streaming(config, weights, ids, capture=[N_LAYERS])  # one sequence: the whole of HF's run
    torch.testing.assert_close(alone.hidden[N_LAYERS], hf_last_raw, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(alone.logits, hf_logits, rtol=1e-5, atol=1e-5)
    assert len(hf_hidden) == N_LAYERS + 1


def test_qwen3_moe_reads_only_routed_experts(tmp_path: Path) -> None:
    _, directory = _qwen3_moe(tmp_path)
    config = LlamaConfig.from_hf(json.loads((directory / "config.json").read_text()))
    source = _Recording(SafetensorsWeights(directory))
    names: list[str] = []
    inner_get = source.get

    def get(name: str) -> torch.Tensor:
        names.append(name)
        return inner_get(name)

    source.get = get  # type: ignore[method-assign]
    forward_streaming(config, source, torch.tensor([3, 3, 3]), capture=[])  # one token id: few experts routed
    experts = {n.rsplit(".", 3)[0] for n in names if ".experts." in n}
    assert 0 < len(experts) <= 3 * 2 * N_LAYERS < 8 * N_LAYERS
    assert all(r() is None for refs in source.alive.values() for r in refs)
    with pytest.raises(ConfigError, match="num_experts_per_tok 9 exceeds num_experts 8"):
        LlamaConfig.from_hf(json.loads((directory / "config.json").read_text()) | {"num_experts_per_tok": 9})
