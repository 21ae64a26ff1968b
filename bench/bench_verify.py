"""Benchmark: `verify --level static` on thousands of tensors, and peak memory of `--level tensors`.

    .venv/bin/python bench/bench_verify.py [--dir DIR]

1. Static: a header-only (sparse) checkpoint of 6000 tensors in 8 shards; median of 15 library calls and of 5 CLI
   runs, and whether torch was imported (it must not be).
2. Tensors: the 2.16 GB speculators-style draft from bench_normalize; the peak RSS of `verify --level tensors`
   (one tensor in memory at a time) next to the size of the largest tensor and of the whole checkpoint.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_inspect import build
from bench_normalize import measure

from eagle_convert.read.checkpoint import open_checkpoint
from eagle_convert.verify.run import verify_checkpoint
from fixtures.big import write_big_checkpoint


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench-verify-"))
    eagle = str(Path(sys.executable).with_name("eagle-convert"))
    try:
        sparse = build(work / "sparse", 6000, 8)
        times = []
        for _ in range(15):
            start = time.perf_counter()
            verify_checkpoint(sparse, compute_hashes=False)
            times.append(time.perf_counter() - start)
        cli = [measure([eagle, "verify", str(sparse), "--no-hash", "--exit-zero", "--json"])[0] for _ in range(5)]
        print(
            f"static, 6000 tensors in 8 shards: library {statistics.median(times) * 1000:.0f} ms, "
            f"CLI end to end {statistics.median(cli) * 1000:.0f} ms; torch imported: {'torch' in sys.modules}"
        )

        big = write_big_checkpoint(work / "big", draft_vocab=64000)
        ckpt = open_checkpoint(big)
        largest = max(t.nbytes for t in ckpt.tensors.values())
        seconds, rss = measure(
            [eagle, "verify", str(big), "--level", "tensors", "--engine", "vllm", "--no-hash", "--exit-zero", "--json"]
        )
        print(
            f"tensors level, {ckpt.total_bytes / 1e9:.2f} GB checkpoint: {seconds:.1f} s, peak RSS "
            f"{rss / 1024:.0f} MiB; largest tensor {largest / 2**20:.0f} MiB, "
            f"checkpoint {ckpt.total_bytes / 2**20:.0f} MiB"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
