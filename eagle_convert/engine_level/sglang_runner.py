"""SGLang behind the engine level. GPU only: no CPU build of SGLang is on PyPI, so this runner has never run on the
machines that test eagle-convert; ``bench/gpu.sh`` runs it on a GPU box.

What it measures is less than the vLLM runner: SGLang's offline ``Engine`` runs the model in scheduler processes of
its own (started with ``spawn``), out of reach of an in-process hook, so the hidden states SGLang fed the draft and
the flags of its built draft module are not captured (reported as null). Acceptance comes from SGLang's per-request
``meta_info``: ``spec_verify_ct`` verify steps produced ``completion_tokens`` tokens, so the mean acceptance length
is their ratio; SGLang reports no per-position counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eagle_convert.engine_level.base import EngineObservation, EngineRequest, run_worker

WORKER = "eagle_convert.engine_level.sglang_worker"


class SglangRunner:
    name = "sglang"

    def run(self, python: Path, request: EngineRequest, workdir: Path) -> list[EngineObservation]:
        out = []
        for draft in request.drafts:  # one worker per draft: SGLang's engines do not restart cleanly in-process
            payload: dict[str, Any] = {
                "target": str(request.target),
                "drafts": [str(draft)],
                "k": request.k,
                "prompts": request.prompts,
                "max_tokens": request.new_tokens,
                "dtype": request.dtype,
                "baseline": request.baseline,
            }
            raw = run_worker(python, WORKER, payload, {}, workdir)
            out.append(
                EngineObservation(
                    draft=draft,
                    engine="sglang",
                    version=str(raw["version"]),
                    runner="sglang",
                    requested_layers=None,
                    captured_layers=None,
                    flags={},
                    drafts=int(raw["verify_steps"]),
                    draft_tokens=int(raw["verify_steps"]) * request.k,
                    accepted_tokens=int(raw["completion_tokens"]) - int(raw["verify_steps"]),
                    accepted_per_position=[],
                    outputs=raw["outputs"],
                    baseline_outputs=raw.get("baseline_outputs"),
                    capture_path=None,
                    load_s=float(raw["load_s"]),
                    generate_s=float(raw["generate_s"]),
                    peak_rss_mib=float(raw["peak_rss_mib"]),
                )
            )
        return out
