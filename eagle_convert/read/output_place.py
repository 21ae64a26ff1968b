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
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from eagle_convert.errors import DiskFullError, InputError, UsageError

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})  # EFBIG: a file-size limit
_SPECIAL = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def check_output_place(out: Path, inputs: Sequence[Path], *, directory: bool) -> None:
    """The place ``out`` (a report file, or a directory when ``directory``) before any work: UsageError (exit 2,
    nothing read or written) when it is, lies inside or (a directory) contains one of ``inputs``; when what is there
    is special or of the other kind; when the nearest existing folder above it is a file or cannot be written (a
    read-only filesystem, no permission). Whether an existing output may be replaced (``--force``) is the caller's."""
    if out.name in ("", ".", ".."):
        raise UsageError("the output must name a file or directory to create", path=out)
    real = out.resolve()
    for given in inputs:
        if not os.path.lexists(given):  # a Hub id, or a file the run will report missing
            continue
        source = given.resolve()
        inside = source.is_dir() and real.is_relative_to(source)
        contains = directory and source.is_relative_to(real)
        if real == source or inside or contains:
            where = "is" if real == source else "is inside" if inside else "contains"
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
