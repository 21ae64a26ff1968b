"""Servers on 127.0.0.1 that the ``--engine-url`` tests start and stop: a quiet JSON handler and a context manager
that serves one handler class on a free port for the length of a ``with``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    """A handler that logs nothing and answers whole bodies (JSON with :meth:`_json`)."""

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, payload: Any) -> None:
        self._send(code, json.dumps(payload).encode())


@contextmanager
def serve(handler: type[BaseHTTPRequestHandler], **attrs: Any) -> Iterator[tuple[str, Any]]:
    """(the base URL, the handler subclass serving it, with ``attrs`` as its own class attributes, so a test's
    changes to them stay its own) on a free port of 127.0.0.1, stopped at the end of the ``with``."""
    cls = type("Handler", (handler,), attrs)
    server = ThreadingHTTPServer(("127.0.0.1", 0), cls)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", cls
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
