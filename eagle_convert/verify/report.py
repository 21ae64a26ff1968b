"""The result of `verify`: findings, every check with its outcome, and the hash manifest of the verified files."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from eagle_convert.read.digest import FileDigest
from eagle_convert.rules.finding import SEVERITIES, Finding
from eagle_convert.rules.registry import Fixes
from eagle_convert.version import SCHEMA_VERSION, TOOL, __version__

if TYPE_CHECKING:  # the probe's and the engine's types; a static verify imports neither
    from eagle_convert.errors import EagleConvertError
    from eagle_convert.probe.result import ProbeReport
    from eagle_convert.real_engine.record import EngineRun

TENSOR_VALUES = "reading tensor values"  # what verify --level tensors reports to its progress callback


@dataclass(frozen=True)
class CheckOutcome:
    rule_id: str
    name: str
    outcome: str  # "pass", "fail" or "skipped"
    reason: str = ""  # why it was skipped (level, engine, selection, missing input)


@dataclass(frozen=True)
class ReportError:
    """Why a checkpoint could not be verified (the typed error verify stopped at): the report's ``error``."""

    message: str
    hint: str | None
    exit_code: int  # 2: bad input, usage or the engine failing; 3: nothing to check

    @classmethod
    def of(cls, exc: EagleConvertError) -> ReportError:
        return cls(exc.message, exc.hint, exc.exit_code)

    def to_dict(self) -> dict[str, Any]:
        return {"message": self.message, "hint": self.hint, "exit_code": self.exit_code}


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
    error: ReportError | None = None  # when the input could not be verified
    revision: str | None = None  # the resolved commit sha when PATH was a Hub repo id
    probe: ProbeReport | None = None  # the acceptance probe (--level target)
    engine_run: EngineRun | None = None  # the draft measured in a real engine, or on a server (--level engine)
    deployment: dict[str, Any] = field(default_factory=dict)  # the deployment settings the views read (trtllm)
    # each selected release whose capture is a deployment setting (TensorRT-LLM): the setting that feeds the trained
    # states (None: its default does, or they are unknown), as the release's view gives it
    capture_settings: dict[str, dict[str, list[int]] | None] = field(default_factory=dict)
    # who chose the releases of ``engine``: "given" (--engine or the project's settings), "default" (deployed),
    # "draft" (the engines a normalized draft's config records it was written for: eagle_convert.engines)
    engine_source: str = "given"

    def summary(self) -> dict[str, int]:
        counts = {s: sum(f.severity == s for f in self.findings) for s in SEVERITIES}
        return {"errors": counts["error"], "warnings": counts["warning"], "infos": counts["info"]}

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract, validated by eagle_convert/schemas/verify-report.schema.json."""
        fixes = Fixes.among(self.findings)
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": TOOL,
            "version": __version__,
            "tool_version": __version__,  # as inspect's and normalize's
            "status": self.status,
            "level": self.level,
            "engine": self.engine,
            "engine_source": self.engine_source,
            "fail_level": self.fail_level,
            "summary": self.summary(),
            "checkpoint": {"path": self.path, "revision": self.revision, "files": [asdict(f) for f in self.files]},
            "findings": [{**f.to_dict(), **fixes.fields(f.rule_id)} for f in self.findings],
            "checks": [asdict(c) for c in self.checks],
            "error": self.error.to_dict() if self.error is not None else None,
            "probe": self.probe.to_dict() if self.probe is not None else None,
            "engine_run": self.engine_run.to_dict() if self.engine_run is not None else None,
            "deployment": dict(self.deployment),
            "capture_settings": dict(self.capture_settings),
        }
