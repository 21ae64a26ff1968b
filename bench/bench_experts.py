"""Benchmark: `verify --level target --token-ids` on frontier-sized mixture-of-experts targets, their experts streamed
in groups (reference/experts.py, issue 37), beside the whole-layer path of ``--base``.

    .venv/bin/python bench/bench_experts.py [--dir /tmp/eagle-convert-experts] [--only kimi-k2 deepseek-v3 qwen3-235b]
        [--tokens 16] [--base 0421174] [--keep]

Each target is 8 decoder layers of the real model's shapes, written as *sparse* safetensors shards of about 5 GB
(the header and the tensors below are real bytes; every routed expert's tensors are holes, read back as zeros, so a
135 GB target takes about 6 GB of disk), with an EAGLE3 draft sized to it (one layer, the target's intermediate
size, a 32,000-token draft vocabulary, the target's embedding borrowed):

* ``kimi-k2``: model_type ``kimi_k2`` (the DeepSeek-V3 trunk), 384 routed experts of 7168 x 2048, top 8, one
  shared expert, the first layer dense, MLA attention, vocabulary 163,840, in block FP8 as Kimi K2 ships it: each
  linear weight float8_e4m3fn beside its ``weight_scale_inv`` (per 128 x 128 block), per-expert tensors under their
  real names (``model.layers.N.mlp.experts.E.gate_proj.weight``); embedding, norms, router and head bfloat16.
* ``deepseek-v3``: the same format with DeepSeek-V3's config: 256 experts, 128 heads, 3 dense layers first, the
  router's 8 groups (top 4), vocabulary 129,280.
* ``qwen3-235b``: Qwen3-235B-A22B's shapes in bfloat16: hidden 4096, 64 heads over 4 KV heads, 128 experts of 1536,
  top 8, vocabulary 151,936.

Real (random) bytes: embedding, head, attention, norms, routers, shared experts, dense MLPs. Each run is the command a
user types, in a fresh process (through a wrapper that counts the bytes the reference reads, by the expert tensors
and the rest): wall time, the child's peak RSS (``wait4``), exit code, verdict, the phases from its progress lines.
With ``--base``, the same command with the package as it was at that commit (the whole-layer path), in a git
worktree under ``--dir``. Each target is deleted after its runs unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_reference import _cpu  # noqa: E402
from bench.bench_scale import Run, run  # noqa: E402
from bench.bench_stream import write_draft  # noqa: E402

BASE = "0421174"  # the whole-layer path: every expert of a layer dequantized as the layer streams
SHARD_BYTES = 5 * 10**9
_FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
_MLA = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "norm_topk_prob": True,
    "scoring_func": "sigmoid",
    "topk_method": "noaux_tc",
    "hidden_act": "silu",
    "max_position_embeddings": 163840,
    "rms_norm_eps": 1e-6,
    "rope_theta": 50000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": _FP8,
}
CONFIGS: dict[str, dict[str, Any]] = {
    "kimi-k2": {
        **_MLA,
        "model_type": "kimi_k2",
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "n_routed_experts": 384,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
        "routed_scaling_factor": 2.827,
        "vocab_size": 163840,
        "bos_token_id": 163584,
        "eos_token_id": 163585,
    },
    "deepseek-v3": {
        **_MLA,
        "model_type": "deepseek_v3",
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "n_routed_experts": 256,
        "first_k_dense_replace": 3,
        "n_group": 8,
        "topk_group": 4,
        "routed_scaling_factor": 2.5,
        "vocab_size": 129280,
        "bos_token_id": 0,
        "eos_token_id": 1,
    },
    "qwen3-235b": {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "moe_intermediate_size": 1536,
        "num_hidden_layers": 8,
        "num_attention_heads": 64,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "eos_token_id": 151645,
    },
}

# ---------------------------------------------------------------------------------------------------- writing

Fill = Callable[[BinaryIO], None] | None  # writes the tensor's bytes at the file's position; None: a hole (zeros)
_DTYPES = {torch.bfloat16: "BF16", torch.float32: "F32", torch.float8_e4m3fn: "F8_E4M3"}


class SparseWriter:
    """Safetensors shards of about :data:`SHARD_BYTES`, written tensor by tensor: real bytes where a tensor has a
    fill, a hole (zeros on reading, no disk) where it has none; then the index."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.pending: list[tuple[str, torch.dtype, tuple[int, ...], Fill]] = []
        self.size = 0
        self.weight_map: dict[str, str] = {}
        self.total = 0
        self.shards = 0
        out.mkdir(parents=True, exist_ok=True)

    def add(self, name: str, dtype: torch.dtype, shape: tuple[int, ...], fill: Fill) -> None:
        nbytes = math.prod(shape) * dtype.itemsize
        if self.pending and self.size + nbytes > SHARD_BYTES:
            self.flush()
        self.pending.append((name, dtype, shape, fill))
        self.size += nbytes

    def flush(self) -> None:
        self.shards += 1
        name = f"model-{self.shards:05d}.safetensors"
        header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for key, dtype, shape, _ in self.pending:
            nbytes = math.prod(shape) * dtype.itemsize
            header[key] = {"dtype": _DTYPES[dtype], "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
            self.weight_map[key] = name
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(self.out / name, "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text)
            start = f.tell()
            for key, _, _, fill in self.pending:
                if fill is not None:
                    f.seek(start + header[key]["data_offsets"][0])
                    fill(f)
            f.truncate(start + offset)
        self.total += offset
        self.pending, self.size = [], 0

    def close(self, config: dict[str, Any]) -> None:
        if self.pending:
            self.flush()
        index = {"metadata": {"total_size": self.total}, "weight_map": self.weight_map}
        (self.out / "model.safetensors.index.json").write_text(json.dumps(index))
        (self.out / "config.json").write_text(json.dumps(config, indent=2))


def _random(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator, std: float) -> Fill:
    def fill(f: BinaryIO) -> None:
        rows = max(1, (64 << 20) // max(1, math.prod(shape[1:]) * 4))  # ~64 MB of float32 at a time
        for start in range(0, shape[0], rows):
            part = torch.randn((min(rows, shape[0] - start), *shape[1:]), generator=g) * std
            if dtype == torch.float8_e4m3fn:
                part = part.clamp(-448, 448)
            f.write(part.to(dtype).view(torch.uint8).numpy().tobytes())

    return fill


def _const(value: float) -> Fill:
    def fill(f: BinaryIO) -> None:
        f.write(torch.full((1,), value, dtype=torch.float32).numpy().tobytes())

    return fill


def write_target(name: str, out: Path) -> None:
    c = CONFIGS[name]
    g = torch.Generator().manual_seed(0)
    w = SparseWriter(out)
    h, fp8 = c["hidden_size"], "quantization_config" in c

    def ones(key: str, n: int) -> None:
        w.add(key, torch.bfloat16, (n,), lambda f: f.write(torch.ones(n, dtype=torch.bfloat16).view(torch.uint8)
                                                            .numpy().tobytes()))  # fmt: skip

    def linear(key: str, rows: int, cols: int, real: bool = True) -> None:
        if not fp8:
            w.add(key + ".weight", torch.bfloat16, (rows, cols), _random((rows, cols), torch.bfloat16, g, 0.02)
                  if real else None)  # fmt: skip
            return
        w.add(key + ".weight", torch.float8_e4m3fn, (rows, cols), _random((rows, cols), torch.float8_e4m3fn, g, 1.0)
              if real else None)  # fmt: skip
        grid = (-(-rows // 128), -(-cols // 128))
        w.add(key + ".weight_scale_inv", torch.float32, grid, _scales(grid) if real else None)

    def _scales(grid: tuple[int, int]) -> Fill:
        def fill(f: BinaryIO) -> None:
            f.write(torch.full(grid, 0.005, dtype=torch.float32).numpy().tobytes())

        return fill

    vocab = c["vocab_size"]
    w.add("model.embed_tokens.weight", torch.bfloat16, (vocab, h), _random((vocab, h), torch.bfloat16, g, 1.0))
    experts = c.get("n_routed_experts") or c["num_experts"]
    moe = c["moe_intermediate_size"]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        ones(p + "input_layernorm.weight", h)
        ones(p + "post_attention_layernorm.weight", h)
        if "kv_lora_rank" in c:
            heads, rope, nope = c["num_attention_heads"], c["qk_rope_head_dim"], c["qk_nope_head_dim"]
            linear(p + "self_attn.q_a_proj", c["q_lora_rank"], h)
            ones(p + "self_attn.q_a_layernorm.weight", c["q_lora_rank"])
            linear(p + "self_attn.q_b_proj", heads * (rope + nope), c["q_lora_rank"])
            linear(p + "self_attn.kv_a_proj_with_mqa", c["kv_lora_rank"] + rope, h)
            ones(p + "self_attn.kv_a_layernorm.weight", c["kv_lora_rank"])
            linear(p + "self_attn.kv_b_proj", heads * (nope + c["v_head_dim"]), c["kv_lora_rank"])
            linear(p + "self_attn.o_proj", h, heads * c["v_head_dim"])
        else:
            heads, kv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
            linear(p + "self_attn.q_proj", heads * hd, h)
            linear(p + "self_attn.k_proj", kv * hd, h)
            linear(p + "self_attn.v_proj", kv * hd, h)
            linear(p + "self_attn.o_proj", h, heads * hd)
            ones(p + "self_attn.q_norm.weight", hd)
            ones(p + "self_attn.k_norm.weight", hd)
        if i < c.get("first_k_dense_replace", 0):
            linear(p + "mlp.gate_proj", c["intermediate_size"], h)
            linear(p + "mlp.up_proj", c["intermediate_size"], h)
            linear(p + "mlp.down_proj", h, c["intermediate_size"])
            continue
        w.add(p + "mlp.gate.weight", torch.bfloat16, (experts, h), _random((experts, h), torch.bfloat16, g, 0.02))
        if "n_routed_experts" in c:
            w.add(p + "mlp.gate.e_score_correction_bias", torch.float32, (experts,), None)
            for proj, rows, cols in (("gate_proj", moe, h), ("up_proj", moe, h), ("down_proj", h, moe)):
                linear(f"{p}mlp.shared_experts.{proj}", rows, cols)
        for e in range(experts):
            for proj, rows, cols in (("gate_proj", moe, h), ("up_proj", moe, h), ("down_proj", h, moe)):
                linear(f"{p}mlp.experts.{e}.{proj}", rows, cols, real=False)  # a hole: zeros, no disk
    ones("model.norm.weight", h)
    w.add("lm_head.weight", torch.bfloat16, (vocab, h), _random((vocab, h), torch.bfloat16, g, 0.02))
    w.close(c)


# ---------------------------------------------------------------------------------------------------- running

_WRAPPER = """#!{python}
import atexit, json, re, sys
sys.path.insert(0, {tree!r})
from eagle_convert.reference import weights as _w
counts = {{"experts": 0, "other": 0}}
_read = _w.SafetensorsWeights.read
expert = re.compile(r"\\.experts\\.\\d+\\.|\\.experts\\.[a-z_]")
def read(self, name):
    t = _read(self, name)
    counts["experts" if expert.search(name) else "other"] += t.numel() * t.element_size()
    return t
_w.SafetensorsWeights.read = read
if hasattr(_w.SafetensorsWeights, "read_rows"):
    _rows = _w.SafetensorsWeights.read_rows
    def read_rows(self, name, rows):
        t = _rows(self, name, rows)
        counts["experts"] += t.numel() * t.element_size()
        return t
    _w.SafetensorsWeights.read_rows = read_rows
atexit.register(lambda: sys.stderr.write("BYTES-READ " + json.dumps(counts) + "\\n"))
from eagle_convert.cli.main import run
sys.argv[0] = "eagle-convert"
run()
"""


def wrapper(directory: Path, tree: Path, label: str) -> str:
    path = directory / f"eagle-convert-{label}"
    path.write_text(_WRAPPER.format(python=sys.executable, tree=str(tree)))
    path.chmod(0o755)
    return str(path)


def base_tree(directory: Path, rev: str) -> Path:
    tree = directory / f"tree-{rev}"
    if not (tree / "eagle_convert").is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=ROOT, check=True,
                       capture_output=True)  # fmt: skip
    return tree


def stored(target: Path) -> tuple[int, int]:
    """(every tensor's bytes, the routed experts' bytes) from the index and headers."""
    from eagle_convert.read.checkpoint import open_weights

    infos = open_weights(target)
    experts = sum(i.nbytes for k, i in infos.items() if ".mlp.experts." in k)
    return sum(i.nbytes for i in infos.values()), experts


def measure(name: str, directory: Path, tokens: int, base: str | None, keep: bool) -> None:
    config = CONFIGS[name]
    target, draft = directory / f"target-{name}", directory / f"draft-{name}"
    if not (target / "config.json").is_file():
        started = time.perf_counter()
        write_target(name, target)
        disk = sum(p.stat().st_blocks * 512 for p in target.iterdir())
        print(f"wrote {name} in {time.perf_counter() - started:.0f} s ({disk / 1e9:.1f} GB on disk)", flush=True)
    if not (draft / "config.json").is_file():
        n = config["num_hidden_layers"]
        write_draft(draft, config, [1, n // 2 - 1, n - 4], intermediate=config["intermediate_size"])
    ids = directory / f"ids-{name}.json"
    g = torch.Generator().manual_seed(2)
    ids.write_text(json.dumps(torch.randint(0, 32000, (1, tokens), generator=g).tolist()))
    total, experts = stored(target)
    args = ["verify", str(draft), "--target", str(target), "--level", "target", "--token-ids", str(ids), "--json",
            "--no-hash"]  # fmt: skip
    trees = {"experts in groups (now)": ROOT}
    if base:
        trees[f"whole layer ({base})"] = base_tree(directory, base)
    print(f"\n{name}: {total / 1e9:.1f} GB stored ({experts / 1e9:.1f} GB of routed experts), {tokens} tokens")
    for label, tree in trees.items():
        command = run(Run(name, args), wrapper(directory, tree, label.split()[0]), {**os.environ, "COLUMNS": "200"})
        err_tail = command.stderr_tail
        counted = next((json.loads(line[11:]) for line in err_tail.splitlines() if line.startswith("BYTES-READ ")), {})
        print(f"  {label}: exit {command.exit} ({command.status or 'no report'}), {command.seconds:.0f} s, "
              f"peak RSS {command.rss_gib:.2f} GiB ({command.rss_gib * 2**30 / 1e9:.2f} GB), dtype {command.dtype}",
              flush=True)  # fmt: skip
        if counted:
            e, o = counted["experts"], counted["other"]
            print(f"    read: experts {e / 1e9:.2f} GB of {experts / 1e9:.1f} GB ({e / max(experts, 1):.1%}), the "
                  f"rest {o / 1e9:.2f} GB; in all {(e + o) / total:.1%} of the target")  # fmt: skip
        for what, seconds in (command.phases or {}).items():
            print(f"    {what}: {seconds:.0f} s")
        if command.exit not in (0, 1):
            print("    " + "\n    ".join(line for line in err_tail.splitlines() if not line.startswith("BYTES")))
    if not keep:
        shutil.rmtree(target)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=Path("/tmp/eagle-convert-experts"))
    parser.add_argument("--only", nargs="*", default=list(CONFIGS))
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--base", default=BASE, help="the whole-layer path's commit ('' to skip it)")
    parser.add_argument("--keep", action="store_true", help="keep the targets (sparse, but large)")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    print(f"machine: {_cpu()}, {os.cpu_count()} cpus, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
    for name in args.only:
        measure(name, args.dir, args.tokens, args.base or None, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
