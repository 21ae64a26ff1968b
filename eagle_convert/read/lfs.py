"""Git LFS pointers: the small text file a clone holds in place of a large file whose LFS object it did not fetch
(a CI checkout without ``lfs: true``, ``GIT_LFS_SKIP_SMUDGE=1``, a clone where git-lfs is not installed).

Every reader of a weight or config file asks :func:`refuse_pointer` of the first bytes it reads (``read_regular``
for every config, index and list file; the safetensors header reader; ``regular.refuse_pointer_file`` before a file
goes to a library that reads it itself: torch's pickle loader, the tokenizers), so the error names
the cause and the fix instead of a header length of 2336927755350992246 (``b"version "`` read as a little-endian
integer) or invalid JSON. The format is git-lfs's ``docs/spec.md``: ``version <url>`` first, then ``oid`` and
``size`` lines, the whole file under 1024 bytes.
"""

from __future__ import annotations

from pathlib import Path

from eagle_convert.errors import LfsPointerError

SPEC_LINES = (b"version https://git-lfs.github.com/spec/v1", b"version https://hawser.github.com/spec/v1")
FIRST_BYTES = b"version "  # what a pointer's first 8 bytes always are (a safetensors length prefix never is)
MAX_POINTER_BYTES = 1024  # the spec: a pointer file is smaller than this


def is_pointer(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes, at least its first line) is a Git LFS pointer's."""
    return head.startswith(SPEC_LINES)


def pointer_error(head: bytes, path: str | Path) -> LfsPointerError:
    """The error for the pointer whose text begins ``head``: the object it stands for, by its oid and size."""
    fields = dict(
        line.split(" ", 1) for line in head[:MAX_POINTER_BYTES].decode("ascii", "replace").splitlines() if " " in line
    )
    oid, size = fields.get("oid", "").strip(), fields.get("size", "").strip()
    what = f" for the {size}-byte object {oid[:19]}..." if oid and size.isdigit() else ""
    return LfsPointerError(
        f"is a Git LFS pointer{what}, not the file itself: its LFS object was not fetched", path=path
    )


def refuse_pointer(head: bytes, path: str | Path) -> None:
    """Raise :class:`LfsPointerError` when ``head`` (a file's first bytes) is a Git LFS pointer's."""
    if is_pointer(head):
        raise pointer_error(head, path)
