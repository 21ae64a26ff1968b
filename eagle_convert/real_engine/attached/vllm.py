"""vLLM's OpenAI-compatible server (vLLM 0.32): asked with ``/v1/completions``, measured from ``/metrics``.

Acceptance is read from the Prometheus counters of ``/metrics`` (``vllm:spec_decode_num_drafts_total``,
``..._num_draft_tokens``, ``..._num_accepted_tokens``, ``..._num_accepted_tokens_per_pos{position=...}``) scraped
before and after the run and diffed, the same counters the in-process engine level reads from ``LLM.get_metrics()``.
The request and token counters (``vllm:request_success_total``, ``vllm:prompt_tokens_total``,
``vllm:generation_tokens_total``) must move by exactly what this run's requests explain; any other move is someone
else's traffic, reported as a :class:`CounterMove` and never silently mixed in.
"""

from __future__ import annotations

import time
from typing import Any

from eagle_convert.errors import AttachError
from eagle_convert.real_engine.attached.checks import consistent, count, fault, missing, optional_count
from eagle_convert.real_engine.attached.client import Endpoint
from eagle_convert.real_engine.attached.prometheus import Samples, parse_metrics, total
from eagle_convert.real_engine.attached.protocol import (
    MAX_POSITIONS,
    SETTLE_S,
    CounterMove,
    Counts,
    EngineProtocol,
    ServerInfo,
    completions,
    send_all,
)

_SPEC = "vllm:spec_decode_num_"
DRAFTS, DRAFT_TOKENS, ACCEPTED = f"{_SPEC}drafts_total", f"{_SPEC}draft_tokens_total", f"{_SPEC}accepted_tokens_total"
ACCEPTED_PER_POS = f"{_SPEC}accepted_tokens_per_pos_total"
REQUESTS, PROMPT_TOKENS, GENERATION_TOKENS = (
    "vllm:request_success_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
)
IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def describe(server: Endpoint, info: Any, metrics: str | None, timeout: float) -> ServerInfo:
    """vLLM's ``/version`` and ``/v1/models``, the spec-decode counters of ``/metrics``, and its speculative config
    from ``/server_info`` (``info``), which it serves only with ``VLLM_SERVER_DEV_MODE=1``."""
    version = server.optional_json("/version", timeout)
    models = server.json("/v1/models", None, timeout, "before the run")
    try:
        model = models["data"][0]
    except (KeyError, IndexError, TypeError):
        raise missing(server, "/v1/models", "data[0]") from None
    if not isinstance(model, dict):
        raise missing(server, "/v1/models", "data[0] as an object")
    reported = ["/version", "/v1/models"]
    config = server.optional_json("/server_info?config_format=json", timeout) if info is not None else None
    spec = config.get("vllm_config", {}).get("speculative_config") if isinstance(config, dict) else None
    if metrics is None:
        raise AttachError(
            f"the vLLM server at {server.url} has no /metrics: acceptance is read from its spec-decode counters",
            hint="start it without --disable-log-stats (vLLM serves /metrics by default)",
        )
    samples = parse_metrics(metrics)
    reported.append("/metrics")
    counters = any(n == DRAFTS for n, _, _ in samples)
    positions = _per_position(samples)
    not_reported = None
    if isinstance(spec, dict):
        reported.append("/server_info")
        method, draft, k = spec.get("method"), spec.get("model"), spec.get("num_speculative_tokens")
    else:
        method, draft, k = ("speculative" if counters else None), None, (len(positions) or None)
        not_reported = (
            "vLLM reports its draft only on /server_info, which it serves with VLLM_SERVER_DEV_MODE=1; "
            "the number of draft tokens is read from the per-position counters"
            if counters
            else "its /metrics has no vllm:spec_decode_* counters"
        )
    return ServerInfo(
        url=server.url,
        engine="vllm",
        version=str(version.get("version")) if isinstance(version, dict) else "unknown",
        model=str(model.get("id")),
        model_path=model.get("root") or model.get("id"),
        speculative=counters or bool(spec),
        method=method,
        draft_path=str(draft) if draft else None,
        num_speculative_tokens=optional_count(server, "/server_info", "num_speculative_tokens", k),
        reported_by=reported,
        not_reported=not_reported,
    )


def measure(
    server: Endpoint, info: ServerInfo, prompts: list[list[int]], new_tokens: int, concurrency: int, timeout: float
) -> Counts:
    """The prompts through ``/v1/completions`` (token ids returned), the counters of ``/metrics`` diffed around
    them."""
    send = completions(server, info, new_tokens, timeout, return_token_ids=True)
    before = _scrape(server, timeout, "before the run")
    started = time.perf_counter()
    answers = send_all(prompts, concurrency, send)
    expected = {
        REQUESTS: float(len(prompts)),
        PROMPT_TOKENS: float(sum(len(p) for p in prompts)),
        GENERATION_TOKENS: float(len(prompts) * new_tokens),
    }
    after = _settled(server, before, expected[REQUESTS], timeout)
    wall = time.perf_counter() - started
    for name in (*expected, DRAFTS, DRAFT_TOKENS, ACCEPTED):
        count(server, "/metrics", f"{name} before the run", total(before, name))
        count(server, "/metrics", f"{name} after the run", total(after, name))
    moved = {name: total(after, name) - total(before, name) for name in (*expected, DRAFTS, DRAFT_TOKENS, ACCEPTED)}
    backwards = [n for n, v in moved.items() if v < 0]
    if backwards:
        n = backwards[0]
        raise fault(
            server, "/metrics", f"{n} went backwards during the run, from {total(before, n):g} to {total(after, n):g}"
        )
    if moved[REQUESTS] < expected[REQUESTS]:
        raise AttachError(
            f"the counters of {server.url}/metrics counted {moved[REQUESTS]:.0f} finished requests during the run, "
            f"fewer than the {len(prompts)} it answered: the metrics are not those of the server that answered",
            hint="point --engine-url at one server, not at a load balancer in front of several",
        )
    foreign = [CounterMove(n, e, moved[n]) for n, e in expected.items() if moved[n] != e]
    foreign += [CounterMove(n, 0.0, total(after, n)) for n in IN_FLIGHT if total(after, n) > 0]
    drafts = int(moved[DRAFTS])
    if drafts <= 0:
        raise AttachError(
            f"the vLLM server at {server.url} drafted nothing during the run ({_SPEC}drafts_total did not move)",
            hint="serve the target with the draft (--speculative-config), and ask for more than one new token",
        )
    pos_before, pos_after = _per_position(before), _per_position(after)
    if len(pos_after) > MAX_POSITIONS:
        raise fault(server, "/metrics", f"{ACCEPTED_PER_POS} has {len(pos_after)} positions")
    per_position = [
        count(server, "/metrics", f"{ACCEPTED_PER_POS} at position {i}", pos_after[i] - pos_before.get(i, 0.0))
        for i in sorted(pos_after)
    ]
    consistent(server, "/metrics", drafts, int(moved[DRAFT_TOKENS]), int(moved[ACCEPTED]), per_position)
    return Counts(
        outputs=[a["token_ids"] for a in answers],
        drafts=drafts,
        draft_tokens=int(moved[DRAFT_TOKENS]),
        accepted_tokens=int(moved[ACCEPTED]),
        accepted_per_position=per_position,
        measured_from="vllm /metrics counters, diffed around the run",
        foreign_traffic=foreign,
        wall_s=wall,
    )


def _scrape(server: Endpoint, timeout: float, phase: str) -> Samples:
    """The samples of ``/metrics`` now."""
    return parse_metrics(server.request("/metrics", None, timeout, phase).decode("utf-8", errors="replace"))


def _settled(server: Endpoint, before: Samples, requests: float, timeout: float) -> Samples:
    """The counters after the run, once they count at least ``requests`` more finished requests (vLLM records a
    step's stats just after it sends the step's answers) or SETTLE_S has passed."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        after = _scrape(server, timeout, "after the run")
        if total(after, REQUESTS) - total(before, REQUESTS) >= requests or time.monotonic() > deadline:
            return after
        time.sleep(0.1)


def _per_position(samples: Samples) -> dict[int, float]:
    """The accepted tokens per draft position, summed over the other labels (engines)."""
    out: dict[int, float] = {}
    for name, labels, value in samples:
        if name == ACCEPTED_PER_POS and labels.get("position", "").isdecimal():
            out[int(labels["position"])] = out.get(int(labels["position"]), 0.0) + value
    return out


PROTOCOL = EngineProtocol(
    engine="vllm",
    describe=describe,
    measure=measure,
    serve_with='vLLM --speculative-config \'{"method": "eagle3", "model": DRAFT, ...}\'',
)
