"""The engine's own settings at the engine level: ``--engine-arg KEY=VALUE`` and ``--engine-config FILE``.

Keys are the engine's own Python names: vLLM's ``LLM(...)`` keywords (its ``EngineArgs`` fields), SGLang's
``ServerArgs`` fields. This module only parses them and refuses the few the engine level must set itself; the engine's
own argument classes validate everything else in the child process, before any model is loaded (``vllm_worker`` /
``sglang_worker``), and an unknown key or a bad value comes back as :class:`EngineArgsError` with the engine's message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from eagle_convert import engines
from eagle_convert.errors import EngineArgsError, InputError, UsageError
from eagle_convert.read.regular import read_text
from eagle_convert.version import docs_url

# The keys the engine level sets and a user may not: each would change what is measured, not how the engine runs.
# (The settings it sets and a user may override, e.g. dtype, seed, enforce_eager, distributed_executor_backend, are
# the worker's defaults; see docs/engine-level.md, "The engine's own settings".)
REFUSED: dict[str, dict[str, str]] = {
    "vllm": {
        "model": "the target is --target",
        "speculative_config": "the draft is the checkpoint verified and K is --probe-steps",
        "spec_method": "the engine level runs method eagle3",
        "spec_model": "the draft is the checkpoint verified",
        "spec_tokens": "K is --probe-steps",
        "disable_log_stats": "acceptance is read from the engine's spec-decode counters, which need stats on",
    },
    "sglang": {
        "model_path": "the target is --target",
        "speculative_algorithm": "the engine level runs EAGLE3",
        "speculative_draft_model_path": "the draft is the checkpoint verified",
        "speculative_num_steps": "K is --probe-steps",
        "speculative_eagle_topk": "the engine level decodes one chain (top-k 1), as the probe predicts",
        "speculative_num_draft_tokens": "it is K + 1 (one chain of --probe-steps)",
    },
}
KEYS_HINT = {
    "vllm": "keys are the keyword arguments of vLLM's LLM(...) (its EngineArgs fields, e.g. tensor_parallel_size, "
    "max_num_seqs); `vllm serve --help` lists them with dashes",
    "sglang": "keys are the fields of SGLang's ServerArgs (e.g. tp_size, mem_fraction_static); "
    "`python -m sglang.launch_server --help` lists them with dashes",
}


def parse_value(text: str) -> Any:
    """A value as JSON when it parses (numbers, booleans, null, lists, objects), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_engine_args(items: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` items as a dict (a later key wins); UsageError for an item without ``=`` or without a key."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(
                f"--engine-arg {item!r} is not KEY=VALUE",
                hint="e.g. --engine-arg tensor_parallel_size=2 --engine-arg 'compilation_config={\"level\": 0}'",
            )
        out[key] = parse_value(value)
    return out


def read_engine_config(path: Path) -> dict[str, Any]:
    """``--engine-config FILE``: one JSON object (``.json``) or YAML mapping (any other suffix) of engine settings."""
    import yaml  # type: ignore[import-untyped,unused-ignore]  # no stubs in the test extra

    text = read_text(path, "the engine config")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(
            f"not valid {kind}: {first}", path=path, hint="the engine config is one mapping of engine settings"
        ) from exc
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise InputError(
            f"the engine config must be one mapping of setting names to values, not {type(data).__name__}",
            path=path,
            hint='e.g. tensor_parallel_size: 2 (YAML) or {"tensor_parallel_size": 2} (JSON)',
        )
    return dict(data)


def engine_args(items: Iterable[str] = (), config: Path | None = None) -> dict[str, Any]:
    """The engine settings a user asked for: ``--engine-config`` first, then each ``--engine-arg`` over it."""
    out = read_engine_config(config) if config is not None else {}
    out.update(parse_engine_args(items))
    return out


def check_engine_args(engine: str, args: Mapping[str, Any]) -> None:
    """EngineArgsError for a key the engine level sets itself (:data:`REFUSED`); the engine validates the rest."""
    refused = REFUSED.get(engine, {})
    for key in args:
        if key in refused:
            raise EngineArgsError(
                f"--engine-arg {key} is set by the engine level itself ({refused[key]}); it cannot be passed to "
                f"{engine}",
                hint="drop it: every other setting of the engine may be passed "
                f"({docs_url('docs/engine-level.md', 'the-engines-own-settings')})",
            )


def settings_error(engine: str, error: Mapping[str, Any]) -> EngineArgsError:
    """The worker's structured refusal (``{"message", "key", "close"}``) as the typed error: the engine's own
    message, and a hint with the keys it knows that are closest to an unknown one."""
    label = engines.label(engine)
    close = list(error.get("close") or [])
    if error.get("key"):  # an unknown key: the names the engine knows
        hint = KEYS_HINT.get(engine, "")
        if close:
            hint = f"did you mean {' or '.join(close)}? " + hint
    else:  # a value the engine's own checks refused
        hint = (
            f"{label} checked the value with the settings of this run and the pair's configs; fix the setting it names"
        )
    return EngineArgsError(f"{label} refused the engine settings: {error['message']}", hint=hint)
