"""Quantized targets as their producers write them, read by the streamed reference (reference/formats.py,
reference/quant_tensors.py) and compared with an exact dequantization done in numpy from the files' bytes
(:func:`_exact`: the safetensors header parsed here, FP8 and bfloat16 decoded bit by bit), since transformers is not
exact on these (it rounds compressed-tensors weights to bfloat16; it cannot read FineGrainedFP8's own save on a CPU):

- compressed-tensors FP8 **block** with MoE experts, as llmcompressor writes it (its ``LinearExperts`` unfuses
  transformers' experts into one ``nn.Linear`` an expert, ``experts.E.gate_proj`` ...: llm-compressor
  ``src/llmcompressor/modeling/moe/linearize.py``; scheme ``FP8_BLOCK``, ignore ``lm_head`` and the router:
  ``examples/quantization_w8a8_fp8/fp8_block_example.py``), each module compressed by the compressed-tensors package
  itself, for a Qwen3-MoE and a DeepSeek-V3 (its 160-row ``q_a_proj``: a ragged block);
- a Qwen3-MoE quantized and saved by transformers itself with ``FineGrainedFP8Config`` (experts' weights one by one
  beside the fused scales of its in-memory experts; a scale of uninitialized memory beside each weight it left
  unquantized);
- and the refusals: an FP8 weight without its scale, a scale of the wrong shape, an unknown ``quant_method``: exit 2
  before any tensor is read, one ``Error:`` naming the file and the tensor.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from eagle_convert.errors import InputError  # noqa: E402
from eagle_convert.reference.weights import SafetensorsWeights  # noqa: E402
from tests import cli_process  # noqa: E402
from tests.reference.test_reference_formats import (  # noqa: E402
    DEEPSEEK_V3,
    IDS,
    QWEN3,
    QWEN3_MOE,
    _ct_preset,
    _ct_target,
    _fp8_blocks,
    _matches,
    _original,
    _relative,
    _streamed,
    _unquantized,
    _write,
)

ROOT = Path(__file__).resolve().parents[2]
EXACT = 1e-6  # float32 products of the same factors: the streamed weight against the numpy one
# a Qwen3-MoE whose dimensions span several 128 x 128 blocks (down_proj [256, 128]: scales [2, 1])
QWEN3_MOE_BLOCKS = {**QWEN3_MOE, "hidden_size": 256, "moe_intermediate_size": 128}


# ---- the exact dequantization, from the bytes ------------------------------------------------------------------------


def _stored(path: Path) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    """Every tensor of a safetensors file as (dtype, shape, bytes), from its header (parsed here, not by a library)."""
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    header.pop("__metadata__", None)
    start = 8 + size
    return {
        name: (
            entry["dtype"],
            tuple(entry["shape"]),
            data[start + entry["data_offsets"][0] : start + entry["data_offsets"][1]],
        )
        for name, entry in header.items()
    }


def _decode(dtype: str, shape: tuple[int, ...], raw: bytes) -> np.ndarray:
    """A stored tensor as float64: FP8 E4M3 (bias 7, no infinities, S.1111.111 NaN) and bfloat16 decoded from
    their bits."""
    if dtype == "F8_E4M3":
        bits = np.frombuffer(raw, dtype=np.uint8).astype(np.int64)
        sign = np.where(bits >> 7, -1.0, 1.0)
        exponent, mantissa = (bits >> 3) & 0xF, bits & 0x7
        value = np.where(
            exponent == 0, mantissa / 8.0 * 2.0**-6, (1.0 + mantissa / 8.0) * np.exp2(exponent.astype(np.float64) - 7)
        )
        value = np.where((exponent == 15) & (mantissa == 7), np.nan, value)
        return (sign * value).reshape(shape)
    if dtype == "BF16":
        return (
            (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16)
            .view(np.float32)
            .astype(np.float64)
            .reshape(shape)
        )
    return np.frombuffer(raw, dtype={"F32": np.float32, "F16": np.float16}[dtype]).astype(np.float64).reshape(shape)


def _exact(weight: np.ndarray, scale: np.ndarray, block: tuple[int, int]) -> np.ndarray:
    """``weight`` [out, in] times its block scales [ceil(out / bo), ceil(in / bi)] (a 1-element scale: per tensor)."""
    if scale.size == 1:
        return weight * scale.reshape(())
    rows, cols = np.arange(weight.shape[0]) // block[0], np.arange(weight.shape[1]) // block[1]
    return weight * scale[rows][:, cols]


def _close(ours: torch.Tensor, exact: np.ndarray) -> float:
    return _relative(ours, torch.from_numpy(np.ascontiguousarray(exact)))


# ---- compressed-tensors FP8 block, MoE experts (llmcompressor's layout) ---------------------------------------------

CT_FAMILIES = {
    "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM, QWEN3_MOE_BLOCKS),
    "deepseek_v3": (transformers.DeepseekV3Config, transformers.DeepseekV3ForCausalLM, DEEPSEEK_V3),
}


@pytest.mark.parametrize("family", sorted(CT_FAMILIES))
def test_compressed_tensors_fp8_block_moe_equals_the_exact_dequantization(family: str, tmp_path: Path) -> None:
    """Before (0421174): refused at ``experts.down_proj`` (transformers multiplies each expert's FP8 weight by its
    scale grid as it is, which broadcasts a per-channel scale but not a [2, 1] block grid)."""
    pytest.importorskip("compressed_tensors")
    config_cls, model_cls, sizes = CT_FAMILIES[family]
    quant = _ct_preset("FP8_BLOCK", "float-quantized", ["lm_head", "re:.*mlp.gate$"])
    raw, tensors = _ct_target(
        tmp_path / "dense", config_cls(**sizes), model_cls, quant, lambda m: m.endswith(("proj", "proj_with_mqa")),
        torch.bfloat16,  # llmcompressor quantizes the model in its own dtype: bfloat16 weights, bfloat16 scales
    )  # fmt: skip
    directory = _write(tmp_path / "fp8-block", raw, tensors)
    stored = _stored(directory / "model.safetensors")
    expert = "model.layers.1.mlp.experts.1.down_proj"
    assert stored[expert + ".weight"][0] == "F8_E4M3" and stored[expert + ".weight_scale"][:2] == ("BF16", (2, 1))
    exact: dict[str, np.ndarray] = {}
    for name, (dtype, shape, data) in stored.items():
        if name.endswith(".weight_scale"):
            continue
        value = _decode(dtype, shape, data)
        if dtype == "F8_E4M3":
            value = _exact(value, _decode(*stored[name + "_scale"]), (128, 128))
        exact[name] = value
    reference = _write(
        tmp_path / "reference", _unquantized(raw), {k: torch.from_numpy(v).float() for k, v in exact.items()}
    )

    model = _matches(directory, raw, reference)
    merged = model.parameter("model.layers.1.mlp.experts.down_proj")  # [E, out, in]
    assert _close(merged[1], exact[expert + ".weight"]) <= EXACT
    gate_up = model.parameter("model.layers.1.mlp.experts.gate_up_proj")  # [E, 2 * I, H]: gate rows, then up rows
    both = np.concatenate([exact[f"model.layers.1.mlp.experts.3.{p}_proj.weight"] for p in ("gate", "up")])
    assert _close(gate_up[3], both) <= EXACT
    dense = "model.layers.1.self_attn.q_a_proj.weight" if family == "deepseek_v3" else "model.layers.1.mlp.gate.weight"
    assert _close(model.parameter(dense), exact[dense]) <= EXACT


# ---- transformers' FineGrainedFP8Config save of a MoE ----------------------------------------------------------------


def _fine_grained_fp8(tmp: Path, sizes: dict[str, Any]) -> Path:
    """A Qwen3-MoE quantized by transformers' own FineGrainedFP8 quantizer as it loads, and saved by its own
    ``save_pretrained``. transformers refuses to quantize without a GPU in ``validate_environment``; the quantization
    itself is plain torch, so that one check is lifted while it runs."""
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer

    torch.manual_seed(0)
    transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**sizes)).save_pretrained(tmp / "dense")
    lifted = pytest.MonkeyPatch()
    lifted.setattr(FineGrainedFP8HfQuantizer, "validate_environment", lambda self, *a, **k: None)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(tmp / "dense"),
            quantization_config=transformers.FineGrainedFP8Config(weight_block_size=(128, 128)),
            dtype=torch.bfloat16,
        )
    finally:
        lifted.undo()
    model.save_pretrained(tmp / "fp8")
    return tmp / "fp8"


@pytest.mark.parametrize("intermediate", [128, 64])
def test_fine_grained_fp8_moe_equals_the_exact_dequantization(intermediate: int, tmp_path: Path) -> None:
    """Before (0421174): "internal error" (the experts' FP8 weights reached the forward unscaled: their scales are
    fused, under names transformers' loader does not read). ``intermediate`` 64: gate and up rows share a 128-row
    block of the fused scale, and the experts' down_proj [256, 64] is left unquantized (a fused scale of uninitialized
    memory beside it)."""
    sizes = {**QWEN3_MOE_BLOCKS, "moe_intermediate_size": intermediate}
    directory = _fine_grained_fp8(tmp_path, sizes)
    raw = json.loads((directory / "config.json").read_text())
    stored = _stored(directory / "model.safetensors")
    fused = stored["model.layers.0.mlp.experts.gate_up_proj_scale_inv"]
    assert stored["model.layers.0.mlp.experts.2.up_proj.weight"][0] == "F8_E4M3"
    assert fused[1] == (4, math.ceil(2 * intermediate / 128), 2)
    assert "model.layers.0.mlp.experts.2.up_proj.weight_scale_inv" not in stored
    assert stored["model.layers.0.self_attn.k_proj.weight"][0] == "BF16"  # left unquantized, a scale beside it
    exact: dict[str, np.ndarray] = {}
    for name, (dtype, shape, data) in stored.items():
        if not name.endswith("scale_inv"):
            exact[name] = _decode(dtype, shape, data)
    for layer in range(sizes["num_hidden_layers"]):
        experts = f"model.layers.{layer}.mlp.experts"
        for fused_name, parts in (("gate_up_proj", ("gate_proj", "up_proj")), ("down_proj", ("down_proj",))):
            scales = _decode(*stored[f"{experts}.{fused_name}_scale_inv"])
            for e in range(sizes["num_experts"]):
                names = [f"{experts}.{e}.{p}.weight" for p in parts]
                if stored[names[0]][0] != "F8_E4M3":  # left unquantized (a dimension not a block multiple)
                    continue
                whole = _exact(np.concatenate([exact[n] for n in names]), scales[e], (128, 128))
                for n, piece in zip(names, np.split(whole, len(names)), strict=True):
                    exact[n] = piece
        for proj in ("q_proj", "o_proj"):
            name = f"model.layers.{layer}.self_attn.{proj}.weight"
            if stored[name][0] == "F8_E4M3":
                exact[name] = _exact(exact[name], _decode(*stored[name + "_scale_inv"]), (128, 128))
    reference = _write(
        tmp_path / "reference", _unquantized(raw), {k: torch.from_numpy(v).float() for k, v in exact.items()}
    )

    model = _matches(directory, raw, reference)
    gate_up = model.parameter("model.layers.1.mlp.experts.gate_up_proj")
    both = np.concatenate([exact[f"model.layers.1.mlp.experts.2.{p}_proj.weight"] for p in ("gate", "up")])
    assert _close(gate_up[2], both) <= EXACT
    name = "model.layers.1.self_attn.k_proj.weight"
    assert _close(model.parameter(name), exact[name]) == 0.0  # as stored: its scale (uninitialized memory) unused


# ---- refused from the headers, before any tensor is read -------------------------------------------------------------


@pytest.fixture(scope="module")
def block_fp8(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """A tiny Qwen3 in block FP8 (DeepSeek-V3's layout: ``W`` and ``W_scale_inv`` per linear weight)."""
    raw, state = _original(
        tmp_path_factory.mktemp("fp8"), transformers.Qwen3Config(**QWEN3), transformers.Qwen3ForCausalLM
    )
    tensors: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        if name.endswith("proj.weight"):
            weight, scale = _fp8_blocks(value, (128, 128))
            tensors |= {name: weight, name + "_scale_inv": scale}
        else:
            tensors[name] = value
    quant = {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
    return {**raw, "quantization_config": quant}, tensors


def _refused_before_reading(directory: Path, raw: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> InputError:
    read: list[str] = []
    original = SafetensorsWeights.read
    monkeypatch.setattr(SafetensorsWeights, "read", lambda self, name: read.append(name) or original(self, name))
    with pytest.raises(InputError) as caught:
        _streamed(directory, raw).forward(IDS)
    assert read == [], read
    return caught.value


def test_an_fp8_weight_without_its_scale_is_refused_before_reading(
    block_fp8: tuple[dict[str, Any], dict[str, torch.Tensor]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before (0421174): read unscaled, the run went on (states wrong from that layer on)."""
    raw, tensors = block_fp8
    missing = "model.layers.1.mlp.down_proj.weight_scale_inv"
    directory = _write(tmp_path, raw, {k: v for k, v in tensors.items() if k != missing})
    error = _refused_before_reading(directory, raw, monkeypatch)
    assert error.path == str(directory / "model.safetensors")
    assert "'model.layers.1.mlp.down_proj.weight'" in error.message and missing in error.message


def test_a_fused_expert_scale_of_the_wrong_shape_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = _fine_grained_fp8(tmp_path, QWEN3_MOE_BLOCKS)
    raw = json.loads((directory / "config.json").read_text())
    tensors = safetensors_torch.load_file(str(directory / "model.safetensors"))
    fused = "model.layers.1.mlp.experts.down_proj_scale_inv"
    tensors[fused] = tensors[fused][:, :1]
    _write(directory, raw, tensors)
    error = _refused_before_reading(directory, raw, monkeypatch)
    assert fused in error.message and "does not fit" in error.message


def test_an_fp8_tensor_in_an_unquantized_target_is_refused(
    block_fp8: tuple[dict[str, Any], dict[str, torch.Tensor]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw, tensors = block_fp8
    directory = _write(tmp_path, _unquantized(raw), tensors)
    error = _refused_before_reading(directory, _unquantized(raw), monkeypatch)
    assert "FP8" in error.message and "quantization_config" in error.message


# ---- through verify: exit 2, one Error line naming the file and the tensor -------------------------------------------


def _pair(tmp: Path) -> tuple[Path, Path]:
    """A tiny Qwen3 target in block FP8 (blocks of 32: its hidden size is 64) and a draft normalized against it."""
    from eagle_convert.normalize.plan import normalize_checkpoint
    from fixtures.families import write_family_target
    from fixtures.generate import write_layout
    from fixtures.layouts import LAYOUTS

    target = write_family_target("qwen3", tmp / "plain")
    raw = json.loads((target / "config.json").read_text())
    tensors: dict[str, torch.Tensor] = {}
    for name, value in safetensors_torch.load_file(str(target / "model.safetensors")).items():
        if name.endswith("proj.weight"):
            weight, scale = _fp8_blocks(value.float(), (32, 32))
            tensors |= {name: weight, name + "_scale_inv": scale}
        else:
            tensors[name] = value
    quant = {"quant_method": "fp8", "weight_block_size": [32, 32], "activation_scheme": "dynamic"}
    fp8 = _write(tmp / "target", {**raw, "quantization_config": quant}, tensors)
    src = write_layout(tmp / "src", LAYOUTS["specforge-mha-eagle3.1"])
    normalize_checkpoint(src, tmp / "draft", target=target, aux_convention="output-of", profile="vllm")
    (tmp / "ids.json").write_text(json.dumps([list(range(5, 21))]))
    return tmp / "draft", fp8


@pytest.mark.parametrize(
    ("broken", "named"),
    [
        ("unknown quant_method", ["config.json", "'zebra-q9'"]),
        ("scale of the wrong shape", ["model.safetensors", "model.layers.0.self_attn.o_proj.weight_scale_inv"]),
        ("missing scale", ["model.safetensors", "model.layers.1.mlp.up_proj.weight"]),
    ],
)
def test_verify_refuses_a_target_it_cannot_read_with_exit_2(broken: str, named: list[str], tmp_path: Path) -> None:
    """Before (0421174): an EC702 finding against the draft, exit 1 (an unknown format, a scale of the wrong shape),
    or a run on unscaled weights (a missing scale)."""
    draft, target = _pair(tmp_path)
    raw = json.loads((target / "config.json").read_text())
    tensors = safetensors_torch.load_file(str(target / "model.safetensors"))
    if broken == "unknown quant_method":
        raw["quantization_config"] = {"quant_method": "zebra-q9", "bits": 3}
    elif broken == "scale of the wrong shape":
        name = "model.layers.0.self_attn.o_proj.weight_scale_inv"
        tensors[name] = tensors[name][:1]
    else:
        del tensors["model.layers.1.mlp.up_proj.weight_scale_inv"]
    _write(target, raw, tensors)
    args = ["verify", str(draft), "--target", str(target), "--level", "target", "--no-hash"]
    done = cli_process.run(
        [sys.executable, "-m", "eagle_convert", *args, "--token-ids", str(tmp_path / "ids.json")],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "\nHint: " in done.stderr and "Traceback" not in done.stderr, done.stderr
    for needle in named:
        assert needle in errors[0], (needle, errors[0])
    assert "EC702" not in done.stdout + done.stderr
