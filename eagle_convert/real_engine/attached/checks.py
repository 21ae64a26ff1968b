"""A server's answers checked before they count: every count a whole number, the counts consistent with each other,
and the two errors of a server whose answers cannot be measured (impossible numbers, missing fields).

    drafts = count(server, "/metrics", "vllm:spec_decode_num_drafts_total", value)
"""

from __future__ import annotations

import math
from typing import Any

from eagle_convert.errors import AttachError
from eagle_convert.real_engine.attached.client import Endpoint, clip


def count(server: Endpoint, path: str, what: str, value: Any) -> int:
    """A count the server reported: a finite whole number >= 0, else a server fault (never a measurement)."""
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if number is None or not math.isfinite(number) or number < 0 or number != int(number):
        raise fault(server, path, f"{what} is {clip(repr(value).encode(), limit=60)}, not a count")
    return int(number)


def optional_count(server: Endpoint, path: str, what: str, value: Any) -> int | None:
    """A count the server may leave out (None), else as :func:`count` reads it."""
    return None if value is None else count(server, path, what, value)


def token_ids(server: Endpoint, path: str, what: str, value: Any) -> list[int]:
    """The generated token ids of one answer (none when the server leaves them out): a list of counts, else a fault."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise fault(server, path, f"{what} is {clip(repr(value).encode(), limit=60)}, not a list of token ids")
    return [count(server, path, f"{what}[{n}]", t) for n, t in enumerate(value)]


def consistent(
    server: Endpoint, path: str, drafts: int, draft_tokens: int, accepted: int, positions: list[int]
) -> None:
    """The run's counters against each other: accepted <= drafted tokens, at least one token per draft, and the
    per-position counts summing to the accepted total, none above the drafts."""
    problems = []
    if accepted > draft_tokens:
        problems.append(f"{accepted} accepted tokens exceed the {draft_tokens} drafted")
    if draft_tokens < drafts:
        problems.append(f"{draft_tokens} draft tokens over {drafts} drafts")
    if positions and sum(positions) != accepted:
        problems.append(f"the per-position counts sum to {sum(positions)}, not the {accepted} accepted")
    if any(p > drafts for p in positions):
        problems.append(f"a position accepted more than the {drafts} drafts ({max(positions)})")
    if problems:
        raise fault(server, path, "; ".join(problems))


def fault(server: Endpoint, path: str, what: str) -> AttachError:
    """The error of numbers no honest server reports: nothing is measured from them."""
    return AttachError(
        f"{server.url}{path} reported impossible numbers: {what} (a server fault: nothing was measured)",
        hint="the server restarted, or something between this tool and the engine rewrites its answers; rerun "
        "against the engine's own address when it serves steadily",
    )


def missing(server: Endpoint, path: str, what: str) -> AttachError:
    """The error of an answer without a field a measurement needs."""
    return AttachError(
        f"{server.url}{path} answered without {what}",
        hint="this server's answers are not the shapes this eagle-convert was built against (vLLM 0.32, SGLang "
        "0.5.23, trtllm-serve of TensorRT-LLM 1.2); pass --engine to force the engine, or report the server's "
        "version",
    )
