"""Findings: one observation about a checkpoint, tied to a rule with a stable id."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    rule_id: str
    severity: str
    message: str
    subject: str | None = None  # the tensor name or config key the finding is about
    expected: Any = None
    actual: Any = None
    engine: str | None = None  # set when only one engine is affected ("vllm" or "sglang")


def worst_severity(findings: list[Finding]) -> str | None:
    for level in SEVERITIES:
        if any(f.severity == level for f in findings):
            return level
    return None
