"""Benchmark: the probe's default text generation on a real target, packed passes against one sequence at a time.

    .venv/bin/python bench/bench_probe.py [--repeat 3] [--sequences 8] [--tokens 31]

The target is SmolLM2-135M-Instruct dequantized to float32 (``fixtures/smollm2.py``; the first run writes it), run
by the streaming reference forward on the CPU. Both sides generate the same greedy continuations of the same seeded
one-token prompts (checked equal):

* ``one at a time``: ``Target.generate([prompt])`` for each prompt (one pass over the weights per sequence per token);
* ``packed``: ``Target.generate(prompts)`` (all sequences packed into one pass per token).

The two alternate order each repeat; reports medians, the ratio, and how many decoder layers each read from disk.
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
from eagle_convert.probe import Progress, Target
from fixtures.smollm2 import smollm2_checkpoint


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=31)
    args = parser.parse_args()

    target = Target(smollm2_checkpoint())
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, target.vocab_size, (1,), generator=g).tolist() for _ in range(args.sequences)]
    layers = {"one at a time": 0, "packed": 0}

    def counter(label: str) -> Progress:
        def tick(_what: str, done: int, total: int) -> None:
            if done == total:
                layers[label] += total

        return tick

    def separate() -> list[list[int]]:
        return [target.generate([p], args.tokens, counter("one at a time"))[0] for p in prompts]

    def packed() -> list[list[int]]:
        return target.generate(prompts, args.tokens, counter("packed"))

    runs: dict[str, list[float]] = {"one at a time": [], "packed": []}
    outputs: dict[str, list[list[int]]] = {}
    for i in range(args.repeat):
        order = [("one at a time", separate), ("packed", packed)]
        for label, fn in order[i % 2 :] + order[: i % 2]:
            start = time.perf_counter()
            outputs[label] = fn()
            runs[label].append(time.perf_counter() - start)
    assert outputs["one at a time"] == outputs["packed"], "packed generation must give the same text"

    med = {k: statistics.median(v) for k, v in runs.items()}
    print(
        f"machine: {_cpu()}, {os.cpu_count()} cpus, torch {torch.__version__} ({torch.get_num_threads()} threads); "
        f"SmolLM2-135M float32, {args.sequences} sequences x {args.tokens} new tokens; median of {args.repeat}"
    )
    for k, v in runs.items():
        per_run = layers[k] // args.repeat
        print(f"{k:>14}: {med[k]:6.2f} s, {per_run} decoder layers read  (runs: {' '.join(f'{s:.2f}' for s in v)})")
    print(f"packed / one at a time: time {med['packed'] / med['one at a time']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
