"""Benchmark: header reading and `inspect` on a sharded checkpoint with thousands of tensors.

    .venv/bin/python bench/bench_inspect.py [--tensors 6000] [--shards 8] [--repeat 15] [--compare REV]

With ``--compare REV`` the package as it was at git revision REV is exported to a temporary directory and
`inspect --json` (stdout to a file) runs end to end from both trees, alternately, on the same checkpoint: a
before/after ratio on one machine in one run.

The checkpoint is header-only (sparse data), so the figures measure header parsing, validation and detection,
which is all `inspect` does. Compared side by side in one run with the reference parser (`safetensors.safe_open`,
keys + metadata + every tensor's shape/dtype), reported as a ratio because machines are noisy.
"""

from __future__ import annotations

import argparse
import json
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

from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.read.checkpoint import open_checkpoint
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
    parser.add_argument("--compare", metavar="REV", help="also time `inspect --json` of the package at REV")
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
    if args.compare:
        compare(args.compare, args.tensors, args.shards, max(3, args.repeat // 3))
    return 0


def _cli_seconds(tree: Path, args: list[str], out: Path) -> float:
    """One `python -m eagle_convert ...` run with ``tree`` first on the path, stdout to a file (not a terminal)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    with open(out, "wb") as f:
        subprocess.run([sys.executable, "-m", "eagle_convert", *args], check=True, stdout=f, env=env, cwd=tree)
    return time.perf_counter() - start


def compare(rev: str, tensors: int, shards: int, repeat: int) -> None:
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        old.mkdir()
        archive = subprocess.run(["git", "archive", rev, "eagle_convert"], cwd=root, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        ckpt = build(Path(tmp) / "draft", tensors, shards)
        times: dict[str, list[float]] = {"before": [], "after": [], "start": []}
        for _ in range(repeat):  # alternate, so load on the machine falls on both alike
            times["before"].append(_cli_seconds(old, ["inspect", str(ckpt), "--json"], Path(tmp) / "before.json"))
            times["after"].append(_cli_seconds(root, ["inspect", str(ckpt), "--json"], Path(tmp) / "after.json"))
            times["start"].append(_cli_seconds(root, ["--version"], Path(tmp) / "version.txt"))
        headers = median_seconds(lambda: open_checkpoint(ckpt), repeat)
        doc = inspect_checkpoint(ckpt).to_dict()
        indented = median_seconds(lambda: json.dumps(doc, indent=2, ensure_ascii=False), repeat)
        one_line = median_seconds(lambda: json.dumps(doc, ensure_ascii=False, separators=(",", ":")), repeat)
        before_doc = json.loads((Path(tmp) / "before.json").read_text())
        same = json.dumps(_older_fields(Path(tmp) / "after.json")).lower() == json.dumps(before_doc).lower()
        before, after, start = (statistics.median(times[k]) for k in ("before", "after", "start"))
        print(f"compare: {tensors} tensors in {shards} shards, median of {repeat} alternating runs, stdout to a file")
        print(f"  `inspect --json` at {rev}: {before:.2f} s   (runs: {' '.join(f'{t:.2f}' for t in times['before'])})")
        print(f"  `inspect --json` now:       {after:.2f} s   (runs: {' '.join(f'{t:.2f}' for t in times['after'])})")
        print(f"  process start (--version): {start:.2f} s; strict header read (library): {headers:.2f} s")
        print(f"  now / before: {after / before:.2f}; now / (start + headers): {after / (start + headers):.2f}")
        print(f"  encoding the report: indented {indented:.2f} s (before), one line {one_line:.2f} s (now, piped)")
        print(f"  same JSON document (fields added since left out, case aside: vllm -> vLLM): {same}")


def _older_fields(path: Path) -> dict[str, object]:
    doc = json.loads(path.read_text())
    for f in doc["findings"]:
        f.pop("fixable", None)
        f.pop("fix", None)
    return dict(doc)


if __name__ == "__main__":
    sys.exit(main())
