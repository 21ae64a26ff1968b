"""Stream a safetensors checkpoint to disk and commit it atomically (no torch, no numpy).

The converter describes its output as a plan and this module writes it::

    plan = [ShardPlan("model.safetensors", (TensorSource("fc.weight", "BF16", (64, 192), file=src, start=s, end=e),
                                             TensorSource("d2t", "I64", (128,), compute=make_d2t)),
                      {"format": "pt"})]
    write_checkpoint(Path("out"), plan, {"config.json": config_bytes}, force=False, progress=bar.advance)

**Where the bytes come from.** A :class:`TensorSource` is either a byte range of a source file (tensor bytes are
copied unchanged, by the kernel when it can) or a ``compute`` callable that returns the bytes. ``compute`` is called
once, while its shard is written, so at most one computed tensor is in memory at a time; nothing else is ever held in
memory but the current copy chunk. Source files are opened read-only and never modified.

**Layout.** Each shard is the header from :func:`~.safetensors_header.build_header` (tensors back to back
in the plan's order, buffer 8-byte aligned) followed by the tensor bytes in that order. With more than one shard,
``model.safetensors.index.json`` is written too (``metadata.total_size`` = the sum of tensor bytes, ``weight_map``
sorted by name). ``files`` (``config.json`` and the like) are written as given.

**Copying.** Consecutive sources that read contiguous ranges of the same file (one's ``end`` is the next's
``start``) are merged into one copy, so a shard that keeps its source order is copied in one piece. A copy tries, in
order, ``os.copy_file_range`` (in-kernel, may share extents on filesystems that support it), ``os.sendfile``, and
a ``pread``/``write`` loop with an 8 MiB buffer. A kernel call that is missing, raises EXDEV, EINVAL, ENOSYS or
EOPNOTSUPP, or copies nothing, moves this write on to the next way for the rest of the run. Each call copies at most
64 MiB, and partial copies are resumed, so ``progress(nbytes)`` is called at least every 64 MiB of tensor data.

**Sources read as they were.** Every source file is opened once, through :class:`~.source_files.SourceFiles`, and
all its bytes (copies and the ``compute`` callables that read through the same object) come through that descriptor.
With ``sources`` given, each file must still have the fingerprint taken when its header was read; before the commit
every source is checked again, by descriptor and by path: a file replaced, written to, grown or truncated during the
run is a :class:`SourceChangedError` and nothing is committed.

**Atomic commit.** Everything is written into a fresh sibling ``.{out.name}.partial-{16 hex}`` of ``out`` (never
inside ``out``), marked as the tool's by a ``.eagle-convert-staging`` file in it. Every file is fsynced, every
shard's header is read back with :func:`~.safetensors_header.read_header` and checked against the plan (names,
dtypes, shapes, metadata, file size), the sources are checked unchanged, the marker is removed and the directory is
fsynced. Then, with SIGINT and SIGTERM held back until it is done: with no previous ``out``, the directory is renamed
to ``out``; with a previous ``out`` and ``force``, the previous one is renamed to ``.{out.name}.old-{16 hex}``, the
new one to ``out``, and the old one removed (if the second rename fails, the first is undone). The parent directory is
fsynced after the renames. A process killed at any moment therefore leaves ``out`` absent, the previous ``out``
intact, or the complete new ``out`` -- never a half-written one -- plus possibly a marked ``.partial-*`` sibling
(removed by the next write to the same ``out``; a folder of that name without the marker is the user's and is never
touched) or, when killed between the two renames, the previous checkpoint under ``.old-*`` (left alone: it may be the
only copy of the previous output). An interrupt (SIGINT, SIGTERM) removes the partial directory on its way out.

**Errors.** The plan is validated before anything is created:

- a tensor with both or neither of ``file`` and ``compute``, a bad dtype or shape, a byte range whose length is not
  ``tensor_nbytes(dtype, shape)``, an empty or reserved tensor name, or clashing file names: ``ValueError`` (a bug in
  the caller);
- a shard or file name that is not a plain name: :class:`UnsafePathError`;
- the same tensor name twice, or a source file that is missing or shorter than a range: :class:`InputError`;
- ``out`` inside, equal to, or a parent of a source file's directory (by identity: a bind mount is the same
  folder), a special file, or under a file or a folder that cannot be written: :class:`UsageError`
  (:func:`check_output_place`, which report writers share);
- ``out`` existing without ``force``, or holding anything but a checkpoint's files: :class:`OutputExistsError`
  (:func:`check_replace`);
- a source file that is not a regular file, is shorter than a range, or changed since its header was read:
  :class:`InputError` (:class:`SourceChangedError`).

While writing, any exception removes the partial directory and is re-raised; an ``OSError`` with ENOSPC or EDQUOT
becomes :class:`DiskFullError`, any other ``OSError`` an :class:`InputError` naming ``out``. A ``compute`` that returns
the wrong number of bytes raises ``RuntimeError``. Two processes writing the same ``out`` at once are not supported.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from eagle_convert.errors import InputError, OutputExistsError, SourceChangedError, UnsafePathError
from eagle_convert.read.checkpoint import INDEX_NAME, SAFETENSORS_SUFFIX, is_plain_name
from eagle_convert.read.output_place import (
    check_output_place,
    check_replace,
    committed,
    drop_staging,
    fsync_dir,
    is_leftover_staging,
    keep_staging,
    make_staging,
    remove_staging,
    signals_held,
    track_staging,
    unmark_staging,
    write_error,
)
from eagle_convert.read.safetensors_header import DTYPE_BITS, build_header, read_header, tensor_nbytes
from eagle_convert.read.source_files import CHANGED, SourceFiles

COPY_BUFFER_BYTES = 8 * 1024 * 1024  # the read/write fallback's chunk
KERNEL_CHUNK_BYTES = 64 * 1024 * 1024  # the most one copy_file_range/sendfile call is asked to copy
_FALLBACK_ERRNOS = frozenset({errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP})
_RANDOM_HEX = 16
_BINARY: int = getattr(os, "O_BINARY", 0)  # Windows only; 0 elsewhere

Progress = Callable[[int], None]


@dataclass(frozen=True)
class TensorSource:
    """One output tensor and where its bytes come from: a byte range of a source file (copied by the kernel),
    or bytes computed on demand (called once, while writing, so only one such tensor is in memory at a time)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: Path | None = None
    start: int = 0  # absolute byte offset in `file`
    end: int = 0
    compute: Callable[[], bytes] | None = None


@dataclass(frozen=True)
class ShardPlan:
    name: str  # plain file name, e.g. "model.safetensors" or "model-00001-of-00003.safetensors"
    tensors: tuple[TensorSource, ...]
    metadata: Mapping[str, str]  # safetensors __metadata__


@dataclass(frozen=True)
class WriteResult:
    """``files`` are the paths inside ``out`` (shards, index, extra files); ``bytes_written`` counts all of them.
    ``left_behind`` lists leftovers (a replaced previous output, stale partial directories) that could not be removed.
    """

    out: Path
    files: tuple[Path, ...]
    bytes_written: int
    left_behind: tuple[Path, ...] = ()


@dataclass(frozen=True)
class _Copy:
    """Contiguous source tensors merged into one byte range."""

    file: Path
    start: int
    end: int


def write_checkpoint(
    out: Path,
    shards: Sequence[ShardPlan],
    files: Mapping[str, bytes],
    *,
    force: bool = False,
    progress: Progress | None = None,
    check: Callable[[Path], None] | None = None,
    sources: SourceFiles | None = None,
) -> WriteResult:
    """Write ``shards`` and ``files`` as the checkpoint directory ``out``, atomically (see the module docstring).

    ``progress(n)`` is called with the number of tensor bytes just written (headers and extra files not counted).
    ``check(tmp)`` runs on the finished temporary directory before the commit; if it raises, nothing is committed.
    ``sources`` reads the source files (with the fingerprints their headers were read with); the caller closes it.
    Without it, each source is fingerprinted when it is first opened here.
    """
    out = Path(out)
    if sources is None:
        with SourceFiles() as own:
            return write_checkpoint(out, shards, files, force=force, progress=progress, check=check, sources=own)
    ends = _check_plan(shards, files)
    _check_output(out, ends, force)
    _check_sources(ends, sources)

    left_behind: list[Path] = []
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        left_behind += _remove_stale_partials(out)
        tmp = make_staging(out, "partial")
    except OSError as exc:
        raise write_error(exc, out) from exc

    done = False
    try:
        written, nbytes = _write_all(tmp, shards, files, progress, sources)
        _verify(tmp, shards)
        if check is not None:
            check(tmp)
        unmark_staging(tmp)
        fsync_dir(tmp)
        sources.check_unchanged()  # nothing read changed while it was read: the last check before the commit
        with signals_held():
            old = _commit(tmp, out, force)
            committed(tmp, out, old)
            done = True
    except OSError as exc:
        raise write_error(exc, out) from exc
    finally:
        if not done:
            drop_staging(tmp)

    try:
        fsync_dir(out.parent)
    except OSError as exc:
        raise InputError(
            f"the checkpoint was written but its parent directory could not be synced: {exc.strerror or exc}", path=out
        ) from exc
    if old is not None and not drop_staging(old):
        left_behind.append(old)
    return WriteResult(out, tuple(out / name for name in written), nbytes, tuple(left_behind))


# ---- validation (nothing is created before these pass) -------------------------------------------------------------


def _check_plan(shards: Sequence[ShardPlan], files: Mapping[str, bytes]) -> dict[Path, int]:
    """Check names and tensor sources; return each source file with the furthest byte the plan reads from it."""
    file_names = [s.name for s in shards] + ([INDEX_NAME] if len(shards) > 1 else []) + list(files)
    for name in file_names:
        _check_plain_name(name)
    clashes = sorted({n for n in file_names if file_names.count(n) > 1})
    if clashes:
        raise ValueError(f"output file name(s) {clashes} are planned twice (shards, index and extra files)")

    ends: dict[Path, int] = {}
    seen: dict[str, str] = {}
    for shard in shards:
        if not shard.name.endswith(SAFETENSORS_SUFFIX):
            raise ValueError(f"shard {shard.name!r} must end with {SAFETENSORS_SUFFIX}")
        for t in shard.tensors:
            if t.name in seen:
                raise InputError(
                    f"tensor {t.name!r} would be written twice (in {seen[t.name]} and {shard.name})",
                    hint="two source tensors map to the same output name; remove one of them from the source",
                )
            seen[t.name] = shard.name
            nbytes = _planned_nbytes(t)
            if t.file is not None:
                if t.end - t.start != nbytes:
                    raise ValueError(
                        f"tensor {t.name!r}: {t.dtype} x {list(t.shape)} is {nbytes} bytes but the range "
                        f"{t.start}:{t.end} of {t.file} is {t.end - t.start}"
                    )
                ends[t.file] = max(ends.get(t.file, 0), t.end)
    return ends


def _planned_nbytes(t: TensorSource) -> int:
    if not t.name or t.name == "__metadata__":
        raise ValueError(f"tensor name {t.name!r} cannot be written to safetensors")
    if (t.file is None) == (t.compute is None):
        raise ValueError(f"tensor {t.name!r}: give exactly one of file (with start/end) or compute")
    if t.file is not None and not 0 <= t.start <= t.end:
        raise ValueError(f"tensor {t.name!r}: byte range {t.start}:{t.end} is not valid")
    if t.dtype not in DTYPE_BITS:
        raise ValueError(f"tensor {t.name!r}: unknown dtype {t.dtype!r}")
    if not all(type(d) is int and d >= 0 for d in t.shape):
        raise ValueError(f"tensor {t.name!r}: shape {t.shape!r} is not a tuple of non-negative integers")
    nbytes = tensor_nbytes(t.dtype, t.shape)
    if nbytes is None:
        raise ValueError(f"tensor {t.name!r}: {t.dtype} x {list(t.shape)} is not a whole number of bytes")
    return nbytes


def _check_plain_name(name: str) -> None:
    if not is_plain_name(name):
        raise UnsafePathError(f"output file name {name!r} is not a plain file name")


def _check_output(out: Path, sources: Mapping[Path, int], force: bool) -> None:
    check_output_place(out, sorted({src.parent for src in sources}), directory=True)
    check_replace(out, force)


def _check_sources(ends: Mapping[Path, int], sources: SourceFiles) -> None:
    """Open every source file (a regular file, as fingerprinted) and check it holds every byte the plan reads."""
    for path, end in ends.items():
        size = sources.size(path)
        if size < end:
            raise InputError(
                f"source file is {size} bytes but tensors are read up to byte {end}",
                path=path,
                hint="the file changed or is truncated since it was read; re-download it",
            )


# ---- writing ---------------------------------------------------------------------------------------------------------


def _write_all(
    tmp: Path, shards: Sequence[ShardPlan], files: Mapping[str, bytes], progress: Progress | None, sources: SourceFiles
) -> tuple[list[str], int]:
    """Write every shard, the index and the extra files into ``tmp``; return their names and total size."""
    written: list[str] = []
    nbytes = 0
    copier = _Copier(progress, sources)
    for shard in shards:
        nbytes += _write_shard(tmp / shard.name, shard, copier)
        written.append(shard.name)
    extra = dict(files)
    if len(shards) > 1:
        extra = {INDEX_NAME: _index(shards), **extra}
    for name, data in extra.items():
        nbytes += _write_file(tmp / name, data)
        written.append(name)
    _fsync_files([tmp / name for name in written])
    return written, nbytes


def _write_shard(path: Path, shard: ShardPlan, copier: _Copier) -> int:
    runs = list(_runs(shard.tensors))
    # Start the data where the first copied range starts within its page: copies stay page-congruent (faster).
    first = runs[0].start % 4096 if runs and isinstance(runs[0], _Copy) and runs[0].start % 8 == 0 else None
    header = build_header(((t.name, t.dtype, t.shape) for t in shard.tensors), shard.metadata, data_start_mod=first)
    size = len(header)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _BINARY, 0o666)
    try:
        _write_bytes(fd, header)
        for run in runs:
            if isinstance(run, _Copy):
                copier.copy(run.file, run.start, run.end, fd)
                size += run.end - run.start
            else:
                size += _write_computed(fd, run, copier.progress)
    finally:
        os.close(fd)
    return size


def _fsync_files(paths: Sequence[Path]) -> None:
    """fsync after everything is written, so the kernel writes back all files in one go instead of shard by shard."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY | _BINARY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _runs(tensors: Sequence[TensorSource]) -> Iterator[_Copy | TensorSource]:
    """Merge consecutive file sources that are contiguous in the same file; computed tensors stand alone."""
    run: _Copy | None = None
    for t in tensors:
        if t.file is None:
            if run is not None:
                yield run
                run = None
            yield t
        elif run is not None and run.file == t.file and run.end == t.start:
            run = _Copy(run.file, run.start, t.end)
        else:
            if run is not None:
                yield run
            run = _Copy(t.file, t.start, t.end)
    if run is not None:
        yield run


def _write_computed(fd: int, t: TensorSource, progress: Progress | None) -> int:
    assert t.compute is not None  # _runs yields only computed tensors as TensorSource
    data = t.compute()
    expected = tensor_nbytes(t.dtype, t.shape)
    got = memoryview(data).nbytes
    if got != expected:
        raise RuntimeError(f"compute() for tensor {t.name!r} returned {got} bytes, expected {expected}")
    _write_bytes(fd, data)
    if progress is not None:
        progress(got)
    return got


class _Copier:
    """Copies byte ranges of source files into an output fd, with the fastest call that works here.

    Source files are read through ``sources``' one descriptor each (opened read-only, fingerprint checked).
    """

    def __init__(self, progress: Progress | None, sources: SourceFiles) -> None:
        self.progress = progress
        self.use_copy_file_range = True
        self.use_sendfile = True
        self.sources = sources

    def copy(self, src: Path, start: int, end: int, dst: int) -> None:
        """Append bytes ``start:end`` of ``src`` at ``dst``'s current position."""
        fd = self.sources.open(src)
        pos = start
        while pos < end:
            n = self._copy_some(fd, dst, pos, end - pos)
            if n == 0:
                raise SourceChangedError(
                    f"ended at byte {pos}, before the end of a tensor at byte {end}: {CHANGED}", path=src
                )
            pos += n
            if self.progress is not None:
                self.progress(n)

    def _copy_some(self, src: int, dst: int, pos: int, count: int) -> int:
        """Copy up to ``count`` bytes from ``src`` at ``pos``; return how many (0 only at the end of ``src``)."""
        copy_file_range: Callable[..., int] | None = getattr(os, "copy_file_range", None)
        if self.use_copy_file_range and copy_file_range is not None:
            n = _kernel_copy(lambda: copy_file_range(src, dst, min(count, KERNEL_CHUNK_BYTES), pos))
            if n > 0:
                return n
            self.use_copy_file_range = False  # not supported between these files: try the next way
        sendfile: Callable[..., int] | None = getattr(os, "sendfile", None)
        if self.use_sendfile and sendfile is not None:
            n = _kernel_copy(lambda: sendfile(dst, src, pos, min(count, KERNEL_CHUNK_BYTES)))
            if n > 0:
                return n
            self.use_sendfile = False
        data = os.pread(src, min(count, COPY_BUFFER_BYTES), pos)
        _write_bytes(dst, data)
        return len(data)


def _kernel_copy(call: Callable[[], int]) -> int:
    """Run one kernel copy call; 0 when the call is not supported for these files (the caller falls back)."""
    try:
        return call()
    except OSError as exc:
        if exc.errno in _FALLBACK_ERRNOS:
            return 0
        raise


def _write_bytes(fd: int, data: bytes) -> None:
    view = memoryview(data).cast("B")
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "write() wrote nothing")
        view = view[n:]


def _write_file(path: Path, data: bytes) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _BINARY, 0o666)
    try:
        _write_bytes(fd, data)
    finally:
        os.close(fd)
    return len(data)


def _index(shards: Sequence[ShardPlan]) -> bytes:
    weight_map = {t.name: s.name for s in shards for t in s.tensors}
    total = sum(tensor_nbytes(t.dtype, t.shape) or 0 for s in shards for t in s.tensors)
    doc = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _verify(tmp: Path, shards: Sequence[ShardPlan]) -> None:
    """Read every written header back and check it against the plan."""
    for shard in shards:
        path = tmp / shard.name
        header = read_header(path, shard=shard.name)
        want = [(t.name, t.dtype, tuple(t.shape)) for t in shard.tensors]
        got = [(t.name, t.dtype, t.shape) for t in header.tensors]
        size = header.data_start + sum(tensor_nbytes(t.dtype, t.shape) or 0 for t in shard.tensors)
        if got != want or header.metadata != dict(shard.metadata) or header.file_size != size:
            raise InputError(
                f"the written shard does not match the plan (file is {header.file_size} bytes, planned {size})",
                path=path,
                hint="another process may have changed the output while it was written; run the command again",
            )


# ---- directories and the commit --------------------------------------------------------------------------------------


def _sibling(out: Path, kind: str) -> Path:
    return out.parent / f".{out.name}.{kind}-{secrets.token_hex(_RANDOM_HEX // 2)}"


def _remove_stale_partials(out: Path) -> list[Path]:
    """Remove the ``.{out.name}.partial-{16 hex}`` directories killed runs of this tool left (those holding its
    marker; a folder of that name without it is the user's, and stays); return those that would not go."""
    pattern = re.compile(re.escape(f".{out.name}.partial-") + f"[0-9a-f]{{{_RANDOM_HEX}}}")
    left: list[Path] = []
    with os.scandir(out.parent) as entries:
        stale = [Path(e.path) for e in entries if pattern.fullmatch(e.name) and is_leftover_staging(Path(e.path))]
    for path in stale:
        if not remove_staging(path):
            left.append(path)
    return left


def _commit(tmp: Path, out: Path, force: bool) -> Path | None:
    """Rename ``tmp`` to ``out``; return where a previous ``out`` was moved, for the caller to remove."""
    if not os.path.lexists(out):
        os.rename(tmp, out)
        return None
    if not force:
        raise OutputExistsError("the output appeared while the checkpoint was being written", path=out)
    old = _sibling(out, "old")
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)  # put the previous output back
        raise
    return old


def write_text_atomic(path: Path, text: str, what: str = "the report") -> None:
    """Write ``text`` (``what``, as errors name it) to ``path`` through a temporary sibling and a rename.

    The rename replaces ``path`` itself, so a symlink planted at ``path`` is replaced, never followed, and a reader
    never sees a half-written file.
    """
    path = Path(path)
    tmp = path.parent / f".{path.name}.partial-{secrets.token_hex(8)}"
    track_staging(tmp)  # removed on any way out, an interrupt included
    created = done = False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _BINARY, 0o644)
        created = True
        try:
            _write_bytes(fd, text.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        with signals_held():
            os.replace(tmp, path)
            committed(tmp, path)
            done = True
    except OSError as exc:
        raise write_error(exc, path, what) from exc
    finally:
        if created and not done:
            drop_staging(tmp)
        elif not done:
            keep_staging(tmp)  # not made by this run: never removed
