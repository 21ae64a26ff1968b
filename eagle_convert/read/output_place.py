"""Where a command writes, checked before any work, and what a failed write says.

Every output (``verify --output``'s report, ``normalize``'s OUT, ``pull``'s OUT) is written beside its final name and
renamed into place. A rename replaces whatever is at the name, so the place is checked first: it must not be or hold an
input, must not be a special file (a device, FIFO or socket: the rename would replace the node rather than write into
it) or the wrong kind (a directory for a report, a file for a directory), and the nearest existing folder above it
must be a directory that can be written. Links are followed for the kind: a link to a regular file is replaced (never
written through), a link to a device is refused.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import signal
import stat
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from eagle_convert.errors import DiskFullError, InputError, OutputExistsError, UsageError
from eagle_convert.read.checkpoint import is_checkpoint_file, resolved

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})  # EFBIG: a file-size limit
_SPECIAL = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def check_output_place(out: Path, inputs: Sequence[Path], *, directory: bool) -> None:
    """The place ``out`` (a report file, or a directory when ``directory``) before any work: UsageError (exit 2,
    nothing read or written) when it is, lies inside or (a directory) contains one of ``inputs``, by any path (see
    :func:`_overlap`); when what is there is special or of the other kind; when the nearest existing folder above it
    is a file or cannot be written (a read-only filesystem, no permission). Whether an existing output may be
    replaced is :func:`check_replace`'s."""
    if out.name in ("", ".", ".."):
        raise UsageError("the output must name a file or directory to create", path=out)
    real = resolved(out, "remove the link, or choose another output path", "nothing written")  # a loop: named
    mounts = _Mounts.read()
    for given in inputs:
        if not os.path.lexists(given):  # a Hub id, or a file the run will report missing
            continue
        where = _overlap(real, given, directory, mounts)
        if where is not None:
            raise UsageError(
                f"the output {where} the input {given}: writing it would overwrite what is read",
                path=out,
                hint="write the output outside the checkpoints and other inputs, e.g. to a new directory",
            )
    if os.path.lexists(out) and os.path.exists(out):  # a dangling link is simply replaced
        _check_kind(out, os.stat(out).st_mode, directory)
    folder = real.parent
    while not os.path.lexists(folder):
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(
            f"the output's folder {folder} is a file, not a directory",
            path=out,
            hint="choose an output path whose folders are directories (or do not exist yet)",
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        reason = "a read-only filesystem" if _read_only(folder) else "no permission to write there"
        raise UsageError(f"cannot write into {folder}: {reason}", path=out, hint="choose an output path you can write")


Identity = tuple[int, int]  # (st_dev, st_ino): one file or folder, whatever path reaches it


def _identity(path: Path) -> Identity | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def _chain(real: Path) -> list[Identity]:
    """The identities of ``real`` (resolved) and of every existing folder above it, nearest first."""
    found = (_identity(p) for p in (real, *real.parents))
    return [i for i in found if i is not None]


def _overlap(real_out: Path, given: Path, directory: bool, mounts: _Mounts) -> str | None:
    """How the output at ``real_out`` (resolved) overlaps the input ``given``: "is", "is inside", "contains" or None.

    By identity, never by spelling: the device and inode of the output and of each existing folder above it against
    the input's, and (a directory output) the output's against those of the input and each folder above it; so a
    link, a hard link, ``..`` or a bind mount of the same folder is the same place. Where the kernel lists its mounts
    (Linux), each path is also placed in its filesystem (the mount's device and root) so that a bind mount of a
    folder *inside* an input is seen too, which no chain of parents shows."""
    source = resolved(given)
    source_id, out_id = _identity(source), _identity(real_out)
    if source_id is not None:
        if out_id == source_id:
            return "is"
        if source_id in _chain(real_out.parent):
            return "is inside"
        if directory and out_id is not None and out_id in _chain(source.parent):
            return "contains"
    placed_out, placed_in = mounts.place(real_out), mounts.place(source)
    if placed_out is None or placed_in is None or placed_out[0] != placed_in[0]:
        return None
    if placed_out[1] == placed_in[1]:
        return "is"
    if placed_out[1].is_relative_to(placed_in[1]):
        return "is inside"
    if directory and placed_in[1].is_relative_to(placed_out[1]):
        return "contains"
    return None


class _Mounts:
    """The mounts of this process (``/proc/self/mountinfo``): where each path lies in its filesystem."""

    def __init__(self, mounts: list[tuple[PurePosixPath, str, PurePosixPath]]) -> None:
        self.mounts = mounts  # (mount point, device, root within the device), in the kernel's order

    @classmethod
    def read(cls) -> _Mounts:
        try:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
                lines = f.read(MAX_MOUNTINFO).splitlines()
        except OSError:
            return cls([])
        mounts = []
        for line in lines:
            fields = line.split(" ")
            if len(fields) > 4:  # id, parent id, major:minor, root, mount point, ...
                mounts.append((PurePosixPath(_unescape(fields[4])), fields[2], PurePosixPath(_unescape(fields[3]))))
        return cls(mounts)

    def place(self, real: Path) -> tuple[str, PurePosixPath] | None:
        """(device, path within it) of the resolved path ``real``: the mount whose point is its longest prefix (the
        last one mounted there, which hides the others)."""
        path = PurePosixPath(real)
        best: tuple[PurePosixPath, str, PurePosixPath] | None = None
        for point, device, root in self.mounts:
            if path.is_relative_to(point) and (best is None or len(point.parts) >= len(best[0].parts)):
                best = (point, device, root)
        if best is None:
            return None
        return best[1], best[2].joinpath(path.relative_to(best[0]))


MAX_MOUNTINFO = 16 << 20  # characters: a container with thousands of mounts lists well under this


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (``\\040`` for a space, and tab, newline, backslash)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def check_replace(out: Path, force: bool) -> None:
    """An existing ``out`` (a directory output) before any work: OutputExistsError without ``force``; with it, also
    unless nothing in it would be lost: ``--force`` replaces a checkpoint (what this tool writes or pulls: config,
    weights, index, tokenizer files), or an empty folder, never a folder holding anything else. A link at ``out`` is
    replaced itself, never what it points to, so it may always go."""
    if not os.path.lexists(out):
        return
    if not force:
        raise OutputExistsError("the output already exists", path=out)
    if os.path.islink(out) or not os.path.isdir(out):
        return
    with os.scandir(out) as entries:
        foreign = sorted(e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in entries if not _ours(e))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise OutputExistsError(
            f"--force would delete {shown}, which no checkpoint holds: --force replaces only a checkpoint; "
            "nothing was written",
            path=out,
            hint="move those files out of the output folder, or choose a new output directory",
        )


def _ours(entry: os.DirEntry[str]) -> bool:
    """A file a checkpoint holds: a regular file or a link (a link is removed, never followed) with such a name."""
    return (entry.is_symlink() or entry.is_file(follow_symlinks=False)) and is_checkpoint_file(entry.name)


def _check_kind(out: Path, mode: int, directory: bool) -> None:
    kind = next((what for test, what in _SPECIAL if test(mode)), None)
    if kind is None and stat.S_ISDIR(mode) != directory:
        kind = "a directory" if stat.S_ISDIR(mode) else "a regular file"
    if kind is None:
        return
    why = "a directory never replaces a file" if directory and kind == "a regular file" else "it would be replaced"
    raise UsageError(
        f"the output is {kind}: {why}, not written into" if why.startswith("it") else f"the output is {kind}: {why}",
        path=out,
        hint="name a new directory"
        if directory
        else "name a regular file (or a new one), or leave the option out to write to stdout",
    )


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs (Windows)
        return False


def write_error(exc: OSError, out: Path, what: str = "the checkpoint") -> InputError:
    """The typed error for an OSError while writing ``what`` to ``out``: DiskFullError for no room (ENOSPC, a quota,
    a file-size limit), else an InputError naming the file the system named. Nothing was written: every writer
    removes its partial output before raising it."""
    reason = exc.strerror or str(exc)
    if exc.errno in DISK_FULL_ERRNOS:
        return DiskFullError(f"no room to write {what} ({reason}); nothing was written", path=out)
    where = f" ({exc.filename})" if exc.filename else ""
    return InputError(
        f"cannot write {what}{where}: {reason}; nothing was written",
        path=out,
        hint="choose an output path on a writable filesystem with room, outside the inputs",
    )


def fsync_dir(path: Path) -> None:
    """fsync the directory ``path`` (its entries: a rename into it, the files made in it); a no-op on Windows and on
    filesystems without directory fsync."""
    if sys.platform == "win32":  # directories cannot be opened for fsync there
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def make_parents(out: Path) -> list[Path]:
    """Create the folders above ``out`` that are missing; return them, deepest first, for :func:`remove_made`."""
    made = [p for p in out.absolute().parents if not os.path.lexists(p)]
    out.parent.mkdir(parents=True, exist_ok=True)
    return made


def remove_made(made: Sequence[Path]) -> None:
    """Remove the folders :func:`make_parents` created, deepest first, as far as they are empty: after a failure,
    nothing is left where the output would have been."""
    for folder in made:
        try:
            folder.rmdir()
        except OSError:
            break


def remove_tree(path: Path) -> bool:
    """Remove a file, link or directory tree, best effort; True when it is gone."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass
    return not os.path.lexists(path)


# ---- staging folders: the tool's own, marked, and removed on every way out ------------------------------------------

STAGING_MARKER = ".eagle-convert-staging"  # inside every staging folder until it is committed: the tool made it
_MARKER_TEXT = b"eagle-convert's staging folder: removed when its run ends (safe to delete)\n"
_staging: set[Path] = set()  # made by this process, not yet removed or committed: removed after an interrupt
_written: list[Path] = []  # outputs this process committed


def make_staging(out: Path, kind: str) -> Path:
    """A new folder ``.{out.name}.{kind}-{16 hex}`` beside ``out`` holding :data:`STAGING_MARKER`, registered for
    :func:`remove_leftover_staging` until :func:`drop_staging` or :func:`committed`."""
    while True:
        path = out.parent / f".{out.name}.{kind}-{secrets.token_hex(8)}"
        _staging.add(path)  # before it exists: an interrupt between the two still finds it
        try:
            os.mkdir(path)
        except FileExistsError:  # 64 random bits collided; draw again
            _staging.discard(path)
            continue
        except BaseException:  # an interrupt: it can land after the folder was made, before this line is reached
            if not os.path.lexists(path):
                _staging.discard(path)
            raise
        try:
            mark_staging(path)
        except BaseException:
            drop_staging(path)
            raise
        return path


def track_staging(path: Path) -> None:
    """Register ``path`` (a temporary file or folder this run is about to create) for removal after an interrupt."""
    _staging.add(path)


def mark_staging(path: Path) -> None:
    """Put the marker into the staging folder ``path`` and register it (a resumed pull's folder is marked already)."""
    _staging.add(path)
    fd = os.open(path / STAGING_MARKER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        os.write(fd, _MARKER_TEXT)
    finally:
        os.close(fd)


def is_staging(path: Path) -> bool:
    """Whether ``path`` is a staging folder this tool made (a real folder with the marker file in it)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode) and stat.S_ISREG(os.lstat(path / STAGING_MARKER).st_mode)
    except OSError:
        return False


def unmark_staging(path: Path) -> None:
    """Take the marker out of ``path`` just before it is renamed into place (it stays registered until then)."""
    (path / STAGING_MARKER).unlink(missing_ok=True)


def drop_staging(path: Path) -> bool:
    """Remove the staging folder ``path``; True when it is gone (it stays registered if not)."""
    gone = remove_staging(path)
    if gone:
        _staging.discard(path)
    return gone


def remove_staging(path: Path) -> bool:
    """Remove a staging folder with its marker last: a process killed while removing it leaves a folder that is
    still marked, which the next run removes (the marker gone first would leave it the user's, forever)."""
    if path.is_dir() and not path.is_symlink():
        try:
            with os.scandir(path) as entries:
                inside = [Path(e.path) for e in entries if e.name != STAGING_MARKER]
        except OSError:
            inside = []
        for entry in inside:
            remove_tree(entry)
    return remove_tree(path)


def is_leftover_staging(path: Path) -> bool:
    """A staging folder a killed run left: marked, or empty (killed between making it and marking it; removing an
    empty folder loses nothing)."""
    if is_staging(path):
        return True
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode) and not any(os.scandir(path))
    except OSError:
        return False


def keep_staging(path: Path) -> None:
    """Leave ``path`` in place after this run (a pull's checked files, to resume from): no longer removed on exit."""
    _staging.discard(path)


def committed(staging: Path, out: Path, old: Path | None = None) -> None:
    """``staging`` was renamed to ``out``; ``old`` (the previous output, moved aside) is the tool's to remove."""
    _staging.discard(staging)
    if old is not None:
        _staging.add(old)
    _written.append(out)


def written_outputs() -> tuple[Path, ...]:
    """The outputs this process has committed, in order."""
    return tuple(_written)


def remove_leftover_staging() -> list[Path]:
    """Remove every staging folder (or moved-aside previous output) this process made and did not remove: after an
    interrupt, whatever moment it came at. Returns those that would not go."""
    return [path for path in sorted(_staging) if not drop_staging(path)]


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back (blocked) for the few calls of a commit, delivered as soon as they are done: an
    interrupt never lands between the renames of a commit and the record of what was written."""
    block = getattr(signal, "pthread_sigmask", None)
    if block is None:  # Windows
        yield
        return
    previous = block(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        block(signal.SIG_SETMASK, previous)
