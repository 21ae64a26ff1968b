"""The user's deployment settings that decide what an engine release does with the draft, at every level.

TensorRT-LLM reads no aux-layer ids from the draft: the layers come from the deployment's
``speculative_config.eagle3_layers_to_capture`` (``extra_llm_api_options`` YAML). TokenSpeed reads the draft's ids
unless its server is started with ``--eagle3-layers-to-capture``, which replaces them. vLLM 0.33's target support
depends on the deployment's ``platform`` and ``pipeline_parallel_size``. The user gives these as
``--engine-arg KEY=VALUE`` or the same keys in ``--engine-config``; they are taken out of the engine settings here,
checked, and handed to every release's view (``engine_view(..., deployment=...)``). Any other engine setting stays an
engine-level setting, and ``pipeline_parallel_size``, a setting of vLLM itself, is passed on to the engine level as
well.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from eagle_convert.errors import UsageError
from eagle_convert.releases import Release

CAPTURE_KEY = "eagle3_layers_to_capture"
# the deployment keys each engine reads at every level, not only when the engine level starts it
DEPLOYMENT_KEYS: Mapping[str, tuple[str, ...]] = {
    "trtllm": (CAPTURE_KEY,),
    "vllm": ("pipeline_parallel_size", "platform"),
    "tokenspeed": (CAPTURE_KEY,),  # its server argument --eagle3-layers-to-capture, which replaces the draft's ids
}
# the engines whose captured layers are the deployment's alone: they never read the draft's ids (TensorRT-LLM)
CAPTURE_ONLY_FROM_DEPLOYMENT = frozenset({"trtllm"})
# the subjects of findings about a deployment setting: they live in no file of the draft
DEPLOYMENT_SUBJECTS = frozenset(k for keys in DEPLOYMENT_KEYS.values() for k in keys)
# deployment keys that are settings of the engine the engine level starts as well (they reach it unchanged)
ENGINE_SETTINGS_TOO = frozenset({"pipeline_parallel_size"})


def capture_from_deployment(engine: str) -> bool:
    """The engine takes the captured layers from the deployment, never from the draft's ids (TensorRT-LLM)."""
    return engine in CAPTURE_ONLY_FROM_DEPLOYMENT


def reads_capture_setting(engine: str) -> bool:
    """The engine reads ``eagle3_layers_to_capture`` from the deployment: as its only source (TensorRT-LLM), or as
    one that replaces the draft's ids when given (TokenSpeed)."""
    return CAPTURE_KEY in DEPLOYMENT_KEYS.get(engine, ())


EXAMPLE = f"--engine-arg {CAPTURE_KEY}=[1,5,9]"


def deployment_keys(releases: Iterable[Release]) -> tuple[str, ...]:
    """The deployment keys the selected releases read (empty when none reads any)."""
    engines = dict.fromkeys(r.engine for r in releases)
    return tuple(dict.fromkeys(k for e in engines for k in DEPLOYMENT_KEYS.get(e, ())))


def split_settings(settings: Mapping[str, Any], releases: Iterable[Release]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the deployment settings the selected releases read, checked; the engine settings: every other one, and
    those of :data:`ENGINE_SETTINGS_TOO`)."""
    chosen = list(releases)
    keys = deployment_keys(chosen)
    deployment = {k: v for k, v in settings.items() if k in keys}
    rest = {k: v for k, v in settings.items() if k not in keys or k in ENGINE_SETTINGS_TOO}
    return check_deployment(deployment, chosen), rest


def check_deployment(deployment: Mapping[str, Any], releases: Iterable[Release]) -> dict[str, Any]:
    """``deployment`` when every key is one a selected release reads and every value is valid; UsageError naming the
    key and the fix otherwise."""
    chosen = list(releases)
    keys = deployment_keys(chosen)
    for key, value in deployment.items():
        if key not in keys:
            reads = [e for e, ks in DEPLOYMENT_KEYS.items() if key in ks]
            known = "; ".join(f"{', '.join(ks)} with a {e} release selected" for e, ks in DEPLOYMENT_KEYS.items())
            raise UsageError(
                f"{key} is read by {', '.join(reads)} releases only, and none is selected"
                if reads
                else f"{key} is not a deployment setting that decides what a release feeds (those are: {known})",
                hint=f"add a release that reads it (e.g. --engine {reads[0]}), or drop it" if reads else "drop it",
            )
        if key == CAPTURE_KEY and not _layer_ids(value):
            raise UsageError(
                f"{CAPTURE_KEY} must be a list of non-negative layer ids, not {value!r}",
                hint=f"e.g. {EXAMPLE} (TensorRT-LLM's convention: id i is the output of decoder layer i; "
                "TokenSpeed's: its target class's reading of the draft's ids); quote it in the shell",
            )
        if key == "pipeline_parallel_size" and not (_int(value) and value >= 1):
            raise UsageError(f"pipeline_parallel_size must be a positive integer, not {value!r}", hint="e.g. 2")
        if key == "platform" and not (isinstance(value, str) and value.strip()):
            raise UsageError(f"platform must be vLLM's device name, not {value!r}", hint="e.g. cuda, rocm or xpu")
    return dict(deployment)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _layer_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_int(i) and i >= 0 for i in value)
