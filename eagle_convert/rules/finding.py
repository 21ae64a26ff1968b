"""The one finding type: an observation about a checkpoint, tied to a rule with a stable id.

Detection, the reader, every verify level, the engine level and normalize all report with it. ``subject`` is what
the finding is about (a tensor name or a config key); ``file`` and ``pointer`` place it in the checkpoint's files
(``verify`` fills them from the subject where the finding did not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    rule_id: str
    severity: str  # "error", "warning" or "info"
    message: str
    file: str | None = None  # the checkpoint file the finding is about (config.json, a shard), relative
    pointer: str | None = None  # JSON pointer into that file's config, or the tensor name
    expected: Any = None
    actual: Any = None
    subject: str | None = None  # the tensor name or config key the finding is about
    engine: str | None = None  # set when only one engine release is affected

    def at(self, file: str | None, pointer: str | None) -> Finding:
        """This finding placed at ``file`` and ``pointer`` (``dataclasses.replace``, without its per-call
        introspection: every finding of a report is placed, 100,000 of them for a header of unknown tensors)."""
        s = self
        return Finding(s.rule_id, s.severity, s.message, file, pointer, s.expected, s.actual, s.subject, s.engine)

    def to_dict(self) -> dict[str, Any]:
        """A finding in JSON, the same keys in ``inspect`` and ``verify`` (eagle_convert/schemas/inspect-report and
        verify-report.schema.json): where it is (``file``, ``pointer``), what it is about (``subject``) and the one
        release it concerns (``engine``), each null when unknown."""
        return {k: getattr(self, k) for k in _JSON_KEYS}


# inspect wrote rule_id .. subject, expected, actual, engine; verify wrote file and pointer instead of subject and
# engine: both write all of them now (keys are a public contract: added, never renamed)
_JSON_KEYS = ("rule_id", "severity", "message", "file", "pointer", "subject", "engine", "expected", "actual")
