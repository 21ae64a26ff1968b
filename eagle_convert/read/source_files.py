"""Input files read as they were when their headers were read: fingerprinted, read through one descriptor, checked.

A file's :class:`Fingerprint` (device, inode, size, modification and change times) is taken with ``fstat`` on the
descriptor its header is read through (``read_header``, ``ShardInfo.fingerprint``). Whoever later reads its bytes
(``normalize``'s copier and computed tensors, the manifest's hashes, ``pull``'s staging) goes through
:class:`SourceFiles`: each file is opened once, its open descriptor must carry the same fingerprint, every byte is
read through that descriptor, and before the output is committed every descriptor and every path is checked again.
A file replaced (another inode), grown, truncated or written to (another mtime or ctime) in between is a
:class:`SourceChangedError` (exit 2, nothing written), never a silently mixed output.

The times are the filesystem's: a write in the same clock tick as the fingerprint, to a file that was also written
in that tick before it, is the one change a fingerprint cannot see.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from eagle_convert.errors import InputError, SourceChangedError
from eagle_convert.read.regular import refuse_irregular

_BINARY: int = getattr(os, "O_BINARY", 0)  # Windows only; 0 elsewhere
_PREADV = getattr(os, "preadv", None)
CHANGED = "changed while it was read; nothing was written"


@dataclass(frozen=True)
class Fingerprint:
    """What identifies one version of a file: where it is (device, inode) and its size and times."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Fingerprint:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class SourceFiles:
    """The files a run reads bytes from, each opened once and read through that descriptor.

    ``expected`` maps a path to the fingerprint taken when its header was read (None: the fingerprint is taken when
    the file is first opened here); ``changed`` is what a :class:`SourceChangedError` says happened (a writer's
    "nothing was written", or a reader's own words). Use as a context manager, or call :meth:`close`."""

    def __init__(self, expected: Mapping[Path, Fingerprint | None] | None = None, changed: str = CHANGED) -> None:
        self._expected = {Path(p): f for p, f in (expected or {}).items() if f is not None}
        self._open: dict[Path, tuple[int, Fingerprint]] = {}
        self._changed = changed

    def __enter__(self) -> SourceFiles:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def open(self, path: Path) -> int:
        """The descriptor of ``path``, opened on first use: a regular file whose fingerprint is the expected one."""
        path = Path(path)
        held = self._open.get(path)
        if held is not None:
            return held[0]
        try:
            refuse_irregular(os.stat(path).st_mode, path)  # a socket cannot even be opened: say what it is
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | _BINARY)
        except OSError as exc:
            raise InputError(f"cannot read source file: {exc.strerror or exc}", path=path) from None
        try:
            st = os.fstat(fd)
            refuse_irregular(st.st_mode, path)
            if hasattr(os, "set_blocking"):
                os.set_blocking(fd, True)
            now = Fingerprint.of(st)
            if self._expected.get(path, now) != now:
                raise SourceChangedError(self._changed, path=path)
        except BaseException:
            os.close(fd)
            raise
        self._open[path] = (fd, now)
        return fd

    def size(self, path: Path) -> int:
        """The size of ``path`` as fingerprinted (opening it)."""
        self.open(path)
        return self._open[Path(path)][1].size

    def fingerprint(self, path: Path) -> Fingerprint:
        self.open(path)
        return self._open[Path(path)][1]

    def read(self, path: Path, start: int, end: int) -> bytes:
        """Bytes ``start:end`` of ``path``, through its one descriptor."""
        fd = self.open(path)
        parts, pos = [], start
        while pos < end:
            chunk = os.pread(fd, end - pos, pos)
            if not chunk:
                raise SourceChangedError(f"ended at byte {pos}, before byte {end}: {self._changed}", path=path)
            parts.append(chunk)
            pos += len(chunk)
        return b"".join(parts)

    def read_into(self, path: Path, start: int, buffer: bytearray | memoryview) -> None:
        """Fill ``buffer`` with the bytes of ``path`` from ``start`` on, through its one descriptor, straight into
        ``buffer`` (the kernel's copy is the only one)."""
        fd = self.open(path)
        view, done = memoryview(buffer).cast("B"), 0
        while done < len(view):
            if _PREADV is not None:
                n = _PREADV(fd, [view[done:]], start + done)
            else:  # no preadv (macOS before 11): a chunk at a time
                chunk = os.pread(fd, len(view) - done, start + done)
                n = len(chunk)
                view[done : done + n] = chunk
            if n == 0:
                end = start + len(view)
                raise SourceChangedError(f"ended at byte {start + done}, before byte {end}: {self._changed}", path=path)
            done += n

    def check_unchanged(self) -> None:
        """Every file opened here is still what was fingerprinted, by its descriptor and by its path (not written
        to, grown, truncated, or replaced by another file); SourceChangedError naming the first that is not."""
        for path, (fd, expected) in self._open.items():
            try:
                by_path = Fingerprint.of(os.stat(path))
            except OSError:
                by_path = None
            if Fingerprint.of(os.fstat(fd)) != expected or by_path != expected:
                raise SourceChangedError(self._changed, path=path)

    def close(self) -> None:
        while self._open:
            os.close(self._open.popitem()[1][0])
