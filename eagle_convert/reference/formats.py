"""The weight formats targets ship in, dequantized to the compute dtype as each unit streams.

Plain bf16/fp16/fp32 weights are cast as they are read. A pre-quantized target (``quantization_config`` in its
config, or ModelOpt's ``hf_quant_config.json`` beside it) is read through a transformers quantizer for its
``quant_method``, set to dequantize:

- ``fp8``: block FP8 (DeepSeek-V3/R1, Kimi K2, Qwen3-FP8, GLM and MiniMax FP8): ``W`` float8_e4m3fn next to
  ``W_scale_inv`` float32 ``[ceil(out / bo), ceil(in / bi)]`` for ``weight_block_size`` ``[bo, bi]``; the weight is
  ``W[i, j] * scale_inv[i // bo, j // bi]``, computed here (:func:`_fp8_scaled`) with the declared block:
  transformers' own op derives the block from the scale grid, which is wrong where a dimension is not a multiple of
  the block (DeepSeek-V3's ``kv_a_proj_with_mqa``: 576 rows, 5 scale rows). transformers' own save of a MoE
  quantized with ``FineGrainedFP8Config`` keeps the experts' scales fused (``experts.gate_up_proj_scale_inv``): each
  expert's share is read as its own scale (reference/quant_tensors.py).
- ``mxfp4``: gpt-oss experts, ``*_blocks`` uint8 (two E2M1 codes a byte) and ``*_scales`` uint8 (E8M0): transformers'
  own dequantization.
- ``compressed-tensors``: INT4 pack-quantized (Kimi K2 Thinking), FP8, NVFP4 and the other schemes the
  ``compressed-tensors`` package decompresses; needs that package. The package computes a weight in its scales'
  dtype (Kimi's bfloat16 scales: every expert weight rounded to bfloat16), so the scales are widened to float32
  first and the result cast to the compute dtype. FP8 experts (llmcompressor's ``FP8_BLOCK`` MoE: one weight and one
  block grid an expert) are scaled here over their grid (transformers multiplies the two as they are: a block grid
  fails). Its NVFP4 (``weight_packed`` uint8, ``weight_scale``
  float8_e4m3fn per 16 inputs, ``weight_global_scale``: the weight is ``e2m1 * scale / global``) is dequantized
  here (:func:`_nvfp4`): the package rounds it to bfloat16, and transformers' expert path drops the global scale
  (experts' weights come out ``global`` times too large).
- ``modelopt``: NVIDIA ModelOpt's NVFP4 (``W`` uint8, two E2M1 codes a byte, low nibble first; ``W_scale``
  float8_e4m3fn, one per 16 inputs; ``W_scale_2`` float32: the weight is ``e2m1 * W_scale * W_scale_2``) and FP8
  (per-tensor or per-channel ``W_scale``). transformers 5.24 has no reader for these (``modelopt`` is not one of its
  quant methods, and its ``nvfp4`` quantizer refuses pre-quantized weights), so the quantizer here is this module's
  own (:func:`_modelopt`), through the same loading step.

Each equals the exact dequantization of the stored bytes (docs/formats.md section 8). Any other format, and a ModelOpt
algorithm other than those, is refused with its name before anything is read, and so is a target whose headers lack a
scale its format needs, or hold one of the wrong shape (:func:`readable`, reference/quant_tensors.py).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, cast

import torch

from eagle_convert.errors import ConfigError
from eagle_convert.read.jsonstrict import load_json_object
from eagle_convert.reference import quant_tensors
from eagle_convert.reference.weights import SafetensorsWeights

# quant_method -> what the format is, for messages
FORMATS = {
    "fp8": "block FP8",
    "mxfp4": "MXFP4",
    "compressed-tensors": "compressed-tensors",
    "modelopt": "ModelOpt (NVFP4, FP8)",
}
# ModelOpt's quant_algo values read here (their weights: NVFP4 or FP8, per tensor or per channel)
MODELOPT_ALGOS = frozenset({"NVFP4", "W4A16_NVFP4", "FP8", "FP8_PER_CHANNEL_PER_TOKEN"})
_HINT = (
    "the reference reads bf16/fp16/fp32 targets and the formats it dequantizes on this machine (block FP8 "
    "'fp8', MXFP4 'mxfp4', 'compressed-tensors', ModelOpt NVFP4/FP8 'modelopt'); point --target at a checkpoint in "
    "one of them, or at its unquantized (e.g. bfloat16) original"
)
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)  # FP4 code -> value
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def method_of(quant: Any) -> str | None:
    """The ``quant_method`` of a quantization config (a dict or transformers' config object)."""
    value = quant.get("quant_method") if isinstance(quant, dict) else getattr(quant, "quant_method", None)
    value = getattr(value, "value", value)  # transformers' QuantizationMethod enum
    return value if isinstance(value, str) else None


def declared(config: Any, directory: Path) -> Any | None:
    """The target's quantization config: its config's ``quantization_config`` (``config``: transformers' config, or
    config.json as read), else ModelOpt's
    ``hf_quant_config.json`` (some ModelOpt exports declare their format only there) as a ``modelopt`` config;
    None for unquantized weights."""
    quant = (
        config.get("quantization_config") if isinstance(config, dict) else getattr(config, "quantization_config", None)
    )
    if quant is not None:
        return quant
    path = directory / "hf_quant_config.json"
    if not path.is_file():
        return None
    sidecar = load_json_object(path, ConfigError, "ModelOpt's quantization config (hf_quant_config.json)")
    body = sidecar.get("quantization") if isinstance(sidecar, dict) else None
    if not isinstance(body, dict):
        raise ConfigError("ModelOpt's quantization config has no 'quantization' object", path=path, hint=_HINT)
    return {"quant_method": "modelopt", **body}


def quantizer(config: Any, quant: Any, directory: Path, device: torch.device, dtype: torch.dtype) -> Any:
    """A transformers quantizer for the target's format, set to dequantize to ``dtype`` as it loads; ConfigError
    (before anything is read) for a format it cannot dequantize here, naming it."""
    where = directory / "config.json"
    method = checked_method(quant, where)
    if method == "modelopt":
        return _modelopt(quant, where)
    from transformers.quantizers.auto import AutoHfQuantizer

    if isinstance(quant, dict):
        quant = {**quant, "dequantize": True}
    try:
        q = AutoHfQuantizer.from_config(quant, pre_quantized=True)
    except (ValueError, ImportError, TypeError, KeyError) as exc:
        raise ConfigError(
            f"cannot read the target's {FORMATS[method]} weights: {exc}", path=where, hint=_HINT
        ) from None
    if not hasattr(q.quantization_config, "dequantize"):
        raise ConfigError(f"transformers cannot dequantize {FORMATS[method]} weights here", path=where, hint=_HINT)
    q.quantization_config.dequantize = True
    if method in ("fp8", "compressed-tensors"):  # transformers' quantizer, its dequantization corrected (see above)
        q = _classes()[method](q.quantization_config, pre_quantized=True)
    try:
        q.validate_environment(device_map={"": device}, dtype=dtype, weights_only=True)
    except (ValueError, ImportError, RuntimeError) as exc:
        raise ConfigError(
            f"cannot read the target's {FORMATS[method]} weights here: {exc}", path=where, hint=_HINT
        ) from None
    return q


def checked_method(quant: Any, where: Path) -> str:
    """The ``quant_method`` of a format the reference reads here; ConfigError naming it otherwise (no
    ``quant_method``, another method, a ModelOpt algorithm it does not read, compressed-tensors without its package)."""
    method = method_of(quant)
    if method is None:
        raise ConfigError(
            "the target's config declares quantized weights (quantization_config) but no quant_method",
            path=where,
            hint=_HINT,
        )
    if method not in FORMATS:
        raise ConfigError(
            f"the target's weights are quantized as {method!r}, a format the reference does not read",
            path=where,
            hint=_HINT,
        )
    if method == "modelopt":
        _modelopt_algos(quant, where)
    if method == "compressed-tensors":
        from transformers.utils.import_utils import is_compressed_tensors_available

        if not is_compressed_tensors_available():
            raise ConfigError(
                "the target's weights are compressed-tensors, which needs the compressed-tensors package",
                path=where,
                hint="pip install compressed-tensors (or eagle-convert[reference]), then run again",
            )
    return method


def readable(weights: SafetensorsWeights, quant: Any, directory: Path) -> SafetensorsWeights:
    """``weights`` checked from their headers against the declared format (``quant``; None: unquantized) before any
    tensor is read: ConfigError for a format not read here, InputError naming the shard and tensor for a scale that
    is missing or does not fit (reference/quant_tensors.py); with each expert's share of a fused expert scale named
    as its own (:func:`quant_tensors.expert_scales`)."""
    raw = _as_dict(quant)
    if raw is not None:
        checked_method(quant, directory / "config.json")
    quant_tensors.check(raw, weights.tensors(), directory)
    shares = quant_tensors.expert_scales(raw, weights.tensors())
    return weights.with_expert_scales(shares) if shares else weights


def _as_dict(quant: Any) -> dict[str, Any] | None:
    """A quantization config as a dict (transformers' config objects by ``to_dict``); None for None."""
    if quant is None or isinstance(quant, dict):
        return quant
    to_dict = getattr(quant, "to_dict", None)
    value = to_dict() if callable(to_dict) else dict(getattr(quant, "__dict__", {}))
    value.setdefault("quant_method", method_of(quant))
    return dict(value)


def _modelopt(quant: Any, where: Path) -> Any:
    """The quantizer for a ModelOpt checkpoint whose algorithm is in :data:`MODELOPT_ALGOS`."""
    raw = _modelopt_algos(quant, where)
    group = raw.get("group_size", 16)
    return _classes()["modelopt"](raw, int(group) if isinstance(group, int) and group > 0 else 16)


def _modelopt_algos(quant: Any, where: Path) -> dict[str, Any]:
    """A ModelOpt config as a dict; ConfigError naming any algorithm not in :data:`MODELOPT_ALGOS`."""
    raw = quant if isinstance(quant, dict) else dict(getattr(quant, "__dict__", {}))
    algo = raw.get("quant_algo")
    algos = {algo}
    if algo == "MIXED_PRECISION":
        layers = raw.get("quantized_layers")
        algos = (
            {v.get("quant_algo") for v in layers.values() if isinstance(v, dict)}
            if isinstance(layers, dict)
            else {None}
        )
    if bad := sorted(str(a) for a in algos if a not in MODELOPT_ALGOS):
        raise ConfigError(
            f"the target's weights are ModelOpt {', '.join(bad)}; the reference reads ModelOpt "
            f"{', '.join(sorted(MODELOPT_ALGOS))}",
            path=where,
            hint=_HINT,
        )
    return raw


def _fp8_scaled(
    weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] | None, dtype: torch.dtype
) -> torch.Tensor:
    """``weight`` ``[..., out, in]`` (FP8) times its ``scale``: one for the tensor, or a grid ``[..., R, C]`` whose
    cells cover the declared ``block`` where the grid is that block's (the last block ragged), else ``out / R`` x
    ``in / C`` (per channel, per group, one a row); ValueError for a grid that fits neither."""
    s = (scale.to(torch.float32) - 127.0).exp2() if scale.dtype == torch.uint8 else scale.to(torch.float32)
    if s.numel() == 1:
        return (weight.to(torch.float32) * s.reshape(())).to(dtype)
    s = s if s.dim() >= 2 else s.unsqueeze(-1)  # [out] -> [out, 1]: one a row
    rows, cols = weight.shape[-2:]
    bo = quant_tensors.grid_extent(rows, s.shape[-2], block[0] if block else None)
    bi = quant_tensors.grid_extent(cols, s.shape[-1], block[1] if block else None)
    if bo is None or bi is None:
        raise ValueError(
            f"FP8 weight {list(weight.shape)} does not fit its scale {list(scale.shape)}"
            + (f" for blocks of {list(block)}" if block else "")
        )
    s = s.repeat_interleave(bo, -2)[..., :rows, :].repeat_interleave(bi, -1)[..., :cols]
    return (weight.to(torch.float32) * s).to(dtype)


def _nvfp4(
    weight: torch.Tensor, scale: torch.Tensor, scale_2: torch.Tensor | None, dtype: torch.dtype, group: int
) -> torch.Tensor:
    """ModelOpt NVFP4: ``weight`` ``[..., out, in / 2]`` uint8 (two E2M1 codes a byte, the low nibble first),
    ``scale`` ``[..., out, in / group]`` float8_e4m3fn, ``scale_2`` float32 (per tensor)."""
    if (
        weight.dtype != torch.uint8
        or scale.shape[:-1] != weight.shape[:-1]
        or scale.shape[-1] * group != 2 * weight.shape[-1]
    ):
        raise ValueError(
            f"NVFP4 weight {list(weight.shape)} ({weight.dtype}) does not fit its scale {list(scale.shape)} with "
            f"groups of {group}"
        )
    codes = torch.stack((weight & 0x0F, weight >> 4), dim=-1).flatten(-2).long()
    values = torch.tensor(E2M1, dtype=torch.float32, device=weight.device)[codes]
    per_group = scale.to(torch.float32)
    if scale_2 is not None:
        per_group = per_group * scale_2.to(torch.float32).reshape(
            scale_2.shape + (1,) * (per_group.dim() - scale_2.dim())
        )
    grouped = values.reshape(*values.shape[:-1], -1, group) * per_group.unsqueeze(-1)
    return grouped.flatten(-2).to(dtype)


def _modelopt_fp8(weight: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """ModelOpt FP8: ``weight`` FP8 times its ``scale`` (one per tensor, or one per output row)."""
    s = scale.to(torch.float32)
    if s.numel() > 1:
        s = s.reshape(*weight.shape[:-1], 1)
    return (weight.to(torch.float32) * s).to(dtype)


@lru_cache(maxsize=1)
def _classes() -> dict[str, type]:
    """The quantizer classes (built on first use: transformers is imported only when a target is read)."""
    from transformers.core_model_loading import ConversionOps, _IdentityOp
    from transformers.integrations.compressed_tensors import CompressedTensorsDequantize as CTDequantize
    from transformers.integrations.compressed_tensors import get_experts_scheme
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize
    from transformers.quantizers.base import HfQuantizer
    from transformers.quantizers.quantizer_compressed_tensors import CompressedTensorsHfQuantizer
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer
    from transformers.quantizers.quantizers_utils import get_module_from_name
    from transformers.utils.quantization_config import QuantizationConfigMixin

    class BlockFp8Dequantize(Fp8Dequantize):
        """transformers' FP8 dequantization, with the declared ``weight_block_size`` where a dimension of the weight
        is not a multiple of it (transformers' op would derive a wrong block from the scale grid, or fail); a weight
        stored unquantized beside a scale is read as stored (transformers 5.24's own save writes a scale of
        uninitialized memory beside each weight it left unquantized), and in the parameter's dtype whatever the
        path (transformers passes an expert weight stored without a scale through as stored); an FP8 weight without
        its scale is refused,
        never read unscaled (quant_tensors.check refuses it before any read; this is the load's own guard)."""

        def convert(  # type: ignore[override]  # transformers' own op is called so, by keyword
            self,
            input_dict: dict[str, Any],
            full_layer_name: str | None = None,
            model: torch.nn.Module | None = None,
            **kwargs: Any,
        ) -> dict[str, Any]:
            for key, value in input_dict.items():
                scaled = "weight_scale_inv" in input_dict if key == "weight" else f"{key}_scale_inv" in input_dict
                if "scale" not in key and not scaled and any(t.dtype in _FP8 for t in _listed(value)):
                    raise ValueError(f"an FP8 weight ({full_layer_name or key}) has no weight_scale_inv beside it")
            result = super().convert(input_dict, full_layer_name=full_layer_name, model=model, **kwargs)
            dtype = self._get_target_dtype(model, full_layer_name)  # weights stored unquantized
            return {k: _cast(v, dtype) for k, v in result.items()} if dtype is not None else dict(result)

        def _dequantize_one(
            self, quantized: torch.Tensor, scales: torch.Tensor, output_dtype: torch.dtype | None = None
        ) -> torch.Tensor:
            if quantized.is_floating_point() and quantized.dtype not in _FP8:  # left unquantized: its scale unused
                return quantized.to(output_dtype or quantized.dtype)
            if quantized.dtype in _FP8:
                block = getattr(self.hf_quantizer.quantization_config, "weight_block_size", None)
                pair = (int(block[0]), int(block[1])) if block is not None else None
                return _fp8_scaled(quantized, scales, pair, output_dtype or torch.bfloat16)
            return super()._dequantize_one(quantized, scales, output_dtype)

    class BlockFp8Quantizer(FineGrainedFP8HfQuantizer):
        def get_load_operations(self) -> dict[str, type]:
            return {"dequantize": BlockFp8Dequantize}

    class CompressedTensorsDequantize(CTDequantize):
        """compressed-tensors' dequantization, computed in float32 and returned in the parameter's dtype (the
        package computes in the scales' dtype: bfloat16 scales, as Kimi K2 Thinking ships, round every weight to
        bfloat16, and transformers' expert path keeps that dtype whatever the model's); NVFP4 weights (packed uint8
        with a global scale) done here with their global scale, whether one module's or a list of experts'."""

        def convert(
            self,
            input_dict: dict[str, Any],
            source_patterns: list[str],
            target_patterns: list[str],
            full_layer_name: str | None = None,
            **kwargs: Any,
        ) -> dict[str, Any]:
            model = kwargs.get("model")
            dtype = (
                model.get_parameter(full_layer_name).dtype if model is not None and full_layer_name else torch.float32
            )
            packed = [k for k in input_dict if k.endswith("weight_packed")]
            if packed and all(_stem(k) + "weight_global_scale" in input_dict for k in packed):
                out: dict[str, Any] = {}
                for key in packed:
                    stem = _stem(key)
                    weights, scales, globals_ = (
                        _listed(input_dict[stem + n]) for n in ("weight_packed", "weight_scale", "weight_global_scale")
                    )
                    done = [
                        _nvfp4(w, s, 1.0 / g.to(torch.float32), dtype, 2 * w.shape[-1] // max(1, s.shape[-1]))
                        for w, s, g in zip(weights, scales, globals_, strict=True)
                    ]
                    if key == "weight_packed":  # the general converter: one module's weight, named as its parameter
                        return {full_layer_name or "weight": done[0]}
                    out[key] = done
                return out
            if not ("weight" in input_dict or "weight_scale" in input_dict):  # experts (the per-module converter's
                fp8 = self._fp8_experts(input_dict, dtype)  # keys are the serialized names of one module)
                if fp8 is not None:
                    return fp8
            wide = {k: _widened(v) if k.endswith("weight_scale") else v for k, v in input_dict.items()}
            result = super().convert(wide, source_patterns, target_patterns, full_layer_name, **kwargs)
            return {k: _cast(v, dtype) for k, v in result.items()}

        def _fp8_experts(self, input_dict: dict[str, Any], dtype: torch.dtype) -> dict[str, Any] | None:
            """FP8 experts, each weight times its scale in float32 (transformers' op multiplies the two as they
            are, which fits a per-channel scale and no block grid: llmcompressor's FP8 block experts failed with a
            size mismatch); None when the experts' scheme is not FP8."""
            config = self.hf_quantizer.compressor.quantization_config
            scheme = self.scheme or get_experts_scheme(config)  # type: ignore[no-untyped-call]
            args = scheme.weights
            if args is None or args.type != "float" or args.num_bits != 8:
                return None
            block = tuple(args.block_structure) if args.strategy == "block" and args.block_structure else None
            out: dict[str, Any] = {}
            for key, value in input_dict.items():
                if key.endswith("weight_scale"):
                    continue
                weights = _listed(value)
                if key + "_scale" not in input_dict:
                    if any(w.dtype in _FP8 for w in weights):
                        raise ValueError(f"an FP8 expert weight ({key}) has no weight_scale beside it")
                    out[key] = value
                    continue
                scales = _listed(input_dict[key + "_scale"])
                if len(weights) != len(scales):
                    raise ValueError(f"{key}: {len(weights)} weights, {len(scales)} scales")
                pair = (int(block[0]), int(block[1])) if block is not None else None
                out[key] = torch.stack([_fp8_scaled(w, s, pair, dtype) for w, s in zip(weights, scales, strict=True)])
            return out

    class CompressedTensorsQuantizer(CompressedTensorsHfQuantizer):
        def get_load_operations(self) -> dict[str, type]:
            return {"dequantize": CompressedTensorsDequantize}

    class ModelOptConfig(QuantizationConfigMixin):
        def __init__(self, raw: dict[str, Any]) -> None:
            self.quant_method = cast(Any, "modelopt")  # not one of transformers' QuantizationMethod values
            self.raw = raw
            self.dequantize = True
            self.modules_to_not_convert = None

        def to_dict(self) -> dict[str, Any]:
            return dict(self.raw)

    class ModelOptDequantize(ConversionOps):
        """A ModelOpt weight (NVFP4 or FP8) and its scales -> the weight in its parameter's dtype; a weight stored
        without scales (an excluded module) is cast."""

        def __init__(self, hf_quantizer: Any) -> None:
            self.hf_quantizer = hf_quantizer  # marks this op as reading serialized tensors (HfQuantizer.get_new_dtype)

        def _one(
            self, weight: torch.Tensor, scale: torch.Tensor | None, scale_2: torch.Tensor | None, dtype: torch.dtype
        ) -> torch.Tensor:
            if scale is None:
                return weight.to(dtype)
            if weight.dtype == torch.uint8:
                return _nvfp4(weight, scale, scale_2, dtype, self.hf_quantizer.group)
            if weight.dtype in _FP8:
                return _modelopt_fp8(weight, scale, dtype)
            raise ValueError(f"a ModelOpt weight stored as {weight.dtype} with a scale is neither NVFP4 nor FP8")

        def convert(
            self,
            input_dict: dict[str, Any],
            source_patterns: list[str],
            target_patterns: list[str],
            full_layer_name: str | None = None,
            model: torch.nn.Module | None = None,
            **kwargs: Any,
        ) -> dict[str, Any]:
            dtype = torch.float32
            if model is not None and full_layer_name is not None:
                module, name = get_module_from_name(model, full_layer_name)
                dtype = getattr(getattr(module, name, None), "dtype", dtype)

            def listed(value: Any) -> list[torch.Tensor]:
                return list(value) if isinstance(value, list) else [value]

            out: dict[str, Any] = {}
            for key, value in input_dict.items():
                if key.endswith(("weight_scale", "weight_scale_2", "input_scale")):
                    continue
                weights = listed(value)
                scales = listed(input_dict[key + "_scale"]) if key + "_scale" in input_dict else [None] * len(weights)
                seconds = (
                    listed(input_dict[key + "_scale_2"]) if key + "_scale_2" in input_dict else [None] * len(weights)
                )
                if not len(weights) == len(scales) == len(seconds):
                    raise ValueError(
                        f"{key}: {len(weights)} weights, {len(scales)} scales, {len(seconds)} second scales"
                    )
                done = [self._one(w, s, s2, dtype) for w, s, s2 in zip(weights, scales, seconds, strict=True)]
                if key == "weight":  # the general converter: one module's weight, named as its parameter
                    return {full_layer_name or key: done[0]}
                out[key] = done
            return out

        @property
        def reverse_op(self) -> ConversionOps:
            return _IdentityOp()

    class ModelOptQuantizer(HfQuantizer):
        """Pre-quantized ModelOpt weights, dequantized as they load; the model keeps its own (float) modules."""

        requires_calibration = False

        def __init__(self, raw: dict[str, Any], group: int) -> None:
            super().__init__(ModelOptConfig(raw), pre_quantized=True)
            self.group = group
            self.serialized_names = {"weight": ["weight", "weight_scale", "weight_scale_2", "input_scale"]}

        def get_load_operations(self) -> dict[str, type]:
            return {"dequantize": ModelOptDequantize}

        def is_serializable(self) -> bool:
            return False

        @property
        def is_trainable(self) -> bool:
            return False

    return {"fp8": BlockFp8Quantizer, "compressed-tensors": CompressedTensorsQuantizer, "modelopt": ModelOptQuantizer}


def _stem(key: str) -> str:
    """``x.weight_packed`` -> ``x.`` (the module's prefix of a serialized name)."""
    return key[: -len("weight_packed")]


def _listed(value: Any) -> list[torch.Tensor]:
    return list(value) if isinstance(value, list) else [value]


def _widened(value: Any) -> Any:
    """A scale (or a list of them) in bfloat16/float16 as float32, so what is computed from it is float32."""
    if isinstance(value, list):
        return [_widened(v) for v in value]
    narrow = isinstance(value, torch.Tensor) and value.dtype in (torch.bfloat16, torch.float16)
    return value.to(torch.float32) if narrow else value


def _cast(value: Any, dtype: torch.dtype) -> Any:
    """Floating tensors (or lists of them) in ``dtype``."""
    if isinstance(value, list):
        return [_cast(v, dtype) for v in value]
    return value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value
