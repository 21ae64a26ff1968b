"""What ``verify`` says of a written draft, release by release: normalize's report ends with it.

The releases are the ones ``verify OUT`` checks when no ``--engine`` is given, as verify itself chooses them: those
the written config records (``eagle_convert.engines``, the profile's engines), else the deployed ones (the
speculators format has no place for the record). Each is verified on its own, at verify's default level, with
normalize's ``--target``, so a problem normalize cannot fix is named here instead of a clean-looking plan.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SEVERE = ("error", "warning")


@dataclass(frozen=True)
class ReleaseVerdict:
    """verify's verdict on the written draft for one release (fail level error)."""

    release: str
    status: str  # "pass" or "fail"
    errors: tuple[str, ...]  # the rule ids of its error findings, in verify's order
    warnings: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "status": self.status,
            "errors": list(self.errors),
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class Verdicts:
    """The verdicts of ``command`` (what a user types to see the findings) on every release it checks."""

    level: str
    command: str
    releases: tuple[ReleaseVerdict, ...]

    @property
    def status(self) -> str:
        return "pass" if all(v.status == "pass" for v in self.releases) else "fail"

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "command": self.command,
            "status": self.status,
            "releases": [v.to_dict() for v in self.releases],
        }


def verdicts(out: Path, config: Mapping[str, Any], target: Path | None) -> Verdicts:
    """verify's verdict on the draft written to ``out`` (its config.json is ``config``) for each release ``verify
    OUT`` checks (static: configs and headers; no byte is hashed), with the target normalize was given."""
    from eagle_convert.verify.request import DEFAULT_LEVEL, VerifyRequest
    from eagle_convert.verify.run import verify_checkpoint

    # verify's own choice of releases for this config (CheckedRequest.with_recorded), without a run of its own
    chosen = VerifyRequest(target=target, compute_hashes=False).validate().with_recorded(config).releases
    found = []
    for release in chosen:
        report = verify_checkpoint(out, VerifyRequest(target=target, engine=release.name, compute_hashes=False))
        errors, warnings = (tuple(dict.fromkeys(f.rule_id for f in report.findings if f.severity == s)) for s in SEVERE)
        found.append(ReleaseVerdict(release.name, report.status, errors, warnings))
    return Verdicts(DEFAULT_LEVEL, _command(out, target), tuple(found))


def _command(out: Path, target: Path | None) -> str:
    return shlex.join(["eagle-convert", "verify", str(out), *(["--target", str(target)] if target else [])])
