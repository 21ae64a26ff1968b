"""``--engine-url`` against servers that misbehave (issue 29): every misbehaviour is an AttachError or a usage error
(exit 2) with a clear message, never a measurement, never a hang, and the API key goes nowhere but the origin named.

The servers are ``http.server`` instances on 127.0.0.1 started and stopped by each test. The vLLM one answers in the
shapes of vLLM's OpenAI server (``/v1/models``, ``/v1/completions``, Prometheus ``/metrics``: the same counters the
real-server tests in tests/engine/test_engine_url.py read); the SGLang one answers ``/server_info`` and ``/generate``.
"""

from __future__ import annotations

import base64
import http.client
import json
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from eagle_convert.errors import AttachError, UsageError
from eagle_convert.real_engine.attached import client, run
from tests import cli_process
from tests.conftest import ROOT
from tests.local_http import QuietHandler, serve

KEY = "sk-hostile-test-5e9a"
PROMPTS = [[1, 2, 3], [4, 5, 6, 7]]
NEW = 8
GOOD = {"drafts": 10, "draft_tokens": 30, "accepted": 12, "positions": [7, 4, 1]}  # what an honest run moves


def _metrics(requests: float, counts: dict[str, Any]) -> str:
    lines = [
        f'vllm:request_success_total{{finished_reason="length"}} {requests}',
        f"vllm:prompt_tokens_total {7 if requests else 0}",
        f"vllm:generation_tokens_total {NEW * requests}",
        f"vllm:spec_decode_num_drafts_total {counts['drafts']}",
        f"vllm:spec_decode_num_draft_tokens_total {counts['draft_tokens']}",
        f"vllm:spec_decode_num_accepted_tokens_total {counts['accepted']}",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}'
        for i, v in enumerate(counts["positions"])
    ]
    return "\n".join(lines) + "\n"


_Quiet = QuietHandler


class _Vllm(_Quiet):
    """A vLLM-shaped server; ``after``: the counters once the run's requests are answered (before: all zero)."""

    after: dict[str, Any] = GOOD
    before: dict[str, Any] = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "positions": [0, 0, 0]}  # noqa: RUF012
    answered = 0
    routes: dict[str, Callable[[_Vllm], None]] = {}  # noqa: RUF012 -- per test: a path's own misbehaviour
    seen: list[tuple[str, str | None]] = []  # noqa: RUF012 -- (path, Authorization) of every request

    def _route(self) -> bool:
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        special = type(self).routes.get(self.path)
        if special is not None:
            special(self)
            return True
        return False

    def do_GET(self) -> None:
        if self._route():
            return
        cls = type(self)
        if self.path == "/metrics":
            done = cls.answered >= len(PROMPTS)
            text = _metrics(float(len(PROMPTS)) if done else 0.0, cls.after if done else cls.before)
            self._send(200, text.encode(), "text/plain")
        elif self.path == "/version":
            self._send(200, b'{"version": "0.32.0"}')
        elif self.path == "/v1/models":
            self._json(200, {"data": [{"id": "target", "root": "/models/target"}]})
        else:
            self._send(404, b'{"detail": "Not Found"}')

    def do_POST(self) -> None:
        if self._route():
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        answer = {
            "choices": [{"token_ids": list(range(body["max_tokens"])), "finish_reason": "length"}],
            "usage": {"completion_tokens": body["max_tokens"]},
        }
        type(self).answered += 1
        self._json(200, answer)


class _Url(str):
    """A served base URL; ``handler`` is the server's own handler class, whose ``seen`` lists what reached it."""

    handler: Any


@contextmanager
def _serve(handler: type[BaseHTTPRequestHandler], **attrs: Any) -> Iterator[_Url]:
    with serve(handler, seen=[], answered=0, **attrs) as (base, cls):
        url = _Url(base)
        url.handler = cls
        yield url


def _attach(url: str, timeout: float = 10.0) -> Any:
    return run(url, KEY, PROMPTS, NEW, concurrency=2, timeout=timeout)


def _no_key(error: Exception) -> None:
    assert KEY not in str(error) and KEY not in (getattr(error, "hint", None) or "") and KEY not in repr(error)


def test_an_honest_fake_server_is_measured() -> None:
    """The control: the fake's honest answers give a run (so each failure below is the misbehaviour's)."""
    with _serve(_Vllm) as url:
        got = _attach(url)
    assert (got.drafts, got.accepted_tokens, got.accepted_per_position) == (10, 12, [7, 4, 1])


# ---- severity 1: the key goes nowhere else; impossible numbers never count -------------------------------------------


@pytest.mark.parametrize("code", [301, 302, 307, 308])
def test_a_redirect_to_another_origin_is_an_error_and_the_key_never_arrives_there(code: int) -> None:
    with _serve(_Vllm) as other:

        def redirect(handler: _Vllm) -> None:
            handler.send_response(code)
            handler.send_header("Location", f"{other}/metrics")
            handler.send_header("Content-Length", "0")
            handler.end_headers()

        with _serve(_Vllm, routes={"/metrics": redirect}) as url, pytest.raises(AttachError) as error:
            _attach(url)
        elsewhere = other.handler.seen
    assert "redirected to another origin" in error.value.message and other.replace("http://", "") in error.value.message
    assert url in error.value.message and error.value.exit_code == 2
    assert not elsewhere  # nothing at all reached the other origin, with or without the key
    _no_key(error.value)


def test_a_redirect_within_the_origin_is_followed() -> None:
    def redirect(handler: _Vllm) -> None:
        handler.send_response(302)
        handler.send_header("Location", "/version")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    with _serve(_Vllm, routes={"/v0/version": redirect}) as url:
        server = client.connect(url, KEY)
        assert json.loads(server.request("/v0/version", None, 5.0, "before the run")) == {"version": "0.32.0"}


@pytest.mark.parametrize("url", ["http://admin:hunter2@127.0.0.1:9", "http://hunter2@127.0.0.1:9"])
def test_a_url_with_user_info_is_refused_without_printing_it(url: str) -> None:
    with pytest.raises(UsageError) as error:
        run(url, None, PROMPTS, NEW)
    assert "hunter2" not in error.value.message and "***@127.0.0.1:9" in error.value.message
    assert "--engine-url-token" in (error.value.hint or "")


def test_verify_with_a_user_info_url_exits_2_and_prints_no_password(tmp_path: Any) -> None:
    command = [sys.executable, "-m", "eagle_convert", "verify", str(ROOT / "fixtures" / "smollm2-eagle3")]
    command += ["--engine-url", "http://u:s3cr3t-pw@127.0.0.1:9", "--json", "--no-hash"]
    done = cli_process.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert done.returncode == 2, done.stderr
    assert "s3cr3t-pw" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


IMPOSSIBLE = {
    "accepted over drafted": ({**GOOD, "accepted": 31, "positions": [10, 10, 11]}, "exceed the 30 drafted"),
    "per-position disagrees": ({**GOOD, "positions": [7, 4, 2]}, "sum to 13, not the 12 accepted"),
    "a position over the drafts": ({**GOOD, "accepted": 12, "positions": [11, 1, 0]}, "more than the 10 drafts"),
    "negative": ({**GOOD, "accepted": -3, "positions": [-3, 0, 0]}, "is -3.0, not a count"),
    "NaN": ({**GOOD, "drafts": "NaN"}, "is nan, not a count"),
    "infinite": ({**GOOD, "draft_tokens": "+Inf"}, "is inf, not a count"),
    "fractional": ({**GOOD, "drafts": 10.5}, "is 10.5, not a count"),
    "fewer tokens than drafts": ({**GOOD, "draft_tokens": 9, "accepted": 9, "positions": [5, 4, 0]}, "9 draft tokens"),
}


@pytest.mark.parametrize("case", list(IMPOSSIBLE))
def test_impossible_vllm_counters_are_a_server_fault(case: str) -> None:
    after, says = IMPOSSIBLE[case]
    with _serve(_Vllm, after=after) as url, pytest.raises(AttachError) as error:
        _attach(url)
    assert "reported impossible numbers" in error.value.message and says in error.value.message, error.value.message
    assert error.value.exit_code == 2


def test_vllm_counters_that_go_backwards_are_a_server_fault() -> None:
    """A restart between the scrapes: the counters after the run are below those before it."""
    before = {"drafts": 50, "draft_tokens": 150, "accepted": 60, "positions": [30, 20, 10]}
    with _serve(_Vllm, before=before) as url, pytest.raises(AttachError) as error:
        _attach(url)
    assert "went backwards during the run, from 50 to 10" in error.value.message


def test_zero_drafts_is_not_a_measurement() -> None:
    zero = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "positions": [0, 0, 0]}
    with _serve(_Vllm, after=zero) as url, pytest.raises(AttachError, match="drafted nothing"):
        _attach(url)


# ---- severity 2: bounded in time and size ------------------------------------------------------------------------


def test_a_server_that_drips_its_answer_hits_the_total_deadline() -> None:
    """One byte every 0.2 s never trips a per-read timeout; the whole exchange has 1.5 s."""

    def drip(handler: _Vllm) -> None:
        body = b'{"version": "0.32.0"}' + b" " * 200
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        for byte in body:
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(0.2)

    with _serve(_Vllm, routes={"/version": drip}) as url:
        server = client.connect(url, KEY)
        started = time.monotonic()
        with pytest.raises(AttachError, match=r"did not answer within 1\.5 s before the run") as error:
            server.request("/version", None, 1.5, "before the run")
        assert time.monotonic() - started < 4.0
    assert error.value.exit_code == 2


def test_a_header_that_never_ends_hits_the_total_deadline() -> None:
    def headers_forever(handler: _Vllm) -> None:
        handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
        for i in range(100):
            handler.wfile.write(f"X-Drip-{i}: a\r\n".encode())
            handler.wfile.flush()
            time.sleep(0.2)

    with _serve(_Vllm, routes={"/version": headers_forever}) as url:
        started = time.monotonic()
        with pytest.raises(AttachError, match="did not answer within 1 s"):
            client.connect(url, KEY).request("/version", None, 1.0, "before the run")
        assert time.monotonic() - started < 4.0


def test_an_oversized_answer_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "MAX_BODY_BYTES", 1 << 16)

    def huge(handler: _Vllm) -> None:
        body = b"vllm:spec_decode_num_drafts_total 1\n" * 30_000
        handler._send(200, body, "text/plain")

    refused = r"answered more than 65,536 bytes before the run: refused unread"
    with _serve(_Vllm, routes={"/metrics": huge}) as url, pytest.raises(AttachError, match=refused):
        _attach(url)


# ---- SGLang's per-request numbers --------------------------------------------------------------------------------


class _Sglang(_Quiet):
    meta: dict[str, Any] = {}  # noqa: RUF012 -- the meta_info every /generate answer carries
    seen: list[Any] = []  # noqa: RUF012
    answered = 0

    def do_GET(self) -> None:
        if self.path == "/server_info":
            info = {"model_path": "/m/target", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3}
            self._json(200, {**info, "speculative_draft_model_path": "/m/draft", "version": "0.5.23"})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        new = body["sampling_params"]["max_new_tokens"]
        meta = {"completion_tokens": new, **type(self).meta}
        self._json(200, {"text": "", "output_ids": list(range(new)), "meta_info": meta})


SGLANG_GOOD = {"spec_verify_ct": 4, "spec_num_correct_drafts": 5, "spec_correct_drafts_histogram": [0, 3, 1]}
SGLANG_IMPOSSIBLE = {
    "histogram over the steps": ({**SGLANG_GOOD, "spec_correct_drafts_histogram": [1, 3, 1]}, "disagrees"),
    "histogram under the accepted": ({**SGLANG_GOOD, "spec_num_correct_drafts": 7}, "disagrees"),
    "NaN verify count": ({**SGLANG_GOOD, "spec_verify_ct": float("nan")}, "not a count"),
    "negative accepted": ({**SGLANG_GOOD, "spec_num_correct_drafts": -1}, "not a count"),
    "a string count": ({**SGLANG_GOOD, "spec_verify_ct": "4"}, "not a count"),
    "more accepted than drafted": (
        {"spec_verify_ct": 2, "spec_num_correct_drafts": 8, "spec_correct_drafts_histogram": []},
        "16 accepted drafts over 4 verify steps of 3 draft tokens",
    ),
    "a ten-million-entry histogram": (
        {**SGLANG_GOOD, "spec_correct_drafts_histogram": [0] * 10_000_000},
        "10000000 entries long",
    ),
}


def test_an_honest_sglang_fake_is_measured() -> None:
    with _serve(_Sglang, meta=SGLANG_GOOD) as url:
        got = _attach(url)
    assert (got.drafts, got.accepted_tokens, got.accepted_per_position) == (8, 10, [8, 2, 0])


@pytest.mark.parametrize("case", list(SGLANG_IMPOSSIBLE))
def test_impossible_sglang_numbers_are_a_server_fault(case: str) -> None:
    meta, says = SGLANG_IMPOSSIBLE[case]
    started = time.monotonic()
    with _serve(_Sglang, meta=meta) as url, pytest.raises(AttachError) as error:
        _attach(url, timeout=60.0)
    assert "reported impossible numbers" in error.value.message and says in error.value.message, error.value.message
    assert time.monotonic() - started < 30  # linear in what the server sends, whatever it sends


# ---- proxies: the environment's http_proxy/https_proxy/no_proxy, as urllib reads them ------------------------------


class _Proxy(_Quiet):
    """A forward HTTP proxy: records each request line with its Authorization and Proxy-Authorization headers, relays
    absolute-form requests to their origin, and refuses CONNECT (no TLS here: the tunnel's request line is enough)."""

    seen: list[tuple[str, str | None, str | None]] = []  # noqa: RUF012

    def _relay(self) -> None:
        type(self).seen.append(
            (self.requestline, self.headers.get("Authorization"), self.headers.get("Proxy-Authorization"))
        )
        if self.command == "CONNECT":
            self._send(502, b"no tunnels here")
            return
        parts = urllib.parse.urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        upstream = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "proxy-authorization"}
        upstream.request(self.command, parts.path, body=body, headers=headers)
        answer = upstream.getresponse()
        self._send(answer.status, answer.read(), answer.getheader("Content-Type") or "application/json")
        upstream.close()

    do_GET = do_POST = do_CONNECT = _relay


def _proxy_env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def test_the_environments_http_proxy_carries_the_run_and_its_password_goes_to_the_proxy_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with _serve(_Vllm) as url, _serve(_Proxy) as proxy:
        _proxy_env(monkeypatch, http_proxy=proxy.replace("http://", "http://me:pr0xy-pw@"))
        got = _attach(url)
        through, direct = proxy.handler.seen, url.handler.seen
    assert (got.drafts, got.accepted_tokens) == (10, 12)
    assert through and all(line.split()[1].startswith(url + "/") for line, _, _ in through)  # absolute-form
    assert all(auth == f"Bearer {KEY}" for _, auth, _ in through)
    assert {basic for _, _, basic in through} == {"Basic " + base64.b64encode(b"me:pr0xy-pw").decode()}
    assert direct and all(auth == f"Bearer {KEY}" for _, auth in direct)  # the server never sees the proxy's


def test_no_proxy_reaches_the_server_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    with _serve(_Vllm) as url, _serve(_Proxy) as proxy:
        _proxy_env(monkeypatch, http_proxy=proxy, no_proxy="127.0.0.1")
        got = _attach(url)
        through = proxy.handler.seen
    assert got.drafts == 10 and not through


def test_https_goes_through_a_tunnel_the_proxy_cannot_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy sees CONNECT host:port and its own credentials, never a request or the API key; its refusal of the
    tunnel is a clear AttachError (exit 2)."""
    with _serve(_Proxy) as proxy:
        _proxy_env(monkeypatch, https_proxy=proxy)
        with pytest.raises(AttachError) as error:
            run("https://127.0.0.1:9", KEY, PROMPTS, NEW, timeout=10.0)
        through = proxy.handler.seen
    assert [line.split()[:2] for line, _, _ in through] == [["CONNECT", "127.0.0.1:9"]]
    assert all(auth is None for _, auth, _ in through) and "not reachable" in error.value.message
    _no_key(error.value)


def test_a_proxy_setting_that_is_not_http_is_a_usage_error_without_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _proxy_env(monkeypatch, http_proxy="socks5://me:pr0xy-pw@127.0.0.1:1080")
    with pytest.raises(UsageError) as error:
        _attach("http://127.0.0.1:9")
    assert "not an http:// proxy" in error.value.message and "pr0xy-pw" not in error.value.message
    assert "***@127.0.0.1:1080" in error.value.message
