"""Open a file only if it is a regular file (or a link to one): a FIFO, socket or device under a checkpoint's file
names would otherwise block a read forever or stream without end.

The file is opened without blocking (so opening a FIFO with no writer returns at once), checked with ``fstat`` on the
open descriptor (no race between the check and the read), and then read normally. Symbolic links are followed, as
the Hub cache's snapshots need; whether the target may lie outside the checkpoint is the caller's check.

A small file (a config, an index, a list of prompts or token ids) is read whole, up to ``MAX_SMALL_FILE``: the largest
real ones (a 1T-parameter model's shard index) are about 10 MB, so anything past the cap is refused before it is read
into memory. Text is UTF-8, as transformers and the engines read it: a byte-order mark or another encoding is named.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from eagle_convert.errors import InputError, NotRegularFileError, TooLargeError
from eagle_convert.read.lfs import MAX_POINTER_BYTES, refuse_pointer

MAX_SMALL_FILE = 64 << 20  # bytes: a config, index or list file larger than this is refused unread

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def open_regular(path: Path | str) -> BinaryIO:
    """``open(path, "rb")`` for a regular file; NotRegularFileError for anything else, OSError as ``open`` raises."""
    refuse_irregular(os.stat(path).st_mode, path)  # a socket cannot even be opened: say what it is
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        refuse_irregular(os.fstat(fd).st_mode, path)  # what was opened, whatever replaced the name since
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def refuse_irregular(mode: int, path: Path | str) -> None:
    """NotRegularFileError naming what ``mode`` is, unless it is a regular file's."""
    if not stat.S_ISREG(mode):
        kind = next((what for test, what in _KINDS if test(mode)), "not a regular file")
        raise NotRegularFileError(f"is {kind}, not a regular file: not read", path=path)


def read_regular(path: Path | str, limit: int = MAX_SMALL_FILE) -> bytes:
    """The bytes of the regular file ``path`` (NotRegularFileError for a FIFO, socket, device or directory), at most
    ``limit`` of them (TooLargeError past it, measured before the read and again while reading)."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(size + 1) if size <= limit else b""  # one byte more than stated: a file that grows shows it
        if len(data) > size:  # larger than stated (growing, or a filesystem that states 0): read on, to the cap
            data += f.read(limit + 1 - len(data))
        if size > limit or len(data) > limit:
            raise TooLargeError(f"is {max(size, len(data))} bytes, over the {_mib(limit)} limit: not read", path=path)
        refuse_pointer(data, path)  # a clone without its LFS objects: say so, not "invalid JSON"
        return data


def refuse_pointer_file(path: Path | str) -> None:
    """LfsPointerError when the regular file ``path`` is a Git LFS pointer (its first bytes read), before it goes to
    a library that reads it itself (torch's loader, the tokenizers)."""
    with open_regular(path) as f:
        refuse_pointer(f.read(MAX_POINTER_BYTES), path)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


_BOMS = (  # longest first: UTF-32's little-endian mark begins with UTF-16's
    (b"\xff\xfe\x00\x00", "the text is UTF-32"),
    (b"\x00\x00\xfe\xff", "the text is UTF-32"),
    (b"\xef\xbb\xbf", "the text is UTF-8 with a byte-order mark"),
    (b"\xff\xfe", "the text is UTF-16"),
    (b"\xfe\xff", "the text is UTF-16"),
)


class NotUtf8Error(ValueError):
    """Text that is not plain UTF-8; ``str(exc)`` names what it is instead, ``hint`` how to fix it."""

    hint = "save the file as UTF-8 without a byte-order mark (e.g. iconv -f ENCODING -t UTF-8 IN > OUT)"


def decode_utf8(data: bytes) -> str:
    """``data`` as UTF-8 text, as transformers' config reader takes it (``open(..., encoding="utf-8")``, then
    ``json.loads``, which refuses a byte-order mark); NotUtf8Error naming the encoding found otherwise."""
    for mark, found in _BOMS:
        if data.startswith(mark):
            raise NotUtf8Error(f"{found} ({mark.hex(' ')}): transformers and the engines read plain UTF-8 only")
    if b"\x00" in data[:4]:
        raise NotUtf8Error("the text holds NUL bytes (UTF-16 or UTF-32 without a byte-order mark), not UTF-8")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8Error(
            f"not valid UTF-8 (byte {exc.start}: 0x{data[exc.start]:02x}; another encoding such as Latin-1?)"
        ) from None


def read_text(path: Path | str, what: str, limit: int = MAX_SMALL_FILE) -> str:
    """The UTF-8 text of the regular file ``path``: an InputError naming ``what`` for anything unreadable."""
    try:
        return decode_utf8(read_regular(path, limit))
    except OSError as exc:
        raise InputError(
            f"cannot read {what}: {exc.strerror or exc}", path=path, hint=f"check the path given for {what}"
        ) from None
    except NotUtf8Error as exc:
        raise InputError(f"cannot read {what}: {exc}", path=path, hint=exc.hint) from None
