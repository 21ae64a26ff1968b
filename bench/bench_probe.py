"""Benchmark: the default acceptance probe on a real target, and its text generation with and without a KV cache.

    .venv/bin/python bench/bench_probe.py [--repeat 1] [--prompts 8] [--tokens 32]

The target is SmolLM2-135M-Instruct dequantized to float32 (``fixtures/smollm2.py``), the draft the committed
``fixtures/smollm2-eagle3`` (``fixtures/smollm2_pair.py``); everything runs on the CPU in float32.

* ``generation``: the same greedy continuations of the first ``--prompts`` default prompts, ``--tokens`` new tokens
  each, by ``Target.generate`` (packed passes, every position recomputed for every new token) and by the KV-cached
  ``reference/llama_decode.generate_greedy`` (checked equal), alternating order each repeat;
* ``default probe``: ``run_probe`` with no text given (>= 4,096 scored positions), wall time and positions.

Reports medians, ratios, the load average (the machine may be shared) and the probe's table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_reference import _cpu
from eagle_convert import probe, probe_target, probe_text
from eagle_convert.reference.llama_decode import generate_greedy
from fixtures.smollm2_pair import smollm2_pair


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--skip-generation", action="store_true")
    args = parser.parse_args()
    target_dir, draft_dir = smollm2_pair()
    target = probe_target.Target(target_dir)
    print(
        f"machine: {_cpu()}, {os.cpu_count()} cpus, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"load average at start {os.getloadavg()[0]:.1f}"
    )
    if not args.skip_generation:
        prompts = probe_text.prompt_pool(target_dir, target.vocab_size)[: args.prompts]

        def recompute() -> list[list[int]]:
            return target.generate(prompts, args.tokens)

        def cached() -> list[list[int]]:
            gen = generate_greedy(target._cfg, target.weights, prompts, args.tokens)
            return [s + [0] * (len(p) + args.tokens - len(s)) for s, p in zip(gen.sequences, prompts, strict=True)]

        runs: dict[str, list[float]] = {"recomputed": [], "KV cache": []}
        outputs: dict[str, list[list[int]]] = {}
        for i in range(args.repeat):
            order = [("recomputed", recompute), ("KV cache", cached)]
            for label, fn in order[i % 2 :] + order[: i % 2]:
                start = time.perf_counter()
                outputs[label] = fn()
                runs[label].append(time.perf_counter() - start)
        same = sum(a[: len(p) + 8] == b[: len(p) + 8] for a, b, p in zip(*outputs.values(), prompts, strict=True))
        med = {k: statistics.median(v) for k, v in runs.items()}
        print(f"generation, {args.prompts} prompts x {args.tokens} new tokens, median of {args.repeat}:")
        for k, v in runs.items():
            print(f"{k:>12}: {med[k]:7.2f} s  (runs: {' '.join(f'{s:.2f}' for s in v)})")
        print(f"KV cache / recomputed: time {med['KV cache'] / med['recomputed']:.2f}; first 8 tokens equal: {same}")
    start = time.perf_counter()
    result = probe.run_probe(draft_dir, target_dir)
    seconds = time.perf_counter() - start
    print(
        f"default probe: {seconds:.1f} s, {result.positions} positions of {result.sequences} sequences, "
        f"{len(result.rows)} readings, load average now {os.getloadavg()[0]:.1f}"
    )
    for r in result.rows:
        lo, hi = r.top1_ci
        print(
            f"  {r.reading:<45} hs{r.hidden_states} top-1 {r.top1:.3f} [{lo:.3f}, {hi:.3f}] "
            f"accept len {r.acceptance_length:.3f} d-top1 {r.delta_top1:+.3f} p {r.p_value:.1e} {r.verdict}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
