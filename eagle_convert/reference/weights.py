"""A local checkpoint's safetensors weights, read zero-copy through the strict reader (``read/checkpoint.py``)."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from eagle_convert.errors import InputError
from eagle_convert.read.checkpoint import open_weights
from eagle_convert.read.safetensors_header import TensorInfo
from eagle_convert.reference import fp8
from eagle_convert.reference.quant_tensors import ExpertScale
from eagle_convert.reference.stream import MappedShards

WEIGHTS_HINT = "the target's config.json and weights disagree; point at the checkpoint the config belongs to"


class SafetensorsWeights:
    """A local checkpoint directory's safetensors weights, read through the strict reader of ``read/checkpoint.py``
    (the index, or every ``*.safetensors`` file; headers validated), each shard opened once and kept open.

    :meth:`read` gives a tensor as stored, viewing a private mapping of its pages (reference/stream.py): no copy, and
    the pages leave the process when its last view dies. :meth:`get` gives FP8 weights dequantized with the
    target's ``weight_block_size`` (``fp8_block``, reference/fp8.py)."""

    def __init__(self, directory: str | Path, fp8_block: tuple[int, int] | None = None) -> None:
        self.directory = Path(directory)
        self.fp8_block = fp8_block
        self._tensors = open_weights(self.directory)
        self._shards = MappedShards(self.directory)
        self._shares: dict[str, ExpertScale] = {}  # an expert's own scale, read from a fused one (quant_tensors.py)
        self.bytes_read = 0  # bytes of tensors read (mapped to be used) so far, as stored

    def names(self) -> list[str]:
        return sorted([*self._tensors, *self._shares])

    def tensors(self) -> Mapping[str, TensorInfo]:
        """Every stored tensor's header entry (nothing read)."""
        return self._tensors

    def with_expert_scales(self, shares: Mapping[str, ExpertScale]) -> SafetensorsWeights:
        """These weights, with each expert's share of a fused expert scale readable under its own name (the same
        mapped shards, nothing read)."""
        view = copy.copy(self)
        view._shares = {**self._shares, **shares}
        return view

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The shape of ``name`` from its shard's header (no values read); None when it is not stored."""
        info = self._tensors.get(name)
        share = self._shares.get(name)
        return info.shape if info is not None else share.shape if share is not None else None

    def nbytes(self, name: str) -> int:
        """Bytes of ``name`` as stored (0 when it is not stored)."""
        info = self._tensors.get(name)
        return info.nbytes if info is not None else 0

    def under(self, prefix: str) -> SafetensorsWeights:
        """The tensors whose names start with ``prefix``, named without it (the same mapped shards, nothing read)."""
        view = copy.copy(self)
        view._tensors = {k[len(prefix) :]: info for k, info in self._tensors.items() if k.startswith(prefix)}
        view._shares = {
            k[len(prefix) :]: ExpertScale(s.source[len(prefix) :], s.expert, s.rows, s.shape)
            for k, s in self._shares.items()
            if k.startswith(prefix) and s.source.startswith(prefix)
        }
        return view

    def values(self, name: str) -> int:
        """The values ``name`` holds once unpacked (headers only): packed 4-bit formats keep several a stored
        element (:data:`PACKED`)."""
        info = self._tensors.get(name)
        if info is None:
            return math.prod(self._shares[name].shape)
        return math.prod(info.shape) * PACKED.get(info.dtype, 1)

    def read(self, name: str) -> torch.Tensor:
        """``name`` as stored, zero-copy (an expert's share of a fused scale: its rows of the fused tensor)."""
        info = self._tensors.get(name)
        share = self._shares.get(name)
        if info is None and share is not None:
            fused = self.read(share.source)[share.expert]  # [rows, cols] of the fused [E, rows, cols]
            first, last = share.rows[0], share.rows[-1]
            if share.rows == tuple(range(first, last + 1)):
                return fused[first : last + 1]
            return fused[list(share.rows)]  # one scale row a weight row (blocks straddling two projections)
        if info is None:
            raise InputError(f"tensor {name!r} is not in the checkpoint", path=self.directory, hint=WEIGHTS_HINT)
        self.bytes_read += info.nbytes
        return self._shards.map(info)

    def read_rows(self, name: str, rows: Sequence[int]) -> torch.Tensor:
        """Rows ``rows`` (ascending) of ``name`` along its first dimension, as stored, stacked: the experts of a
        group out of a fused ``[E, ...]`` tensor, each run of consecutive rows mapped on its own (nothing else of the
        tensor is read)."""
        info = self._tensors.get(name)
        if info is None:
            raise InputError(f"tensor {name!r} is not in the checkpoint", path=self.directory, hint=WEIGHTS_HINT)
        runs: list[list[int]] = []
        for row in rows:
            if runs and runs[-1][1] == row:
                runs[-1][1] += 1
            else:
                runs.append([row, row + 1])
        parts = [self._shards.map_rows(info, a, b) for a, b in runs]
        self.bytes_read += sum(p.numel() * p.element_size() for p in parts)
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def get(self, name: str) -> torch.Tensor:
        tensor = self.read(name)
        if tensor.dtype not in fp8.FP8_DTYPES:
            return tensor
        scale = name + fp8.SCALE_SUFFIX
        if self.fp8_block is None or scale not in self._tensors:
            raise InputError(
                f"tensor {name!r} is FP8, but the config declares no block quantization or {scale!r} is missing",
                path=self.directory,
                hint="the reference reads FP8 weights only as quant_method fp8 with weight_block_size",
            )
        return fp8.dequantize(tensor, self.get(scale), self.fp8_block, name)


# Values a stored element holds once dequantized: packed formats keep several 4-bit values in one integer (MXFP4 and
# NVFP4: two a byte; compressed-tensors' pack-quantized INT4: eight an int32).
PACKED = {"U8": 2, "I32": 8}
RESIDENT_BYTES = 2 * 2**30  # a target this small in the compute dtype is read once and kept, not streamed


def resident_fits(weights: SafetensorsWeights, dtype: torch.dtype) -> bool:
    """Whether the target's weights, dequantized to ``dtype``, are small enough to keep (:data:`RESIDENT_BYTES`)."""
    return sum(weights.values(name) for name in weights.names()) * dtype.itemsize <= RESIDENT_BYTES
