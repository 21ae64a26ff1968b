"""Benchmark: a rename-only `normalize` of a >= 2 GB draft against `cp` of the same files, with peak RSS.

    .venv/bin/python bench/bench_normalize.py [--repeat 3] [--dir DIR]

The source is a speculators-format draft (every layer tensor is renamed `layers.0.*` -> `midlayer.*`) with real
bytes. Runs rotate their order and each starts after `sync` with the previous output deleted; reports medians
and the ratio of throughputs. `normalize` fsyncs every file and re-reads the headers before it commits; `cp`
does neither, so a `cp` + `sync` row is reported too. Peak RSS is the child process's maximum resident set size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fixtures.big import write_big_checkpoint

_MEASURE = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter(); subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
    "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)


def measure(cmd: list[str]) -> tuple[float, int]:
    """(seconds, peak RSS in KiB) of ``cmd`` run as a child of a fresh process."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], check=True, capture_output=True, text=True)
    seconds, rss = out.stdout.split()
    return float(seconds), int(rss)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench-normalize-"))
    try:
        src = write_big_checkpoint(work / "src", draft_vocab=64000)
        size = sum(p.stat().st_size for p in src.iterdir())
        eagle = str(Path(sys.executable).with_name("eagle-convert"))
        rows: dict[str, list[tuple[float, int]]] = {"cp": [], "cp+sync": [], "normalize": []}
        commands = [
            ("cp", ["cp", "-r", str(src), str(work / "out")]),
            ("cp+sync", ["sh", "-c", f"cp -r {src} {work / 'out'} && sync -f {work / 'out'}/*"]),
            ("normalize", [eagle, "normalize", str(src), str(work / "out"), "--profile", "vllm"]),
        ]
        for i in range(args.repeat):
            for label, cmd in commands[i % 3 :] + commands[: i % 3]:  # rotate: no command always runs last
                shutil.rmtree(work / "out", ignore_errors=True)
                os.sync()  # every run starts with no dirty pages from the previous one
                rows[label].append(measure(cmd))
        shutil.rmtree(work / "out", ignore_errors=True)
        med = {k: statistics.median(s for s, _ in v) for k, v in rows.items()}
        rss = {k: max(r for _, r in v) for k, v in rows.items()}
        print(f"machine: {os.cpu_count()} cpus; source {size / 1e9:.2f} GB in 4 shards; median of {args.repeat}")
        for k in rows:
            runs = " ".join(f"{s:.2f}" for s, _ in rows[k])
            print(
                f"{k:>10}: {med[k]:6.2f} s  {size / med[k] / 1e9:5.2f} GB/s  peak RSS {rss[k] / 1024:6.1f} MiB"
                f"  (runs: {runs})"
            )
        print(f"throughput normalize / cp:      {med['cp'] / med['normalize']:.2f}")
        print(f"throughput normalize / cp+sync: {med['cp+sync'] / med['normalize']:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
