"""Benchmark: the target's weights read by mapping (reference/stream.py's ``MappedShards``, the streamed reference's
path) beside the one reader of values (``pread`` at the header's offsets, reference/tensor_file.py), in one run.

    .venv/bin/python bench/bench_read.py [--dir /tmp/eagle-convert-read] [--layers 4] [--repeat 3]

The first run writes ``--layers`` layers of a Llama-3.1-8B-shaped bfloat16 target (436 MiB a layer, random bytes) in
two shards under ``--dir``. Each way then reads every tensor once and faults in (touches) every page of it, as the
streamed reference's read-ahead thread does, in a fresh process: from the page cache (``hot``), and with the shards
evicted first (``cold``, ``posix_fadvise(DONTNEED)``). Wall time, GB/s, and the child's peak RSS; the ways alternate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
H, KV, INTER = 4096, 1024, 14336
LAYER = {
    "self_attn.q_proj.weight": (H, H),
    "self_attn.k_proj.weight": (KV, H),
    "self_attn.v_proj.weight": (KV, H),
    "self_attn.o_proj.weight": (H, H),
    "mlp.gate_proj.weight": (INTER, H),
    "mlp.up_proj.weight": (INTER, H),
    "mlp.down_proj.weight": (H, INTER),
    "input_layernorm.weight": (H,),
}

_CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import torch
from eagle_convert.read.checkpoint import open_checkpoint
from eagle_convert.reference.stream import touch
way, directory = sys.argv[2], Path(sys.argv[3])
ckpt = open_checkpoint(directory)
start = time.perf_counter()
total = 0
if way == "mmap":
    from eagle_convert.reference.weights import SafetensorsWeights
    weights = SafetensorsWeights(directory)
    for name in weights.names():
        t = weights.read(name)
        touch(t)
        total += t.numel() * t.element_size()
        del t
elif way == "safe_open":
    from safetensors import safe_open
    for shard in ckpt.shards:
        with safe_open(str(directory / shard.name), framework="pt") as f:
            for name in f.keys():
                t = f.get_tensor(name)
                touch(t)
                total += t.numel() * t.element_size()
                del t
else:
    from eagle_convert.reference.tensor_file import TensorFile
    with TensorFile(ckpt) as f:
        for name in f.keys():
            t = f.get_tensor(name)
            touch(t)
            total += t.numel() * t.element_size()
            del t
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(json.dumps({"s": seconds, "bytes": total, "peak_gib": peak}))
"""


def write_target(directory: Path, layers: int) -> None:
    from safetensors.torch import save_file

    if (directory / "config.json").is_file():
        return
    directory.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    half = (layers + 1) // 2
    names = [f"model-0000{i + 1}-of-00002.safetensors" for i in range(2)]
    weight_map = {}
    for shard, span in zip(names, (range(half), range(half, layers)), strict=True):
        tensors = {
            f"model.layers.{i}.{key}": torch.randint(0, 1 << 15, shape, generator=g, dtype=torch.int16).view(
                torch.bfloat16
            )
            for i in span
            for key, shape in LAYER.items()
        }
        save_file(tensors, str(directory / shard), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(tensors, shard)
    index = {"metadata": {}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    (directory / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))


def evict(directory: Path) -> None:
    for path in directory.glob("*.safetensors"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def one(way: str, directory: Path, cold: bool) -> dict[str, float]:
    if cold:
        evict(directory)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(ROOT), way, str(directory)], check=True, capture_output=True, text=True
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=Path("/tmp/eagle-convert-read"))
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    write_target(args.dir, args.layers)
    for cache in ("hot", "cold"):
        if cache == "hot":
            one("pread", args.dir, cold=False)  # the shards into the page cache
        runs: dict[str, list[dict[str, float]]] = {"mmap": [], "pread": [], "safe_open": []}
        for _ in range(args.repeat):
            for way in runs:
                runs[way].append(one(way, args.dir, cold=cache == "cold"))
        for way, results in runs.items():
            s = statistics.median(r["s"] for r in results)
            gb = results[0]["bytes"] / 1e9
            peak = max(r["peak_gib"] for r in results)
            each = ", ".join(f"{r['s']:.3f}" for r in results)
            print(f"{cache:4} {way:9}: {gb:.2f} GB in {s:.3f} s (median of {each}) = {gb / s:.2f} GB/s, ", end="")
            print(f"peak RSS {peak:.2f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
