"""sha256 of checkpoint files, streamed: the manifest verify reports and the check pull makes."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from eagle_convert.errors import TooLargeError
from eagle_convert.read.source_files import Fingerprint, SourceFiles

HASH_CHUNK = 8 << 20
# The most bytes one manifest hashes (verify's sha256 of the checkpoint's files): a draft is a few GB (the largest,
# for 1T-parameter targets, under 10 GiB); past this the run is refused before a byte is hashed (--no-hash skips the
# manifest), instead of reading for hours through a file as large (or as sparse) as its header claims.
MAX_HASHED_BYTES = 64 << 30


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
    limit: int = MAX_HASHED_BYTES,
) -> list[FileDigest]:
    """Each file's size and sha256, read in HASH_CHUNK pieces (``progress(bytes)`` after each) through one
    descriptor: the file as ``expected`` fingerprinted it (when its header was read), and unchanged until its last
    byte is hashed; SourceChangedError (exit 2) otherwise, never the hash of another version or of a mix. When the
    files hold more than ``limit`` bytes, TooLargeError before any byte is hashed."""
    out = []
    names = list(names)
    with SourceFiles({root / n: f for n, f in (expected or {}).items()}) as files:
        total = sum(files.size(root / name) for name in names)
        if total > limit:
            raise TooLargeError(
                f"the files to hash hold {_gib(total)}, over the {_gib(limit)} limit of the sha256 manifest: "
                "nothing was hashed",
                path=root,
                hint="a draft is a few GB; pass --no-hash to verify without the manifest",
            )
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


def _gib(n: int) -> str:
    return f"{n / (1 << 40):,.1f} TiB" if n >= 1 << 40 else f"{n / (1 << 30):,.1f} GiB"
