"""Runs inside the engine environment (``.venv-engine``), never in eagle-convert's own: one vLLM process per run.

    python -m eagle_convert.engine_level.vllm_worker REQUEST.json

It imports nothing from eagle-convert (the engine environment need not have its dependencies), only the standard
library, torch, safetensors and vLLM. The request names the target, the draft, k, the prompts (token ids) and where to
write the result. In this process, before vLLM builds anything, it wraps two engine methods to record what the engine
really did:

- ``EagleModelMixin._set_aux_hidden_state_layers`` (the target side): the layer ids the runner asked the target to
  capture, as the engine stored them;
- ``combine_hidden_states`` of every EAGLE3 draft class (the draft side): the concatenated aux states the engine fed
  the draft's ``fc`` on the prefill of the capture prompt, and the built draft module, whose flags are
  then read off its attributes.

It runs greedy generation with the draft and reads the spec-decode counters from ``llm.get_metrics()`` around the
measured run, then prefills the first prompt with its continuation to capture the draft's inputs. Each draft of the
request gets its own engine, one after the other. With ``baseline`` it finally runs the target alone on the same
prompts, to tell whether speculation changed the output.
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


def _engine(request: dict[str, Any], with_draft: bool) -> Any:
    from vllm import LLM

    kwargs: dict[str, Any] = {
        "model": request["target"],
        "skip_tokenizer_init": True,
        "dtype": request["dtype"],
        "max_model_len": request["max_model_len"],
        "enforce_eager": True,
        "distributed_executor_backend": "uni",
        "disable_log_stats": False,
        "seed": 0,
        "enable_prefix_caching": False,  # the capture prompt must be prefilled whole, not from a cached prefix
    }
    if with_draft:
        kwargs["speculative_config"] = {
            "method": "eagle3",
            "model": request["draft"],
            "num_speculative_tokens": request["k"],
        }
    return LLM(**kwargs)


def _generate(llm: Any, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outputs]


def _one_draft(request: dict[str, Any], draft_dir: str, capture_path: str) -> dict[str, Any]:
    import torch
    from safetensors.torch import save_file

    started = time.perf_counter()
    llm = _engine({**request, "draft": draft_dir}, with_draft=True)
    loaded = time.perf_counter()
    before = _counters(llm)
    outputs = _generate(llm, request["prompts"], request["max_tokens"])
    generate_s = time.perf_counter() - loaded
    counters = _diff(_counters(llm), before)
    # The capture: the first prompt and its continuation, prefilled as one prompt; the draft's first call then
    # gets the aux states of every one of its tokens.
    capture_ids = (request["prompts"][0] + outputs[0])[: request["max_model_len"] - 2]
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
    }
    draft = _SEEN.get("draft_module")
    fc_input = _SEEN.get("fc_input")
    if draft is not None and fc_input is not None:
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
    del llm, draft
    _SEEN.clear()
    _release()
    return result


def _release() -> None:
    """Tear one engine down so that the next one in this process starts clean."""
    from vllm.distributed import cleanup_dist_env_and_memory

    gc.collect()
    cleanup_dist_env_and_memory()


def run(request: dict[str, Any]) -> dict[str, Any]:
    """One engine per draft in ``request["drafts"]``, one after the other, then (``baseline``) the target alone."""
    import vllm

    _install_hooks()
    runs = [
        _one_draft(request, draft, str(Path(request["workdir"]) / f"fed_hidden_states_{i}.safetensors"))
        for i, draft in enumerate(request["drafts"])
    ]
    result: dict[str, Any] = {"engine": "vllm", "version": vllm.__version__, "runs": runs}
    if request.get("baseline"):
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
