"""Which engine serves a URL (vLLM, SGLang or trtllm-serve), and what the server says about itself.

    info = detect("http://10.0.0.5:8000", token, timeout=30.0)

Detection reads ``/server_info`` (SGLang; vLLM in dev mode) and ``/metrics`` once and names the engine from the
first sign that holds, in a fixed order; then that engine's protocol module describes the server
(:class:`ServerInfo`). A server that does not run speculative decoding is an :class:`AttachError`.
"""

from __future__ import annotations

import re
from typing import Any

from eagle_convert import engines
from eagle_convert.errors import AttachError, UsageError
from eagle_convert.real_engine.attached import sglang, trtllm, vllm
from eagle_convert.real_engine.attached.client import Endpoint, connect
from eagle_convert.real_engine.attached.protocol import ServerInfo

ENGINES = engines.ATTACHABLE  # the engines whose servers are detected and measured (one protocol module each)
# how each engine's server is described and measured: one entry per engine of ENGINES
# (tests/releases/test_engine_vocabulary.py)
PROTOCOLS = {p.engine: p for p in (vllm.PROTOCOL, sglang.PROTOCOL, trtllm.PROTOCOL)}


def detect(url: str, token: str | None = None, timeout: float = 30.0, engine: str | None = None) -> ServerInfo:
    """Which engine serves ``url``, its version, the model and the speculative settings it reports. ``engine``
    (one of ENGINES) skips the detection. AttachError when the server is not reachable or not speculative."""
    return detect_on(connect(url, token), timeout, engine)


def detect_on(server: Endpoint, timeout: float, engine: str | None) -> ServerInfo:
    if engine is not None and engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    info = server.optional_json("/server_info", timeout)  # SGLang; vLLM only with VLLM_SERVER_DEV_MODE=1
    if info is None:
        info = server.optional_json("/get_server_info", timeout)  # SGLang before /server_info
    metrics: str | None = server.optional_json("/metrics", timeout, text=True)
    if engine is None:
        engine = _which_engine(server, info, metrics, timeout)
    found = PROTOCOLS[engine].describe(server, info, metrics, timeout)
    if not found.speculative:
        raise AttachError(
            f"the {engine} server at {server.url} does not run speculative decoding ({found.not_reported})",
            hint="serve the target with the draft: " + ", ".join(PROTOCOLS[e].serve_with for e in ENGINES),
        )
    return found


def _which_engine(server: Endpoint, info: Any, metrics: str | None, timeout: float) -> str:
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
    if _owner(server.optional_json("/v1/models", timeout)) == trtllm.TRTLLM_OWNER:
        return "trtllm"
    if server.optional_json("/version", timeout) is not None:
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
