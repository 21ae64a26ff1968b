"""`pull`: download only what a draft needs from the Hub, checked file by file, validated, then renamed into place.

The files go into a resumable staging directory next to the output; every file's size and hash is checked against
the Hub's metadata (LFS sha256, or the git blob id of small files), the strict reader validates the checkpoint, and
only then is it renamed to the output. (``hub.publish`` holds the verify-gated push; ``normalize`` pulls through here.)
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from eagle_convert.errors import InputError, OutputExistsError, UsageError
from eagle_convert.read.checkpoint import (
    CONFIG_NAME,
    INDEX_SUFFIX,
    PICKLE_SUFFIXES,
    SAFETENSORS_SUFFIX,
    open_checkpoint,
)
from eagle_convert.read.digest import hash_files
from eagle_convert.read.hub_store import HubError, HubStore, hf_client, hub_repo_ref, translate_error

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "generation_config.json",
)


@dataclass
class TransferFile:
    name: str
    size: int
    sha256: str | None


@dataclass
class PullReport:
    repo_id: str
    revision: str
    out: str
    files: list[TransferFile] = field(default_factory=list)
    dry_run: bool = False  # nothing was downloaded: the files are what a pull would fetch, as the Hub lists them


def repo_ref(ref: str) -> tuple[str, str | None]:
    parsed = hub_repo_ref(ref)
    if parsed is None:
        raise UsageError(f"{ref!r} is not a Hub repo id (owner/name[@revision])")
    return parsed


def _wanted(name: str, allow_pickle: bool, tokenizer: bool) -> bool:
    return (
        name == CONFIG_NAME
        or name.endswith((SAFETENSORS_SUFFIX, INDEX_SUFFIX))
        or (tokenizer and name in TOKENIZER_FILES)
        or (allow_pickle and name.endswith(PICKLE_SUFFIXES))
    )


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _check_file(store: HubStore, path: Path) -> TransferFile:
    """The downloaded file has the Hub's size and hash (LFS sha256, or git blob sha1 for files stored in git)."""
    remote = store.files[path.name]
    size = path.stat().st_size
    if size != remote.size:
        path.unlink()
        raise HubError(
            f"{path.name} is {size} bytes but the Hub lists {remote.size}; removed, run pull again",
            path=store.location(path.name),
        )
    sha256 = hash_files(path.parent, [path.name])[0].sha256
    if remote.sha256 and sha256 != remote.sha256:
        path.unlink()
        raise HubError(
            f"{path.name} does not match the Hub's sha256; removed, run pull again", path=store.location(path.name)
        )
    if not remote.sha256 and remote.blob_id and _git_blob_sha1(path.read_bytes()) != remote.blob_id:
        path.unlink()
        raise HubError(
            f"{path.name} does not match the Hub's git object id; removed, run pull again",
            path=store.location(path.name),
        )
    return TransferFile(path.name, size, sha256)


def pull_checkpoint(
    ref: str,
    out: str | Path,
    *,
    allow_pickle: bool = False,
    tokenizer: bool = False,
    token: str | None = None,
    force: bool = False,
    dry_run: bool = False,
) -> PullReport:
    """Download the draft files of ``ref`` into ``out``: checked, validated, then renamed into place. ``dry_run``:
    list what would be downloaded (names, sizes and sha256 as the Hub lists them) and write nothing."""
    repo_id, revision = repo_ref(ref)
    out = Path(out)
    if (out.exists() or out.is_symlink()) and not force:
        raise OutputExistsError("the output already exists", path=out)
    store = HubStore(repo_id, revision, token)
    names = [n for n in store.names() if _wanted(n, allow_pickle, tokenizer)]
    skipped_pickle = [n for n in store.names() if n.endswith(PICKLE_SUFFIXES) and n not in names]
    if CONFIG_NAME not in names:
        raise HubError(f"the repo has no {CONFIG_NAME} at {store.sha[:12]}: not a draft checkpoint", path=ref)
    if not any(n.endswith(SAFETENSORS_SUFFIX) or n.endswith(PICKLE_SUFFIXES) for n in names):
        hint = "its weights are pickle: pass --allow-pickle to download them" if skipped_pickle else None
        raise HubError("the repo has no safetensors weights", path=ref, hint=hint)
    if dry_run:
        listed = [TransferFile(n, store.files[n].size, store.files[n].sha256) for n in names]
        return PullReport(repo_id, store.sha, str(out), listed, dry_run=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.pull-{store.sha[:16]}"  # the same name on a rerun: downloads resume
    hf = hf_client()
    try:
        hf.snapshot_download(
            repo_id,
            revision=store.sha,
            allow_patterns=names,
            local_dir=staging,
            token=token,
            endpoint=hf.constants.ENDPOINT,
        )
    except Exception as exc:  # noqa: BLE001 - every client error becomes one typed line
        raise translate_error(exc, ref) from None
    files = [_check_file(store, staging / n) for n in names]
    try:
        open_checkpoint(staging)  # the strict reader: a lying header or an index naming ../ never lands
    except InputError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(staging / ".cache", ignore_errors=True)  # huggingface_hub's resume bookkeeping
    if out.exists() or out.is_symlink():
        old = out.parent / f".{out.name}.old-{store.sha[:16]}"
        out.rename(old)
        staging.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        staging.rename(out)
    return PullReport(repo_id, store.sha, str(out), files)
