"""Runs inside the engine environment (``.venv-engine``), never in eagle-convert's own: one vLLM process per run.

    python -m eagle_convert.real_engine.vllm_worker REQUEST.json

It imports nothing from eagle-convert (the engine environment need not have its dependencies), only the standard
library, torch, safetensors and vLLM. The request names the target, the draft, k, the prompts (token ids) and where to
write the result. In this process, before vLLM builds anything, it wraps two engine methods to record what the engine
really did:

- ``EagleModelMixin._set_aux_hidden_state_layers`` (the target side): the layer ids the runner asked the target to
  capture, as the engine stored them;
- ``combine_hidden_states`` of every EAGLE3 draft class (the draft side): the concatenated aux states the engine fed
  the draft's ``fc`` on the prefill of the capture prompt, and the built draft module, whose flags are
  then read off its attributes.

Before anything is loaded, vLLM's own argument classes validate the settings (:func:`validate`): the engine level's
defaults (:data:`DEFAULTS`) with the user's ``engine_args`` over them; a refusal is written as ``settings_error``
and nothing runs. The result reports every setting the engine ran with (:func:`settings`, read back from the
engine's config) and what the hooks could not see under them (:func:`not_observed`, e.g. a multi-process executor).

It runs greedy generation with the draft and reads the spec-decode counters from ``llm.get_metrics()`` around the
measured run, then prefills the first prompt with its continuation to capture the draft's inputs. Each draft of the
request gets its own engine, one after the other. With ``baseline`` it finally runs the target alone on the same
prompts, to tell whether speculation changed the output.

When vLLM refuses to start with a draft (its loader has no parameter for a tensor, the target class cannot capture
aux states...), the worker starts the target alone with the same settings (:func:`_refusal`): if that starts, the
refusal is the draft's, written as the run's ``refused`` (a finding, EC728); if not, or the failure is the machine's
(memory, files, imports), it is raised and the process fails (the environment, exit 2).
"""

from __future__ import annotations

import gc
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

_SEEN: dict[str, Any] = {}
_DRAFT_MODULES = (
    ("vllm.model_executor.models.llama_eagle3", "Eagle3LlamaForCausalLM"),
    ("vllm.model_executor.models.qwen3_eagle3", "Eagle3Qwen3ForCausalLM"),
    ("vllm.model_executor.models.deepseek_eagle3", "Eagle3DeepseekV2ForCausalLM"),
)


def _install_hooks() -> None:
    import importlib

    import torch
    from vllm.model_executor.models.interfaces import EagleModelMixin

    set_layers = EagleModelMixin._set_aux_hidden_state_layers

    def recording_set_layers(self: Any, layers: tuple[int, ...]) -> None:
        set_layers(self, layers)
        _SEEN["requested_layers"] = [int(i) for i in layers]
        _SEEN["aux_hidden_state_layers"] = [int(i) for i in self.aux_hidden_state_layers]
        _SEEN["target_num_layers"] = len(getattr(self, "layers", ()))

    EagleModelMixin._set_aux_hidden_state_layers = recording_set_layers

    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        setup = GPUModelRunner._setup_eagle3_aux_hidden_state_outputs

        def recording_setup(self: Any) -> None:
            _SEEN["runner"] = "v1"
            _SEEN["runner_class"] = type(self).__name__
            setup(self)

        GPUModelRunner._setup_eagle3_aux_hidden_state_outputs = recording_setup
    except (ImportError, AttributeError):
        pass

    for module_name, class_name in _DRAFT_MODULES:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        _wrap_combine(cls, torch)


def _wrap_combine(cls: Any, torch: Any) -> None:
    combine = cls.combine_hidden_states

    def recording_combine(self: Any, hidden_states: Any) -> Any:
        if _SEEN.get("capture_armed") and "fc_input" not in _SEEN:
            _SEEN["fc_input"] = hidden_states.detach().to("cpu", torch.float32).clone()
            _SEEN["draft_module"] = self
        return combine(self, hidden_states)

    cls.combine_hidden_states = recording_combine


def _flags(draft: Any) -> dict[str, Any]:
    """The flags the built draft module runs with, read off its attributes (llama_eagle3.py / qwen3_eagle3.py /
    deepseek_eagle3.py keep them on ``.model``)."""
    model = draft.model
    layer = model.layers[0]
    residual_norm = getattr(getattr(layer, "_residual_norm", None), "__name__", None)
    return {
        "draft_class": type(draft).__name__,
        "use_aux_hidden_state": bool(getattr(model, "use_aux_hidden_state", True)),
        "num_aux_hidden_states": int(getattr(model, "num_aux_hidden_states", 0) or 0),
        "fc_norm": getattr(model, "fc_norm", None) is not None,
        "norm_before_fc": bool(getattr(model, "norm_before_fc", False)),
        "norm_output": bool(getattr(model, "norm_output", False)),
        "norm_before_residual": residual_norm == "_norm_before_residual" if residual_norm else None,
        "num_draft_layers": len(model.layers),
    }


def _counters(llm: Any) -> dict[str, Any]:
    """The spec-decode counters of ``llm.get_metrics()``: totals and the per-position vector."""
    out: dict[str, Any] = {}
    for metric in llm.get_metrics():
        name = metric.name.removeprefix("vllm:")
        if name.startswith("spec_decode"):
            out[name] = list(metric.values) if hasattr(metric, "values") else metric.value
    return out


def _diff(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in after.items():
        prior = before.get(name)
        if isinstance(value, list):
            prior = prior if isinstance(prior, list) else [0] * len(value)
            out[name] = [a - b for a, b in zip(value, prior, strict=False)]
        else:
            out[name] = value - (prior or 0)
    return out


# The settings the engine level runs vLLM with, before the user's (--engine-arg) go over them. A user may override
# any of these; the ones that would change what is measured (model, speculative_config, disable_log_stats) are
# refused before the child starts (engine_args.REFUSED).
DEFAULTS: dict[str, Any] = {
    "skip_tokenizer_init": True,  # prompts are token ids; nothing is detokenized
    "enforce_eager": True,  # the capture hook wraps a Python method: a compiled or graph-captured draft bypasses it
    "distributed_executor_backend": "uni",  # the model runs in this process, where the capture hooks are
    "seed": 0,
    "enable_prefix_caching": False,  # the capture prompt must be prefilled whole, not from a cached prefix
}
IN_PROCESS_BACKENDS = ("uni", None)  # executors that run the model in this process (None: vLLM picks uni for 1 rank)


def _kwargs(request: dict[str, Any], with_draft: bool) -> dict[str, Any]:
    """The keyword arguments of ``LLM(...)``: the engine level's defaults, then the user's settings over them."""
    user = request.get("engine_args", {})
    defaults = dict(DEFAULTS)
    if _ranks(user) > 1 and "distributed_executor_backend" not in user:
        del defaults["distributed_executor_backend"]  # more ranks: vLLM's own choice (mp on one node, else ray)
    kwargs: dict[str, Any] = {
        "model": request["target"],
        "dtype": request["dtype"],
        "max_model_len": request["max_model_len"],
        **defaults,
        **user,
        "disable_log_stats": False,  # the spec-decode counters need stats
    }
    if with_draft:
        kwargs["speculative_config"] = {
            "method": "eagle3",
            "model": request["draft"],
            "num_speculative_tokens": request["k"],
        }
    return kwargs


def _ranks(args: dict[str, Any]) -> int:
    """Tensor x pipeline parallel size asked for (1 when not given or not integers: vLLM then says what is wrong)."""
    sizes = (args.get("tensor_parallel_size", 1), args.get("pipeline_parallel_size", 1))
    return sizes[0] * sizes[1] if all(type(v) is int for v in sizes) else 1


def _engine(request: dict[str, Any], with_draft: bool) -> Any:
    from vllm import LLM

    return LLM(**_kwargs(request, with_draft))


class _Validated(Exception):  # not an error: it carries the config out of LLM.__init__
    def __init__(self, config: Any) -> None:
        super().__init__("validated")
        self.config = config


def validate(request: dict[str, Any]) -> dict[str, Any] | None:
    """vLLM's own validation of the settings, before any model is loaded: ``LLM(**kwargs)`` as released, stopped
    where it would build the engine, after ``EngineArgs(**kwargs)`` (an unknown key: its TypeError) and
    ``create_engine_config()`` (a bad value: the config class's error; it reads the target's and the draft's
    config.json, never their weights). None when vLLM takes them; else the structured refusal
    ``{"message", "key", "close"}`` the runner turns into a typed error (exit 2)."""
    import dataclasses
    import difflib
    import inspect

    from vllm import LLM
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    known = {f.name for f in dataclasses.fields(EngineArgs)} | set(inspect.signature(LLM.__init__).parameters)
    unknown = [k for k in request.get("engine_args", {}) if k not in known]
    build = LLMEngine.from_engine_args

    def stop(cls: Any, engine_args: Any, usage_context: Any = None, *args: Any, **kwargs: Any) -> Any:
        raise _Validated(engine_args.create_engine_config(usage_context))

    LLMEngine.from_engine_args = classmethod(stop)
    try:
        LLM(**_kwargs({**request, "draft": request["drafts"][0]}, with_draft=True))
    except _Validated as validated:
        parallel = validated.config.parallel_config
        if parallel.world_size > 1 and parallel.distributed_executor_backend == "uni":  # vLLM would wait forever
            return {
                "message": f"distributed_executor_backend=uni runs one rank in this process, and the world size is "
                f"{parallel.world_size}: the other ranks would never start (use mp, or ray across nodes)",
                "key": None,
                "close": [],
            }
        return None
    except Exception as exc:  # noqa: BLE001 (any refusal by vLLM's argument classes is reported as vLLM's own)
        key = unknown[0] if unknown else None
        close = difflib.get_close_matches(key, sorted(known), n=3) if key else []
        return {"message": _one_line(exc), "key": key, "close": close}
    finally:
        LLMEngine.from_engine_args = build
    return None


def _one_line(exc: BaseException) -> str:
    """``Type: message`` of an engine exception without pydantic's URL lines, whitespace collapsed."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and "errors.pydantic.dev" not in ln]
    lines = [ln.split(" [type=")[0] for ln in lines]  # pydantic's "[type=..., input_value=...]" tail
    return f"{type(exc).__name__}: {' '.join(lines)}"


def settings(llm: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every setting the engine was built with (``kwargs``), each read back from the engine's own config where a
    part of it (model, cache, parallel, scheduler, load, device config) has a field of that name, else as passed;
    and :data:`ALWAYS_REPORTED` as the engine chose them."""
    config = llm.llm_engine.vllm_config
    parts = [getattr(config, name, None) for name in _CONFIG_PARTS]
    out: dict[str, Any] = {}
    for key in [*kwargs, *(k for k in ALWAYS_REPORTED if k not in kwargs)]:
        passed = kwargs.get(key)
        holder = next((p for p in parts if p is not None and key != "model" and hasattr(p, key)), None)
        if holder is not None:
            out[key] = _plain(getattr(holder, key), passed)
        elif key in kwargs:
            out[key] = passed
    return out


_CONFIG_PARTS = ("model_config", "cache_config", "parallel_config", "scheduler_config", "load_config", "device_config")
# reported as the engine chose them even when nobody passed them: how the model was laid out and scheduled
ALWAYS_REPORTED = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "distributed_executor_backend",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "quantization",
)


def _plain(value: Any, passed: Any) -> Any:
    """A config value as JSON: scalars as they are, a torch dtype as its name, an enum as its value; anything else
    (a nested config object) as it was passed."""
    import enum

    import torch

    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, enum.Enum):
        return value.value if isinstance(value.value, bool | int | float | str) else value.name
    return passed


def not_observed(llm: Any, seen: dict[str, Any], capture_tokens: int) -> list[str]:
    """What the capture hooks could not see in this run, each with why (the acceptance counters are the engine's
    own and are always read)."""
    parallel = llm.llm_engine.vllm_config.parallel_config
    backend = parallel.distributed_executor_backend
    backend = getattr(backend, "__name__", backend)
    elsewhere = backend not in IN_PROCESS_BACKENDS or parallel.world_size > 1
    why = (
        f"the capture hooks run in this process, and distributed_executor_backend={backend} with world size "
        f"{parallel.world_size} runs the model in worker processes (the in-process executor is uni, one rank)"
        if elsewhere
        else None
    )
    out = []
    if "requested_layers" not in seen:
        out.append(f"aux layer ids the runner requested: {why or 'the target-side hook did not run'}")
    fc_input = seen.get("fc_input")
    if fc_input is None:
        reason = why or (
            "the draft-side hook did not run (a compiled or graph-captured draft bypasses it: enforce_eager=True)"
        )
        out.append(f"aux hidden states fed to the draft and the draft's flags: {reason}")
    elif fc_input.shape[0] < capture_tokens:
        out.append(
            f"aux hidden states fed to the draft: it was fed {fc_input.shape[0]} of the capture prompt's "
            f"{capture_tokens} positions in its first call (a cached prefix, enable_prefix_caching, or a chunked "
            "prefill, max_num_batched_tokens, feeds the rest elsewhere)"
        )
    return out


def _generate(llm: Any, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outputs]


def _one_draft(request: dict[str, Any], draft_dir: str, capture_path: str) -> dict[str, Any]:
    import torch
    from safetensors.torch import save_file

    started = time.perf_counter()
    draft_request = {**request, "draft": draft_dir}
    try:
        llm = _engine(draft_request, with_draft=True)
    except Exception as exc:  # noqa: BLE001 (a refusal of the draft is the observation: _refusal tells them apart)
        return _refusal(request, draft_dir, exc, time.perf_counter() - started)
    loaded = time.perf_counter()
    before = _counters(llm)
    outputs = _generate(llm, request["prompts"], request["max_tokens"])
    generate_s = time.perf_counter() - loaded
    counters = _diff(_counters(llm), before)
    # The capture: the first prompt and its continuation, prefilled as one prompt; the draft's first call then
    # gets the aux states of every one of its tokens.
    max_model_len = int(llm.llm_engine.vllm_config.model_config.max_model_len)
    capture_ids = (request["prompts"][0] + outputs[0])[: max_model_len - 2]
    _SEEN["capture_armed"] = True
    _generate(llm, [capture_ids], 1)
    _SEEN["capture_armed"] = False
    result: dict[str, Any] = {
        "draft": draft_dir,
        "runner": _SEEN.get("runner", "unknown"),
        "runner_class": _SEEN.get("runner_class"),
        "requested_layers": _SEEN.get("requested_layers"),
        "aux_hidden_state_layers": _SEEN.get("aux_hidden_state_layers"),
        "target_num_layers": _SEEN.get("target_num_layers"),
        "counters": counters,
        "outputs": outputs,
        "load_s": round(loaded - started, 3),
        "generate_s": round(generate_s, 3),
        "settings": settings(llm, _kwargs(draft_request, with_draft=True)),
        "not_observed": not_observed(llm, _SEEN, len(capture_ids)),
    }
    draft = _SEEN.get("draft_module")
    fc_input = _SEEN.get("fc_input")
    if draft is not None and fc_input is not None and fc_input.shape[0] >= len(capture_ids):
        result["flags"] = _flags(draft)
        k = result["flags"]["num_aux_hidden_states"] or 1
        rows = len(capture_ids)
        states = torch.stack(fc_input[:rows].chunk(k, dim=-1))  # [K, T, Ht]
        save_file(
            {"token_ids": torch.tensor(capture_ids, dtype=torch.int64), "hidden_states": states.contiguous()},
            capture_path,
        )
        result["capture_rows"] = int(fc_input.shape[0])
        result["capture_path"] = capture_path
    elif draft is not None:
        result["flags"] = _flags(draft)  # built as it was, whatever it was fed
    del llm, draft
    _SEEN.clear()
    _release()
    return result


# failures that say nothing about the draft: the machine or the installation (exit 2, never a finding)
_ENVIRONMENT = (MemoryError, OSError, ImportError)


def _refusal(request: dict[str, Any], draft_dir: str, exc: Exception, load_s: float) -> dict[str, Any]:
    """The run of a draft vLLM refused to load at start-up: its exception, when the target alone starts with the same
    settings (the refusal is then the draft's or its config's). A failure of the environment, or one the target alone
    repeats, is raised as it was (the runner reports it as the engine failing, exit 2)."""
    if isinstance(exc, _ENVIRONMENT) or type(exc).__name__ == "OutOfMemoryError":
        raise exc
    runner = _SEEN.get("runner", "unknown")
    _SEEN.clear()
    _release()
    try:
        alone = _engine(request, with_draft=False)
    except Exception as failure:  # not the draft: the original error goes on, this one as its cause
        raise exc from failure
    del alone
    _SEEN.clear()
    _release()
    print(f"[eagle-convert] vLLM refused the draft; the target alone starts: {_one_line(exc)}", file=sys.stderr)
    return {
        "draft": draft_dir,
        "runner": runner,
        "refused": {"error": type(exc).__name__, "message": _one_line(exc)},
        "outputs": [],
        "load_s": round(load_s, 3),
        "generate_s": 0.0,
        "settings": None,
        "not_observed": [],
    }


def _release() -> None:
    """Tear one engine down so that the next one in this process starts clean."""
    from vllm.distributed import cleanup_dist_env_and_memory

    gc.collect()
    cleanup_dist_env_and_memory()


def run(request: dict[str, Any]) -> dict[str, Any]:
    """One engine per draft in ``request["drafts"]``, one after the other, then (``baseline``) the target alone."""
    import vllm

    refused = validate(request)
    if refused is not None:  # before any model is loaded
        return {"engine": "vllm", "version": vllm.__version__, "settings_error": refused}
    _install_hooks()
    runs = [
        _one_draft(request, draft, str(Path(request["workdir"]) / f"fed_hidden_states_{i}.safetensors"))
        for i, draft in enumerate(request["drafts"])
    ]
    result: dict[str, Any] = {"engine": "vllm", "version": vllm.__version__, "runs": runs}
    if request.get("baseline") and not all("refused" in r for r in runs):  # nothing to compare a refusal with
        alone = _engine(request, with_draft=False)
        result["baseline_outputs"] = _generate(alone, request["prompts"], request["max_tokens"])
    result["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    result = run(request)
    Path(request["result_path"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
