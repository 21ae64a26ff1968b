"""The serving engines eagle-convert models, declared once.

Every list of engines the tool spells is derived from :data:`ENGINES`: the ``--engine`` keywords and their help, the
default selection (``deployed``, ``both``), the engines a rule concerns, the runners of the engine level, the servers
``--engine-url`` measures, the names prose and messages use, and the JSON schemas' enums (checked against this by
``tests/releases/test_engine_vocabulary.py``). A new engine is one entry here plus its release records
(``releases/<name>.py``, registered in ``releases/__init__.py``); the tests then say what else it needs.

Here too, light to import for the command line: :class:`AttachedServer`, the user's running server that
``verify --engine-url`` measures, with its options declared on its fields (eagle_convert/options.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from eagle_convert.options import option


@dataclass(frozen=True)
class Engine:
    """One serving engine: its name and what the tool does with it."""

    name: str  # what --engine, the release names (name@version) and the JSON reports say
    label: str  # how prose and messages name it
    reads_draft_ids: bool  # it reads the aux-layer ids from the draft config (else a deployment setting picks them)
    default: bool  # in the default selections: `deployed` (its deployed releases) and `both` (its newest)
    environment: str | None = None  # the folder `scripts/engine-env` builds for the engine level (None: not run here)
    attach: bool = False  # `verify --engine-url` measures it on a running server, from its spec-decode counters


ENGINES: tuple[Engine, ...] = (
    Engine("vllm", "vLLM", reads_draft_ids=True, default=True, environment=".venv-engine", attach=True),
    Engine("sglang", "SGLang", reads_draft_ids=True, default=True, environment=".venv-sglang", attach=True),
    Engine("trtllm", "TensorRT-LLM", reads_draft_ids=False, default=False, attach=True),
    Engine("tokenspeed", "TokenSpeed", reads_draft_ids=True, default=False),
)
BY_NAME = {e.name: e for e in ENGINES}


def names(where: Callable[[Engine], bool] = lambda e: True) -> tuple[str, ...]:
    """The names of the engines ``where`` holds for, in declaration order."""
    return tuple(e.name for e in ENGINES if where(e))


NAMES = names()  # every modelled engine
DEFAULT_NAMES = names(lambda e: e.default)  # the engines of `deployed` and `both`, in this order
ID_READING = names(lambda e: e.reads_draft_ids)  # the engines that read the aux-layer ids from the draft config
RUNNERS = names(lambda e: e.environment is not None)  # the engines `verify --level engine` starts
ATTACHABLE = names(lambda e: e.attach)  # the engines whose running server `verify --engine-url` measures
MEASURED = names(lambda e: e.environment is not None or e.attach)  # the engines a verify report's engine run names
DTYPE_AUTO = "auto"  # --dtype auto at --level engine: the engine's own auto (real_engine/base.py engine_dtype)
NEW_TOKENS = 64  # --engine-tokens: new tokens per prompt of an engine run, in-process or on an attached server
MAX_NEW_TOKENS = 4096  # --engine-tokens at most

# verify -h: the panels of the engine level's options
ENGINE_PANEL = "Engine (--level engine)"
SERVER_PANEL = "Server (--engine-url: the engine level on a running server)"


def new_tokens_option() -> Any:
    """``--engine-tokens``: one option of both engine runs, the engine started here and the attached server."""
    return option(
        NEW_TOKENS,
        name="engine_tokens",
        min=1,
        max=MAX_NEW_TOKENS,
        panel=ENGINE_PANEL,
        help="--level engine and --engine-url: new tokens the engine generates per prompt (EOS ignored).",
    )


@dataclass(frozen=True)
class AttachedServer:
    """Where and how to reach the running server (``--engine-url`` and its options)."""

    url: str = option(
        name="engine_url",
        metavar="URL",
        panel=SERVER_PANEL,
        help="Measure the draft on a running server that serves --target with it (vLLM's OpenAI-compatible server, "
        f"SGLang's or trtllm-serve, detected; releases of one engine, e.g. --engine {'|'.join(ATTACHABLE)}, name it): "
        "the engine level without starting an engine, so --target needs only its config. Implies --level engine.",
    )
    token: str | None = option(  # else $EAGLE_CONVERT_ENGINE_URL_TOKEN (the command line reads it); never printed
        None,
        name="engine_url_token",
        metavar="KEY",
        panel=SERVER_PANEL,
        help="--engine-url: the server's API key (default: $EAGLE_CONVERT_ENGINE_URL_TOKEN); never printed.",
    )
    concurrency: int = option(
        8,
        name="engine_concurrency",
        min=1,
        max=1024,
        panel=SERVER_PANEL,
        help="--engine-url: requests in flight at most.",
    )
    timeout: float = option(
        300.0,
        name="engine_timeout",
        min=1.0,
        metavar="SECONDS",
        panel=SERVER_PANEL,
        help="--engine-url: seconds one request may take.",
    )
    engine: str | None = None  # the server's engine, not detected: the one engine of the --engine selection
    new_tokens: int = new_tokens_option()  # --engine-tokens: new tokens asked for per prompt


def label(name: str) -> str:
    """How prose names the engine ``name`` (``vLLM``); an unknown name as it is."""
    found = BY_NAME.get(name)
    return found.label if found is not None else name


def spelled(items: Iterable[str], last: str = "or") -> str:
    """``vllm, sglang or trtllm``: a list of names as a sentence says it."""
    words = list(items)
    if len(words) < 2:
        return "".join(words)
    return f"{', '.join(words[:-1])} {last} {words[-1]}"
