"""Open a file only if it is a regular file (or a link to one): a FIFO, socket or device under a checkpoint's file
names would otherwise block a read forever or stream without end.

The file is opened without blocking (so opening a FIFO with no writer returns at once), checked with ``fstat`` on the
open descriptor (no race between the check and the read), and then read normally. Symbolic links are followed, as
the Hub cache's snapshots need; whether the target may lie outside the checkpoint is the caller's check.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from eagle_convert.errors import InputError

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class NotRegularFileError(InputError):
    default_hint = "give a directory of regular files (safetensors, config.json); nothing was read from it"


def open_regular(path: Path | str) -> BinaryIO:
    """``open(path, "rb")`` for a regular file; NotRegularFileError for anything else, OSError as ``open`` raises."""
    _refuse(os.stat(path).st_mode, path)  # a socket cannot even be opened: say what it is
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        _refuse(os.fstat(fd).st_mode, path)  # what was opened, whatever replaced the name since
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _refuse(mode: int, path: Path | str) -> None:
    if not stat.S_ISREG(mode):
        kind = next((what for test, what in _KINDS if test(mode)), "not a regular file")
        raise NotRegularFileError(f"is {kind}, not a regular file: not read", path=path)


def read_regular(path: Path | str) -> bytes:
    """The bytes of the regular file ``path`` (NotRegularFileError for a FIFO, socket, device or directory)."""
    with open_regular(path) as f:
        return f.read()
