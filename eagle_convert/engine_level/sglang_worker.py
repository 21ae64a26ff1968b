"""Runs inside an SGLang environment on a GPU box (see sglang_runner): greedy EAGLE3 decoding with SGLang's offline
``Engine``, and the target alone for comparison. Imports nothing from eagle-convert. Untested on CPU machines."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any


def _generate(engine: Any, prompts: list[list[int]], max_tokens: int) -> list[dict[str, Any]]:
    params = {"temperature": 0.0, "max_new_tokens": max_tokens, "ignore_eos": True}
    out: list[dict[str, Any]] = engine.generate(input_ids=prompts, sampling_params=params)
    return out


def run(request: dict[str, Any]) -> dict[str, Any]:
    import sglang

    common = {"model_path": request["target"], "skip_tokenizer_init": True, "dtype": request["dtype"]}
    started = time.perf_counter()
    engine = sglang.Engine(
        **common,
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=request["drafts"][0],
        speculative_num_steps=request["k"],
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=request["k"] + 1,
    )
    loaded = time.perf_counter()
    outputs = _generate(engine, request["prompts"], request["max_tokens"])
    generate_s = time.perf_counter() - loaded
    engine.shutdown()
    result: dict[str, Any] = {
        "version": sglang.__version__,
        "outputs": [list(o["output_ids"]) for o in outputs],
        "completion_tokens": sum(int(o["meta_info"]["completion_tokens"]) for o in outputs),
        "verify_steps": sum(int(o["meta_info"].get("spec_verify_ct", 0)) for o in outputs),
        "load_s": round(loaded - started, 3),
        "generate_s": round(generate_s, 3),
    }
    if request.get("baseline"):
        alone = sglang.Engine(**common)
        alone_outputs = _generate(alone, request["prompts"], request["max_tokens"])
        result["baseline_outputs"] = [list(o["output_ids"]) for o in alone_outputs]
        alone.shutdown()
    result["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    Path(request["result_path"]).write_text(json.dumps(run(request)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
