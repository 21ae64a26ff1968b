"""The bounded HTTP client of ``--engine-url``, and the checks of the address it is given.

    server = connect("http://10.0.0.5:8000", token)
    models = server.json("/v1/models", None, timeout=30.0, phase="before the run")

Standard library only. Every exchange is bounded in time (one deadline for connect, headers and body, however slowly
the server drips) and in size (MAX_BODY_BYTES); a redirect is followed within the origin the user named only, so the
API key, sent in the ``Authorization`` header, goes nowhere else; the environment's ``http(s)_proxy`` is honoured as
urllib honours it. Every fault is an :class:`AttachError` naming the URL and the phase, never the key.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import socket
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from eagle_convert.errors import AttachError, UsageError
from eagle_convert.read.redact import redact_url

TOKEN_ENV = "EAGLE_CONVERT_ENGINE_URL_TOKEN"  # the API key when --engine-url-token is not given
MAX_BODY_BYTES = 64 << 20  # the largest answer read (a vLLM /metrics page is tens of KiB, an answer a few KiB)
MAX_REDIRECTS = 3  # same-origin redirects followed; one to another origin is an error


@dataclass(frozen=True)
class Endpoint:
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
                f"{self.url}{path} answered with something other than JSON ({clip(raw)})",
                hint="point --engine-url at the engine's own HTTP server (vLLM's OpenAI server or SGLang's), not at "
                "a proxy page",
            ) from None

    def optional_json(self, path: str, timeout: float, text: bool = False) -> Any:
        """The JSON (``text``: the text) at ``path`` before the run, or None when the server answers 404/405 there
        (an endpoint this engine lacks)."""
        try:
            if text:
                return self.request(path, None, timeout, "before the run").decode("utf-8", errors="replace")
            return self.json(path, None, timeout, "before the run")
        except AttachError as exc:
            if " HTTP 404 " in exc.cause or " HTTP 405 " in exc.cause:
                return None
            raise

    def _http_error(self, status: int, reason: str, payload: bytes, path: str) -> AttachError:
        body = clip(payload, self.token)
        if status in (401, 403):
            return AttachError(
                f"{self.url}{path} refused the request: HTTP {status} {clip(reason.encode())}",
                hint=f"pass the server's API key with --engine-url-token or ${TOKEN_ENV}",
            )
        return AttachError(
            f"{self.url}{path} answered HTTP {status} {clip(reason.encode())}: {body}",
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


def clip(raw: bytes, token: str | None = None, limit: int = 200) -> str:
    """``raw`` as one line of at most ``limit`` characters for a message, ``token`` masked."""
    text = " ".join(raw.decode("utf-8", errors="replace").split())
    if token:
        text = text.replace(token, "***")
    return text[:limit] + ("..." if len(text) > limit else "")


def connect(url: str, token: str | None) -> Endpoint:
    """The server at ``url`` (checked by :func:`check_url`), with the API key ``token`` (None or empty: none)."""
    return Endpoint(check_url(url), token or None)


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
