"""``--engine-url`` against trtllm-serve (TensorRT-LLM's OpenAI server, PyTorch backend; issue 31).

TensorRT-LLM needs CUDA, so no trtllm-serve runs here. Its client is tested against a 127.0.0.1 ``http.server`` that
answers with the shapes TensorRT-LLM's source produces, read from the reference index's copies (no line numbers are
given there, so each shape names its file, commit and function):

- ``tensorrt_llm/serve/openai_server.py@e7f7345`` ``register_routes``: ``/version`` -> ``{"version": VERSION}``,
  ``/v1/models`` -> ``ModelList(data=[ModelCard(id=self.model)])``, ``/metrics`` -> ``get_iteration_stats``: every
  iteration statistic ``llm.get_stats_async(2)`` yields, as one JSON list; no ``/server_info`` route;
- ``tensorrt_llm/serve/openai_protocol.py@0076e93``: ``OpenAIBaseModel`` forbids unknown fields (an HTTP 400 from the
  validation handler), ``ModelCard.owned_by = "tensorrt_llm"``, ``CompletionRequest`` (token-id ``prompt``,
  ``max_tokens``, ``temperature``, ``ignore_eos``; no ``return_token_ids``), ``CompletionResponseChoice.token_ids``
  optional (null here);
- ``tensorrt_llm/_torch/pyexecutor/py_executor.py`` ``_update_iter_stats`` (the index copy carries no commit): per
  iteration, over that iteration's generation requests with drafts, ``num_draft_tokens``, ``num_accepted_tokens``,
  ``num_requests_with_draft_tokens`` and ``acceptance_length = (accepted + requests) / requests`` (0.0 without
  drafts), serialized as ``specDecodingStats`` with ``numDraftTokens``, ``numAcceptedTokens``,
  ``numRequestsWithDraftTokens``, ``acceptanceLength``, ``iterLatencyMS``, ``draftOverhead``; ``get_latest_iteration
  _stats`` hands the list over and empties it (each read drains); nothing is kept without ``enable_iter_perf_stats``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eagle_convert.errors import AttachError
from eagle_convert.real_engine.attached import AttachedRun, detect, run
from eagle_convert.real_engine.attached.trtllm import SPEC_STATS
from tests.conftest import verify_attached
from tests.local_http import QuietHandler, serve

K = 3  # the fake server's max_draft_len
PROMPTS = [[1, 2, 3], [4, 5, 6, 7], [8, 9], [10, 11, 12, 13, 14]]
NEW = 40
TARGET = "Llama-3.1-8B-Instruct"  # OpenAIServer.model: the model directory's name
FIELDS = {"model", "prompt", "max_tokens", "temperature", "ignore_eos"}  # all CompletionRequest fields


def schedule(prompt: list[int], new_tokens: int) -> list[int]:
    """Accepted draft tokens per verify step of one request: its first token comes from the context step, then each
    step yields its accepted tokens and one of the target's until ``new_tokens`` are out (the last may overshoot)."""
    steps, made, j = [], 1, 0
    while made < new_tokens:
        accepted = (prompt[0] + j) % (K + 1)
        steps.append(accepted)
        made, j = made + accepted + 1, j + 1
    return steps


def _spec(requests: int, drafted: int, accepted: int) -> dict[str, Any]:
    return {
        "numDraftTokens": drafted,
        "numAcceptedTokens": accepted,
        "numRequestsWithDraftTokens": requests,
        "acceptanceLength": (accepted + requests) / requests if requests else 0.0,
        "iterLatencyMS": 0.0,  # one-model EAGLE3: the drafter reports no latency of its own
        "draftOverhead": 0.0,
    }


def _iteration(n: int, spec: dict[str, Any] | None, completed: int = 0) -> dict[str, Any]:
    """One IterationStats JSON object (a subset of its keys)."""
    return {
        "iter": n,
        "iterLatencyMS": 12.5,
        "numActiveRequests": 1,
        "numCompletedRequests": completed,
        "numNewActiveRequests": 0,
        "maxNumActiveRequests": 256,
        "inflightBatchingStats": {"numScheduledRequests": 1, "numContextRequests": 0, "numGenRequests": 1},
        SPEC_STATS: spec,
    }


class _FakeTrtllm(QuietHandler):
    stats_enabled = True  # enable_iter_perf_stats
    speculative = True
    corrupt: str | None = None  # "accepted" (more accepted than drafted) or "nan"
    foreign = False  # another client's requests batch with this run's
    queue: list[dict[str, Any]] = []  # noqa: RUF012 -- the executor's iteration statistics, drained by /metrics
    seen: list[dict[str, Any]] = []  # noqa: RUF012
    lock = threading.Lock()

    _answer = QuietHandler._json

    def do_GET(self) -> None:
        if self.path == "/version":
            self._answer(200, {"version": "1.2.0"})
        elif self.path == "/v1/models":
            card = {"id": TARGET, "object": "model", "created": 1795526957, "owned_by": "tensorrt_llm"}
            self._answer(200, {"object": "list", "data": [card]})
        elif self.path == "/metrics":
            with self.lock:
                drained, self.queue[:] = list(self.queue), []
            self._answer(200, drained)
        else:
            self._answer(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/completions":
            self._answer(404, {"detail": "Not Found"})
            return
        unknown = sorted(set(body) - FIELDS)
        if unknown:  # pydantic's extra="forbid", rendered by the RequestValidationError handler
            message = f"Extra inputs are not permitted: {unknown}"
            self._answer(400, {"object": "error", "message": message, "type": "BadRequestError", "code": 400})
            return
        self.seen.append(body)
        steps = schedule(body["prompt"], body["max_tokens"])
        items = [_iteration(0, _spec(0, 0, 0) if self.speculative else None)]  # the context step: no drafts yet
        for j, accepted in enumerate(steps):
            spec = _spec(1, K, accepted) if self.speculative else None
            if spec is not None and self.corrupt == "accepted":
                spec["numAcceptedTokens"] = K + 1
            if spec is not None and self.corrupt == "nan":
                spec["numDraftTokens"] = float("nan")
            items.append(_iteration(j + 1, spec, completed=int(j == len(steps) - 1)))
        if self.foreign:  # an iteration where 9 requests drafted: more than this run ever keeps in flight
            items.append(_iteration(99, _spec(9, 9 * K, 9), completed=9))
        if self.stats_enabled:
            with self.lock:
                self.queue.extend(items)
        choice = {"index": 0, "text": "...", "token_ids": None, "logprobs": None, "finish_reason": "length"}
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": body["max_tokens"]}
        self._answer(200, {"id": "cmpl-1", "object": "text_completion", "model": TARGET, "choices": [choice],
                           "usage": {**usage, "total_tokens": sum(usage.values())}})  # fmt: skip


@pytest.fixture
def trtllm() -> Iterator[tuple[str, type[_FakeTrtllm]]]:
    with serve(_FakeTrtllm, queue=[], seen=[], lock=threading.Lock()) as served:
        yield served


def test_trtllm_serve_is_detected_by_its_metrics_and_models(trtllm: tuple[str, type[_FakeTrtllm]]) -> None:
    url, _ = trtllm
    info = detect(url)
    assert (info.engine, info.version, info.model, info.speculative) == ("trtllm", "1.2.0", TARGET, True)
    assert info.draft_path is None and "reports neither its draft" in (info.not_reported or "")
    assert detect(url, engine="trtllm").engine == "trtllm"


def test_acceptance_is_summed_from_the_iteration_statistics(trtllm: tuple[str, type[_FakeTrtllm]]) -> None:
    """What an earlier client left queued is drained first; the run's iterations are summed: a drafting request
    per verify step, its draft and accepted tokens; the mean acceptance length is 1 + accepted / steps."""
    url, handler = trtllm
    handler.queue.extend([_iteration(0, _spec(4, 4 * K, 11), completed=4)])  # before the run: not this run's
    attached: AttachedRun = run(url, None, PROMPTS, NEW, concurrency=2, timeout=30.0)
    assert all(set(b) == FIELDS for b in handler.seen) and len(handler.seen) == len(PROMPTS)
    steps = [schedule(p, NEW) for p in PROMPTS]
    drafts, accepted = sum(len(s) for s in steps), sum(sum(s) for s in steps)
    assert (attached.drafts, attached.draft_tokens, attached.accepted_tokens) == (drafts, drafts * K, accepted)
    assert attached.mean_acceptance_length == pytest.approx(1 + accepted / drafts)
    assert attached.accepted_per_position == [] and attached.foreign_traffic == []
    assert attached.server.num_speculative_tokens == K  # read from the run: the server does not report it
    assert attached.outputs == [[]] * len(PROMPTS)  # no token ids in trtllm-serve's answers
    assert "trtllm /metrics iteration statistics" in attached.measured_from


def test_another_clients_iterations_are_foreign_traffic(trtllm: tuple[str, type[_FakeTrtllm]]) -> None:
    url, handler = trtllm
    handler.foreign = True
    attached = run(url, None, PROMPTS, NEW, concurrency=2, timeout=30.0)
    moved = {m.counter: (m.expected, m.observed) for m in attached.foreign_traffic}
    assert moved[f"{SPEC_STATS}.numRequestsWithDraftTokens in one iteration"] == (2, 9)
    assert moved["numCompletedRequests"] == (len(PROMPTS), len(PROMPTS) + 9 * len(PROMPTS))


def test_a_server_without_iteration_statistics_is_an_error_naming_the_setting(
    trtllm: tuple[str, type[_FakeTrtllm]],
) -> None:
    url, handler = trtllm
    handler.stats_enabled = False
    with pytest.raises(AttachError) as off:
        run(url, None, PROMPTS, 8, timeout=30.0)
    assert "returned no iteration statistics" in off.value.message and "enable_iter_perf_stats: true" in off.value.hint


def test_a_server_that_does_not_draft_is_an_error(trtllm: tuple[str, type[_FakeTrtllm]]) -> None:
    url, handler = trtllm
    handler.speculative = False
    with pytest.raises(AttachError) as plain:
        run(url, None, PROMPTS, 8, timeout=30.0)
    assert "does not run speculative decoding" in plain.value.message and f"{SPEC_STATS} null" in plain.value.message


@pytest.mark.parametrize(("corrupt", "said"), [("accepted", "accepted of 3 draft tokens"), ("nan", "not a count")])
def test_impossible_numbers_are_server_faults(trtllm: tuple[str, type[_FakeTrtllm]], corrupt: str, said: str) -> None:
    url, handler = trtllm
    handler.corrupt = corrupt
    with pytest.raises(AttachError) as fault:
        run(url, None, PROMPTS, 8, timeout=30.0)
    assert "reported impossible numbers" in fault.value.message and said in fault.value.message


def test_verify_engine_url_measures_on_trtllm_serve_from_the_core_install(
    fx: Path, trtllm: tuple[str, type[_FakeTrtllm]], tmp_path: Path
) -> None:
    """The whole gate against trtllm-serve with a config-only target and torch unimportable: the report's engine run
    is the server's, measured from its iteration statistics."""
    url, handler = trtllm
    r = verify_attached(fx, url, PROMPTS, tmp_path, "--engine", "trtllm")
    assert r.returncode in (0, 1), r.stderr
    report = json.loads(r.stdout)
    run_ = report["engine_run"]
    assert (report["level"], run_["runner"], run_["engine"]) == ("engine", "attached", "trtllm")
    new_tokens = handler.seen[0]["max_tokens"]
    assert run_["drafts"] == sum(len(schedule(p, new_tokens)) for p in PROMPTS)
    assert run_["probe_same_text"] is None  # no token ids to compare


def test_engine_tokens_reach_every_request_on_trtllm_serve(
    fx: Path, trtllm: tuple[str, type[_FakeTrtllm]], tmp_path: Path
) -> None:
    """``--engine-tokens`` is the ``max_tokens`` trtllm-serve is asked for, request by request (issue 41)."""
    url, handler = trtllm
    r = verify_attached(fx, url, PROMPTS, tmp_path, "--engine", "trtllm", "--engine-tokens", "21")
    assert r.returncode in (0, 1), r.stderr
    assert [b["max_tokens"] for b in handler.seen] == [21] * len(PROMPTS)
    run_ = json.loads(r.stdout)["engine_run"]
    assert run_["server"]["new_tokens"] == 21
    assert run_["drafts"] == sum(len(schedule(p, 21)) for p in PROMPTS)


def test_engine_url_with_a_target_without_tokenizer_runs_from_the_core_install(
    fx: Path, trtllm: tuple[str, type[_FakeTrtllm]], tmp_path: Path
) -> None:
    """A config-only target without a tokenizer and no --token-ids, torch not installed: the seeded one-token prompts
    come without torch (at 0421174: `internal error: ModuleNotFoundError: No module named 'torch'`)."""
    from tests.conftest import run_cli_without_torch

    url, handler = trtllm
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_bytes((fx / "targets" / "target-llama" / "config.json").read_bytes())
    r = run_cli_without_torch(
        "verify", str(fx / "layouts" / "specforge-mha"), "--target", str(target), "--engine-url", url,
        "--engine", "trtllm", "--json", "--no-hash",
    )  # fmt: skip
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
    prompts = [b["prompt"] for b in handler.seen]
    assert len(prompts) == 8 and all(len(p) == 1 for p in prompts)
    assert json.loads(r.stdout)["engine_run"]["prompts"] == 8
