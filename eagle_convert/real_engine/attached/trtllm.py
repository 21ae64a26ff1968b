"""trtllm-serve of TensorRT-LLM (1.2): asked with ``/v1/completions``, measured from the iteration statistics of its
``/metrics`` route.

``/metrics`` is a JSON list that each read drains (``OpenAIServer.get_iteration_stats`` -> ``LLM.get_stats_async``),
polled through the run; each iteration's ``specDecodingStats`` counts that iteration's drafted and accepted tokens and
the requests that drafted (``PyExecutor._update_iter_stats``). The server keeps them only with
``enable_iter_perf_stats: true``. Iterations that mix in other clients' requests are told apart where the numbers
allow (more drafting requests in one iteration than this run keeps in flight, more tokens than this run's requests
can have generated).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from eagle_convert.errors import AttachError
from eagle_convert.real_engine.attached.checks import consistent, count, fault, missing
from eagle_convert.real_engine.attached.client import Endpoint
from eagle_convert.real_engine.attached.protocol import (
    SETTLE_S,
    CounterMove,
    Counts,
    EngineProtocol,
    ServerInfo,
    completions,
    send_all,
)

POLL_S = 1.0  # trtllm-serve: seconds between reads of /metrics during the run (it keeps ~1000 iterations at most)
MAX_ITERATIONS = 1_000_000  # trtllm-serve: iteration records one run may gather
TRTLLM_OWNER = "tensorrt_llm"  # trtllm-serve's /v1/models owned_by (serve/openai_protocol.py ModelCard)
SPEC_STATS = "specDecodingStats"  # one trtllm iteration's speculative counts (IterationStats JSON)


def describe(server: Endpoint, info: Any, metrics: str | None, timeout: float) -> ServerInfo:
    """trtllm-serve (``tensorrt_llm/serve/openai_server.py``): ``/version`` is ``{"version": VERSION}``,
    ``/v1/models`` one ``ModelCard`` owned by ``tensorrt_llm``; it reports neither its draft nor its speculative
    settings over HTTP, so whether it drafts is read from the iteration statistics of ``/metrics`` (an earlier
    iteration's ``specDecodingStats``), and, when none is queued, from the run itself."""
    version = server.optional_json("/version", timeout)
    models = server.json("/v1/models", None, timeout, "before the run")
    try:
        model = models["data"][0]
        name = str(model["id"])
    except (KeyError, IndexError, TypeError):
        raise missing(server, "/v1/models", "data[0].id") from None
    if metrics is None:
        raise AttachError(
            f"the trtllm-serve server at {server.url} has no /metrics: acceptance is read from its iteration "
            "statistics",
            hint="serve it with trtllm-serve, whose /metrics route returns them (with enable_iter_perf_stats: true)",
        )
    queued = _iteration_list(server, metrics.encode())  # reading them drained them: the run starts from none
    drafting = [i.get(SPEC_STATS) for i in queued]
    speculative = not queued or any(s is not None for s in drafting)
    return ServerInfo(
        url=server.url,
        engine="trtllm",
        version=str(version.get("version")) if isinstance(version, dict) else "unknown",
        model=name,
        model_path=model.get("root") or name,
        speculative=speculative,
        method=None,
        draft_path=None,
        num_speculative_tokens=None,
        reported_by=["/version", "/v1/models", "/metrics"],
        not_reported=(
            "trtllm-serve reports neither its draft nor its speculative settings over HTTP; whether it drafts and "
            "how many tokens are read from the specDecodingStats of its /metrics iteration statistics"
            if speculative
            else f"its /metrics iteration statistics carry {SPEC_STATS} null"
        ),
    )


def _iteration_list(server: Endpoint, raw: bytes) -> list[dict[str, Any]]:
    """trtllm-serve's ``/metrics`` answer: a JSON list of iteration statistics (objects)."""
    try:
        items = json.loads(raw)
    except ValueError:
        items = None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise missing(server, "/metrics", "a JSON list of iteration statistics")
    return items


def _iterations(server: Endpoint, timeout: float, phase: str) -> list[dict[str, Any]]:
    """The iteration statistics trtllm-serve gathered since the last read (the read drains them)."""
    return _iteration_list(server, server.request("/metrics", None, timeout, phase))


def measure(
    server: Endpoint, info: ServerInfo, prompts: list[list[int]], new_tokens: int, concurrency: int, timeout: float
) -> Counts:
    """trtllm-serve: ``/v1/completions`` (``CompletionRequest`` forbids unknown fields, so only its own: token-id
    prompt, ``max_tokens``, ``temperature``, ``ignore_eos``), while ``/metrics`` is read every POLL_S seconds (each
    read drains the iterations gathered since the last, and the server keeps a bounded number) and until it has no
    more after the last answer. Each iteration's ``specDecodingStats`` (``PyExecutor._update_iter_stats``) counts, over
    that iteration's generation requests with drafts: ``numDraftTokens``, ``numAcceptedTokens`` and
    ``numRequestsWithDraftTokens`` (one verify step each); summed, these are the run's drafts, draft tokens and
    accepted tokens. Per-position counts are not reported."""
    send = completions(server, info, new_tokens, timeout)
    _iterations(server, timeout, "before the run")  # drain what earlier traffic left queued
    items: list[dict[str, Any]] = []
    failed: list[AttachError] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(POLL_S):
            try:
                items.extend(_iterations(server, timeout, "during the run"))
            except AttachError as exc:
                failed.append(exc)
                return
            if len(items) > MAX_ITERATIONS:
                return  # refused below, once the requests are answered

    poller = threading.Thread(target=poll, name="engine-url-metrics", daemon=True)
    started = time.perf_counter()
    poller.start()
    try:
        answers = send_all(prompts, concurrency, send)
    finally:
        stop.set()
        poller.join()
    if failed:
        raise failed[0]
    deadline = time.monotonic() + SETTLE_S
    while len(items) <= MAX_ITERATIONS:  # the iterations of the last answers, once the server has them all
        more = _iterations(server, timeout, "after the run")
        items.extend(more)
        if not more or time.monotonic() > deadline:
            break
    wall = time.perf_counter() - started
    if len(items) > MAX_ITERATIONS:
        raise fault(server, "/metrics", f"more than {MAX_ITERATIONS:,} iterations during one run")
    return _counts(server, items, [a["token_ids"] for a in answers], len(prompts), new_tokens, concurrency, wall)


def _counts(
    server: Endpoint,
    items: list[dict[str, Any]],
    outputs: list[list[int]],
    prompts: int,
    new_tokens: int,
    concurrency: int,
    wall: float,
) -> Counts:
    """The run's counts from trtllm-serve's iteration statistics, each checked before it counts."""
    if not items:
        raise AttachError(
            f"{server.url}/metrics returned no iteration statistics during the run: trtllm-serve keeps them only "
            "with enable_iter_perf_stats",
            hint="start trtllm-serve with `enable_iter_perf_stats: true` in its --extra_llm_api_options YAML, and let "
            "no other client read its /metrics during the run (each read drains it)",
        )
    spec = [i.get(SPEC_STATS) for i in items if i.get(SPEC_STATS) is not None]
    if not spec:
        raise AttachError(
            f"the trtllm-serve server at {server.url} does not run speculative decoding: its {len(items)} "
            f"iterations during the run carry {SPEC_STATS} null",
            hint="serve the target with the draft: speculative_config {decoding_type: Eagle3, speculative_model: "
            "DRAFT} in the --extra_llm_api_options YAML",
        )
    drafts = draft_tokens = accepted = widest = busiest = 0
    for stats in spec:
        if not isinstance(stats, dict):
            raise missing(server, "/metrics", f"{SPEC_STATS} objects")
        n, d, a = (
            count(server, "/metrics", f"{SPEC_STATS}.{key}", stats.get(key))
            for key in ("numRequestsWithDraftTokens", "numDraftTokens", "numAcceptedTokens")
        )
        if a > d or n > d or (n == 0 and d > 0):
            raise fault(
                server, "/metrics", f"an iteration reports {a} accepted of {d} draft tokens over {n} drafting requests"
            )
        drafts, draft_tokens, accepted = drafts + n, draft_tokens + d, accepted + a
        if n:
            widest, busiest = max(widest, -(-d // n)), max(busiest, n)
    if drafts == 0:
        raise AttachError(
            f"the trtllm-serve server at {server.url} drafted nothing during the run (every iteration's "
            f"{SPEC_STATS}.numDraftTokens is 0)",
            hint="serve the target with the draft (speculative_config), and ask for more than one new token",
        )
    consistent(server, "/metrics", drafts, draft_tokens, accepted, [])
    after_first = prompts * (new_tokens - 1)  # each prompt's first token comes from its context step
    accounted = accepted + drafts  # a drafting step yields its accepted tokens and one of the target's
    foreign = []
    if busiest > concurrency:
        foreign.append(CounterMove(f"{SPEC_STATS}.numRequestsWithDraftTokens in one iteration", concurrency, busiest))
    if accounted > after_first + prompts * widest:  # a request's last step overshoots by its draft tokens at most
        foreign.append(CounterMove("tokens generated in drafting iterations", after_first, accounted))
    completed: list[Any] = [i.get("numCompletedRequests") for i in items]
    if all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in completed):
        done = sum(completed)
        if done > prompts:
            foreign.append(CounterMove("numCompletedRequests", prompts, done))
    return Counts(
        outputs=outputs,
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        accepted_per_position=[],
        measured_from=(
            f"trtllm /metrics iteration statistics, read through the run ({len(items)} iterations, {len(spec)} with "
            f"{SPEC_STATS}: {accounted} of the {after_first} tokens generated after each prompt's first)"
        ),
        foreign_traffic=foreign,
        wall_s=wall,
        draft_len=widest or None,
    )


PROTOCOL = EngineProtocol(
    engine="trtllm",
    describe=describe,
    measure=measure,
    serve_with="trtllm-serve speculative_config {decoding_type: Eagle3, speculative_model: DRAFT} in its "
    "--extra_llm_api_options YAML",
)
