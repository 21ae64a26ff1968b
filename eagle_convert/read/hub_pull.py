"""`pull`: download only what a draft needs from the Hub, checked file by file, validated, then renamed into place.

OUT is checked before any request (it must not exist unless ``--force``, must be or become a directory, and its
folder must be writable). The files go into a resumable staging directory next to the output, each fetched by its
exact name (never a pattern) and checked as it streams: no more than its listed size, then its size and hash against
the Hub's metadata (LFS sha256, or the git blob id of small files), and fingerprinted as checked (read/source_files.py).
Every file is then fsynced and the strict reader validates the checkpoint through those same versions (a file changed
since its check stops the pull); only then is the directory renamed to the output. After a failure nothing is at OUT;
the staging directory (marked as the tool's: a folder of that name without the marker is never touched) stays only
after a transfer that failed part way or was interrupted, holding only files already checked, and is removed after
any other failure.
(``hub.publish`` holds the verify-gated push; ``normalize`` pulls through here.)
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from eagle_convert.errors import (
    HubError,
    HubTransferError,
    Interrupted,
    OutputExistsError,
    SourceChangedError,
    UsageError,
)
from eagle_convert.read.checkpoint import (
    CONFIG_NAME,
    INDEX_SUFFIX,
    PICKLE_SUFFIXES,
    SAFETENSORS_SUFFIX,
    TOKENIZER_FILES,
    open_checkpoint,
)
from eagle_convert.read.digest import HASH_CHUNK
from eagle_convert.read.hub_store import HubStore, hub_repo_ref
from eagle_convert.read.output_place import (
    STAGING_MARKER,
    check_output_place,
    check_replace,
    committed,
    drop_staging,
    fsync_dir,
    is_staging,
    keep_staging,
    make_parents,
    mark_staging,
    remove_made,
    remove_tree,
    signals_held,
    track_staging,
    unmark_staging,
    write_error,
)
from eagle_convert.read.source_files import CHANGED, Fingerprint, SourceFiles


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


def _kept(store: HubStore, path: Path) -> tuple[TransferFile, Fingerprint] | None:
    """``path`` as a file a pull already checked (a regular file of the listed size and hash) with the fingerprint
    of the version hashed, else None."""
    remote = store.files[path.name]
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size != remote.size:
            return None
        sha256, blob = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % remote.size, usedforsecurity=False)
        with path.open("rb") as f:
            before = Fingerprint.of(os.fstat(f.fileno()))
            while chunk := f.read(HASH_CHUNK):
                sha256.update(chunk)
                blob.update(chunk)
            if Fingerprint.of(os.fstat(f.fileno())) != before:  # written to while it was hashed: fetch it again
                return None
    except OSError:
        return None
    if remote.sha256 and sha256.hexdigest() != remote.sha256:
        return None
    if not remote.sha256 and remote.blob_id and blob.hexdigest() != remote.blob_id:
        return None
    return TransferFile(path.name, remote.size, sha256.hexdigest()), before


def _check_destination(out: Path, force: bool) -> None:
    """Refuse, before any request, an OUT that cannot become the pulled directory: one that exists (without
    ``--force``, or holding anything but a checkpoint's files), is not a directory, lies under a file, or sits where
    nothing can be written."""
    check_output_place(out, [], directory=True)
    check_replace(out, force)


def _check_staging_is_ours(staging: Path, out: Path) -> None:
    """A folder at the staging name that this tool did not make (no marker in it) is the user's: refused, untouched."""
    if os.path.lexists(staging) and not is_staging(staging):
        raise OutputExistsError(
            f"{staging.name} beside the output was not made by eagle-convert (it holds no {STAGING_MARKER}); "
            "it is left as it is",
            path=out,
            hint=f"move {staging} away (or choose another output), then pull again",
        )


def _prepare_staging(staging: Path, names: list[str]) -> None:
    """``staging`` as the tool's marked directory holding nothing but files named in ``names`` (kept from an
    earlier try, checked again before use): other files, links and folders in it are removed."""
    track_staging(staging)
    staging.mkdir(exist_ok=True)
    mark_staging(staging)
    for entry in staging.iterdir():
        if entry.name != STAGING_MARKER and (entry.name not in names or entry.is_symlink() or not entry.is_file()):
            remove_tree(entry)


def _commit(staging: Path, out: Path, force: bool) -> None:
    """Rename the checked ``staging`` to ``out`` (SIGINT and SIGTERM held back meanwhile); with ``force``, a previous
    ``out`` is moved aside to a new name, put back if the rename fails, and removed after."""
    with signals_held():
        if not os.path.lexists(out):
            staging.rename(out)
            committed(staging, out)
            return
        if not force:
            raise OutputExistsError("the output appeared while the pull ran", path=out)
        old = out.parent / f".{out.name}.old-{secrets.token_hex(8)}"
        out.rename(old)
        try:
            staging.rename(out)
        except BaseException:
            old.rename(out)
            raise
        committed(staging, out, old)
    drop_staging(old)


def _seal(staging: Path, names: list[str], fingerprints: dict[str, Fingerprint]) -> None:
    """The staged files as they were checked, synced to disk, and read by the strict reader through those same
    versions: SourceChangedError if any changed since its hash was checked; the marker is taken out last."""
    with SourceFiles({staging / n: fingerprints[n] for n in names}) as staged:
        for name in names:
            os.fsync(staged.open(staging / name))  # as normalize does: the data is on disk before the rename
        ckpt = open_checkpoint(staging)  # the strict reader: a lying header or an index naming ../ never lands
        for shard in ckpt.shards:
            if shard.fingerprint != fingerprints.get(shard.name):
                raise SourceChangedError(CHANGED, path=staging / shard.name)
        staged.check_unchanged()
    unmark_staging(staging)
    fsync_dir(staging)


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
    list what would be downloaded (names, sizes and sha256 as the Hub lists them) and write nothing.

    After a failure nothing is left at ``out``, and nothing beside it but, after a transfer that failed part way
    (network, server errors, the deadline, Ctrl-C or SIGTERM), the staging directory with the files already
    checked."""
    repo_id, revision = repo_ref(ref)
    out = Path(out)
    _check_destination(out, force)
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
    staging = out.parent / f".{out.name}.pull-{store.sha[:16]}"  # the same name on a rerun: downloads resume
    _check_staging_is_ours(staging, out)
    made: list[Path] = []
    try:
        made = make_parents(out)
        _prepare_staging(staging, names)
        checked = [_kept(store, staging / n) or _download(store, n, staging) for n in names]
        _seal(staging, names, {file.name: fingerprint for file, fingerprint in checked})
        _commit(staging, out, force)
        fsync_dir(out.parent)
    except (HubTransferError, KeyboardInterrupt, Interrupted) as exc:
        kept = [p.name for p in staging.iterdir() if p.name != STAGING_MARKER] if staging.is_dir() else []
        if not kept:
            _clean_up(staging, made)
        else:
            keep_staging(staging)  # the checked files, to resume from
        if isinstance(exc, HubTransferError) and kept:
            raise HubTransferError(
                exc.cause,
                path=exc.path,
                hint=f"run the same pull again to resume: {len(kept)} file(s) already checked are kept in "
                f"{staging} (remove it to start over)",
            ) from None
        raise
    except OSError as exc:
        _clean_up(staging, made)
        raise write_error(exc, out, "the pulled checkpoint") from None
    except BaseException:
        _clean_up(staging, made)
        raise
    return PullReport(repo_id, store.sha, str(out), [file for file, _ in checked])


def _download(store: HubStore, name: str, staging: Path) -> tuple[TransferFile, Fingerprint]:
    sha256, fingerprint = store.download(name, staging / name)
    return TransferFile(name, store.files[name].size, sha256), fingerprint


def _clean_up(staging: Path, made: list[Path]) -> None:
    """Remove the staging directory and the folders this pull created above OUT (those left empty)."""
    drop_staging(staging)
    remove_made(made)
