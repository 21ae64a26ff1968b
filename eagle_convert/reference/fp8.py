"""Block-quantized FP8 target weights (DeepSeek-V3, Kimi-K2 and other checkpoints published in that format).

Such a checkpoint declares ``quantization_config: {"quant_method": "fp8", "weight_block_size": [bo, bi], ...}`` and
stores each quantized linear weight ``W`` ``[out, in]`` as ``float8_e4m3fn`` next to ``W_scale_inv``
``[ceil(out / bo), ceil(in / bi)]`` (float32): the real weight is ``W[i, j] * scale_inv[i // bo, j // bi]``. Tensors
left unquantized (embeddings, norms, the router, ``lm_head``) are stored as they are. The reference models read the
dequantized weights; any other quantization is refused rather than read as if it were plain floats.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from eagle_convert.errors import ConfigError

SCALE_SUFFIX = "_scale_inv"
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def block_size(quantization_config: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """The FP8 block size the target's weights use; None for unquantized weights; ConfigError for anything else."""
    if not quantization_config:
        return None
    method = quantization_config.get("quant_method")
    block = quantization_config.get("weight_block_size")
    if (
        method == "fp8"
        and isinstance(block, list)
        and len(block) == 2
        and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
    ):
        return int(block[0]), int(block[1])
    raise ConfigError(
        f"the target's weights are quantized (quant_method {method!r}, weight_block_size {block!r}); the reference "
        "models read float32/bfloat16/float16 weights and block-quantized FP8 (quant_method fp8 with "
        "weight_block_size)",
        hint="point --target at an unquantized (e.g. bfloat16) copy of the target model",
    )


def dequantize(weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int], name: str) -> torch.Tensor:
    """``weight`` ``[out, in]`` FP8 times its per-block ``scale_inv``, as float32."""
    out, inp = weight.shape if weight.dim() == 2 else (0, 0)
    rows, cols = -(-out // block[0]), -(-inp // block[1])
    if weight.dim() != 2 or tuple(scale_inv.shape) != (rows, cols):
        raise ConfigError(
            f"FP8 tensor {name!r} {list(weight.shape)} has scales {list(scale_inv.shape)}, expected [{rows}, {cols}] "
            f"for weight_block_size {list(block)}",
            hint="the target's quantization_config does not describe its weights",
        )
    scale = scale_inv.float().repeat_interleave(block[0], 0)[:out].repeat_interleave(block[1], 1)[:, :inp]
    return weight.float() * scale  # [out, in]
