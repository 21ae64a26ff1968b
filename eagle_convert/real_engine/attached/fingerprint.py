"""Whether the server serves DRAFT: the draft it names against the DRAFT directory, by path, else by sha256."""

from __future__ import annotations

from pathlib import Path

from eagle_convert.errors import TooLargeError


def draft_identity(served: str | None, draft: Path | None) -> tuple[str, str]:
    """("same" | "different" | "unknown", how it was decided): the draft the server names against DRAFT, by
    resolved path, else (when the served path is readable here) by the sha256 of config.json and the weights."""
    if draft is None:
        return "unknown", "no DRAFT directory to compare with"
    if served is None:
        return "unknown", "the server does not say which draft it serves"
    here, there = Path(draft).resolve(), Path(served).expanduser()
    try:
        if there.is_absolute() and there.resolve() == here:
            return "same", f"the server serves {served}, which is DRAFT"
    except (OSError, RuntimeError):  # a link that loops here (RuntimeError before Python 3.13)
        return "unknown", f"the server serves {served}, which cannot be resolved here to compare with DRAFT"
    if not there.is_dir():
        return "unknown", f"the server serves {served}, which is not a directory readable here to compare with DRAFT"
    try:
        mine, theirs = _fingerprint(here), _fingerprint(there)
    except TooLargeError:  # hashing both is capped (read/digest.py MAX_HASHED_BYTES)
        return "unknown", f"the server serves {served}: too large to compare with DRAFT by sha256"
    if mine == theirs:
        return "same", f"the server serves {served}: config.json and weights have DRAFT's sha256"
    return "different", f"the server serves {served}: its config.json or weights differ from DRAFT's"


def _fingerprint(directory: Path) -> list[tuple[str, int, str | None]]:
    """(name, size, sha256) of config.json and each safetensors file: what makes two directories the same draft."""
    from eagle_convert.read.digest import hash_files

    names = sorted(p.name for p in directory.iterdir() if p.name == "config.json" or p.suffix == ".safetensors")
    return [(d.name, d.size, d.sha256) for d in hash_files(directory, names)]
