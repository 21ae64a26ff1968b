"""Benchmark: header reading and `inspect` on a sharded checkpoint with thousands of tensors.

    .venv/bin/python bench/bench_inspect.py [--tensors 6000] [--shards 8] [--repeat 15]

The checkpoint is header-only (sparse data), so the figures measure header parsing, validation and detection,
which is all `inspect` does. Compared side by side in one run with the reference parser (`safetensors.safe_open`,
keys + metadata + every tensor's shape/dtype), reported as a ratio because machines are noisy.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eagle_convert.checkpoint import open_checkpoint
from eagle_convert.inspect_api import inspect_checkpoint
from fixtures.generate import write_specs
from fixtures.layouts import LAYOUTS
from fixtures.tensors import Spec, write_json


def build(out: Path, tensors: int, shards: int) -> Path:
    layout = LAYOUTS["specforge-mha"]
    specs = layout.tensors()
    # Pad with expert-style tensors at realistic widths until the count is reached (e.g. a MoE-derived dump).
    i = 0
    while len(specs) < tensors:
        specs.append(Spec(f"midlayer.mlp.experts.{i}.gate_proj.weight", "BF16", (2048, 7168)))
        i += 1
    out.mkdir(parents=True)
    write_json(out / "config.json", layout.config)
    write_specs(out, specs, shards=shards, sparse=True)
    return out


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def reference_read(ckpt: Path) -> None:
    from safetensors import safe_open

    for shard in sorted(ckpt.glob("*.safetensors")):
        with safe_open(shard, framework="numpy") as f:
            f.metadata()
            for key in f.keys():
                sl = f.get_slice(key)
                sl.get_shape()
                sl.get_dtype()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensors", type=int, default=6000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = build(Path(tmp) / "draft", args.tensors, args.shards)
        apparent = sum(p.stat().st_size for p in ckpt.iterdir())
        ours = median_seconds(lambda: open_checkpoint(ckpt), args.repeat)
        ref = median_seconds(lambda: reference_read(ckpt), args.repeat)
        full = median_seconds(lambda: inspect_checkpoint(ckpt).to_dict(), args.repeat)
        cli = median_seconds(
            lambda: subprocess.run(
                [sys.executable, "-m", "eagle_convert", "inspect", str(ckpt), "--json"],
                check=True,
                stdout=subprocess.DEVNULL,
            ),
            max(3, args.repeat // 3),
        )
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cpus, "
        f"Python {platform.python_version()}"
    )
    print(f"checkpoint: {args.tensors} tensors in {args.shards} shards, {apparent / 2**30:.1f} GiB apparent (sparse)")
    print(f"strict header read + validation (open_checkpoint): {ours * 1000:.1f} ms")
    print(f"reference safe_open keys/shapes/dtypes:            {ref * 1000:.1f} ms")
    print(f"ratio ours / reference:                            {ours / ref:.2f}")
    print(f"inspect_checkpoint + to_dict (library):            {full * 1000:.1f} ms")
    print(f"`eagle-convert inspect --json` end to end:         {cli * 1000:.0f} ms (process start included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
