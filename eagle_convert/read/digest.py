"""sha256 of checkpoint files, streamed: the manifest verify reports and the check pull makes."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from eagle_convert.read.regular import open_regular

HASH_CHUNK = 8 << 20


@dataclass(frozen=True)
class FileDigest:
    name: str
    size: int
    sha256: str | None  # None with --no-hash


def hash_files(root: Path, names: Iterable[str], progress: Callable[[int], None] | None = None) -> list[FileDigest]:
    """Each file's size and sha256, read in HASH_CHUNK pieces (``progress(bytes)`` after each)."""
    out = []
    for name in names:
        path = root / name
        digest = hashlib.sha256()
        with open_regular(path) as f:
            while chunk := f.read(HASH_CHUNK):
                digest.update(chunk)
                if progress is not None:
                    progress(len(chunk))
        out.append(FileDigest(name, path.stat().st_size, digest.hexdigest()))
    return out
