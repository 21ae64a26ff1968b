"""What the engine protocols of ``--engine-url`` share: the one interface each engine's module fills in
(:class:`EngineProtocol`), what a server says about itself (:class:`ServerInfo`), what its records count about one
run (:class:`Counts`), the requests sent with at most ``concurrency`` in flight, and the OpenAI ``/v1/completions``
request vLLM and trtllm-serve both answer.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from eagle_convert.errors import AttachError
from eagle_convert.real_engine.attached.checks import count, missing, token_ids
from eagle_convert.real_engine.attached.client import Endpoint

SETTLE_S = 10.0  # a server records a step's counts just after it answers: wait this long for them to catch up
MAX_POSITIONS = 256  # draft positions a server may report (EAGLE3 chains and trees draft at most a few dozen)


@dataclass(frozen=True)
class ServerInfo:
    """What the server says about itself: engine, version, the model it serves and its speculative settings."""

    url: str
    engine: str  # one of engines.ATTACHABLE
    version: str
    model: str  # the name requests address (vLLM: /v1/models id; SGLang: model_path)
    model_path: str | None  # where the server loaded the target from (as the server names it)
    speculative: bool  # the server runs speculative decoding
    method: str | None  # "eagle3" (vLLM), "EAGLE3" (SGLang); None: not reported
    draft_path: str | None  # the draft the server loaded, as it names it; None: the server does not say
    num_speculative_tokens: int | None  # draft tokens per step (SGLang: speculative_num_steps)
    reported_by: list[str]  # the endpoints these facts came from
    not_reported: str | None = None  # what the server cannot say, and why (e.g. vLLM's draft path outside dev mode)


@dataclass(frozen=True)
class CounterMove:
    """A counter that moved by other than this run's requests explain: someone else's traffic."""

    counter: str
    expected: float  # what this run's requests account for
    observed: float  # what the counter moved by (a gauge: its value after the run)


@dataclass(frozen=True)
class Counts:
    """What one engine's records say about the run, before the rates are derived."""

    outputs: list[list[int]]
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_position: list[int]
    measured_from: str
    foreign_traffic: list[CounterMove]
    wall_s: float
    draft_len: int | None = None  # draft tokens per step, where only the run shows it (trtllm-serve)


# (server, /server_info's JSON, /metrics' text, timeout): the answers detection read, None where the server has none
Describe = Callable[[Endpoint, Any, str | None, float], ServerInfo]
# (server, info, prompts, new tokens, concurrency, timeout)
Measure = Callable[[Endpoint, ServerInfo, list[list[int]], int, int, float], Counts]


@dataclass(frozen=True)
class EngineProtocol:
    """How ``--engine-url`` speaks to one engine's server: one record per engine of ``engines.ATTACHABLE``, each
    declared by the engine's own module (``vllm.PROTOCOL``, ...) and gathered in ``detect.PROTOCOLS``."""

    engine: str  # the engine's name (engines.py)
    describe: Describe  # what the server says about itself, from the answers detection read and its own requests
    measure: Measure  # send the prompts (greedy, EOS ignored) and read this run's counts from the server's records
    serve_with: str  # how this engine serves the target with the draft (the hint when a server does not draft)


def send_all(
    prompts: list[list[int]], concurrency: int, send: Callable[[list[int]], dict[str, Any]]
) -> list[dict[str, Any]]:
    """``send`` on every prompt with at most ``concurrency`` in flight; answers in prompt order. The first failure
    cancels what has not started and is raised once the requests in flight have ended."""
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="engine-url") as pool:
        futures = [pool.submit(send, p) for p in prompts]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((f for f in futures if f in done and f.exception() is not None), None)
        if failed is not None:
            for f in futures:
                f.cancel()
            error = failed.exception()
            assert error is not None
            raise error
        return [f.result() for f in futures]


def completions(
    server: Endpoint, info: ServerInfo, new_tokens: int, timeout: float, **extra: Any
) -> Callable[[list[int]], dict[str, Any]]:
    """One OpenAI ``/v1/completions`` request per prompt (token ids, greedy, ``new_tokens`` with EOS ignored, plus the
    engine's own ``extra`` fields); its answer's generated token ids, where the server returns them."""

    def send(prompt: list[int]) -> dict[str, Any]:
        body = {
            "model": info.model,
            "prompt": prompt,
            "max_tokens": new_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            **extra,
        }
        answer = server.json("/v1/completions", body, timeout, "during the run")
        try:
            choice, generated = answer["choices"][0], answer["usage"]["completion_tokens"]
        except (KeyError, IndexError, TypeError):
            raise missing(server, "/v1/completions", "choices[0] and usage.completion_tokens") from None
        if not isinstance(choice, dict):
            raise missing(server, "/v1/completions", "choices[0] as an object")
        generated = count(server, "/v1/completions", "usage.completion_tokens", generated)
        if generated != new_tokens:
            raise AttachError(
                f"{server.url}/v1/completions generated {generated} tokens, not the {new_tokens} asked for "
                f"(finish_reason {choice.get('finish_reason')!r})",
                hint="lower the number of new tokens (--engine-tokens) below the server's --max-model-len minus the "
                "prompt",
            )
        return {"token_ids": token_ids(server, "/v1/completions", "choices[0].token_ids", choice.get("token_ids"))}

    return send
