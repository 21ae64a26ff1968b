"""``safe_open``'s surface over the strict reader: a checkpoint's tensors as torch tensors.

:class:`TensorFile` offers what ``safetensors.safe_open(..., framework="pt")`` offers a reader of values (``keys``,
``get_tensor``, ``get_slice(name)[...]``), over a checkpoint already opened by the strict header reader
(``read/checkpoint.py``): the bytes come from ``read/tensor_bytes.py`` (the header's offsets, one checked descriptor a
shard, ``pread`` into a buffer the tensor then owns), so a shard changed or truncated since its header was read is a
typed error (exit 2), never a SIGBUS, and a tensor comes back as safe_open gives it: the dtype of the one table
(``read/safetensors_header.py``'s ``DTYPES``), F4 as ``float4_e2m1fn_x2`` with its last dimension halved, F6 refused.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import torch

from eagle_convert.errors import InputError
from eagle_convert.read.safetensors_header import DTYPES, TensorInfo
from eagle_convert.read.tensor_bytes import TensorBytes

if TYPE_CHECKING:
    from eagle_convert.read.checkpoint import Checkpoint
    from eagle_convert.read.source_files import SourceFiles


def torch_dtype(dtype: str) -> torch.dtype | None:
    """The torch dtype ``safe_open`` gives ``dtype``; None where safetensors reads it into none, or torch lacks it."""
    name = DTYPES[dtype].torch
    found = getattr(torch, name, None) if name is not None else None
    return found if isinstance(found, torch.dtype) else None


def torch_shape(info: TensorInfo, where: Path) -> tuple[torch.dtype, tuple[int, ...]]:
    """(dtype, shape) of ``info``'s tensor as torch holds it; InputError naming ``where`` when torch cannot."""
    dtype = torch_dtype(info.dtype)
    if dtype is None:
        raise InputError(
            f"tensor {info.name!r} is stored as {info.dtype}, which safetensors reads into no dtype of torch "
            f"{torch.__version__}",
            path=where,
            hint="store it in a dtype torch reads (the engines load none other)",
        )
    packed = DTYPES[info.dtype].packed
    if packed == 1:
        return dtype, info.shape
    if not info.shape or info.shape[-1] % packed:
        raise InputError(
            f"tensor {info.name!r}: {info.dtype} x {list(info.shape)} packs {packed} values a {dtype}, so its last "
            f"dimension must be divisible by {packed}",
            path=where,
        )
    return dtype, (*info.shape[:-1], info.shape[-1] // packed)


def empty(dtype: torch.dtype, shape: tuple[int, ...], nbytes: int) -> tuple[torch.Tensor, memoryview]:
    """A new ``dtype`` tensor of ``shape`` (``nbytes`` as stored), uninitialized, and a writable view of its bytes to
    read them into (no zero-fill, no copy after the read: the kernel's copy is the only one)."""
    flat = torch.empty(nbytes, dtype=torch.uint8)
    window = (ctypes.c_char * nbytes).from_address(flat.data_ptr())  # used while ``flat`` lives: the read only
    return flat.view(dtype).view(shape), memoryview(window).cast("B")


class TensorFile:
    """A checkpoint's tensors by stored name, with ``safe_open``'s surface. Each shard is opened once, on first use,
    through ``sources`` (the run's, when it has one) and closed by :meth:`close`."""

    def __init__(self, ckpt: Checkpoint, sources: SourceFiles | None = None) -> None:
        self.bytes = TensorBytes(ckpt, sources)

    def keys(self) -> list[str]:
        return self.bytes.keys()

    def get_tensor(self, name: str) -> torch.Tensor:
        """``name``'s tensor, as stored, in memory it owns."""
        info = self.bytes.info(name)
        dtype, shape = torch_shape(info, self.bytes.root / info.shard)
        tensor, window = empty(dtype, shape, info.nbytes)
        self.bytes.read(name, window)
        return tensor

    def get_slice(self, name: str) -> TensorSlice:
        """``name``'s tensor, to be indexed: ``get_slice(name)[a:b]`` reads only rows ``a:b`` of it."""
        return TensorSlice(self, self.bytes.info(name))

    def close(self) -> None:
        self.bytes.close()

    def __enter__(self) -> TensorFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class TensorSlice:
    """One tensor, read when indexed (``safe_open``'s ``PySafeSlice``): an index whose first part is an integer or a
    step-1 slice reads only those rows; any other index reads the whole tensor and indexes it. The index applies to
    the tensor as torch holds it (F4: the packed last dimension)."""

    def __init__(self, file: TensorFile, info: TensorInfo) -> None:
        self._file, self._info = file, info
        self._dtype, self._shape = torch_shape(info, file.bytes.root / info.shard)

    def get_shape(self) -> list[int]:
        return list(self._info.shape)

    def get_dtype(self) -> str:
        return self._info.dtype

    def __getitem__(self, index: Any) -> torch.Tensor:
        parts = index if isinstance(index, tuple) else (index,)
        first, rest = (parts[0], parts[1:]) if parts else (Ellipsis, ())
        rows = self._rows(first)
        if rows is None:
            return self._file.get_tensor(self._info.name)[index]
        start, stop, single = rows
        first, end = self._info.rows(start, stop)
        block, window = empty(self._dtype, (stop - start, *self._shape[1:]), end - first)
        self._file.bytes.read_rows(self._info.name, start, stop, window)
        return block[(0, *rest)] if single else block[(slice(None), *rest)]

    def _rows(self, first: object) -> tuple[int, int, bool] | None:
        """(start, stop, one row indexed by an integer) of the rows ``first`` picks, or None to read them all."""
        if not self._shape or self._info.row_bytes is None or first is Ellipsis:
            return None
        count = self._shape[0]
        if isinstance(first, int) and not isinstance(first, bool):
            row = first + count if first < 0 else first
            if not 0 <= row < count:
                raise IndexError(f"index {first} is out of bounds for dimension 0 with size {count}")
            return row, row + 1, True
        if isinstance(first, slice) and first.step in (None, 1):
            start, stop, _ = first.indices(count)
            return start, max(start, stop), False
        return None
