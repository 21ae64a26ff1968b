"""A checkpoint's tensors by name, as bytes: at the offsets the strict header reader found, through one checked
descriptor a shard (no torch: torch's view of these bytes is ``reference/tensor_file.py``).

Every reader of tensor values goes through :class:`TensorBytes`: the draft's values for verify and the probe (through
``reference/tensor_file.py``'s ``safe_open`` surface), and normalize's computed tensors and byte ranges (which the
writer then copies with the kernel). Each shard is opened once, through :class:`~.source_files.SourceFiles`, and must
still be the file its header was read from (its fingerprint); the bytes are read with ``pread`` into a buffer the
caller owns, never through a mapping that outlives the read. A shard truncated, grown, replaced or written to since
its header was read is a :class:`SourceChangedError` (exit 2) naming it, never a SIGBUS or another version's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from eagle_convert.errors import InputError
from eagle_convert.read.checkpoint import Checkpoint
from eagle_convert.read.safetensors_header import TensorInfo
from eagle_convert.read.source_files import SourceFiles

# what a reader (not a writer) says of a shard that changed under it
READ_CHANGED = "changed since its header was read; run again on a checkpoint no other process is writing"


@dataclass(frozen=True)
class ByteRange:
    """Bytes ``start:end`` (absolute offsets) of ``file``: a tensor, or a run of its rows."""

    file: Path
    start: int
    end: int


class TensorBytes:
    """The tensors of ``ckpt`` by stored name, each read from its shard at its header's offsets.

    ``sources`` is the run's :class:`SourceFiles` when it has one (normalize's writer copies through the same
    descriptors); without it the reader opens its own, expecting each shard's fingerprint from ``ckpt``, and closes
    it in :meth:`close`. ``bytes_read`` counts the tensor bytes read so far."""

    def __init__(self, ckpt: Checkpoint, sources: SourceFiles | None = None) -> None:
        self.root = ckpt.root
        self.tensors = ckpt.tensors
        self._own = sources is None
        if sources is None:
            sources = SourceFiles({ckpt.root / s.name: s.fingerprint for s in ckpt.shards}, READ_CHANGED)
        self.sources = sources
        self.bytes_read = 0

    def keys(self) -> list[str]:
        """Every stored name, sorted (as ``safe_open``'s ``keys()``)."""
        return sorted(self.tensors)

    def info(self, name: str) -> TensorInfo:
        """The header's record of ``name``; InputError when no shard holds it."""
        info = self.tensors.get(name)
        if info is None:
            raise InputError(f"no tensor {name!r} in the checkpoint", path=self.root)
        return info

    def byte_range(self, name: str) -> ByteRange:
        """Where ``name``'s bytes are (nothing read)."""
        info = self.info(name)
        return ByteRange(self.root / info.shard, info.start, info.end)

    def row_range(self, name: str, start: int, stop: int) -> ByteRange:
        """Where rows ``start:stop`` of ``name`` (along its first dimension) are (nothing read)."""
        info = self.info(name)
        first, end = info.rows(start, stop)
        return ByteRange(self.root / info.shard, first, end)

    def read(self, name: str, into: memoryview | None = None) -> memoryview:
        """``name``'s bytes, as stored: into ``into`` (a writable buffer of exactly their size) or a fresh buffer."""
        return self.read_range(self.byte_range(name), into)

    def read_rows(self, name: str, start: int, stop: int, into: memoryview | None = None) -> memoryview:
        """Rows ``start:stop`` of ``name``, as stored (nothing else of the tensor is read), as :meth:`read`."""
        return self.read_range(self.row_range(name, start, stop), into)

    def read_range(self, where: ByteRange, into: memoryview | None = None) -> memoryview:
        """The bytes of ``where``, read through its shard's one descriptor straight into ``into`` or a fresh buffer."""
        size = where.end - where.start
        buffer = memoryview(bytearray(size)) if into is None else into
        if buffer.nbytes != size:
            raise ValueError(f"{where}: a buffer of {buffer.nbytes} bytes for {size}")
        self.sources.read_into(where.file, where.start, buffer)
        self.bytes_read += size
        return buffer

    def close(self) -> None:
        """Close the shards this reader opened (a run's ``sources`` is its owner's to close)."""
        if self._own:
            self.sources.close()

    def __enter__(self) -> TensorBytes:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
