"""`push`: publishing a draft to the Hub, safely (`pull` is read/hub_pull.py, re-exported here).

`push` runs `verify` first and uploads nothing unless it passes; weights, config, the model card and the verify
report then go up in one commit, pinned to the parent commit it was prepared against.
"""

from __future__ import annotations

__all__ = ["PullReport", "PushReport", "pull_checkpoint", "push_checkpoint"]

import hashlib
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle_convert.draft.detect import detect
from eagle_convert.errors import EagleConvertError, GateFailed, HubError, UsageError
from eagle_convert.hub.model_card import render_card
from eagle_convert.read.checkpoint import (
    CONFIG_NAME,
    open_checkpoint,
)
from eagle_convert.read.hub_pull import PullReport, TransferFile, pull_checkpoint, repo_ref
from eagle_convert.read.hub_store import (
    hf_client,
    hub_endpoint,
    known_secrets,
    remember_token,
    translate_error,
)
from eagle_convert.read.redact import printable, redact
from eagle_convert.releases import resolve_engines
from eagle_convert.verify.report import VerifyReport
from eagle_convert.verify.request import FAIL_LEVELS, VerifyRequest
from eagle_convert.verify.run import checkpoint_files, verify_checkpoint
from eagle_convert.version import __version__

CARD_NAME = "README.md"
REPORT_NAME = "verify-report.json"


def verify_command(
    directory: str | Path,
    engine: str,
    *,
    target: str | Path | None = None,
    level: str = "static",
    fail_level: str = "error",
    strict: bool = False,
) -> str:
    """The `eagle-convert verify` line that reproduces a result: the same draft, target, engines, level, fail level
    and strictness (every option that changes the verdict, spelled out even when it is the default engine set)."""
    words = ["eagle-convert", "verify", str(directory)]
    words += ["--target", str(target)] if target is not None else []
    words += ["--engine", engine]
    words += ["--level", level] if level != "static" else []
    words += ["--fail-level", fail_level] if fail_level != "error" else []
    words += ["--strict"] if strict else []
    return shlex.join(words)


def failed_engines(report: VerifyReport) -> str:
    """The releases whose findings failed ``report`` (``vllm@0.33-v1,sglang@0.5.16``), in the order of the releases
    it checked; all of them when a failing finding concerns no single release."""
    engine = report.engine
    blocking = FAIL_LEVELS[: FAIL_LEVELS.index(report.fail_level) + 1]  # fail level warning: errors and warnings
    failing = [f for f in report.findings if f.severity in blocking]
    if not failing or any(f.engine is None for f in failing):
        return engine
    return ",".join(r.name for r in resolve_engines(engine) if any(f.engine == r.name for f in failing))


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


def push_checkpoint(
    directory: str | Path,
    ref: str,
    request: VerifyRequest | None = None,
    *,
    base_model: str | None = None,
    create_pr: bool = False,
    private: bool = False,
    dry_run: bool = False,
    force: bool = False,
    token: str | None = None,
    message: str | None = None,
    **options: Any,
) -> PushReport:
    """Verify ``directory`` with ``request`` (verify's own request; ``options``: its options flat instead, as
    ``VerifyRequest.build`` takes them); if it passes, publish it with its card and report as one commit of ``ref``."""
    if request is None:
        request = VerifyRequest.build(**options)
    elif options:
        raise TypeError("push_checkpoint takes a request or options, not both")
    checked = request.validate()  # every usage error before any work
    target, level = request.target, checked.level
    fail_level, strict = request.fail_level, request.strict
    repo_id, revision = repo_ref(ref)
    if revision is not None:
        raise UsageError("push writes to the main branch (or a PR with --create-pr); drop the @revision")
    directory = Path(directory)
    endpoint = None if dry_run else hub_endpoint()  # a password in HF_ENDPOINT is refused before any work
    remember_token(token)
    report = verify_checkpoint(directory, checked)
    if report.status != "pass":
        s = report.summary()
        again = verify_command(
            directory,
            failed_engines(report),
            target=target,
            level=level,
            fail_level=fail_level,
            strict=strict,
        )
        raise GateFailed(
            f"verify failed ({s['errors']} error(s), {s['warnings']} warning(s) at fail level "
            f"{fail_level}); nothing was uploaded",
            path=directory,
            hint=f"run `{again}` to see the findings; fix them (often: `eagle-convert normalize`)",
        )
    ckpt = open_checkpoint(directory)
    target_cfg = checked.target
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
    api = hf.HfApi(endpoint=endpoint, token=token)
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
        raise translate_error(exc, repo_id, token) from None
    # what the server answered is printed and written as JSON: never a token it repeats, never a control character
    secrets = known_secrets(token)
    result.parent_commit = printable(redact(str(head.sha), secrets))
    result.commit = printable(redact(str(commit.oid), secrets))
    result.commit_url = printable(redact(commit.commit_url, secrets)) if commit.commit_url else None
    result.pr_url = printable(redact(commit.pr_url, secrets)) if commit.pr_url else None
    return result
