"""`pull` and `push`: moving drafts between the Hub and disk, safely.

`pull` downloads only what a draft needs into a resumable staging directory, checks every file's size and hash
against the Hub's metadata, validates the checkpoint with the strict reader, and only then renames it into place.
`push` runs `verify` first and uploads nothing unless it passes; weights, config, the model card and the verify
report then go up in one commit, pinned to the parent commit it was prepared against.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle_convert import __version__
from eagle_convert.draft.detect import detect
from eagle_convert.errors import EXIT_FINDINGS, EagleConvertError, InputError, OutputExistsError, UsageError
from eagle_convert.hub.model_card import render_card
from eagle_convert.read.checkpoint import (
    CONFIG_NAME,
    INDEX_SUFFIX,
    PICKLE_SUFFIXES,
    SAFETENSORS_SUFFIX,
    open_checkpoint,
)
from eagle_convert.read.config import TargetConfig
from eagle_convert.read.hub_store import HubError, HubStore, hf_client, hub_repo_ref, translate_error
from eagle_convert.verify.run import checkpoint_files, hash_files, verify_checkpoint

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "generation_config.json",
)
CARD_NAME = "README.md"
REPORT_NAME = "verify-report.json"


class GateFailed(EagleConvertError):
    """verify found problems at the fail level: nothing was uploaded (exit 1, like verify)."""

    exit_code = EXIT_FINDINGS
    default_hint = "run `eagle-convert verify DIR` to see the findings; fix them (often: `eagle-convert normalize`)"


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


@dataclass
class PushReport:
    repo_id: str
    dry_run: bool
    files: list[TransferFile]
    card: str
    verify: dict[str, Any]
    parent_commit: str | None = None
    commit: str | None = None
    commit_url: str | None = None
    pr_url: str | None = None


def _repo(ref: str) -> tuple[str, str | None]:
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
) -> PullReport:
    """Download the draft files of ``ref`` into ``out``: checked, validated, then renamed into place."""
    repo_id, revision = _repo(ref)
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


def push_checkpoint(
    directory: str | Path,
    ref: str,
    *,
    target: str | Path | None = None,
    base_model: str | None = None,
    engine: str = "both",
    level: str = "static",
    fail_level: str = "error",
    strict: bool = False,
    create_pr: bool = False,
    private: bool = False,
    dry_run: bool = False,
    force: bool = False,
    token: str | None = None,
    message: str | None = None,
) -> PushReport:
    """Verify ``directory``; if it passes, publish it with its card and report as one commit of ``ref``."""
    repo_id, revision = _repo(ref)
    if revision is not None:
        raise UsageError("push writes to the main branch (or a PR with --create-pr); drop the @revision")
    directory = Path(directory)
    report = verify_checkpoint(
        directory, target=target, engine=engine, level=level, fail_level=fail_level, strict=strict
    )
    if report.status != "pass":
        s = report.summary()
        raise GateFailed(
            f"verify failed ({s['errors']} error(s), {s['warnings']} warning(s) at fail level "
            f"{fail_level}); nothing was uploaded",
            path=directory,
        )
    ckpt = open_checkpoint(directory)
    target_cfg = TargetConfig.from_path(target) if target is not None else None
    card = render_card(repo_id, detect(ckpt, target_cfg), report, target_cfg, base_model)
    from eagle_convert.render.formats import to_json

    report_text = to_json(report)
    digests = {f.name: f for f in report.files}
    files = [TransferFile(n, digests[n].size, digests[n].sha256) for n in checkpoint_files(ckpt)]
    extra = {CARD_NAME: card.encode("utf-8"), REPORT_NAME: report_text.encode("utf-8")}
    files += [TransferFile(n, len(b), hashlib.sha256(b).hexdigest()) for n, b in extra.items()]
    result = PushReport(repo_id, dry_run, files, card, report.to_dict())
    if dry_run:
        return result
    hf = hf_client()
    api = hf.HfApi(endpoint=hf.constants.ENDPOINT, token=token)
    try:
        api.create_repo(repo_id, exist_ok=True, private=private)
        head = api.repo_info(repo_id, files_metadata=False)
        if not force and not create_pr and any(s.rfilename == CONFIG_NAME for s in head.siblings or []):
            raise HubError(
                "the repo already holds a draft at its head",
                path=repo_id,
                hint="pass --force to replace it, or --create-pr to propose the new draft",
            )
        operations = [
            hf.CommitOperationAdd(path_in_repo=n, path_or_fileobj=str(directory / n)) for n in checkpoint_files(ckpt)
        ]
        operations += [hf.CommitOperationAdd(path_in_repo=n, path_or_fileobj=b) for n, b in extra.items()]
        commit = api.create_commit(
            repo_id,
            operations=operations,
            parent_commit=head.sha,
            create_pr=create_pr,
            commit_message=message or f"Upload EAGLE3 draft (verified by eagle-convert {__version__})",
        )
    except EagleConvertError:
        raise
    except Exception as exc:  # noqa: BLE001 - every client error becomes one typed line
        raise translate_error(exc, repo_id) from None
    result.parent_commit = head.sha
    result.commit = commit.oid
    result.commit_url = commit.commit_url
    result.pr_url = commit.pr_url
    return result
