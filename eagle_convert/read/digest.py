"""sha256 of checkpoint files, streamed: the manifest verify reports and the check pull makes."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from eagle_convert.read.source_files import Fingerprint, SourceFiles

HASH_CHUNK = 8 << 20


@dataclass(frozen=True)
class FileDigest:
    name: str
    size: int
    sha256: str | None  # None with --no-hash


def hash_files(
    root: Path,
    names: Iterable[str],
    progress: Callable[[int], None] | None = None,
    expected: Mapping[str, Fingerprint | None] | None = None,
) -> list[FileDigest]:
    """Each file's size and sha256, read in HASH_CHUNK pieces (``progress(bytes)`` after each) through one
    descriptor: the file as ``expected`` fingerprinted it (when its header was read), and unchanged until its last
    byte is hashed; SourceChangedError (exit 2) otherwise, never the hash of another version or of a mix."""
    out = []
    names = list(names)
    with SourceFiles({root / n: f for n, f in (expected or {}).items()}) as files:
        for name in names:
            path = root / name
            size = files.size(path)
            digest = hashlib.sha256()
            for pos in range(0, size, HASH_CHUNK):
                chunk = files.read(path, pos, min(pos + HASH_CHUNK, size))
                digest.update(chunk)
                if progress is not None:
                    progress(len(chunk))
            out.append(FileDigest(name, size, digest.hexdigest()))
        files.check_unchanged()
    return out
