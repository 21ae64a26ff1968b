"""Benchmark: the default acceptance probe on a real target, and its text generation with and without a KV cache.

    .venv/bin/python bench/bench_probe.py [--repeat 1] [--prompts 8] [--tokens 32] [--skip-generation] [--threads N]

The target is SmolLM2-135M-Instruct dequantized to float32 (``fixtures/smollm2.py``), the draft the committed
``fixtures/smollm2-eagle3`` (``fixtures/smollm2_pair.py``); everything runs on the CPU in float32.

* ``generation``: the same greedy continuations of the first ``--prompts`` default prompts, ``--tokens`` new tokens
  each, by ``Target.generate`` (packed passes, every position recomputed for every new token) and by the KV-cached
  generator (``reference/hf_target.StreamedModel.generate``: transformers' own ``generate``; checked equal),
  alternating order each repeat;
* ``default probe``: ``run_probe`` with no text given (>= 4,096 scored positions), ``--repeat`` times with the
  readings' draft chains batched (``probe._score_readings``: one forward per chain step for all readings, later
  steps only on the rows still accepted) and as many times one reading after another (``probe._score`` per reading,
  every step on every row: the path before batching), alternating; the text is generated once and kept, so the
  chain time (measured around the scoring) is what differs. Checks that both give the same scores, bit for bit,
  and the same table.

Reports medians and minimums, their ratios, the load average (the machine may be shared) and the probe's table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_reference import _cpu
from eagle_convert.probe import run as probe
from eagle_convert.probe import target as probe_target
from eagle_convert.probe import text as probe_text
from fixtures.smollm2_pair import smollm2_pair


def probe_runs(target_dir: Path, draft_dir: Path, repeat: int) -> None:
    """The default probe with the readings' chains batched and one reading at a time, side by side."""
    batched = probe._score_readings

    def one_at_a_time(chunk: Any, readings: Any, cfg: Any, weights: Any, embed: Any, steps: int) -> Any:
        return [probe._score(chunk, r, cfg, weights, embed, steps) for r in readings]

    modes = {"batched": batched, "one at a time": one_at_a_time}
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in modes}  # (total, chains) per run
    scores: dict[str, list[Any]] = {}
    results: dict[str, probe.ProbeResult] = {}
    for i in range(repeat):
        for label in list(modes)[i % 2 :] + list(modes)[: i % 2]:
            spent, kept = [0.0], list[Any]()

            def timed(*a: Any, _fn: Any = modes[label], _spent: list[float] = spent, _kept: list[Any] = kept) -> Any:
                start = time.perf_counter()
                out = _fn(*a)
                _spent[0] += time.perf_counter() - start
                _kept.append(out)
                return out

            probe._score_readings = timed  # type: ignore[assignment]
            try:
                start = time.perf_counter()
                results[label] = probe.run_probe(draft_dir, target_dir)
                times[label].append((time.perf_counter() - start, spent[0]))
            finally:
                probe._score_readings = batched
            scores[label] = kept
    result = results["batched"]
    print(
        f"default probe: {result.positions} positions of {result.sequences} sequences, {len(result.rows)} readings, "
        f"median of {repeat} (the first run also generates the text), load average now {os.getloadavg()[0]:.1f}"
    )
    med = {k: statistics.median(c for _, c in v) for k, v in times.items()}
    best = {k: min(c for _, c in v) for k, v in times.items()}
    for label, runs in times.items():
        listed = " ".join(f"{total:.1f}/{chains:.1f}" for total, chains in runs)
        print(f"{label:>14}: chains {med[label]:6.2f} s, best {best[label]:6.2f} s  (runs, total/chains s: {listed})")
    same_scores = all(
        len(a) == len(b)
        and all(x[0].equal(y[0]) and x[1].equal(y[1]) and x[2] == y[2] for x, y in zip(a, b, strict=False))
        for a, b in zip(scores["batched"], scores["one at a time"], strict=True)
    )
    same_rows = result.rows == results["one at a time"].rows
    print(
        f"batched / one at a time: chain time {med['batched'] / med['one at a time']:.2f} (medians), "
        f"{best['batched'] / best['one at a time']:.2f} (best); "
        f"scores bit-identical: {same_scores}; probe rows equal: {same_rows}"
    )
    for r in result.rows:
        lo, hi = r.top1_ci
        print(
            f"  {r.reading:<45} hs{r.hidden_states} top-1 {r.top1:.4f} [{lo:.4f}, {hi:.4f}] "
            f"accept len {r.acceptance_length:.4f} rates {r.acceptance_rates} d-top1 {r.delta_top1:+.4f} "
            f"d-acc {r.delta_accepted:+.4f} p {r.p_value:.3e} {r.verdict}"
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--skip-generation", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
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
            gen = target.model.generate(prompts, args.tokens)
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
    probe_runs(target_dir, draft_dir, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
