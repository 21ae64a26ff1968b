"""``verify --engine-url``: measure acceptance on a server that already serves the target with the draft.

    info = detect("http://10.0.0.5:8000", token, timeout=30.0)
    attached = run("http://10.0.0.5:8000", token, prompts, new_tokens=64, concurrency=8, timeout=300.0, draft=DRAFT)

The server is the user's own deployment (vLLM's OpenAI-compatible server, SGLang's, or trtllm-serve), on however
many GPUs or nodes it runs; this client needs no GPU and no torch, only the standard library. It sends the prompts as
token ids, greedy, a fixed number of new tokens with EOS ignored, with at most ``concurrency`` requests in flight, and
reads acceptance from the server's own records: vLLM's ``/metrics`` counters diffed around the run, SGLang's
per-request ``meta_info``, trtllm-serve's iteration statistics. Counts that other clients' requests moved are
reported in :attr:`AttachedRun.foreign_traffic`, never silently mixed in.

Every fault (server not reachable, not speculative, gone mid-run, a timeout, an HTTP error, a response without the
fields needed) is an :class:`AttachError` (exit 2) with a one-line message and a hint. The API key travels in the
``Authorization`` header only; no message, report or repr contains it.

The modules, each with one job:

- ``client``: the bounded HTTP client (deadline, size cap, same-origin redirects, proxies) and the URL checks;
- ``prometheus``: Prometheus text into samples;
- ``checks``: a server's numbers checked before they count, and the errors of impossible or missing ones;
- ``protocol``: what the engine protocols share (:class:`ServerInfo`, the counts of a run, the request loop);
- ``vllm``, ``sglang``, ``trtllm``: one engine's protocol each: how it describes itself, how it is asked for tokens
  and where its spec-decode counts are;
- ``detect``: which engine serves a URL;
- ``fingerprint``: whether the served draft is DRAFT;
- ``measure``: the server's settings (:class:`AttachedServer`), the first contact, one run to :class:`AttachedRun`.
"""

from eagle_convert.real_engine.attached.client import TOKEN_ENV, check_url, token_from_env
from eagle_convert.real_engine.attached.detect import ENGINES, detect
from eagle_convert.real_engine.attached.fingerprint import draft_identity
from eagle_convert.real_engine.attached.measure import AttachedRun, AttachedServer, reach, run
from eagle_convert.real_engine.attached.protocol import CounterMove, ServerInfo

__all__ = [
    "ENGINES",
    "TOKEN_ENV",
    "AttachedRun",
    "AttachedServer",
    "CounterMove",
    "ServerInfo",
    "check_url",
    "detect",
    "draft_identity",
    "reach",
    "run",
    "token_from_env",
]
