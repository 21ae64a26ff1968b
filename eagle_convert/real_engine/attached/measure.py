"""One measured run on an attached server: where and how to reach it (:class:`AttachedServer`), the first contact
before anything expensive (:func:`reach`), then the run: detect it, send the prompts through its engine's protocol,
and derive the acceptance from the counts its own records give (:class:`AttachedRun`).

    reach(AttachedServer("http://10.0.0.5:8000", token))
    attached = run("http://10.0.0.5:8000", token, prompts, new_tokens=64, concurrency=8, timeout=300.0, draft=DRAFT)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from eagle_convert.engines import AttachedServer as AttachedServer  # declared where the CLI reads it, light
from eagle_convert.errors import AttachError, UsageError
from eagle_convert.real_engine.attached.client import connect
from eagle_convert.real_engine.attached.detect import PROTOCOLS, detect, detect_on
from eagle_convert.real_engine.attached.fingerprint import draft_identity
from eagle_convert.real_engine.attached.protocol import CounterMove, ServerInfo
from eagle_convert.real_engine.base import acceptance

REACH_TIMEOUT_S = 30.0  # the first contact with the server, before anything expensive runs


@dataclass(frozen=True)
class AttachedRun:
    """One run against a server, as its own records count it (the report's ``engine_run`` reads from it)."""

    server: ServerInfo
    prompts: int
    new_tokens: int
    concurrency: int
    outputs: list[list[int]]  # the generated token ids per prompt (empty lists where the server returns none)
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_position: list[int]
    mean_acceptance_length: float  # 1 + accepted / drafts (engine_level.base.acceptance)
    acceptance_per_position: list[float]  # accepted at position i / drafts
    measured_from: str  # "vllm /metrics counters, diffed around the run" | "sglang per-request meta_info" | trtllm's
    foreign_traffic: list[CounterMove]  # empty: the counters moved by exactly this run's requests
    draft_identity: str  # "same" | "different" | "unknown": the served draft against DRAFT
    draft_identity_note: str  # how that was decided, or why it could not be
    wall_s: float  # from the first request sent to the last answer (and the counters settled)


def reach(server: AttachedServer) -> None:
    """Contact the server once before anything expensive runs (the checks, the probe): a server that is down,
    refuses the key or does not serve speculatively is exit 2 within seconds, not after the probe's minutes."""
    detect(server.url, server.token, min(server.timeout, REACH_TIMEOUT_S), server.engine)


def run(
    url: str,
    token: str | None,
    prompts: Sequence[Sequence[int]],
    new_tokens: int,
    concurrency: int = 8,
    timeout: float = 300.0,
    engine: str | None = None,
    draft: Path | None = None,
) -> AttachedRun:
    """Send ``prompts`` (token ids) to the server at ``url``, greedy, ``new_tokens`` each with EOS ignored, at most
    ``concurrency`` at once, and measure acceptance from the server's own records. ``timeout``: seconds per HTTP
    request. ``draft``: the DRAFT directory the served draft is compared with. AttachError on any fault."""
    if concurrency < 1 or new_tokens < 1 or not prompts:
        raise UsageError("--engine-concurrency and the number of new tokens must be at least 1, with a prompt or more")
    server = connect(url, token)
    info = detect_on(server, timeout, engine)
    identity, note = draft_identity(info.draft_path, draft)
    counts = PROTOCOLS[info.engine].measure(server, info, [list(p) for p in prompts], new_tokens, concurrency, timeout)
    if counts.drafts <= 0:  # each engine's reader says why; a server that measured nothing never passes
        raise AttachError(f"the {info.engine} server at {server.url} measured no draft during the run")
    if counts.draft_len is not None and info.num_speculative_tokens is None:
        info = replace(info, num_speculative_tokens=counts.draft_len)
    mean, rates = acceptance(counts.drafts, counts.accepted_tokens, counts.accepted_per_position)
    return AttachedRun(
        server=info,
        prompts=len(prompts),
        new_tokens=new_tokens,
        concurrency=concurrency,
        outputs=counts.outputs,
        drafts=counts.drafts,
        draft_tokens=counts.draft_tokens,
        accepted_tokens=counts.accepted_tokens,
        accepted_per_position=counts.accepted_per_position,
        mean_acceptance_length=mean,
        acceptance_per_position=rates,
        measured_from=counts.measured_from,
        foreign_traffic=counts.foreign_traffic,
        draft_identity=identity,
        draft_identity_note=note,
        wall_s=counts.wall_s,
    )
