"""Findings as people read them: one finding that several engine releases share, printed once with its releases.

The gate checks each release on its own, so one problem of the draft is one finding per release, each message
naming its release (``vllm@0.33: ...``, ``vllm@0.28: ...``). The human report and the concise lines show such a group
once, the releases listed where the message names one; JSON, SARIF and the other machine formats keep one entry per
finding (a public contract).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace

from eagle_convert.rules.finding import Finding


def _release(name: str) -> re.Pattern[str]:
    """``name`` as a whole release name: not the head of a longer one (``vllm@0.33`` in ``vllm@0.33-v1``); a full
    stop after it ends a sentence."""
    return re.compile(rf"(?<![\w@.-]){re.escape(name)}(?![\w@-]|\.\w)")


def by_release(findings: list[Finding]) -> list[Finding]:
    """``findings`` with each group that differs only in its release (same rule, severity, file, pointer, subject,
    expected and actual, and the same message apart from the release it names) as one finding, in the order of the
    group's first: its message names every release of the group, comma-separated, and its ``engine`` is None."""
    groups: dict[object, list[Finding]] = {}
    around: dict[object, list[str]] = {}  # the message's text around the release it names
    for n, f in enumerate(findings):
        pieces = _release(f.engine).split(f.message) if f.engine else [f.message]
        key: object = (
            (f.rule_id, f.severity, f.file, f.pointer, f.subject, repr(f.expected), repr(f.actual), *pieces)
            if len(pieces) > 1
            else n  # a finding that names no release of its own stands alone
        )
        groups.setdefault(key, []).append(f)
        around[key] = pieces
    shown = []
    for key, group in groups.items():
        if len(group) == 1:
            shown.append(group[0])
            continue
        releases = ", ".join(dict.fromkeys(f.engine or "" for f in group))
        shown.append(replace(group[0], message=releases.join(around[key]), engine=None))
    return shown


# The human tables show at most this many findings of one rule; one row counts the rest (every machine format, and
# the concise lines, list them all). A table of 100,000 rows is read by nobody and took rich minutes to lay out.
ROWS_PER_RULE = 25


@dataclass(frozen=True)
class More:
    """The row that stands for the findings of ``rule_id`` past ROWS_PER_RULE."""

    rule_id: str
    count: int

    @property
    def message(self) -> str:
        return f"... and {self.count:,} more {self.rule_id} findings (the JSON report, --json, lists every one)"


def table_rows(findings: list[Finding], per_rule: int = ROWS_PER_RULE) -> list[Finding | More]:
    """The rows of a human findings table: :func:`by_release`'s findings, at most ``per_rule`` of each rule, and in
    place of the first left out a :class:`More` counting all that were."""
    shown = by_release(findings)
    total = Counter(f.rule_id for f in shown)
    seen: Counter[str] = Counter()
    rows: list[Finding | More] = []
    for f in shown:
        seen[f.rule_id] += 1
        if seen[f.rule_id] <= per_rule:
            rows.append(f)
        elif seen[f.rule_id] == per_rule + 1:
            rows.append(More(f.rule_id, total[f.rule_id] - per_rule))
    return rows
