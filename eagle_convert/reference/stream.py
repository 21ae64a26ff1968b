"""Reading a target's weights for the streamed reference (reference/hf_target.py): :class:`MappedShards` maps each
tensor straight from its safetensors shard (``mmap`` of the tensor's pages, ``torch.frombuffer`` at the byte offsets
the strict header reader found, in the dtype of the one table ``reference/tensor_file.py`` reads the draft with): no
copy is made where the stored dtype is the compute dtype, and when the last view of a tensor dies its mapping is
unmapped, so the resident set falls back (the page cache, not the process, keeps the file). Measured on a 400 MB
tensor: VmRSS 218 -> 621 MB while mapped and used, 222 MB after its views were dropped. The mapping is private
(copy-on-write): a caller that writes into a weight gets its own pages, never a fault or a changed file. A dtype
conversion or dequantization copies, and that copy is freed the same way. :func:`touch` faults a mapped tensor's pages
in on the thread that reads ahead, so the compute thread takes no page faults.

The draft's values are read with ``pread`` instead (reference/tensor_file.py): a shard truncated mid-run is a typed
error there, where a mapping takes SIGBUS. Reading the target that way measured several times slower than mapping
it (bench/bench_read.py: an 8B-shaped bfloat16 target from the page cache), so the target keeps its mapping.
"""

from __future__ import annotations

import mmap
import os
import threading
from pathlib import Path

import torch

from eagle_convert.errors import InputError
from eagle_convert.read.safetensors_header import TensorInfo
from eagle_convert.reference.tensor_file import torch_shape

PAGE = mmap.ALLOCATIONGRANULARITY


class MappedShards:
    """The shards of one checkpoint directory, each opened once; :meth:`map` returns a tensor viewing its bytes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()  # the background reader and the compute thread both map

    def map(self, info: TensorInfo) -> torch.Tensor:
        """``info``'s tensor as stored, viewing a private mapping of its pages (unmapped when the last view dies)."""
        dtype, shape = torch_shape(info, self.directory / info.shard)  # the one table every reader of values uses
        return self._map(info.shard, info.start, info.nbytes, dtype, shape)

    def map_rows(self, info: TensorInfo, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` of ``info``'s tensor (along its first dimension) as stored, viewing a private mapping
        of only their pages: a fused ``[E, ...]`` tensor is read an expert at a time, never whole."""
        dtype, stored = torch_shape(info, self.directory / info.shard)
        first, end = info.rows(start, stop)  # the header's offsets, as every reader computes them
        return self._map(info.shard, first, end - first, dtype, (stop - start, *stored[1:]) if stored else ())

    def _map(self, shard: str, first: int, nbytes: int, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        offset = first - first % PAGE  # mmap offsets are page multiples
        pages = mmap.mmap(self._fd(shard), first + nbytes - offset, access=mmap.ACCESS_COPY, offset=offset)
        skip = first - offset
        if skip % dtype.itemsize:  # a misaligned tensor (a writer that did not pad): copy it into aligned memory
            flat = torch.frombuffer(pages, dtype=torch.uint8, count=nbytes, offset=skip).clone().view(dtype)
        else:
            flat = torch.frombuffer(pages, dtype=dtype, count=nbytes // dtype.itemsize, offset=skip)  # holds `pages`
        return flat.view(shape)

    def _fd(self, shard: str) -> int:
        with self._lock:
            fd = self._fds.get(shard)
            if fd is None:
                try:
                    fd = self._fds[shard] = os.open(self.directory / shard, os.O_RDONLY)
                except OSError as exc:
                    raise InputError(f"cannot open shard: {exc.strerror}", path=self.directory / shard) from None
            return fd

    def close(self) -> None:
        """Close the shard files (live tensors keep their own mappings)."""
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


def touch(t: torch.Tensor) -> None:
    """Fault in every page of ``t``'s storage (a mapped tensor: read from the page cache or the disk now, on this
    thread, rather than by the first kernel that uses it)."""
    if t.numel() == 0 or t.device.type != "cpu":
        return
    flat = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())  # the storage's bytes
    flat[:: PAGE // 2].sum()  # one byte in every page (half-page stride: a page-crossing start is covered too)
