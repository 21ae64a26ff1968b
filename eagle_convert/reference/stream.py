"""Layer streaming for the reference targets: each group of tensors (a decoder layer) read when it is needed and
released after use, the next group's read started while the current one computes.

**Reading (CPU).** :class:`MappedShards` maps each tensor straight from its safetensors shard (``mmap`` of the
tensor's pages, ``torch.frombuffer`` at the byte offsets the strict header reader found): no copy is made where the
stored dtype is the compute dtype, and when the last view of a tensor dies its mapping is unmapped, so the resident
set falls back (the page cache, not the process, keeps the file). Measured on a 400 MB tensor: VmRSS 218 -> 621 MB
while mapped and used, 222 MB after its views were dropped. The mapping is private (copy-on-write): a caller that
writes into a weight gets its own pages, never a fault or a changed file. A dtype conversion or FP8 dequantization
copies, and that copy is freed the same way.

**Streaming.** :class:`LayerStream.walk` hands out groups in order. When group ``i`` is handed out, group ``i + 1``'s
read starts on one background thread (a touch of each page of a mapped tensor, which reads it from the page cache or
the disk there, so the compute thread takes no page faults; or the dtype conversion), and group ``i - 1``'s dict is
emptied: at most two groups' tensors are held by the stream at any time, and a group's tensors are valid until the
next group is asked for. Measured on a Llama-3.1-8B-shaped bfloat16 target (16 GB, 2 cores, 24 GB): generation
peaks at 2.0 GB resident in bfloat16 and 4.4 GB in float32 (two converted layers and the converted lm_head).

**CUDA** (:class:`CopyLane`; written, unit-tested on the CPU with recording streams, **not yet measured on a GPU**):
two slots, each a pinned host staging buffer and a device buffer sized to the largest group. The background thread
copies group ``i + 1``'s bytes (as stored) into its slot's pinned buffer, then issues a ``non_blocking`` copy to the
slot's device buffer on a side stream and records an event; the compute stream waits for that event before it uses
the group. A slot is refilled only after the compute stream has recorded that it released the group the slot held
(two groups back), and its pinned buffer only after its last host-to-device copy finished. Conversion to the compute
dtype runs on the device, on the side stream.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from eagle_convert.errors import InputError
from eagle_convert.read.safetensors_header import TensorInfo

TORCH_DTYPES: Mapping[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
PAGE = mmap.ALLOCATIONGRANULARITY
ALIGN = 256  # byte alignment of each tensor in a CUDA slot


class WeightSource(Protocol):
    """Tensors by HF name, read when asked for (reference/llama.py's and reference/deepseek.py's protocol)."""

    def names(self) -> list[str]: ...
    def get(self, name: str) -> torch.Tensor: ...


class MappedShards:
    """The shards of one checkpoint directory, each opened once; :meth:`map` returns a tensor viewing its bytes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()  # the background reader and the compute thread both map

    def map(self, info: TensorInfo) -> torch.Tensor:
        """``info``'s tensor as stored, viewing a private mapping of its pages (unmapped when the last view dies)."""
        dtype = TORCH_DTYPES.get(info.dtype)
        if dtype is None:
            raise InputError(
                f"tensor {info.name!r} is stored as {info.dtype}, which the reference models do not read",
                path=self.directory / info.shard,
            )
        if info.nbytes == 0:
            return torch.empty(info.shape, dtype=dtype)
        start = info.start - info.start % PAGE  # mmap offsets are page multiples
        pages = mmap.mmap(self._fd(info.shard), info.end - start, access=mmap.ACCESS_COPY, offset=start)
        skip = info.start - start
        if skip % dtype.itemsize:  # a misaligned tensor (a writer that did not pad): copy it into aligned memory
            flat = torch.frombuffer(pages, dtype=torch.uint8, count=info.nbytes, offset=skip).clone().view(dtype)
        else:
            flat = torch.frombuffer(pages, dtype=dtype, count=info.numel, offset=skip)  # holds `pages` alive
        return flat.view(info.shape)

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


# ---------------------------------------------------------------------------------------------------- stream


Group = Mapping[str, tuple[int, ...] | None]
"""A group's tensors: full HF name -> the shape the config implies (None: not checked here, the user checks)."""


class Lane(Protocol):
    """How a group's tensors reach the compute device: ``load`` on the background thread, ``wait`` and
    ``release`` on the compute thread."""

    def reserve(self, nbytes: int) -> None: ...
    def load(
        self, slot: int, tensors: dict[str, torch.Tensor], dtype: torch.dtype | None
    ) -> dict[str, torch.Tensor]: ...
    def wait(self, slot: int) -> None: ...
    def release(self, slot: int) -> None: ...


class HostLane:
    """The CPU: a tensor stored in the compute dtype stays a mapped view (its pages touched ahead), any other is
    converted (the copy made on the background thread)."""

    def reserve(self, nbytes: int) -> None:
        return None

    def load(self, slot: int, tensors: dict[str, torch.Tensor], dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
        out = {}
        for name, t in tensors.items():
            if dtype is None or t.dtype == dtype or not t.is_floating_point():
                touch(t)
                out[name] = t
            else:
                out[name] = t.to(dtype)
        return out

    def wait(self, slot: int) -> None:
        return None

    def release(self, slot: int) -> None:
        return None


class LayerStream:
    """Reads groups of tensors one ahead of their use, from ``weights`` onto ``device`` in ``dtype``.

    ``lane`` is :class:`HostLane` on the CPU and :class:`CopyLane` on CUDA unless given (tests give a CopyLane
    with recording streams on the CPU)."""

    def __init__(
        self,
        weights: WeightSource,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | None = torch.float32,
        *,
        lane: Lane | None = None,
    ) -> None:
        self.weights, self.device, self.dtype = weights, torch.device(device), dtype
        self.lane = (
            lane if lane is not None else (CopyLane.cuda(self.device) if self.device.type == "cuda" else HostLane())
        )
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="layer-stream")

    def walk(self, groups: Sequence[Group]) -> Generator[dict[str, torch.Tensor], None, None]:
        """Each group's tensors in order (name -> tensor on the device); group ``i + 1`` is read while group ``i``
        is in use, and group ``i``'s dict is emptied when group ``i + 1`` is asked for."""
        if not groups:
            return
        self.lane.reserve(max(_group_bytes(self.weights, g) for g in groups))
        pending = self._reader.submit(self._read, 0, groups[0])
        held: tuple[int, dict[str, torch.Tensor]] | None = None  # the slot and tensors handed out last
        try:
            for i in range(len(groups)):
                current = pending.result()
                if held is not None:
                    self._release(*held)  # before the read that reuses its slot is queued
                    held = None
                if i + 1 < len(groups):
                    pending = self._reader.submit(self._read, (i + 1) % 2, groups[i + 1])
                self.lane.wait(i % 2)
                held = (i % 2, current)
                yield current
        finally:
            _drain(pending)
            if held is not None:
                self._release(*held)

    def _release(self, slot: int, tensors: dict[str, torch.Tensor]) -> None:
        tensors.clear()
        self.lane.release(slot)

    def _read(self, slot: int, group: Group) -> dict[str, torch.Tensor]:
        tensors = {name: _checked(self.weights.get(name), name, shape) for name, shape in group.items()}
        return self.lane.load(slot, tensors, self.dtype)

    def close(self) -> None:
        self._reader.shutdown(wait=True)


def _checked(t: torch.Tensor, name: str, shape: tuple[int, ...] | None) -> torch.Tensor:
    if shape is not None and tuple(t.shape) != shape:
        raise InputError(
            f"tensor {name!r} has shape {list(t.shape)}, the config implies {list(shape)}",
            hint="the target's config.json and weights disagree; point at the checkpoint the config belongs to",
        )
    return t


def _group_bytes(weights: WeightSource, group: Group) -> int:
    """Bytes a slot needs for ``group`` as stored (headers only where the source can say: ``nbytes(name)``)."""
    nbytes: Callable[[str], int] | None = getattr(weights, "nbytes", None)
    if nbytes is None:
        return 0  # in-memory sources: the lane grows its slots when a group is larger
    return sum(-(-nbytes(name) // ALIGN) * ALIGN for name in group)


def _drain(pending: Future[Any]) -> None:
    """Wait for an unfinished read (a walk left early) so its tensors are not filled behind the caller's back."""
    try:
        pending.result()
    except Exception:  # noqa: BLE001 - the walk was left, its error (if any) already raised or no longer wanted
        return


# ---------------------------------------------------------------------------------------------------- CUDA


class Event(Protocol):
    def record(self, stream: Any) -> None: ...
    def synchronize(self) -> None: ...


class Streams(Protocol):
    """What :class:`CopyLane` needs from a device: a side stream for copies, the compute stream, events, pinned
    host memory and device memory. :meth:`CopyLane.cuda` uses torch.cuda's; tests use recording ones on the CPU."""

    copy: Any
    compute: Any

    def event(self) -> Event: ...
    def on(self, stream: Any) -> Any: ...  # a context manager: work issued inside runs on ``stream``
    def wait(self, stream: Any, event: Event) -> None: ...  # ``stream`` waits for ``event``
    def pinned(self, nbytes: int) -> torch.Tensor: ...  # uint8, page-locked host memory
    def device_bytes(self, nbytes: int) -> torch.Tensor: ...  # uint8 on the device


@dataclass
class _Slot:
    pinned: torch.Tensor
    device: torch.Tensor
    copied: Event | None = None  # the last host-to-device copy out of ``pinned``
    released: Event | None = None  # the compute stream done with the group the slot held
    converted: list[torch.Tensor] = field(default_factory=list)


class CopyLane:
    """CUDA streaming from pinned host memory, the next group's copy overlapping the current group's compute
    (double-buffered slots; see the module docstring). Unmeasured on a GPU so far."""

    def __init__(self, streams: Streams) -> None:
        self.streams = streams
        self.slots = [_Slot(streams.pinned(0), streams.device_bytes(0)) for _ in range(2)]

    @classmethod
    def cuda(cls, device: torch.device) -> CopyLane:
        return cls(_CudaStreams(device))

    def reserve(self, nbytes: int) -> None:
        """Both slots at least ``nbytes`` (made before the first group is read)."""
        for slot in range(2):
            self._grow(slot, nbytes)

    def _grow(self, slot: int, nbytes: int) -> None:
        """Slot ``slot`` at least ``nbytes``: new buffers once its pinned one is idle (views of the old device
        buffer keep it alive while the compute stream uses them; the new one has no use to wait for)."""
        box = self.slots[slot]
        if box.pinned.numel() >= nbytes:
            return
        if box.copied is not None:
            box.copied.synchronize()
        self.slots[slot] = _Slot(self.streams.pinned(nbytes), self.streams.device_bytes(nbytes))

    def load(self, slot: int, tensors: dict[str, torch.Tensor], dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
        offsets, end = {}, 0
        for name, t in tensors.items():
            offsets[name] = end
            end += -(-t.numel() * t.element_size() // ALIGN) * ALIGN
        self._grow(slot, end)  # an in-memory source, whose sizes were not known up front
        s, box = self.streams, self.slots[slot]
        if box.copied is not None:
            box.copied.synchronize()  # the pinned buffer's last copy to the device has finished
        for name, t in tensors.items():  # the host read: page cache (or disk) -> pinned
            a = offsets[name]
            box.pinned[a : a + t.numel() * t.element_size()].copy_(t.contiguous().view(-1).view(torch.uint8))
        out: dict[str, torch.Tensor] = {}
        converted: list[torch.Tensor] = []
        with s.on(s.copy):
            if box.released is not None:
                s.wait(s.copy, box.released)  # the group this slot held two steps ago is no longer computed on
            box.device[:end].copy_(box.pinned[:end], non_blocking=True)
            for name, t in tensors.items():
                a = offsets[name]
                out[name] = box.device[a : a + t.numel() * t.element_size()].view(t.dtype).view(t.shape)
                if dtype is not None and t.is_floating_point() and t.dtype != dtype:
                    out[name] = out[name].to(dtype)  # on the device, on the copy stream
                    converted.append(out[name])
            box.copied = s.event()
            box.copied.record(s.copy)
        box.converted = converted
        return out

    def wait(self, slot: int) -> None:
        box = self.slots[slot]
        if box.copied is not None:
            self.streams.wait(self.streams.compute, box.copied)
        for t in box.converted:  # made on the copy stream, used on the compute stream
            _record_stream(t, self.streams.compute)

    def release(self, slot: int) -> None:
        box = self.slots[slot]
        box.released = self.streams.event()
        box.released.record(self.streams.compute)
        box.converted = []


def _record_stream(t: torch.Tensor, stream: Any) -> None:
    if t.device.type == "cuda":
        t.record_stream(stream)


class _CudaStreams:
    """torch.cuda's streams and events for :class:`CopyLane`."""

    def __init__(self, device: torch.device) -> None:
        self.dev = device
        self.copy = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        self.compute = torch.cuda.current_stream(device)

    def event(self) -> Event:
        return torch.cuda.Event()  # type: ignore[no-untyped-call]

    def on(self, stream: Any) -> Any:
        return torch.cuda.stream(stream)

    def wait(self, stream: Any, event: Event) -> None:
        stream.wait_event(event)

    def pinned(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def device_bytes(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, device=self.dev)
