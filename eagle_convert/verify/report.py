"""The result of `verify`: findings, every check with its outcome, and the hash manifest of the verified files."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from eagle_convert.read.digest import FileDigest
from eagle_convert.rules.finding import SEVERITIES, Finding
from eagle_convert.rules.registry import fix_fields
from eagle_convert.version import SCHEMA_VERSION, __version__

if TYPE_CHECKING:  # the probe's types; a static verify never imports the probe
    from eagle_convert.probe.result import ProbeReport

TOOL = "eagle-convert"
TENSOR_VALUES = "reading tensor values"  # what verify --level tensors reports to its progress callback


@dataclass(frozen=True)
class CheckOutcome:
    rule_id: str
    name: str
    outcome: str  # "pass", "fail" or "skipped"
    reason: str = ""  # why it was skipped (level, engine, selection, missing input)


@dataclass
class VerifyReport:
    path: str
    level: str
    engine: str
    fail_level: str
    status: str  # "pass", "fail" or "error"
    findings: list[Finding] = field(default_factory=list)
    checks: list[CheckOutcome] = field(default_factory=list)
    files: list[FileDigest] = field(default_factory=list)
    error: dict[str, Any] | None = None  # {"message", "hint", "exit_code"} when the input could not be verified
    revision: str | None = None  # the resolved commit sha when PATH was a Hub repo id
    probe: ProbeReport | None = None  # the acceptance probe (--level target)
    engine_run: dict[str, Any] | None = None  # the draft measured in a real engine (--level engine)

    def summary(self) -> dict[str, int]:
        counts = {s: sum(f.severity == s for f in self.findings) for s in SEVERITIES}
        return {"errors": counts["error"], "warnings": counts["warning"], "infos": counts["info"]}

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract, validated by eagle_convert/schemas/verify-report.schema.json."""
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": TOOL,
            "version": __version__,
            "status": self.status,
            "level": self.level,
            "engine": self.engine,
            "fail_level": self.fail_level,
            "summary": self.summary(),
            "checkpoint": {"path": self.path, "revision": self.revision, "files": [asdict(f) for f in self.files]},
            "findings": [{**f.verify_json(), **fix_fields(f.rule_id, self.findings)} for f in self.findings],
            "checks": [asdict(c) for c in self.checks],
            "error": self.error,
            "probe": self.probe.to_dict() if self.probe is not None else None,
            "engine_run": self.engine_run,
        }
