"""SGLang behind the engine level, in one of two modes, chosen by the device:

- ``load`` (CPU, the only mode these machines can run): SGLang's CPU kernels are not on the package index, so the
  released SGLang runs as far as it can without them, as its Scheduler would: the target worker, the EAGLE worker
  with the draft loaded by SGLang's own ``load_weights``, and the aux-capture set-up. The worker then reports what
  SGLang read and built (the ids, ``layers_to_capture``, the draft module's flags, where each file tensor went).
  Nothing is decoded: acceptance is not measured, and the report says so.
- ``decode`` (CUDA, ``scripts/engine-env --sglang --cuda``): greedy EAGLE3 decoding with SGLang's offline
  ``Engine``. Its scheduler runs in processes of its own (``spawn``), out of reach of an in-process hook, so the fed
  states are not captured there; acceptance comes from SGLang's per-request ``meta_info`` (``spec_verify_ct``
  verify steps produced ``completion_tokens`` tokens). SGLang reports no per-position counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eagle_convert.real_engine.base import EngineObservation, EngineRequest, run_worker

WORKER = "eagle_convert.real_engine.sglang_worker"
# SGLang's own switch for its CPU platform (the worker sets it too, before SGLang is imported)
LOAD_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}


def mode_for(device: str) -> str:
    return "decode" if device.startswith("cuda") else "load"


class SglangRunner:
    name = "sglang"

    def run(self, python: Path, request: EngineRequest, workdir: Path) -> list[EngineObservation]:
        mode = mode_for(request.device)
        out = []
        for i, draft in enumerate(request.drafts):  # one worker per draft: SGLang does not restart cleanly in-process
            payload: dict[str, Any] = {
                "mode": mode,
                "target": str(request.target),
                "drafts": [str(draft)],
                "k": request.k,
                "prompts": request.prompts,
                "max_tokens": request.new_tokens,
                "dtype": request.dtype,
                "baseline": request.baseline,
                "engine_args": request.engine_args,
            }
            where = workdir / f"draft-{i}"
            where.mkdir(parents=True, exist_ok=True)
            raw = run_worker(python, WORKER, payload, LOAD_ENV if mode == "load" else {}, where)
            out.append(observation(draft, raw, request.k))
        return out


def observation(draft: Path, raw: dict[str, Any], k: int) -> EngineObservation:
    """One worker result as an observation: a ``load`` result carries what SGLang built, a ``decode`` result what it
    measured."""
    common: dict[str, Any] = {
        "draft": draft,
        "engine": "sglang",
        "version": str(raw["version"]),
        "load_s": float(raw.get("load_s", 0.0)),
        "peak_rss_mib": float(raw.get("peak_rss_mib", 0.0)),
        "capture_path": None,
        "settings": raw.get("settings"),
        "not_observed": list(raw.get("not_observed", [])),
    }
    if raw.get("mode") == "load":
        built = dict(raw["draft"])
        return EngineObservation(
            **common,
            runner="load",
            requested_layers=raw.get("ids_read"),
            captured_layers=sorted(raw["layers_to_capture"]),
            flags=built_flags(built),
            drafts=0,
            draft_tokens=0,
            accepted_tokens=0,
            accepted_per_position=[],
            outputs=[],
            baseline_outputs=None,
            generate_s=0.0,
            not_measured=str(raw.get("not_measured") or "SGLang ran its loader and aux capture only"),
            target_class=raw.get("target_class"),
            built=built,
            tensors=dict(raw.get("tensors") or {}),
            extra={"standin_calls": raw.get("standin_calls", [])},
        )
    verify_steps = int(raw["verify_steps"])
    return EngineObservation(
        **common,
        runner="decode",
        requested_layers=None,
        captured_layers=None,
        flags={},
        drafts=verify_steps,
        draft_tokens=verify_steps * k,
        accepted_tokens=int(raw["completion_tokens"]) - verify_steps,
        accepted_per_position=[],
        outputs=raw["outputs"],
        baseline_outputs=raw.get("baseline_outputs"),
        generate_s=float(raw.get("generate_s", 0.0)),
    )


def built_flags(built: dict[str, Any]) -> dict[str, Any]:
    """The built draft in the names the vLLM runner reads off its module (engine_run's ``flags``)."""
    return {
        "draft_class": built.get("class"),
        "fc_norm": built.get("fc_norm"),
        "norm_output": built.get("norm_output"),
        "norm_before_fc": built.get("input_norm"),
        "norm_before_residual": built.get("norm_before_residual"),
        "num_aux_hidden_states": built.get("num_aux"),
    }
