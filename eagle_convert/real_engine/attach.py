"""``verify --engine-url``: measure acceptance on a server that already serves the target with the draft.

    info = detect("http://10.0.0.5:8000", token, timeout=30.0)
    attached = run("http://10.0.0.5:8000", token, prompts, new_tokens=64, concurrency=8, timeout=300.0, draft=DRAFT)

The server is the user's own deployment (vLLM's OpenAI-compatible server or SGLang's), on however many GPUs or nodes
it runs; this client needs no GPU and no torch, only the standard library. It sends the prompts as token ids,
greedy, a fixed number of new tokens with EOS ignored, with at most ``concurrency`` requests in flight, and reads
acceptance from the server's own records:

- vLLM: the Prometheus counters of ``/metrics`` (``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens``,
  ``..._num_accepted_tokens``, ``..._num_accepted_tokens_per_pos{position=...}``) scraped before and after the run and
  diffed, the same counters the in-process engine level reads from ``LLM.get_metrics()``. The request and token
  counters (``vllm:request_success_total``, ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``) must
  move by exactly what this run's requests explain; any other move is someone else's traffic, reported in
  :attr:`AttachedRun.foreign_traffic` and never silently mixed in.
- SGLang: the per-request fields of ``/generate``'s ``meta_info`` (``spec_verify_ct``, ``spec_num_correct_drafts``,
  ``spec_correct_drafts_histogram``; SGLang 0.5.23 ``srt/managers/tokenizer_manager.py:3138-3201``), which count this
  request only, so other traffic cannot mix in.
- TensorRT-LLM (``trtllm-serve``): the iteration statistics of its ``/metrics`` route, a JSON list that each read
  drains (``OpenAIServer.get_iteration_stats`` -> ``LLM.get_stats_async``), polled through the run; each iteration's
  ``specDecodingStats`` counts that iteration's drafted and accepted tokens and the requests that drafted
  (``PyExecutor._update_iter_stats``). The server keeps them only with ``enable_iter_perf_stats: true``. Iterations
  that mix in other clients' requests are told apart where the numbers allow (more drafting requests in one
  iteration than this run keeps in flight, more tokens than this run's requests can have generated).

Every fault (server not reachable, not speculative, gone mid-run, a timeout, an HTTP error, a response without the
fields needed) is an :class:`AttachError` (exit 2) with a one-line message and a hint. The API key travels in the
``Authorization`` header only; no message, report or repr contains it.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import math
import os
import re
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from eagle_convert import engines
from eagle_convert.errors import AttachError, TooLargeError, UsageError
from eagle_convert.read.redact import redact_url
from eagle_convert.real_engine.base import acceptance

TOKEN_ENV = "EAGLE_CONVERT_ENGINE_URL_TOKEN"  # the API key when --engine-url-token is not given
ENGINES = engines.ATTACHABLE  # the engines whose servers this module detects and measures (MEASURE below)
SETTLE_S = 10.0  # vLLM records a step's counters just after it answers: wait this long for them to catch up
MAX_BODY_BYTES = 64 << 20  # the largest answer read (a vLLM /metrics page is tens of KiB, an answer a few KiB)
MAX_REDIRECTS = 3  # same-origin redirects followed; one to another origin is an error
MAX_POSITIONS = 256  # draft positions a server may report (EAGLE3 chains and trees draft at most a few dozen)
POLL_S = 1.0  # trtllm-serve: seconds between reads of /metrics during the run (it keeps ~1000 iterations at most)
MAX_ITERATIONS = 1_000_000  # trtllm-serve: iteration records one run may gather
TRTLLM_OWNER = "tensorrt_llm"  # trtllm-serve's /v1/models owned_by (serve/openai_protocol.py ModelCard)
SPEC_STATS = "specDecodingStats"  # one trtllm iteration's speculative counts (IterationStats JSON)

_SPEC = "vllm:spec_decode_num_"
DRAFTS, DRAFT_TOKENS, ACCEPTED = f"{_SPEC}drafts_total", f"{_SPEC}draft_tokens_total", f"{_SPEC}accepted_tokens_total"
ACCEPTED_PER_POS = f"{_SPEC}accepted_tokens_per_pos_total"
REQUESTS, PROMPT_TOKENS, GENERATION_TOKENS = (
    "vllm:request_success_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
)
IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")


@dataclass(frozen=True)
class ServerInfo:
    """What the server says about itself: engine, version, the model it serves and its speculative settings."""

    url: str
    engine: str  # one of ENGINES
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


# ---- HTTP -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Endpoint:
    """The base URL and the key, kept out of every message (``repr`` hides the key)."""

    url: str
    token: str | None = field(default=None, repr=False)

    def request(self, path: str, body: dict[str, Any] | None, timeout: float, phase: str) -> bytes:
        """GET (``body`` None) or POST JSON to ``path``; the body of a 2xx answer, else an AttachError for ``phase``
        ("before the run" / "during the run"). ``timeout`` bounds the whole exchange (connect, headers, a body read
        byte by byte), not one socket read; a body over MAX_BODY_BYTES is refused. A redirect is followed within the
        same origin only: the key is never sent anywhere but the origin the user named."""
        data = json.dumps(body).encode() if body is not None else None
        deadline = time.monotonic() + timeout
        url = self.url + path
        for _ in range(MAX_REDIRECTS + 1):
            status, reason, location, payload = self._exchange(url, data, deadline, path, timeout, phase)
            if status in (301, 302, 303, 307, 308) and location is not None:
                target = urllib.parse.urljoin(url, location)
                if _origin(target) != _origin(self.url):
                    raise AttachError(
                        f"{self.url}{path} redirected to another origin, {_origin(target)}: the request was not "
                        f"sent there (the API key goes to {_origin(self.url)} only)",
                        hint="point --engine-url at the engine's own address, not at a proxy that redirects",
                    )
                url, data = target, (None if status == 303 else data)
                continue
            if 200 <= status < 300:
                return payload
            raise self._http_error(status, reason, payload, path)
        raise AttachError(
            f"{self.url}{path} redirected more than {MAX_REDIRECTS} times",
            hint="point --engine-url at the engine's own address, not at a proxy that redirects",
        )

    def _exchange(
        self, url: str, data: bytes | None, deadline: float, path: str, timeout: float, phase: str
    ) -> tuple[int, str, str | None, bytes]:
        """One HTTP exchange before ``deadline``: (status, reason, Location, body). A timer shuts the socket at the
        deadline, so a server that drips a byte at a time cannot hold the run past it."""
        parts = urllib.parse.urlsplit(url)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self._timeout(path, timeout, phase)
        conn, target, headers = _connection(parts, remaining)
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        timer: threading.Timer | None = None
        try:
            conn.connect()  # the socket, held here: the connection lets go of it once a closing answer begins
            timer = threading.Timer(max(deadline - time.monotonic(), 0.0), _shut, (conn.sock,))
            timer.daemon = True
            timer.start()
            conn.request("POST" if data is not None else "GET", target, body=data, headers=headers)
            response = conn.getresponse()
            payload = response.read(MAX_BODY_BYTES + 1)
            if time.monotonic() >= deadline:  # the timer cut it short: what arrived is not the answer
                raise self._timeout(path, timeout, phase)
            if len(payload) > MAX_BODY_BYTES:
                raise AttachError(
                    f"{self.url}{path} answered more than {MAX_BODY_BYTES:,} bytes {phase}: refused unread",
                    hint="point --engine-url at the engine's own HTTP server; its answers are far smaller",
                )
            declared = response.getheader("Content-Length") or ""
            if declared.isdecimal() and len(payload) < int(declared):
                raise self._gone(f"the answer ended after {len(payload)} of its {declared} bytes", phase)
            return response.status, response.reason, response.getheader("Location"), payload
        except (http.client.HTTPException, OSError) as exc:  # reset, closed mid-answer, refused, timed out
            if time.monotonic() >= deadline or isinstance(exc, TimeoutError):
                raise self._timeout(path, timeout, phase) from exc
            raise self._gone(exc, phase) from exc
        finally:
            if timer is not None:
                timer.cancel()
            conn.close()

    def json(self, path: str, body: dict[str, Any] | None, timeout: float, phase: str) -> Any:
        raw = self.request(path, body, timeout, phase)
        try:
            return json.loads(raw)
        except ValueError:
            raise AttachError(
                f"{self.url}{path} answered with something other than JSON ({_clip(raw)})",
                hint="point --engine-url at the engine's own HTTP server (vLLM's OpenAI server or SGLang's), not at "
                "a proxy page",
            ) from None

    def _http_error(self, status: int, reason: str, payload: bytes, path: str) -> AttachError:
        body = _clip(payload, self.token)
        if status in (401, 403):
            return AttachError(
                f"{self.url}{path} refused the request: HTTP {status} {_clip(reason.encode())}",
                hint=f"pass the server's API key with --engine-url-token or ${TOKEN_ENV}",
            )
        return AttachError(
            f"{self.url}{path} answered HTTP {status} {_clip(reason.encode())}: {body}",
            hint="the server's own log says why; check that it serves the target named by --target",
        )

    def _timeout(self, path: str, timeout: float, phase: str) -> AttachError:
        return AttachError(
            f"{self.url}{path} did not answer within {timeout:g} s {phase}",
            hint="raise --engine-timeout, or lower --engine-concurrency when the server is busy",
        )

    def _gone(self, reason: object, phase: str) -> AttachError:
        why = _reason(reason)
        if phase == "before the run":
            return AttachError(
                f"the server at {self.url} is not reachable: {why}",
                hint="start the server first (vllm serve / python -m sglang.launch_server), and check host and port",
            )
        return AttachError(
            f"the server at {self.url} went away {phase}: {why}",
            hint="the server stopped or crashed while answering (see its log); nothing was measured, rerun when it "
            "serves again",
        )


def _connection(
    parts: urllib.parse.SplitResult, timeout: float
) -> tuple[http.client.HTTPConnection, str, dict[str, str]]:
    """(connection, request target, headers) for one exchange with ``parts``: straight to the server, or through the
    HTTP proxy the environment names for it (``http_proxy``/``https_proxy``, bypassed for hosts in ``no_proxy``, as
    urllib and the engines' own clients read them). Through a proxy, plain HTTP is sent to it with the absolute URL;
    HTTPS goes through a CONNECT tunnel, so the proxy never sees the request or the API key. A proxy's own
    ``user:password@`` becomes its Proxy-Authorization header, sent to the proxy only."""
    headers = {"Accept": "application/json", "Host": parts.netloc}
    path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    proxy = _proxy_for(parts.scheme, host)
    if proxy is None:
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        return kind(host, port, timeout=timeout), path, headers
    auth = {}
    if proxy.username is not None:
        pair = f"{urllib.parse.unquote(proxy.username)}:{urllib.parse.unquote(proxy.password or '')}"
        auth = {"Proxy-Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}
    if parts.scheme == "https":
        tunnel = http.client.HTTPSConnection(proxy.hostname or "", proxy.port or 80, timeout=timeout)
        tunnel.set_tunnel(host, port, headers=auth)
        return tunnel, path, headers
    through = http.client.HTTPConnection(proxy.hostname or "", proxy.port or 80, timeout=timeout)
    return through, urllib.parse.urlunsplit(("http", parts.netloc, parts.path or "/", parts.query, "")), headers | auth


def _proxy_for(scheme: str, host: str) -> urllib.parse.SplitResult | None:
    """The environment's HTTP proxy for ``scheme`` URLs on ``host``; None to connect directly. Only an ``http://``
    proxy is spoken to (what vLLM and SGLang deployments sit behind); another kind is a usage error naming it."""
    proxy = urllib.request.getproxies().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if parts.scheme != "http" or not parts.hostname:
        raise UsageError(
            f"the {scheme}_proxy setting {redact_url(proxy)} is not an http:// proxy",
            hint=f"set {scheme}_proxy to http://HOST:PORT, or name the server's host in no_proxy to reach it directly",
        )
    return parts


def _shut(sock: socket.socket | None) -> None:
    """At the deadline: end the exchange whatever it is waiting for (a blocked read returns at once)."""
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _origin(url: str) -> str:
    """scheme://host:port of ``url`` (the default port written out), without any user info."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{parts.hostname}:{port}"


def _reason(reason: object) -> str:
    if isinstance(reason, BaseException):
        text = str(reason) or type(reason).__name__
        return f"{type(reason).__name__}: {text}" if type(reason).__name__ not in text else text
    return str(reason)


def _clip(raw: bytes, token: str | None = None, limit: int = 200) -> str:
    text = " ".join(raw.decode("utf-8", errors="replace").split())
    if token:
        text = text.replace(token, "***")
    return text[:limit] + ("..." if len(text) > limit else "")


def _connect(url: str, token: str | None) -> _Endpoint:
    return _Endpoint(check_url(url), token or None)


def check_url(url: str) -> str:
    """``url`` as the base address of a server (``http(s)://HOST[:PORT]``, trailing slash dropped); a UsageError
    (exit 2, the URL shown without any password) for anything else, before any request or heavy import."""
    try:
        parsed = urllib.parse.urlsplit(url)
        parsed.port  # noqa: B018 -- a port that is not a number raises here
    except ValueError:
        parsed = None
    shown = redact_url(url)
    if parsed is not None and "@" in parsed.netloc:
        raise UsageError(
            f"--engine-url {shown!r} carries a user name or password: refused (it would be sent and printed)",
            hint=f"give the address alone and the API key with --engine-url-token or ${TOKEN_ENV}",
        )
    if (
        parsed is None
        or parsed.scheme not in ("http", "https")
        or not parsed.hostname
        or parsed.path.strip("/")
        or parsed.query
        or parsed.fragment
    ):
        raise UsageError(
            f"--engine-url {shown!r} is not an http(s)://HOST:PORT address",
            hint="give the server's base address, e.g. http://10.0.0.5:8000 (no /v1 or other path)",
        )
    return url.rstrip("/")


def token_from_env() -> str | None:
    """The API key from $EAGLE_CONVERT_ENGINE_URL_TOKEN (None when unset or empty)."""
    return os.environ.get(TOKEN_ENV) or None


# ---- Prometheus ----------------------------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Samples = list[tuple[str, dict[str, str], float]]


def parse_metrics(text: str) -> Samples:
    """(name, labels, value) of every sample of a Prometheus text exposition."""
    out: Samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or line.startswith("#"):
            continue
        name, labels, value = match.groups()
        try:
            out.append((name, dict(_LABEL.findall(labels or "")), float(value)))
        except ValueError:
            continue
    return out


def _total(samples: Samples, name: str) -> float:
    """The sum over every label set (engines, finish reasons) of one metric."""
    return sum(v for n, _, v in samples if n == name)


def _per_position(samples: Samples) -> dict[int, float]:
    out: dict[int, float] = {}
    for name, labels, value in samples:
        if name == ACCEPTED_PER_POS and labels.get("position", "").isdecimal():
            out[int(labels["position"])] = out.get(int(labels["position"]), 0.0) + value
    return out


# ---- detect --------------------------------------------------------------------------------------------------------


def detect(url: str, token: str | None = None, timeout: float = 30.0, engine: str | None = None) -> ServerInfo:
    """Which engine serves ``url``, its version, the model and the speculative settings it reports. ``engine``
    (one of ENGINES) skips the detection. AttachError when the server is not reachable or not speculative."""
    return _detect(_connect(url, token), timeout, engine)


def _detect(server: _Endpoint, timeout: float, engine: str | None) -> ServerInfo:
    if engine is not None and engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    info = _optional_json(server, "/server_info", timeout)  # SGLang; vLLM only with VLLM_SERVER_DEV_MODE=1
    if info is None:
        info = _optional_json(server, "/get_server_info", timeout)  # SGLang before /server_info
    metrics: str | None = _optional_json(server, "/metrics", timeout, text=True)
    if engine is None:
        engine = _which_engine(server, info, metrics, timeout)
    if engine == "vllm":
        found = _vllm_info(server, info, metrics, timeout)
    elif engine == "trtllm":
        found = _trtllm_info(server, metrics, timeout)
    else:
        found = _sglang_info(server, info)
    if not found.speculative:
        raise AttachError(
            f"the {engine} server at {server.url} does not run speculative decoding ({found.not_reported})",
            hint='serve the target with the draft: vLLM --speculative-config \'{"method": "eagle3", "model": '
            "DRAFT, ...}', SGLang --speculative-algorithm EAGLE3 --speculative-draft-model-path DRAFT, "
            "trtllm-serve speculative_config {decoding_type: Eagle3, speculative_model: DRAFT} in its "
            "--extra_llm_api_options YAML",
        )
    return found


def _optional_json(server: _Endpoint, path: str, timeout: float, text: bool = False) -> Any:
    """The JSON (``text``: the text) at ``path``, or None when the server answers 404/405 there (an endpoint this
    engine lacks)."""
    try:
        if text:
            return server.request(path, None, timeout, "before the run").decode("utf-8", errors="replace")
        return server.json(path, None, timeout, "before the run")
    except AttachError as exc:
        if " HTTP 404 " in exc.cause or " HTTP 405 " in exc.cause:
            return None
        raise


def _which_engine(server: _Endpoint, info: Any, metrics: str | None, timeout: float) -> str:
    if metrics is not None and metrics.lstrip().startswith("["):
        return "trtllm"  # trtllm-serve's /metrics is a JSON list of iteration statistics, not Prometheus text
    if isinstance(info, dict) and "vllm_config" in info:
        return "vllm"
    if isinstance(info, dict) and "model_path" in info and ("speculative_algorithm" in info or "version" in info):
        return "sglang"
    if metrics is not None and re.search(r"^vllm:", metrics, re.M):
        return "vllm"
    if metrics is not None and re.search(r"^sglang:", metrics, re.M):
        return "sglang"
    if _owner(_optional_json(server, "/v1/models", timeout)) == TRTLLM_OWNER:
        return "trtllm"
    if _optional_json(server, "/version", timeout) is not None:
        return "vllm"
    raise AttachError(
        f"the server at {server.url} answers, but neither as vLLM, SGLang nor trtllm-serve (no /server_info, "
        "/metrics, /v1/models or /version of any)",
        hint=f"pass {engines.spelled(f'--engine {e}' for e in ENGINES)} to say which engine serves it",
    )


def _owner(models: Any) -> Any:
    """``owned_by`` of the first model of a ``/v1/models`` answer (None when there is none)."""
    try:
        return models["data"][0].get("owned_by")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


def _vllm_info(server: _Endpoint, info: Any, metrics: str | None, timeout: float) -> ServerInfo:
    version = _optional_json(server, "/version", timeout)
    models = server.json("/v1/models", None, timeout, "before the run")
    try:
        model = models["data"][0]
    except (KeyError, IndexError, TypeError):
        raise _missing(server, "/v1/models", "data[0]") from None
    if not isinstance(model, dict):
        raise _missing(server, "/v1/models", "data[0] as an object")
    reported = ["/version", "/v1/models"]
    config = _optional_json(server, "/server_info?config_format=json", timeout) if info is not None else None
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
        num_speculative_tokens=_optional_count(server, "/server_info", "num_speculative_tokens", k),
        reported_by=reported,
        not_reported=not_reported,
    )


def _sglang_info(server: _Endpoint, info: Any) -> ServerInfo:
    """SGLang 0.5.23: ``/server_info`` is ``ServerArgs.resolved_dict()`` plus ``version``
    (``srt/entrypoints/http_server.py:863-894``, ``srt/utils/common.py:3584-3593``); the speculative fields are
    ``srt/arg_groups/fields/spec.py:31-66``."""
    if not isinstance(info, dict) or "model_path" not in info:
        raise _missing(server, "/server_info", "model_path")
    method = info.get("speculative_algorithm")
    steps = info.get("speculative_num_steps")
    return ServerInfo(
        url=server.url,
        engine="sglang",
        version=str(info.get("version", "unknown")),
        model=str(info.get("served_model_name") or info["model_path"]),
        model_path=str(info["model_path"]),
        speculative=bool(method),
        method=str(method) if method else None,
        draft_path=info.get("speculative_draft_model_path"),
        num_speculative_tokens=_optional_count(server, "/server_info", "speculative_num_steps", steps),
        reported_by=["/server_info"],
        not_reported=None if method else "its /server_info has speculative_algorithm null",
    )


def _trtllm_info(server: _Endpoint, metrics: str | None, timeout: float) -> ServerInfo:
    """trtllm-serve (``tensorrt_llm/serve/openai_server.py``): ``/version`` is ``{"version": VERSION}``,
    ``/v1/models`` one ``ModelCard`` owned by ``tensorrt_llm``; it reports neither its draft nor its speculative
    settings over HTTP, so whether it drafts is read from the iteration statistics of ``/metrics`` (an earlier
    iteration's ``specDecodingStats``), and, when none is queued, from the run itself."""
    version = _optional_json(server, "/version", timeout)
    models = server.json("/v1/models", None, timeout, "before the run")
    try:
        model = models["data"][0]
        name = str(model["id"])
    except (KeyError, IndexError, TypeError):
        raise _missing(server, "/v1/models", "data[0].id") from None
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


def _iteration_list(server: _Endpoint, raw: bytes) -> list[dict[str, Any]]:
    """trtllm-serve's ``/metrics`` answer: a JSON list of iteration statistics (objects)."""
    try:
        items = json.loads(raw)
    except ValueError:
        items = None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise _missing(server, "/metrics", "a JSON list of iteration statistics")
    return items


def _iterations(server: _Endpoint, timeout: float, phase: str) -> list[dict[str, Any]]:
    """The iteration statistics trtllm-serve gathered since the last read (the read drains them)."""
    return _iteration_list(server, server.request("/metrics", None, timeout, phase))


def _count(server: _Endpoint, path: str, what: str, value: Any) -> int:
    """A count the server reported: a finite whole number >= 0, else a server fault (never a measurement)."""
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if number is None or not math.isfinite(number) or number < 0 or number != int(number):
        raise _fault(server, path, f"{what} is {_clip(repr(value).encode(), limit=60)}, not a count")
    return int(number)


def _optional_count(server: _Endpoint, path: str, what: str, value: Any) -> int | None:
    """A count the server may leave out (None), else as :func:`_count` reads it."""
    return None if value is None else _count(server, path, what, value)


def _token_ids(server: _Endpoint, path: str, what: str, value: Any) -> list[int]:
    """The generated token ids of one answer (none when the server leaves them out): a list of counts, else a fault."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _fault(server, path, f"{what} is {_clip(repr(value).encode(), limit=60)}, not a list of token ids")
    return [_count(server, path, f"{what}[{n}]", t) for n, t in enumerate(value)]


def _consistent(
    server: _Endpoint, path: str, drafts: int, draft_tokens: int, accepted: int, positions: list[int]
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
        raise _fault(server, path, "; ".join(problems))


def _fault(server: _Endpoint, path: str, what: str) -> AttachError:
    return AttachError(
        f"{server.url}{path} reported impossible numbers: {what} (a server fault: nothing was measured)",
        hint="the server restarted, or something between this tool and the engine rewrites its answers; rerun "
        "against the engine's own address when it serves steadily",
    )


def _missing(server: _Endpoint, path: str, what: str) -> AttachError:
    return AttachError(
        f"{server.url}{path} answered without {what}",
        hint="this server's answers are not the shapes this eagle-convert was built against (vLLM 0.32, SGLang "
        "0.5.23, trtllm-serve of TensorRT-LLM 1.2); pass --engine to force the engine, or report the server's "
        "version",
    )


# ---- run -----------------------------------------------------------------------------------------------------------


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
    server = _connect(url, token)
    info = _detect(server, timeout, engine)
    identity, note = draft_identity(info.draft_path, draft)
    counts = MEASURE[info.engine](server, info, [list(p) for p in prompts], new_tokens, concurrency, timeout)
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


@dataclass(frozen=True)
class _Counts:
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


def _send_all(
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


def _completions(
    server: _Endpoint, info: ServerInfo, new_tokens: int, timeout: float, **extra: Any
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
            raise _missing(server, "/v1/completions", "choices[0] and usage.completion_tokens") from None
        if not isinstance(choice, dict):
            raise _missing(server, "/v1/completions", "choices[0] as an object")
        generated = _count(server, "/v1/completions", "usage.completion_tokens", generated)
        if generated != new_tokens:
            raise AttachError(
                f"{server.url}/v1/completions generated {generated} tokens, not the {new_tokens} asked for "
                f"(finish_reason {choice.get('finish_reason')!r})",
                hint="lower the number of new tokens (--engine-tokens) below the server's --max-model-len minus the "
                "prompt",
            )
        return {"token_ids": _token_ids(server, "/v1/completions", "choices[0].token_ids", choice.get("token_ids"))}

    return send


def _run_vllm(
    server: _Endpoint, info: ServerInfo, prompts: list[list[int]], new_tokens: int, concurrency: int, timeout: float
) -> _Counts:
    send = _completions(server, info, new_tokens, timeout, return_token_ids=True)
    before = _scrape(server, timeout, "before the run")
    started = time.perf_counter()
    answers = _send_all(prompts, concurrency, send)
    expected = {
        REQUESTS: float(len(prompts)),
        PROMPT_TOKENS: float(sum(len(p) for p in prompts)),
        GENERATION_TOKENS: float(len(prompts) * new_tokens),
    }
    after = _settled(server, before, expected[REQUESTS], timeout)
    wall = time.perf_counter() - started
    for name in (*expected, DRAFTS, DRAFT_TOKENS, ACCEPTED):
        _count(server, "/metrics", f"{name} before the run", _total(before, name))
        _count(server, "/metrics", f"{name} after the run", _total(after, name))
    moved = {name: _total(after, name) - _total(before, name) for name in (*expected, DRAFTS, DRAFT_TOKENS, ACCEPTED)}
    backwards = [n for n, v in moved.items() if v < 0]
    if backwards:
        n = backwards[0]
        raise _fault(
            server, "/metrics", f"{n} went backwards during the run, from {_total(before, n):g} to {_total(after, n):g}"
        )
    if moved[REQUESTS] < expected[REQUESTS]:
        raise AttachError(
            f"the counters of {server.url}/metrics counted {moved[REQUESTS]:.0f} finished requests during the run, "
            f"fewer than the {len(prompts)} it answered: the metrics are not those of the server that answered",
            hint="point --engine-url at one server, not at a load balancer in front of several",
        )
    foreign = [CounterMove(n, e, moved[n]) for n, e in expected.items() if moved[n] != e]
    foreign += [CounterMove(n, 0.0, _total(after, n)) for n in IN_FLIGHT if _total(after, n) > 0]
    drafts = int(moved[DRAFTS])
    if drafts <= 0:
        raise AttachError(
            f"the vLLM server at {server.url} drafted nothing during the run ({_SPEC}drafts_total did not move)",
            hint="serve the target with the draft (--speculative-config), and ask for more than one new token",
        )
    pos_before, pos_after = _per_position(before), _per_position(after)
    if len(pos_after) > MAX_POSITIONS:
        raise _fault(server, "/metrics", f"{ACCEPTED_PER_POS} has {len(pos_after)} positions")
    per_position = [
        _count(server, "/metrics", f"{ACCEPTED_PER_POS} at position {i}", pos_after[i] - pos_before.get(i, 0.0))
        for i in sorted(pos_after)
    ]
    _consistent(server, "/metrics", drafts, int(moved[DRAFT_TOKENS]), int(moved[ACCEPTED]), per_position)
    return _Counts(
        outputs=[a["token_ids"] for a in answers],
        drafts=drafts,
        draft_tokens=int(moved[DRAFT_TOKENS]),
        accepted_tokens=int(moved[ACCEPTED]),
        accepted_per_position=per_position,
        measured_from="vllm /metrics counters, diffed around the run",
        foreign_traffic=foreign,
        wall_s=wall,
    )


def _scrape(server: _Endpoint, timeout: float, phase: str) -> Samples:
    return parse_metrics(server.request("/metrics", None, timeout, phase).decode("utf-8", errors="replace"))


def _settled(server: _Endpoint, before: Samples, requests: float, timeout: float) -> Samples:
    """The counters after the run, once they count at least ``requests`` more finished requests (vLLM records a
    step's stats just after it sends the step's answers) or SETTLE_S has passed."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        after = _scrape(server, timeout, "after the run")
        if _total(after, REQUESTS) - _total(before, REQUESTS) >= requests or time.monotonic() > deadline:
            return after
        time.sleep(0.1)


def _run_sglang(
    server: _Endpoint, info: ServerInfo, prompts: list[list[int]], new_tokens: int, concurrency: int, timeout: float
) -> _Counts:
    """SGLang 0.5.23's native ``/generate`` (``srt/entrypoints/http_server.py:928-935``) with ``input_ids``; each
    answer's ``meta_info`` carries this request's speculative counts (``tokenizer_manager.py:3138-3201``):
    ``spec_verify_ct`` (verify steps = drafts), ``spec_num_correct_drafts`` (accepted draft tokens, no bonus),
    ``spec_num_proposed_drafts`` (= verify steps x (speculative_num_draft_tokens - 1)) and
    ``spec_correct_drafts_histogram`` (histogram[n] = steps that accepted exactly n draft tokens;
    ``schedule_batch.py:1566-1572``)."""

    def send(prompt: list[int]) -> dict[str, Any]:
        body = {
            "input_ids": prompt,
            "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0.0, "ignore_eos": True},
        }
        answer = server.json("/generate", body, timeout, "during the run")
        meta = answer.get("meta_info") if isinstance(answer, dict) else None
        needed = ("spec_verify_ct", "spec_num_correct_drafts", "completion_tokens")
        if not isinstance(meta, dict) or any(k not in meta for k in needed):
            raise _missing(server, "/generate", "meta_info." + ", meta_info.".join(needed))
        if _count(server, "/generate", "meta_info.completion_tokens", meta["completion_tokens"]) != new_tokens:
            raise AttachError(
                f"{server.url}/generate generated {meta['completion_tokens']} tokens, not the {new_tokens} asked for "
                f"(finish_reason {meta.get('finish_reason')!r})",
                hint="lower the number of new tokens below the server's --context-length minus the prompt",
            )
        return {"token_ids": _token_ids(server, "/generate", "output_ids", answer.get("output_ids")), "meta": meta}

    started = time.perf_counter()
    answers = _send_all(prompts, concurrency, send)
    wall = time.perf_counter() - started
    drafts, accepted, proposed, histogram = 0, 0, 0, [0] * (MAX_POSITIONS + 1)
    longest = 0
    for m in (a["meta"] for a in answers):
        verify = _count(server, "/generate", "meta_info.spec_verify_ct", m["spec_verify_ct"])
        correct = _count(server, "/generate", "meta_info.spec_num_correct_drafts", m["spec_num_correct_drafts"])
        drafts, accepted = drafts + verify, accepted + correct
        proposed += _count(
            server, "/generate", "meta_info.spec_num_proposed_drafts", m.get("spec_num_proposed_drafts", 0)
        )
        steps = m.get("spec_correct_drafts_histogram") or []
        if not isinstance(steps, list) or len(steps) > MAX_POSITIONS + 1:
            size = len(steps) if isinstance(steps, list) else type(steps).__name__
            raise _fault(server, "/generate", f"meta_info.spec_correct_drafts_histogram is {size} entries long")
        counts = [_count(server, "/generate", f"spec_correct_drafts_histogram[{n}]", v) for n, v in enumerate(steps)]
        # one entry per verify step, at the number of drafts it accepted (SGLang 0.5.23
        # srt/managers/scheduler_components/batch_result_processor.py:832-836)
        weighted = sum(n * c for n, c in enumerate(counts))
        if steps and (sum(counts) != verify or weighted != correct):
            raise _fault(
                server,
                "/generate",
                f"meta_info.spec_correct_drafts_histogram ({sum(counts)} steps, {weighted} drafts accepted) disagrees "
                f"with spec_verify_ct {verify} and spec_num_correct_drafts {correct}",
            )
        for n, c in enumerate(counts):
            histogram[n] += c
        longest = max(longest, len(counts))
    if drafts == 0:
        raise AttachError(
            f"the SGLang server at {server.url} verified no draft during the run (every answer's "
            "meta_info.spec_verify_ct is 0): it measured nothing",
            hint="serve the target with the draft (--speculative-algorithm EAGLE3); ask for more than one new token",
        )
    # a step that accepted n draft tokens accepted one at each of positions 0..n-1: suffix sums, linear time
    width = max(info.num_speculative_tokens or 0, longest - 1)
    per_position, tail = [0] * width, 0
    for p in range(min(width, MAX_POSITIONS), 0, -1):
        tail += histogram[p]
        per_position[p - 1] = tail
    if info.num_speculative_tokens and accepted > drafts * info.num_speculative_tokens:
        raise _fault(
            server,
            "/generate",
            f"{accepted} accepted drafts over {drafts} verify steps of {info.num_speculative_tokens} draft tokens",
        )
    return _Counts(
        outputs=[a["token_ids"] for a in answers],
        drafts=drafts,
        draft_tokens=proposed,
        accepted_tokens=accepted,
        accepted_per_position=per_position,
        measured_from="sglang per-request meta_info (this run's requests only)",
        foreign_traffic=[],
        wall_s=wall,
    )


def _run_trtllm(
    server: _Endpoint, info: ServerInfo, prompts: list[list[int]], new_tokens: int, concurrency: int, timeout: float
) -> _Counts:
    """trtllm-serve: ``/v1/completions`` (``CompletionRequest`` forbids unknown fields, so only its own: token-id
    prompt, ``max_tokens``, ``temperature``, ``ignore_eos``), while ``/metrics`` is read every POLL_S seconds (each
    read drains the iterations gathered since the last, and the server keeps a bounded number) and until it has no
    more after the last answer. Each iteration's ``specDecodingStats`` (``PyExecutor._update_iter_stats``) counts, over
    that iteration's generation requests with drafts: ``numDraftTokens``, ``numAcceptedTokens`` and
    ``numRequestsWithDraftTokens`` (one verify step each); summed, these are the run's drafts, draft tokens and
    accepted tokens. Per-position counts are not reported."""
    send = _completions(server, info, new_tokens, timeout)
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
        answers = _send_all(prompts, concurrency, send)
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
        raise _fault(server, "/metrics", f"more than {MAX_ITERATIONS:,} iterations during one run")
    return _trtllm_counts(server, items, [a["token_ids"] for a in answers], len(prompts), new_tokens, concurrency, wall)


# how each engine's server is measured: one entry per engine of ENGINES (tests/test_engine_vocabulary.py)
MEASURE = {"vllm": _run_vllm, "sglang": _run_sglang, "trtllm": _run_trtllm}


def _trtllm_counts(
    server: _Endpoint,
    items: list[dict[str, Any]],
    outputs: list[list[int]],
    prompts: int,
    new_tokens: int,
    concurrency: int,
    wall: float,
) -> _Counts:
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
            raise _missing(server, "/metrics", f"{SPEC_STATS} objects")
        n, d, a = (
            _count(server, "/metrics", f"{SPEC_STATS}.{key}", stats.get(key))
            for key in ("numRequestsWithDraftTokens", "numDraftTokens", "numAcceptedTokens")
        )
        if a > d or n > d or (n == 0 and d > 0):
            raise _fault(
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
    _consistent(server, "/metrics", drafts, draft_tokens, accepted, [])
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
    return _Counts(
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


# ---- draft identity ------------------------------------------------------------------------------------------------


def draft_identity(served: str | None, draft: Path | None) -> tuple[str, str]:
    """("same" | "different" | "unknown", how it was decided): the draft the server names against DRAFT, by
    resolved path, else (when the served path is readable here) by the sha256 of config.json and the weights."""
    if draft is None:
        return "unknown", "no DRAFT directory to compare with"
    if served is None:
        return "unknown", "the server does not say which draft it serves"
    here, there = Path(draft).resolve(), Path(served).expanduser()
    try:
        if there.is_absolute() and there.resolve() == here:
            return "same", f"the server serves {served}, which is DRAFT"
    except (OSError, RuntimeError):  # a link that loops here (RuntimeError before Python 3.13)
        return "unknown", f"the server serves {served}, which cannot be resolved here to compare with DRAFT"
    if not there.is_dir():
        return "unknown", f"the server serves {served}, which is not a directory readable here to compare with DRAFT"
    try:
        mine, theirs = _fingerprint(here), _fingerprint(there)
    except TooLargeError:  # hashing both is capped (read/digest.py MAX_HASHED_BYTES)
        return "unknown", f"the server serves {served}: too large to compare with DRAFT by sha256"
    if mine == theirs:
        return "same", f"the server serves {served}: config.json and weights have DRAFT's sha256"
    return "different", f"the server serves {served}: its config.json or weights differ from DRAFT's"


def _fingerprint(directory: Path) -> list[tuple[str, int, str | None]]:
    """(name, size, sha256) of config.json and each safetensors file: what makes two directories the same draft."""
    from eagle_convert.read.digest import hash_files

    names = sorted(p.name for p in directory.iterdir() if p.name == "config.json" or p.suffix == ".safetensors")
    return [(d.name, d.size, d.sha256) for d in hash_files(directory, names)]
