"""Findings as people read them: one finding that several engine releases share, printed once with its releases.

The gate checks each release on its own, so one problem of the draft is one finding per release, each message
naming its release (``vllm@0.33: ...``, ``vllm@0.28: ...``). The human report and the concise lines show such a group
once, the releases listed where the message names one; JSON, SARIF and the other machine formats keep one entry per
finding (a public contract).
"""

from __future__ import annotations

import re
from dataclasses import replace

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
