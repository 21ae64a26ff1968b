"""The weight formats targets ship in (eagle_convert.reference.formats), each dequantized to the compute dtype as the
streamed reference target (StreamedModel) reads it, on tiny random targets written in the format:

- block FP8 (``fp8``): a Qwen3 written by transformers' own FP8 quantizer op, and a DeepSeek-V3 (MLA, MoE experts
  per expert) whose dimensions are not multiples of the 128 x 128 block, as DeepSeek-V3's ``kv_a_proj_with_mqa`` is;
- MXFP4 (``mxfp4``): a gpt-oss, its experts as ``*_blocks``/``*_scales`` (written by hand: the format's own
  quantizer needs Triton kernels; read back by transformers' own reader);
- compressed-tensors: INT4 pack-quantized with Kimi K2 Thinking's config (its experts), FP8 (``FP8_DYNAMIC``) and
  NVFP4 (a MoE), each written by the compressed-tensors package's own compressors;
- ModelOpt NVFP4 and FP8 (``modelopt``; transformers has no reader for them): written by hand with ModelOpt's
  quantization rule (``NVFP4QTensor.quantize``: byte-identical to nvidia-modelopt 0.47's on these weights), declared
  in config.json or only in ``hf_quant_config.json``.

Every boundary below N must match, to 1e-5, transformers' own in-memory model: ``from_pretrained`` of the quantized
checkpoint where transformers dequantizes it on the CPU as the format means it, else ``from_pretrained`` of the same
target with the weights dequantized here by the format's documented math. A format the reference does not read is
refused, naming it, before any tensor is read.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from eagle_convert.errors import ConfigError, InputError  # noqa: E402
from eagle_convert.reference.hf_target import StreamedModel  # noqa: E402
from eagle_convert.reference.weights import SafetensorsWeights  # noqa: E402

TOLERANCE = 1e-5
LAYERS = 2
IDS = torch.tensor([3, 7, 11, 100, 5, 9, 22, 1, 64, 127])
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
_E2M1_BOUNDS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])

QWEN3 = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 128,
    "max_position_embeddings": 64,
    "tie_word_embeddings": False,
}
QWEN3_MOE = {**QWEN3, "moe_intermediate_size": 64, "num_experts": 4, "num_experts_per_tok": 2}
# dimensions that are not multiples of 128: q_a_proj [160, 256], kv_a_proj_with_mqa [192, 256], q_b_proj [256, 160]
DEEPSEEK_V3 = {
    "hidden_size": 256,
    "intermediate_size": 384,
    "moe_intermediate_size": 128,
    "num_hidden_layers": 3,  # layer 0 dense, 1 and 2 MoE: boundary 2 (below N) is the output of a MoE layer
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "q_lora_rank": 160,
    "kv_lora_rank": 160,
    "qk_rope_head_dim": 32,
    "qk_nope_head_dim": 32,
    "v_head_dim": 32,
    "vocab_size": 128,
    "max_position_embeddings": 64,
    "tie_word_embeddings": False,
}
GPT_OSS = {
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 128,
    "max_position_embeddings": 64,
    "sliding_window": 4,
    "layer_types": ["sliding_attention", "full_attention"],
    "tie_word_embeddings": False,
}
# Kimi K2 Thinking's quantization_config as it ships: INT4 (group 32, symmetric) routed experts, the rest bf16
KIMI_K2_THINKING = {
    "config_groups": {
        "group_0": {
            "input_activations": None,
            "output_activations": None,
            "targets": ["Linear"],
            "weights": {
                "actorder": None,
                "block_structure": None,
                "dynamic": False,
                "group_size": 32,
                "num_bits": 4,
                "observer": "minmax",
                "observer_kwargs": {},
                "strategy": "group",
                "symmetric": True,
                "type": "int",
            },
        }
    },
    "format": "pack-quantized",
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
    "kv_cache_scheme": None,
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed",
}


# ---- writing tiny targets --------------------------------------------------------------------------------------------


def _original(tmp: Path, config: Any, cls: Any) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """A tiny random target's config.json and float32 tensors, as transformers saves them (its checkpoint names:
    MoE experts one by one)."""
    torch.manual_seed(0)
    cls(config).save_pretrained(tmp)
    raw = json.loads((tmp / "config.json").read_text())
    return raw, safetensors_torch.load_file(str(tmp / "model.safetensors"))


def _write(directory: Path, raw: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    contiguous = {k: v.contiguous() for k, v in tensors.items()}
    safetensors_torch.save_file(contiguous, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(raw))
    return directory


def _unquantized(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k != "quantization_config"}


def _fp8_blocks(w: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Block FP8 as DeepSeek-V3 ships it: ``scale_inv`` [ceil(out / bo), ceil(in / bi)] = amax / 448 per block."""
    rows, cols = w.shape
    grid = (math.ceil(rows / block[0]), math.ceil(cols / block[1]))
    scale = torch.zeros(grid)
    for r in range(grid[0]):
        for c in range(grid[1]):
            tile = w[r * block[0] : (r + 1) * block[0], c * block[1] : (c + 1) * block[1]]
            scale[r, c] = tile.abs().amax() / 448.0
    return (w / _expand(scale, block, w.shape)).to(torch.float8_e4m3fn), scale


def _expand(scale: torch.Tensor, block: tuple[int, int], shape: torch.Size) -> torch.Tensor:
    return scale.repeat_interleave(block[0], 0)[: shape[0]].repeat_interleave(block[1], 1)[:, : shape[1]]


def _e2m1(x: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (sign bit 3) of ``x``, rounded to nearest, ties to even (ModelOpt's ``NVFP4QTensor._cast_fp4``)."""
    magnitude = x.abs().contiguous()
    ordinal = torch.searchsorted(_E2M1_BOUNDS, magnitude)
    tie_up = (magnitude.unsqueeze(-1) == _E2M1_BOUNDS[[1, 3, 5]]).any(-1)
    return ((x < 0).to(torch.uint8) << 3) + ordinal.to(torch.uint8) + tie_up.to(torch.uint8)


def _pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """Two E2M1 codes a byte, the first in the low nibble."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def _unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    return E2M1[torch.stack((packed & 0x0F, packed >> 4), dim=-1).flatten(-2).long()]


def _mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """gpt-oss's MXFP4 of ``w`` [..., rows, cols]: blocks [..., rows, cols / 32, 16] uint8, scales
    [..., rows, cols / 32] uint8 (E8M0: 2 ** (s - 127))."""
    groups = w.unflatten(-1, (-1, 32))
    exponent = torch.ceil(torch.log2(groups.abs().amax(-1) / 6.0)).clamp(-127, 127)
    codes = _e2m1(groups / torch.exp2(exponent).unsqueeze(-1))
    return _pack_nibbles(codes), (exponent + 127).to(torch.uint8)


def _mxfp4_math(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """MXFP4's documented value: E2M1 code times 2 ** (scale - 127), [..., rows, cols]."""
    values = _unpack_nibbles(blocks) * torch.exp2(scales.float() - 127.0).unsqueeze(-1)
    return values.flatten(-2)


def _nvfp4(w: torch.Tensor, group: int = 16) -> dict[str, torch.Tensor]:
    """ModelOpt's NVFP4 of ``w`` (``NVFP4QTensor.quantize``): ``weight_scale_2`` = amax / (6 * 448),
    ``weight_scale`` = block amax / (6 * weight_scale_2) in float8_e4m3fn, codes packed two a byte."""
    scale_2 = w.abs().amax().float() / (6.0 * 448.0)
    blocks = w.float().unflatten(-1, (-1, group))
    scale = (blocks.abs().amax(-1) / (6.0 * scale_2)).to(torch.float8_e4m3fn)
    codes = _e2m1(blocks / (scale.float() * scale_2).unsqueeze(-1)).flatten(-2)
    return {"weight": _pack_nibbles(codes), "weight_scale": scale, "weight_scale_2": scale_2}


def _nvfp4_math(packed: torch.Tensor, scale: torch.Tensor, scale_2: torch.Tensor, group: int = 16) -> torch.Tensor:
    """ModelOpt NVFP4's documented value: E2M1 code times weight_scale times weight_scale_2."""
    per_group = (scale.float() * scale_2.float()).unsqueeze(-1)
    return (_unpack_nibbles(packed).unflatten(-1, (-1, group)) * per_group).flatten(-2)


# ---- checking --------------------------------------------------------------------------------------------------------


def _relative(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return float((ours.double() - theirs.double()).norm() / theirs.double().norm().clamp_min(1e-30))


def _reference_states(directory: Path) -> tuple[torch.Tensor, ...]:
    """Boundaries 0..N-1 (and the final norm's output) as transformers' own in-memory model computes them."""
    model = transformers.AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
    with torch.no_grad():
        out = model(input_ids=IDS[None], output_hidden_states=True, use_cache=False)
    return tuple(h[0] for h in out.hidden_states)


def _streamed(directory: Path, raw: dict[str, Any], **kwargs: Any) -> StreamedModel:
    return StreamedModel(directory, raw, SafetensorsWeights(directory), resident=False, **kwargs)


def _matches(directory: Path, raw: dict[str, Any], reference: Path) -> StreamedModel:
    """The streamed target on ``directory`` against ``from_pretrained(reference)`` on every boundary j < N."""
    want = _reference_states(reference)
    model = _streamed(directory, raw)
    layers = model.num_layers
    got = model.forward(IDS, capture=range(layers + 1))
    assert layers == raw["num_hidden_layers"]
    for j in range(layers):
        error = _relative(got.hidden[j], want[j])
        assert error <= TOLERANCE, f"boundary {j}: relative error {error:.3g}"
    return model


# ---- block FP8 -------------------------------------------------------------------------------------------------------


def test_block_fp8_qwen3_matches_from_pretrained(tmp_path: Path) -> None:
    """A Qwen3-FP8-style target (weight_block_size [128, 128]) written by transformers' own FP8 quantizer op: it
    leaves the weights whose dimensions are not block multiples (k_proj, v_proj: 64 rows) unquantized, as a mixed
    checkpoint does. transformers dequantizes it on the CPU."""
    from transformers.integrations.finegrained_fp8 import Fp8Quantize
    from transformers.quantizers.auto import AutoHfQuantizer

    raw, state = _original(tmp_path / "dense", transformers.Qwen3Config(**QWEN3), transformers.Qwen3ForCausalLM)
    quant = {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic", "fmt": "e4m3"}
    quantize = Fp8Quantize(AutoHfQuantizer.from_config(dict(quant), pre_quantized=False))
    tensors: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        tensors |= quantize.convert({name: value}) if name.endswith("proj.weight") else {name: value}
    assert tensors["model.layers.0.mlp.gate_proj.weight"].dtype == torch.float8_e4m3fn
    assert tensors["model.layers.0.mlp.gate_proj.weight_scale_inv"].shape == (2, 1)
    assert tensors["model.layers.0.self_attn.k_proj.weight"].dtype == torch.float32  # left unquantized
    directory = _write(tmp_path / "fp8", {**raw, "quantization_config": quant}, tensors)

    model = _matches(directory, {**raw, "quantization_config": quant}, directory)
    weight = model.parameter("model.layers.1.mlp.down_proj.weight")
    stored = tensors["model.layers.1.mlp.down_proj.weight"]
    scale = tensors["model.layers.1.mlp.down_proj.weight_scale_inv"]
    assert weight.dtype == torch.float32
    assert torch.equal(weight, stored.float() * _expand(scale, (128, 128), stored.shape))


def test_block_fp8_ragged_blocks_deepseek_v3(tmp_path: Path) -> None:
    """A DeepSeek-V3 FP8 target whose weights are not all block multiples (q_a_proj 160 rows, kv_a_proj_with_mqa
    192: scales [2, 2] for blocks of 128; DeepSeek-V3's own is 576 rows, 5 scale rows), the experts quantized one by
    one. transformers 5.24's own op derives the block from the scale grid (96 rows here: a wrong dequantization;
    576 / 5: an error), so the reference is the target dequantized by the documented math (block i // 128)."""
    raw, state = _original(
        tmp_path / "dense", transformers.DeepseekV3Config(**DEEPSEEK_V3), transformers.DeepseekV3ForCausalLM
    )
    block = (128, 128)
    tensors: dict[str, torch.Tensor] = {}
    dequantized: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        if value.dim() == 2 and name.endswith(("proj.weight", "proj_with_mqa.weight")):
            weight, scale = _fp8_blocks(value, block)
            tensors |= {name: weight, name + "_scale_inv": scale}
            dequantized[name] = weight.float() * _expand(scale, block, weight.shape)
        else:
            tensors[name] = dequantized[name] = value
    assert tensors["model.layers.1.self_attn.kv_a_proj_with_mqa.weight_scale_inv"].shape == (2, 2)
    assert "model.layers.1.mlp.experts.3.down_proj.weight_scale_inv" in tensors
    quant = {"quant_method": "fp8", "weight_block_size": list(block), "activation_scheme": "dynamic", "fmt": "e4m3"}
    raw = {**raw, "quantization_config": quant}
    directory = _write(tmp_path / "fp8", raw, tensors)
    reference = _write(tmp_path / "reference", _unquantized(raw), dequantized)

    model = _matches(directory, raw, reference)
    name = "model.layers.1.self_attn.kv_a_proj_with_mqa.weight"
    assert torch.equal(model.parameter(name), dequantized[name])


# ---- MXFP4 -----------------------------------------------------------------------------------------------------------


def test_mxfp4_gpt_oss_matches_from_pretrained(tmp_path: Path) -> None:
    """A gpt-oss target as it ships (experts' gate_up_proj/down_proj as ``*_blocks`` [E, out, in / 32, 16] and
    ``*_scales`` [E, out, in / 32], uint8; attention, router, embeddings unquantized): transformers dequantizes it
    on the CPU; the streamed experts are the documented math (E2M1 code times 2 ** (scale - 127)), which is also
    what transformers' own reader makes of the bytes."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    raw, state = _original(tmp_path / "dense", transformers.GptOssConfig(**GPT_OSS), transformers.GptOssForCausalLM)
    tensors: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):  # [E, in, out] -> stored [E, out, in]
            blocks, scales = _mxfp4(value.transpose(1, 2))
            tensors |= {name + "_blocks": blocks, name + "_scales": scales}
            math_value = _mxfp4_math(blocks, scales)
            assert torch.equal(
                convert_moe_packed_tensors(blocks, scales, dtype=torch.float32), math_value.transpose(1, 2)
            )
        else:
            tensors[name] = value
    raw["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
    }
    directory = _write(tmp_path / "mxfp4", raw, tensors)

    model = _matches(directory, raw, directory)
    name = "model.layers.1.mlp.experts.gate_up_proj"
    expected = _mxfp4_math(tensors[name + "_blocks"], tensors[name + "_scales"]).transpose(1, 2)
    assert torch.equal(model.parameter(name), expected)


# ---- compressed-tensors ----------------------------------------------------------------------------------------------


def _ct_compress(weight: torch.Tensor, scheme: Any, fmt: str) -> dict[str, torch.Tensor]:
    """One module's weight compressed by the compressed-tensors package (its qparams and its compressor)."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam

    args = scheme.weights
    global_scale = None
    if args.strategy in ("group", "tensor_group"):
        groups = weight.unflatten(-1, (-1, args.group_size))
        low, high = groups.amin(-1), groups.amax(-1)
    elif args.strategy == "block":  # one scale a [bo, bi] block, the ragged edge padded with zeros (as the package)
        from compressed_tensors.quantization.utils import maybe_pad_tensor_for_block_quant

        (bo, bi), padded = args.block_structure, maybe_pad_tensor_for_block_quant(weight, args.block_structure)
        blocks = padded.unflatten(0, (-1, bo)).unflatten(-1, (-1, bi))  # [rows / bo, bo, cols / bi, bi]
        low, high = blocks.amin((1, 3)), blocks.amax((1, 3))
    else:  # channel
        low, high = weight.amin(-1, keepdim=True), weight.amax(-1, keepdim=True)
    state = {"weight": weight}
    if args.strategy == "tensor_group":
        global_scale = state["weight_global_scale"] = generate_gparam(weight.amin(), weight.amax())
    state["weight_scale"], _ = calculate_qparams(low, high, args, global_scale=global_scale)
    return dict(BaseCompressor.get_value_from_registry(fmt).compress(state, scheme))


def _ct_target(
    tmp: Path, config: Any, cls: Any, quant: dict[str, Any], selected: Any, dtype: torch.dtype = torch.float32
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """A target whose ``selected`` modules' weights (cast to ``dtype``) are compressed by compressed-tensors with
    ``quant``'s one config group."""
    from compressed_tensors.quantization import QuantizationConfig

    parsed = QuantizationConfig.model_validate({k: v for k, v in quant.items() if k != "quant_method"})
    scheme = parsed.config_groups["group_0"]
    raw, state = _original(tmp, config, cls)
    tensors: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and value.dim() == 2 and selected(module):
            compressed = _ct_compress(value.to(dtype), scheme, parsed.format)
            tensors |= {f"{module}.{k}": v for k, v in compressed.items()}
        else:
            tensors[name] = value
    return {**raw, "quantization_config": quant}, tensors


def _int4_math(packed: torch.Tensor, scale: torch.Tensor, group: int = 32) -> torch.Tensor:
    """compressed-tensors' symmetric INT4 (pack-quantized): eight 4-bit values an int32, the first in the low bits,
    each stored plus 8; the weight is (nibble - 8) * scale, one scale per ``group`` inputs."""
    nibbles = torch.stack([(packed >> (4 * i)) & 0xF for i in range(8)], dim=-1).flatten(-2) - 8
    return (nibbles.float().unflatten(-1, (-1, group)) * scale.float().unsqueeze(-1)).flatten(-2)


def test_compressed_tensors_int4_kimi_k2_thinking(tmp_path: Path) -> None:
    """Kimi K2 Thinking's format: a DeepSeek-V3 (read as ``kimi_k2``, the config Kimi ships) whose routed experts are
    INT4 pack-quantized (``weight_packed`` int32, ``weight_scale`` bfloat16 per 32 inputs, ``weight_shape``), the rest
    unquantized. The reference is the documented math in float32: transformers' from_pretrained (through
    compressed-tensors) computes the weights in the scales' bfloat16, which moves boundary 2 by ~1e-3; its values,
    rounded to bfloat16, are the same (checked on one expert)."""
    pytest.importorskip("compressed_tensors")
    raw, tensors = _ct_target(
        tmp_path / "dense",
        transformers.DeepseekV3Config(**DEEPSEEK_V3),
        transformers.DeepseekV3ForCausalLM,
        KIMI_K2_THINKING,
        lambda m: ".experts." in m and "shared" not in m,
        torch.bfloat16,
    )
    packed_name = "model.layers.1.mlp.experts.2.down_proj.weight_packed"
    assert tensors[packed_name].dtype == torch.int32 and tensors[packed_name].shape == (256, 128 // 8)
    assert tensors["model.layers.1.mlp.experts.2.down_proj.weight_scale"].dtype == torch.bfloat16
    assert tensors["model.layers.1.self_attn.q_a_proj.weight"].dtype == torch.float32  # ignored: left as it is
    dequantized: dict[str, torch.Tensor] = {}
    for key, value in tensors.items():
        if key.endswith(".weight_packed"):
            module = key.removesuffix(".weight_packed")
            dequantized[module + ".weight"] = _int4_math(value, tensors[module + ".weight_scale"])
        elif not key.endswith((".weight_scale", ".weight_shape")):
            dequantized[key] = value
    directory = _write(tmp_path / "int4", raw, tensors)
    reference = _write(tmp_path / "reference", _unquantized(raw), dequantized)
    kimi = {
        **raw,
        "model_type": "kimi_k2",
        "architectures": ["DeepseekV3ForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"},
    }

    model = _matches(directory, kimi, reference)
    merged = model.parameter("model.layers.1.mlp.experts.down_proj")  # [E, out, in]
    expected = dequantized["model.layers.1.mlp.experts.2.down_proj.weight"]
    assert merged.dtype == torch.float32
    assert torch.equal(merged[2], expected)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
    with torch.no_grad():
        theirs(input_ids=IDS[None, :2])  # compressed-tensors decompresses on the first forward
    assert torch.equal(theirs.model.layers[1].mlp.experts.down_proj[2].float(), expected.to(torch.bfloat16).float())


def _ct_preset(preset: str, fmt: str, ignore: list[str]) -> dict[str, Any]:
    """A compressed-tensors quantization_config of one preset scheme for every Linear, as its package writes it."""
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.quantization import QuantizationConfig, preset_name_to_scheme

    quant: dict[str, Any] = QuantizationConfig(
        config_groups={"group_0": preset_name_to_scheme(preset, ["Linear"])},
        format=fmt,
        ignore=ignore,
        quantization_status="compressed",
    ).model_dump(mode="json")
    quant["quant_method"] = "compressed-tensors"
    return quant


def test_compressed_tensors_fp8_matches_documented_math(tmp_path: Path) -> None:
    """compressed-tensors FP8 (``FP8_DYNAMIC``: float8_e4m3fn weights, a float32 scale per output channel). The
    reference is the target with the weights dequantized by the documented math (weight * scale): transformers'
    from_pretrained also quantizes the activations to FP8 at run time, which the reference does not."""
    quant = _ct_preset("FP8_DYNAMIC", "float-quantized", ["lm_head"])
    raw, tensors = _ct_target(
        tmp_path / "dense",
        transformers.Qwen3Config(**QWEN3),
        transformers.Qwen3ForCausalLM,
        quant,
        lambda m: m.endswith("proj"),
    )
    name = "model.layers.0.self_attn.o_proj.weight"
    assert tensors[name].dtype == torch.float8_e4m3fn and tensors[name + "_scale"].shape == (128, 1)
    dequantized = {
        k: v.float() * tensors[k + "_scale"] if v.dtype == torch.float8_e4m3fn else v
        for k, v in tensors.items()
        if not k.endswith("weight_scale")
    }
    directory = _write(tmp_path / "fp8", raw, tensors)
    reference = _write(tmp_path / "reference", _unquantized(raw), dequantized)

    model = _matches(directory, raw, reference)
    assert torch.equal(model.parameter(name), dequantized[name])


def test_compressed_tensors_nvfp4_moe_matches_documented_math(tmp_path: Path) -> None:
    """compressed-tensors NVFP4 (``NVFP4A16``) on a Qwen3-MoE, its experts included: ``weight_packed`` uint8,
    ``weight_scale`` float8_e4m3fn per 16 inputs, ``weight_global_scale``; the weight is code * scale / global.
    transformers 5.24 drops the experts' global scale and rounds through bfloat16 (its from_pretrained fails on a
    float32 CPU model), so the reference is the documented math."""
    quant = _ct_preset("NVFP4A16", "nvfp4-pack-quantized", ["lm_head", "re:.*mlp.gate$"])
    raw, tensors = _ct_target(
        tmp_path / "dense",
        transformers.Qwen3MoeConfig(**QWEN3_MOE),
        transformers.Qwen3MoeForCausalLM,
        quant,
        lambda m: m.endswith("proj"),
    )
    dequantized: dict[str, torch.Tensor] = {}
    for key, value in tensors.items():
        if key.endswith(".weight_packed"):
            module = key.removesuffix(".weight_packed")
            per_group = tensors[module + ".weight_scale"].float() / tensors[module + ".weight_global_scale"]
            codes = _unpack_nibbles(value).unflatten(-1, (-1, 16))
            dequantized[module + ".weight"] = (codes * per_group.unsqueeze(-1)).flatten(-2)
        elif not key.endswith((".weight_scale", ".weight_global_scale")):
            dequantized[key] = value
    assert tensors["model.layers.0.mlp.experts.1.up_proj.weight_packed"].dtype == torch.uint8
    directory = _write(tmp_path / "nvfp4", raw, tensors)
    reference = _write(tmp_path / "reference", _unquantized(raw), dequantized)

    model = _matches(directory, raw, reference)
    merged = model.parameter("model.layers.1.mlp.experts.down_proj")
    expected = dequantized["model.layers.1.mlp.experts.3.down_proj.weight"]
    assert _relative(merged[3], expected) <= 1e-6


# ---- ModelOpt NVFP4 and FP8 ------------------------------------------------------------------------------------------

MODELOPT_NVFP4 = {
    "config_groups": {
        "group_0": {
            "input_activations": {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16},
            "weights": {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16},
            "targets": ["Linear"],
        }
    },
    "ignore": ["lm_head", "model.layers.*.mlp.gate"],
    "quant_algo": "NVFP4",
    "producer": {"name": "modelopt", "version": "0.47.0"},
    "quant_method": "modelopt",
}


def _modelopt_target(
    tmp: Path, config: Any, cls: Any
) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """A target exported as ModelOpt NVFP4 (every ``*proj`` linear, experts one by one; ``input_scale`` beside
    each), and its weights dequantized by the documented math."""
    raw, state = _original(tmp, config, cls)
    tensors: dict[str, torch.Tensor] = {}
    dequantized: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        if name.endswith("proj.weight"):
            module = name.removesuffix(".weight")
            quantized = _nvfp4(value)
            tensors |= {f"{module}.{k}": v for k, v in quantized.items()}
            tensors[f"{module}.input_scale"] = torch.tensor(0.0125)
            dequantized[name] = _nvfp4_math(quantized["weight"], quantized["weight_scale"], quantized["weight_scale_2"])
        else:
            tensors[name] = dequantized[name] = value
    return raw, tensors, dequantized


@pytest.mark.parametrize("declared", ["config.json", "hf_quant_config.json"])
def test_modelopt_nvfp4_matches_documented_math(tmp_path: Path, declared: str) -> None:
    """ModelOpt NVFP4 (nvidia's -FP4 checkpoints): ``weight`` uint8 (two E2M1 codes a byte, the low nibble first),
    ``weight_scale`` float8_e4m3fn per 16 inputs, ``weight_scale_2`` float32; declared in config.json's
    quantization_config, or only in ModelOpt's hf_quant_config.json. transformers 5.24 cannot read it (no
    ``modelopt`` quant method; its ``nvfp4`` quantizer refuses pre-quantized weights), so the reference is the
    documented math (code * weight_scale * weight_scale_2)."""
    raw, tensors, dequantized = _modelopt_target(
        tmp_path / "dense", transformers.Qwen3Config(**QWEN3), transformers.Qwen3ForCausalLM
    )
    name = "model.layers.0.mlp.down_proj.weight"
    assert tensors[name].dtype == torch.uint8 and tensors[name].shape == (128, 128)
    assert tensors[name.replace("weight", "weight_scale")].shape == (128, 16)
    if declared == "config.json":
        raw["quantization_config"] = MODELOPT_NVFP4
        directory = _write(tmp_path / "nvfp4", raw, tensors)
    else:
        directory = _write(tmp_path / "nvfp4", raw, tensors)
        sidecar = {
            "producer": {"name": "modelopt", "version": "0.29.0"},
            "quantization": {
                "quant_algo": "NVFP4",
                "kv_cache_quant_algo": None,
                "group_size": 16,
                "exclude_modules": ["lm_head"],
            },
        }
        (directory / "hf_quant_config.json").write_text(json.dumps(sidecar))
    reference = _write(tmp_path / "reference", _unquantized(raw), dequantized)

    model = _matches(directory, raw, reference)
    assert torch.equal(model.parameter(name), dequantized[name])


def test_modelopt_nvfp4_moe_experts(tmp_path: Path) -> None:
    """ModelOpt NVFP4 on a Qwen3-MoE: each expert's weight and scales are dequantized before transformers merges the
    experts into one tensor; in bfloat16 compute the weights come out in bfloat16."""
    raw, tensors, dequantized = _modelopt_target(
        tmp_path / "dense", transformers.Qwen3MoeConfig(**QWEN3_MOE), transformers.Qwen3MoeForCausalLM
    )
    raw["quantization_config"] = MODELOPT_NVFP4
    directory = _write(tmp_path / "nvfp4", raw, tensors)
    reference = _write(tmp_path / "reference", _unquantized(raw), dequantized)

    model = _matches(directory, raw, reference)
    merged = model.parameter("model.layers.1.mlp.experts.gate_up_proj")  # [E, 2 * I, H]: gate rows, then up rows
    expert = [dequantized[f"model.layers.1.mlp.experts.1.{p}_proj.weight"] for p in ("gate", "up")]
    assert torch.equal(merged[1], torch.cat(expert))
    half = _streamed(directory, raw, dtype=torch.bfloat16)
    down = half.parameter("model.layers.0.mlp.experts.down_proj")
    assert down.dtype == torch.bfloat16
    assert torch.equal(down[0], dequantized["model.layers.0.mlp.experts.0.down_proj.weight"].to(torch.bfloat16))


def test_modelopt_fp8_per_tensor(tmp_path: Path) -> None:
    """ModelOpt FP8 (nvidia's -FP8 checkpoints): ``weight`` float8_e4m3fn, ``weight_scale`` one float32 per tensor,
    ``input_scale`` beside it; the weight is weight * weight_scale."""
    raw, state = _original(tmp_path / "dense", transformers.Qwen3Config(**QWEN3), transformers.Qwen3ForCausalLM)
    tensors: dict[str, torch.Tensor] = {}
    dequantized: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        if name.endswith("proj.weight"):
            module = name.removesuffix(".weight")
            scale = value.abs().amax() / 448.0
            weight = (value / scale).to(torch.float8_e4m3fn)
            tensors |= {name: weight, f"{module}.weight_scale": scale, f"{module}.input_scale": torch.tensor(0.02)}
            dequantized[name] = weight.float() * scale
        else:
            tensors[name] = dequantized[name] = value
    raw["quantization_config"] = {
        "quant_method": "modelopt",
        "quant_algo": "FP8",
        "kv_cache_quant_algo": None,
        "exclude_modules": ["lm_head"],
    }
    directory = _write(tmp_path / "fp8", raw, tensors)
    reference = _write(tmp_path / "reference", _unquantized(raw), dequantized)

    model = _matches(directory, raw, reference)
    name = "model.layers.1.self_attn.q_proj.weight"
    assert torch.equal(model.parameter(name), dequantized[name])


# ---- refusals --------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """A tiny unquantized Qwen3 target's config and tensors (each refusal writes them with its quantization_config)."""
    return _original(tmp_path_factory.mktemp("tiny"), transformers.Qwen3Config(**QWEN3), transformers.Qwen3ForCausalLM)


@pytest.mark.parametrize(
    ("quant", "named"),
    [
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}, "'awq'"),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "'gptq'"),
        ({"quant_method": "zebra-q9", "bits": 3}, "'zebra-q9'"),
        ({"bits": 4}, "no quant_method"),
        ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "W4A8_AWQ"),
        (
            {
                "quant_method": "modelopt",
                "quant_algo": "MIXED_PRECISION",
                "quantized_layers": {"model.layers.0.mlp.down_proj": {"quant_algo": "NVFP4_AWQ"}},
            },
            "NVFP4_AWQ",
        ),
    ],
)
def test_unknown_format_is_refused_before_reading(
    tiny: tuple[dict[str, Any], dict[str, torch.Tensor]],
    quant: dict[str, Any],
    named: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A format the reference does not read (another quant_method, one transformers does not know, none, or a
    ModelOpt algorithm other than NVFP4/FP8) is refused with its name before any tensor is read."""
    raw, tensors = tiny
    raw = {**raw, "quantization_config": quant}
    directory = _write(tmp_path, raw, tensors)
    read: list[str] = []
    monkeypatch.setattr(SafetensorsWeights, "read", lambda self, name: read.append(name))
    with pytest.raises(ConfigError, match=named):
        _streamed(directory, raw)
    assert read == []


def test_compressed_tensors_without_its_package_is_refused(
    tiny: tuple[dict[str, Any], dict[str, torch.Tensor]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compressed-tensors target where that package is not installed: refused, saying what to install."""
    raw, tensors = tiny
    raw = {**raw, "quantization_config": KIMI_K2_THINKING}
    directory = _write(tmp_path, raw, tensors)
    monkeypatch.setattr(transformers.utils.import_utils, "is_compressed_tensors_available", lambda *a, **k: False)
    read: list[str] = []
    monkeypatch.setattr(SafetensorsWeights, "read", lambda self, name: read.append(name))
    with pytest.raises(ConfigError, match="compressed-tensors package") as caught:
        _streamed(directory, raw)
    assert "pip install compressed-tensors" in str(caught.value.hint)
    assert read == []


def test_a_weight_that_does_not_fit_its_scales_is_an_input_error(
    tiny: tuple[dict[str, Any], dict[str, torch.Tensor]], tmp_path: Path
) -> None:
    """A dequantization that fails (a ModelOpt NVFP4 weight whose scales are for another shape) says which tensor,
    rather than reading as a missing one."""
    raw, state = tiny
    tensors = dict(state)
    for name in [n for n in state if n.endswith("proj.weight")]:
        module = name.removesuffix(".weight")
        tensors |= {f"{module}.{k}": v for k, v in _nvfp4(state[name]).items()}
    tensors["model.layers.0.mlp.up_proj.weight_scale"] = tensors["model.layers.0.mlp.up_proj.weight_scale"][:, :4]
    raw = {**raw, "quantization_config": MODELOPT_NVFP4}
    directory = _write(tmp_path, raw, tensors)
    model = _streamed(directory, raw)
    with pytest.raises(InputError, match=r"model\.layers\.0\.mlp\.up_proj\.weight.*does not fit its scale"):
        model.forward(IDS)
