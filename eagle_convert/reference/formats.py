"""The weight formats targets ship in, dequantized to the compute dtype as each unit streams.

Plain bf16/fp16/fp32 weights are cast as they are read. A pre-quantized target (``quantization_config`` in its
config) is read through transformers' own quantizer for its ``quant_method``, set to dequantize: block FP8
(``fp8``: DeepSeek-V3/R1, Qwen3-FP8, GLM and MiniMax FP8), MXFP4 (``mxfp4``: gpt-oss), compressed-tensors
(``compressed-tensors``: INT4 pack-quantized, FP8; needs the ``compressed-tensors`` package) and NVFP4 (``modelopt``).
A format whose quantizer cannot dequantize on this machine is refused before anything is read, with its name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from eagle_convert.errors import ConfigError

# quant_method -> what the format is, for messages
FORMATS = {
    "fp8": "block FP8",
    "mxfp4": "MXFP4",
    "compressed-tensors": "compressed-tensors",
    "modelopt": "NVFP4 (ModelOpt)",
}
_HINT = (
    "the reference reads bf16/fp16/fp32 targets and the formats transformers dequantizes on this machine (block FP8, "
    "MXFP4, compressed-tensors, NVFP4); point --target at a checkpoint in one of them"
)


def method_of(quant: Any) -> str | None:
    """The ``quant_method`` of a quantization config (a dict or transformers' config object)."""
    value = quant.get("quant_method") if isinstance(quant, dict) else getattr(quant, "quant_method", None)
    value = getattr(value, "value", value)  # transformers' QuantizationMethod enum
    return value if isinstance(value, str) else None


def quantizer(config: Any, quant: Any, directory: Path, device: torch.device, dtype: torch.dtype) -> Any:
    """transformers' quantizer for the target's format, set to dequantize to ``dtype`` as it loads; ConfigError
    (before anything is read) for a format it cannot dequantize here."""
    from transformers.quantizers.auto import AutoHfQuantizer

    method = method_of(quant)
    where = directory / "config.json"
    if method not in FORMATS:
        raise ConfigError(
            f"the target's weights are quantized as {method!r}, a format the reference does not read", path=where,
            hint=_HINT,
        )
    try:
        q = AutoHfQuantizer.from_config(quant, pre_quantized=True)
    except (ValueError, ImportError, TypeError, KeyError) as exc:
        raise ConfigError(f"cannot read the target's {FORMATS[method]} weights: {exc}", path=where, hint=_HINT) from None
    if hasattr(q.quantization_config, "dequantize"):
        q.quantization_config.dequantize = True
    elif method != "compressed-tensors":
        raise ConfigError(
            f"transformers cannot dequantize {FORMATS[method]} weights here", path=where, hint=_HINT
        )
    try:
        q.validate_environment(device_map={"": device}, dtype=dtype, weights_only=True)
    except (ValueError, ImportError, RuntimeError) as exc:
        raise ConfigError(f"cannot read the target's {FORMATS[method]} weights here: {exc}", path=where,
                          hint=_HINT) from None
    return q
