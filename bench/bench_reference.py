"""Benchmark: the reference target's streaming forward against transformers on a real model, with peak RSS.

    .venv/bin/python bench/bench_reference.py [--repeat 3] [--tokens 256]

The model is SmolLM2-135M-Instruct dequantized to float32 (``fixtures/smollm2.py``; the first run writes it).
Each run is a fresh process that imports, loads and runs one forward of the same fixed token ids on the CPU:

* ``transformers``: ``AutoModelForCausalLM.from_pretrained`` + a forward with ``output_hidden_states=True``;
* ``reference``: the reference target (``probe.target.Target``: transformers' model, its weights streamed from the
  checkpoint a layer at a time) capturing 3 boundaries (the EAGLE3 default).

Runs alternate their order; reports medians of the whole process (and of its load and forward, timed inside it)
and the ratio. Peak RSS is the child process's maximum resident set size.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_normalize import measure
from fixtures.smollm2 import smollm2_checkpoint

LABELS = ("transformers", "reference")


def _ids(tokens: int, vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (tokens,), generator=torch.Generator().manual_seed(0))


def worker(label: str, directory: Path, tokens: int, times: Path) -> None:
    """One measured run: load and forward, then append ``{label, load, forward}`` to ``times``."""
    raw = json.loads((directory / "config.json").read_text())
    ids = _ids(tokens, raw["vocab_size"])
    start = time.perf_counter()
    if label == "transformers":
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
        loaded = time.perf_counter()
        with torch.no_grad():
            model(ids[None], output_hidden_states=True)
    else:
        from eagle_convert.draft.aux_layers import default_hidden_states
        from eagle_convert.probe.target import Target

        target = Target(directory, resident=False)  # reads headers only; each layer is read during the forward
        loaded = time.perf_counter()
        target.run(ids, capture=default_hidden_states(target.num_layers))
    done = time.perf_counter()
    with times.open("a") as f:
        f.write(json.dumps({"label": label, "load": loaded - start, "forward": done - loaded}) + "\n")


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--worker", choices=LABELS, help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--times", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.dir, args.tokens, args.times)
        return 0

    directory = smollm2_checkpoint()
    with tempfile.TemporaryDirectory(prefix="bench-reference-") as work:
        times = Path(work) / "times.jsonl"
        rows: dict[str, list[tuple[float, int]]] = {label: [] for label in LABELS}
        for i in range(args.repeat):
            for label in LABELS[i % 2 :] + LABELS[: i % 2]:  # alternate: neither always runs first
                cmd = [sys.executable, __file__, "--worker", label, "--dir", str(directory)]
                rows[label].append(measure([*cmd, "--tokens", str(args.tokens), "--times", str(times)]))
        inner = [json.loads(line) for line in times.read_text().splitlines()]

    med = {k: statistics.median(s for s, _ in v) for k, v in rows.items()}
    rss = {k: max(r for _, r in v) for k, v in rows.items()}
    print(
        f"machine: {_cpu()}, {os.cpu_count()} cpus, torch {torch.__version__} ({torch.get_num_threads()} threads); "
        f"SmolLM2-135M float32, {args.tokens} tokens; median of {args.repeat} fresh processes"
    )
    for k in LABELS:
        load = statistics.median(r["load"] for r in inner if r["label"] == k)
        forward = statistics.median(r["forward"] for r in inner if r["label"] == k)
        runs = " ".join(f"{s:.2f}" for s, _ in rows[k])
        print(
            f"{k:>12}: {med[k]:6.2f} s (load {load:5.2f} s, forward {forward:5.2f} s)  "
            f"peak RSS {rss[k] / 1024:7.1f} MiB  (runs: {runs})"
        )
    print(
        f"reference / transformers: time {med['reference'] / med['transformers']:.2f}, "
        f"peak RSS {rss['reference'] / rss['transformers']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
