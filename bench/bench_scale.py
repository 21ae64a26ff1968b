"""Benchmark: `verify --level forward` and `--level target` at real size, beside the floors of the same machine.

    .venv/bin/python bench/bench_scale.py [--dir /tmp/eagle-convert-scale] [--only NAME ...] [--keep]

The first run writes a Llama-3.1-8B-shaped target (32 layers, hidden 4096, intermediate 14336, vocabulary 128,256,
8 KV heads, bfloat16, random weights: 16.06 GB in 4 shards, no tokenizer, so the probe's prompts are seeded one-token
prompts) and an EAGLE3 draft for it (one layer, draft vocabulary 32,000, borrowed embedding: 0.85 GB) under
``--dir``; later runs reuse them (nothing here is committed). Then, in one run:

* floors: reading the target's shards once from disk (evicted from the page cache first with
  ``posix_fadvise(DONTNEED)``) and again from the page cache; a layer-sized matmul (``[B, 4096] x [4096, 14336]``)
  in bfloat16 and float32 at B = 32 (a generation step of a 32-prompt round) and B = 1024 (a packed pass);
* the runs: each `eagle-convert verify ...` command as a user types it, in a fresh process, its wall time, peak RSS
  (the child's ``ru_maxrss``), exit code, verdict, the probe's dtype and its reason, and each phase's time as the
  command's own progress lines report it (generation, target passes, draft chains);
* for each run, the compute floor of each phase at the matmul rates measured in the same run (see
  :func:`phase_floors`): generation = every generated token's FLOPs at B = 32; target passes = every position's at
  B = 1024; chains = every reading's first chain step on every position at B = 1024. ``ratio`` is the phases' time
  over their floors.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_reference import _cpu

H, INTER, LAYERS, HEADS, KV, HD, VOCAB, DRAFT_VOCAB, SHARDS = 4096, 14336, 32, 32, 8, 128, 128256, 32000, 4
TARGET_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": H,
    "intermediate_size": INTER,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV,
    "head_dim": HD,
    "vocab_size": VOCAB,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 128000,
    "eos_token_id": 128009,
}
DRAFT_CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": H,
    "intermediate_size": INTER,
    "num_hidden_layers": 1,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV,
    "head_dim": HD,
    "vocab_size": VOCAB,
    "draft_vocab_size": DRAFT_VOCAB,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28], "use_aux_hidden_state": True},
}


def _randn(shape: tuple[int, ...], g: torch.Generator, std: float = 0.02) -> torch.Tensor:
    return (torch.randn(shape, generator=g, dtype=torch.bfloat16) * std).contiguous()


def _ones(n: int) -> torch.Tensor:
    return torch.ones(n, dtype=torch.bfloat16)


def write_target(out: Path) -> Path:
    """The 8B-shaped target, one shard at a time (peak memory: one shard)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    per = -(-LAYERS // SHARDS)
    weight_map: dict[str, str] = {}
    total = 0
    for s in range(SHARDS):
        name = f"model-{s + 1:05d}-of-{SHARDS:05d}.safetensors"
        tensors: dict[str, torch.Tensor] = {}
        if s == 0:
            tensors["model.embed_tokens.weight"] = _randn((VOCAB, H), g, 1.0)
        for i in range(s * per, min(LAYERS, (s + 1) * per)):
            p = f"model.layers.{i}."
            tensors |= {
                p + "input_layernorm.weight": _ones(H),
                p + "post_attention_layernorm.weight": _ones(H),
                p + "self_attn.q_proj.weight": _randn((HEADS * HD, H), g),
                p + "self_attn.k_proj.weight": _randn((KV * HD, H), g),
                p + "self_attn.v_proj.weight": _randn((KV * HD, H), g),
                p + "self_attn.o_proj.weight": _randn((H, HEADS * HD), g),
                p + "mlp.gate_proj.weight": _randn((INTER, H), g),
                p + "mlp.up_proj.weight": _randn((INTER, H), g),
                p + "mlp.down_proj.weight": _randn((H, INTER), g),
            }
        if s == SHARDS - 1:
            tensors["model.norm.weight"] = _ones(H)
            tensors["lm_head.weight"] = _randn((VOCAB, H), g)
        save_file(tensors, str(out / name), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(tensors, name)
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        del tensors
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (out / "config.json").write_text(json.dumps(TARGET_CONFIG, indent=2))
    return out


def write_draft(out: Path) -> Path:
    """An EAGLE3 draft for the target (SpecForge/vLLM layout, borrowed embedding, 32,000-token draft vocabulary)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(1)
    p = "midlayer."
    tensors = {
        "fc.weight": _randn((H, 3 * H), g),
        p + "input_layernorm.weight": _ones(H),
        p + "hidden_norm.weight": _ones(H),
        p + "post_attention_layernorm.weight": _ones(H),
        p + "self_attn.q_proj.weight": _randn((HEADS * HD, 2 * H), g),
        p + "self_attn.k_proj.weight": _randn((KV * HD, 2 * H), g),
        p + "self_attn.v_proj.weight": _randn((KV * HD, 2 * H), g),
        p + "self_attn.o_proj.weight": _randn((H, HEADS * HD), g),
        p + "mlp.gate_proj.weight": _randn((INTER, H), g),
        p + "mlp.up_proj.weight": _randn((INTER, H), g),
        p + "mlp.down_proj.weight": _randn((H, INTER), g),
        "norm.weight": _ones(H),
        "lm_head.weight": _randn((DRAFT_VOCAB, H), g),
        "d2t": torch.zeros(DRAFT_VOCAB, dtype=torch.int64),
        "t2d": torch.arange(VOCAB) < DRAFT_VOCAB,
    }
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(DRAFT_CONFIG, indent=2))
    return out


def _bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.safetensors"))


# ---------------------------------------------------------------------------------------------------- floors


def read_rate(directory: Path, cold: bool) -> float:
    """Bytes per second reading the shards once (``cold``: evicted from the page cache first)."""
    files = sorted(directory.glob("*.safetensors"))
    if cold:
        for path in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    buffer = bytearray(64 << 20)
    view = memoryview(buffer)
    start, total = time.perf_counter(), 0
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(view):
                total += n
    return total / (time.perf_counter() - start)


def matmul_rate(rows: int, dtype: torch.dtype, seconds: float = 3.0) -> float:
    """FLOP/s of ``[rows, H] x [H, INTER]`` in ``dtype`` (the largest matmul of a layer), best of repeated runs."""
    a, w = torch.randn(rows, H, dtype=dtype), torch.randn(INTER, H, dtype=dtype)
    torch.nn.functional.linear(a, w)  # warm up
    best, until = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < until:
        start = time.perf_counter()
        torch.nn.functional.linear(a, w)
        best = max(best, 2 * rows * H * INTER / (time.perf_counter() - start))
    return best


def flops_per_token(positions_seen: int = 128) -> tuple[float, float]:
    """(target, draft) FLOPs per token: 2 x the matmul parameters, lm_head included, plus attention over
    ``positions_seen`` cached positions."""
    attn = 4 * HEADS * HD * positions_seen
    target = 2 * (LAYERS * (H * HEADS * HD * 2 + 2 * H * KV * HD + 3 * H * INTER) + VOCAB * H) + LAYERS * attn
    layer = 2 * H * (HEADS * HD + 2 * KV * HD) + H * HEADS * HD + 3 * H * INTER  # q/k/v read [embedding, hidden]
    draft = 2 * (3 * H * H + layer + DRAFT_VOCAB * H) + attn
    return float(target), float(draft)


# ---------------------------------------------------------------------------------------------------- runs


@dataclass
class Run:
    name: str
    args: list[str]
    seconds: float = 0.0
    rss_gib: float = 0.0
    exit: int = 0
    status: str = ""
    dtype: str = ""
    dtype_reason: str = ""
    positions: int = 0
    chain_steps: int = 0  # draft steps per scored position over every reading (diagnostic readings run one)
    readings: int = 0  # readings scored (each runs at least its first chain step on every position)
    phases: dict[str, float] | None = None
    stderr_tail: str = ""


_PHASE = re.compile(r"^(?P<what>[^:]+: [^:]+): (?P<done>\d+)/(?P<total>\d+) \S+.*\((?P<m>\d+):(?P<s>\d+) elapsed\)")


def run(command: Run, eagle: str, env: dict[str, str]) -> Run:
    """The command in a fresh process: wall time, the child's peak RSS, and its phases from its progress lines."""
    import threading

    start = time.perf_counter()
    proc = subprocess.Popen([eagle, *command.args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    streams: dict[str, str] = {}
    readers = [
        threading.Thread(target=lambda k=k, f=f: streams.__setitem__(k, f.read()))
        for k, f in (("out", proc.stdout), ("err", proc.stderr))
    ]
    for reader in readers:
        reader.start()
    _, status, usage = os.wait4(proc.pid, 0)  # the child's own peak RSS, not every child's so far
    proc.returncode = os.waitstatus_to_exitcode(status)
    for reader in readers:
        reader.join()
    out, err = streams["out"], streams["err"]
    command.seconds = time.perf_counter() - start
    command.exit = proc.returncode
    command.rss_gib = usage.ru_maxrss / 2**20
    phases: dict[str, float] = {}
    for line in err.splitlines():
        m = _PHASE.match(line.strip())
        if m:
            phases[m["what"]] = int(m["m"]) * 60 + int(m["s"])  # the last line of a phase has its whole time
    command.phases = phases
    command.stderr_tail = "\n".join(err.strip().splitlines()[-3:])
    try:
        doc = json.loads(out)
    except ValueError:
        return command
    command.status = str(doc.get("status", ""))
    probe = doc.get("probe") or {}
    command.dtype = str(probe.get("dtype", ""))
    command.dtype_reason = str(probe.get("dtype_reason", ""))
    command.positions = int(probe.get("positions", 0) or 0)
    steps = int(probe.get("steps", 3) or 3)
    command.chain_steps = sum(1 if r.get("diagnostic") else steps for r in probe.get("rows", []))
    command.readings = len(probe.get("rows", []))
    return command


def _ram_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=Path("/tmp/eagle-convert-scale"))
    parser.add_argument("--only", nargs="*", help="run only these runs (by name)")
    args = parser.parse_args()

    target, draft = args.dir / "target-8b", args.dir / "draft-8b"
    if not (target / "config.json").is_file():
        started = time.perf_counter()
        write_target(target)
        print(f"wrote the target ({_bytes(target) / 1e9:.2f} GB) in {time.perf_counter() - started:.0f} s")
    if not (draft / "config.json").is_file():
        write_draft(draft)
    ids_file = args.dir / "ids.json"
    if not ids_file.is_file():  # 8 sequences of 128 random tokens: 1,016 scored positions
        g = torch.Generator().manual_seed(2)
        ids_file.write_text(json.dumps(torch.randint(0, VOCAB, (8, 128), generator=g).tolist()))

    size = _bytes(target)
    cold, warm = read_rate(target, cold=True), read_rate(target, cold=False)
    rates = {
        (rows, name): matmul_rate(rows, getattr(torch, name)) for rows in (32, 1024) for name in ("bfloat16", "float32")
    }
    target_flops, draft_flops = flops_per_token()
    print(
        f"machine: {_cpu()}, {os.cpu_count()} cpus, {_ram_gib():.1f} GiB RAM, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), {time.strftime('%Y-%m-%d')}"
    )
    print(f"target: {size / 1e9:.2f} GB in {SHARDS} shards; draft {_bytes(draft) / 1e9:.2f} GB")
    print(f"floor: read once {size / 1e9:.1f} GB: cold {size / cold:.1f} s ({cold / 1e9:.2f} GB/s), "
          f"page cache {size / warm:.1f} s ({warm / 1e9:.2f} GB/s)")  # fmt: skip
    for (rows, name), rate in rates.items():
        print(f"floor: [{rows}, {H}] x [{H}, {INTER}] matmul, {name}: {rate / 1e9:.0f} GFLOP/s")
    print(f"FLOPs per token: target {target_flops / 1e9:.1f} G, draft {draft_flops / 1e9:.2f} G")

    common = ["--target", str(target), "--json", "--no-hash"]
    runs = [
        Run("forward", ["verify", str(draft), "--level", "forward", *common]),
        Run("target", ["verify", str(draft), "--level", "target", *common]),
        Run("target --token-ids", ["verify", str(draft), "--level", "target", "--token-ids", str(ids_file), *common]),
        Run("target --dtype float32", ["verify", str(draft), "--level", "target", "--dtype", "float32", *common]),
        Run(
            "target --token-ids --dtype float32",
            ["verify", str(draft), "--level", "target", "--token-ids", str(ids_file), "--dtype", "float32", *common],
        ),
    ]
    eagle = str(Path(sys.executable).with_name("eagle-convert"))
    env = {**os.environ, "COLUMNS": "200"}
    results: list[dict[str, Any]] = []
    for command in runs:
        if args.only and command.name not in args.only:
            continue
        run(command, eagle, env)
        floor = phase_floors(command, rates, warm, size, target_flops, draft_flops)
        phase_total = sum((command.phases or {}).values())
        floor_total = sum(v for k, v in floor.items() if k in (command.phases or {}))
        print(
            f"\n{command.name}: exit {command.exit} ({command.status or 'no report'}), {command.seconds:.0f} s, "
            f"peak RSS {command.rss_gib:.2f} GiB, dtype {command.dtype or '-'}; positions {command.positions}"
        )
        if command.dtype_reason:
            print(f"  dtype: {command.dtype_reason}")
        for what, seconds in (command.phases or {}).items():
            print(f"  {what}: {seconds:.0f} s (floor {floor.get(what, 0.0):.0f} s)")
        for what, seconds in floor.items():
            if what not in (command.phases or {}):
                print(f"  ({what}: {seconds:.0f} s)")
        if floor_total:
            print(f"  phases {phase_total:.0f} s, floors {floor_total:.0f} s: ratio {phase_total / floor_total:.2f}")
        if command.exit not in (0, 1):
            print(f"  stderr: {command.stderr_tail}")
        results.append(command.__dict__ | {"floors": floor})
    (args.dir / "results.json").write_text(json.dumps(results, indent=2))
    return 0


def phase_floors(
    command: Run,
    rates: dict[tuple[int, str], float],
    page_cache_rate: float,
    size: int,
    target_flops: float,
    draft_flops: float,
) -> dict[str, float]:
    """The compute floor of each phase the command reported, at the matmul rate measured in this run:

    * generation: every generated token's FLOPs at the B = 32 rate (a step runs the 32 sequences of a round; the
      prompts here are one token each). The weights are mapped from the page cache, not copied, so the per-step
      read is not a separate floor (it is printed beside: ``streamed``);
    * target passes: every position's FLOPs at the B = 1024 rate;
    * draft chains: every reading's first chain step on every position at the B = 1024 rate: the work no pruning
      skips (later steps run only on rows the text still accepts; ``all_steps`` is every step on every row)."""
    dtype = command.dtype if command.dtype in ("bfloat16", "float32") else "bfloat16"
    floors: dict[str, float] = {}
    for what in command.phases or {}:
        if what.startswith("target: generating"):
            steps = 144
            rounds = max(1, -(-command.positions // (32 * (steps - 1))))
            floors[what] = rounds * steps * 32 * target_flops / rates[(32, dtype)]
            floors["streamed (page cache, not a floor)"] = size * steps * rounds / page_cache_rate
        elif what.startswith("probe: target"):
            floors[what] = command.positions * target_flops / rates[(1024, dtype)]
        elif what.startswith("probe: draft"):
            floors[what] = command.positions * command.readings * draft_flops / rates[(1024, dtype)]
            floors["all_steps (not a floor)"] = (
                command.positions * command.chain_steps * draft_flops / rates[(1024, dtype)]
            )
    return floors


if __name__ == "__main__":
    sys.exit(main())
