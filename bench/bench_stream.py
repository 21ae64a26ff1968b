"""Benchmark: the streamed transformers reference at real size, beside the hand-written path it replaced and the
floors of the same machine, in one run.

    .venv/bin/python bench/bench_stream.py [--dir /tmp/eagle-convert-scale] [--old REV] [--repeat 2]
        [--only 8b moe gpt-oss] [--pass ROWS TOKENS] [--generate PROMPTS TOKENS NEW] [--ids ROWS TOKENS]

* ``8b``: the Llama-3.1-8B-shaped bfloat16 target of ``bench/bench_scale.py`` (16 GB in 4 shards, written on the first
  run). Each phase runs in a fresh process, the current tree and the tree at ``--old`` (default: the last commit with
  the hand-written Llama/DeepSeek models, checked out as a git worktree under ``--dir``) alternating: a teacher-forced
  pass (default 4 x 256 tokens) in bfloat16 capturing 3 states (``Target.run``), and the KV-cached generation
  (default 4 prompts x 64 tokens + 8 new tokens), greedy, capturing the same states. On a CPU without bfloat16
  matmul instructions (tens of GFLOP/s) use smaller sizes. Wall time and peak RSS (the child's ``ru_maxrss``).
* ``moe``: a Qwen3-MoE-shaped block-FP8 target of 10.9 B parameters (32 layers, hidden 2048, 64 experts of 768, top
  8; per-expert tensors as Qwen3-MoE-FP8 checkpoints ship them, which transformers dequantizes and fuses per layer as
  each streams) and a draft for it; ``gpt-oss``: a gpt-oss-20b-shaped MXFP4 target (24 layers, hidden 2880, 32
  experts, the experts as MXFP4 blocks and scales, random) and a draft for it. Each: ``eagle-convert verify DRAFT
  --target T --level target --token-ids FILE`` in a fresh process: wall time, peak RSS, the verdict, and the files
  in the target's directory before and after (nothing may be written beside it).
* floors, measured in the same run: reading each target's shards once from disk (evicted first) and from the page
  cache, and a layer-sized bfloat16 matmul.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_reference import _cpu  # noqa: E402
from bench.bench_scale import Run, _bytes, matmul_rate, read_rate, run, write_target  # noqa: E402

OLD = "3a35588"  # the last commit with reference/llama.py, llama_decode.py, deepseek.py, deepseek_decode.py
CAPTURE = [2, 16, 29]  # the EAGLE3 default boundaries of a 32-layer target

_CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import torch
from eagle_convert.probe.target import Target
from eagle_convert.reference.compute import resolve
phase, target_dir = sys.argv[2], sys.argv[3]
capture = json.loads(sys.argv[4])
rows, length, new = json.loads(sys.argv[5])
g = torch.Generator().manual_seed(0)
target = Target(__import__("pathlib").Path(target_dir), resolve("cpu", "bfloat16"))
start = time.perf_counter()
if phase == "pass":
    ids = torch.randint(0, target.vocab_size, (rows * length,), generator=g)
    out = target.run(ids, capture, lengths=[length] * rows)
    check = float(out.hidden[capture[-1]].float().abs().mean())
else:
    prompts = torch.randint(0, target.vocab_size, (rows, length), generator=g).tolist()
    if hasattr(target, "model"):
        gen = target.model.generate(prompts, new, capture=capture)
    else:
        from eagle_convert.reference.llama_decode import generate
        gen = generate(target._cfg, target.weights, prompts, new, capture=capture, dtype=torch.bfloat16)
    check = gen.sequences
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
import eagle_convert
print(json.dumps({"s": seconds, "peak_gib": peak, "check": check, "from": eagle_convert.__file__}))
"""


def side_by_side(target: Path, old_tree: Path, repeat: int, sizes: dict[str, list[int]]) -> dict[str, Any]:
    """Each phase of the current tree and the old one, alternating, each in a fresh process."""
    trees = {"transformers (now)": ROOT, f"--old ({old_tree.name.removeprefix('tree-')})": old_tree}
    results: dict[str, dict[str, list[dict[str, Any]]]] = {p: {k: [] for k in trees} for p in ("pass", "generate")}
    for phase in results:
        for i in range(repeat):
            order = list(trees.items())
            for label, tree in order[i % 2 :] + order[: i % 2]:
                out = subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        _CHILD,
                        str(tree),
                        phase,
                        str(target),
                        json.dumps(CAPTURE),
                        json.dumps(sizes[phase]),
                    ],
                    capture_output=True,
                    text=True,
                    cwd=tree,
                )
                if out.returncode:
                    raise SystemExit(f"{label} {phase}: {out.stderr[-2000:]}")
                results[phase][label].append(json.loads(out.stdout.strip().splitlines()[-1]))
    for phase, by in results.items():
        rows, length, new = sizes[phase]
        what = f"{rows} x {length} tokens" if phase == "pass" else f"{rows} prompts x {length} + {new} new tokens"
        print(f"\n8B-shaped target, {phase} ({what}):")
        med = {k: statistics.median(r["s"] for r in v) for k, v in by.items()}
        peak = {k: max(r["peak_gib"] for r in v) for k, v in by.items()}
        for k, v in by.items():
            runs = " ".join(f"{r['s']:.1f}" for r in v)
            print(f"  {k:>28}: {med[k]:7.1f} s (runs {runs}), peak RSS {peak[k]:.2f} GiB")
        now, old = list(by)
        print(f"  now / old: time {med[now] / med[old]:.2f}, peak RSS {peak[now] / peak[old]:.2f}")
        if phase == "generate":
            print(f"  same tokens: {by[now][0]['check'] == by[old][0]['check']}")
    return results


def old_worktree(directory: Path, rev: str) -> Path:
    tree = directory / f"tree-{rev}"
    if not (tree / "eagle_convert").is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=ROOT, check=True)
    return tree


# ---------------------------------------------------------------------------------------------------- targets


def _randn(shape: tuple[int, ...], g: torch.Generator, std: float = 0.02) -> torch.Tensor:
    return (torch.randn(shape, generator=g, dtype=torch.bfloat16) * std).contiguous()


def _save_sharded(
    out: Path, layers: int, per_layer: Any, head: dict[str, torch.Tensor], config: dict[str, Any]
) -> None:
    """Shards of about 4 GB, one layer's tensors at a time in memory; an index; the config."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    shards: list[dict[str, torch.Tensor]] = [dict(head)]
    names: list[str] = []
    weight_map: dict[str, str] = {}
    total = 0

    def flush() -> None:
        nonlocal total
        name = f"model-{len(names) + 1:05d}.safetensors"
        save_file(shards[-1], str(out / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shards[-1], name))
        total += sum(t.numel() * t.element_size() for t in shards[-1].values())
        names.append(name)
        shards[-1] = {}

    for i in range(layers):
        shards[-1].update(per_layer(i))
        if sum(t.numel() * t.element_size() for t in shards[-1].values()) > 4 * 2**30:
            flush()
    if shards[-1]:
        flush()
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    (out / "config.json").write_text(json.dumps(config, indent=2))


MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "norm_topk_prob": True,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "eos_token_id": 151645,
    "quantization_config": {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "weight_block_size": [128, 128],
        "modules_to_not_convert": ["lm_head", "mlp.gate"],
    },
}


def _fp8(shape: tuple[int, int], g: torch.Generator) -> dict[str, torch.Tensor]:
    """A block-FP8 weight as Qwen3-FP8 and DeepSeek-V3 ship it: float8_e4m3fn values and a float32
    ``weight_scale_inv`` per 128 x 128 block (the weight is value x scale_inv)."""
    values = torch.randn(shape, generator=g).clamp(-4, 4).to(torch.float8_e4m3fn)
    blocks = (-(-shape[0] // 128), -(-shape[1] // 128))
    return {"weight": values, "weight_scale_inv": torch.full(blocks, 0.005, dtype=torch.float32)}


def write_moe(out: Path) -> None:
    """The Qwen3-MoE-shaped target in block FP8 (its linear layers; embeddings, norms, router and head bf16)."""
    c = MOE
    h, e, inter, hd = c["hidden_size"], c["num_experts"], c["moe_intermediate_size"], c["head_dim"]
    g = torch.Generator().manual_seed(0)

    def linear(name: str, shape: tuple[int, int]) -> dict[str, torch.Tensor]:
        return {f"{name}.{k}": v for k, v in _fp8(shape, g).items()}

    def layer(i: int) -> dict[str, torch.Tensor]:
        p = f"model.layers.{i}."
        heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
        t = {
            p + "input_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
            p + "post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
            **linear(p + "self_attn.q_proj", (heads * hd, h)),
            **linear(p + "self_attn.k_proj", (kv * hd, h)),
            **linear(p + "self_attn.v_proj", (kv * hd, h)),
            **linear(p + "self_attn.o_proj", (h, heads * hd)),
            p + "self_attn.q_norm.weight": torch.ones(hd, dtype=torch.bfloat16),
            p + "self_attn.k_norm.weight": torch.ones(hd, dtype=torch.bfloat16),
            p + "mlp.gate.weight": _randn((e, h), g),
        }
        for x in range(e):
            q = f"{p}mlp.experts.{x}."
            t |= linear(q + "gate_proj", (inter, h)) | linear(q + "up_proj", (inter, h))
            t |= linear(q + "down_proj", (h, inter))
        return t

    head = {
        "model.embed_tokens.weight": _randn((c["vocab_size"], h), g, 1.0),
        "model.norm.weight": torch.ones(h, dtype=torch.bfloat16),
        "lm_head.weight": _randn((c["vocab_size"], h), g),
    }
    _save_sharded(out, c["num_hidden_layers"], layer, head, c)


GPT_OSS = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_hidden_layers": 24,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_local_experts": 32,
    "num_experts_per_tok": 4,
    "vocab_size": 201088,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 150000,
    "rope_scaling": {
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "rope_type": "yarn",
        "truncate": False,
    },
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "swiglu_limit": 7.0,
    "tie_word_embeddings": False,
    "attention_bias": True,
    "torch_dtype": "bfloat16",
    "eos_token_id": 200002,
    "quantization_config": {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
    },
}


def write_gpt_oss(out: Path) -> None:
    """gpt-oss-20b's shapes; each expert projection as MXFP4: ``*_blocks`` uint8 [E, rows, cols / 32, 16] (two FP4
    values a byte) and ``*_scales`` uint8 [E, rows, cols / 32] (a power-of-two exponent biased by 127), random."""
    c = GPT_OSS
    h, e, inter, hd = c["hidden_size"], c["num_local_experts"], c["intermediate_size"], c["head_dim"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    g = torch.Generator().manual_seed(0)

    def blocks(rows: int, cols: int) -> torch.Tensor:
        return torch.randint(0, 256, (e, rows, cols // 32, 16), generator=g, dtype=torch.uint8)

    def scales(rows: int, cols: int) -> torch.Tensor:
        return torch.randint(118, 122, (e, rows, cols // 32), generator=g, dtype=torch.uint8)

    def layer(i: int) -> dict[str, torch.Tensor]:
        p = f"model.layers.{i}."
        return {
            p + "input_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
            p + "post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
            p + "self_attn.q_proj.weight": _randn((heads * hd, h), g),
            p + "self_attn.q_proj.bias": _randn((heads * hd,), g),
            p + "self_attn.k_proj.weight": _randn((kv * hd, h), g),
            p + "self_attn.k_proj.bias": _randn((kv * hd,), g),
            p + "self_attn.v_proj.weight": _randn((kv * hd, h), g),
            p + "self_attn.v_proj.bias": _randn((kv * hd,), g),
            p + "self_attn.o_proj.weight": _randn((h, heads * hd), g),
            p + "self_attn.o_proj.bias": _randn((h,), g),
            p + "self_attn.sinks": _randn((heads,), g),
            p + "mlp.router.weight": _randn((e, h), g),
            p + "mlp.router.bias": _randn((e,), g),
            p + "mlp.experts.gate_up_proj_blocks": blocks(2 * inter, h),
            p + "mlp.experts.gate_up_proj_scales": scales(2 * inter, h),
            p + "mlp.experts.gate_up_proj_bias": _randn((e, 2 * inter), g),
            p + "mlp.experts.down_proj_blocks": blocks(h, inter),
            p + "mlp.experts.down_proj_scales": scales(h, inter),
            p + "mlp.experts.down_proj_bias": _randn((e, h), g),
        }

    head = {
        "model.embed_tokens.weight": _randn((c["vocab_size"], h), g, 1.0),
        "model.norm.weight": torch.ones(h, dtype=torch.bfloat16),
        "lm_head.weight": _randn((c["vocab_size"], h), g),
    }
    _save_sharded(out, c["num_hidden_layers"], layer, head, c)


def write_draft(
    out: Path, target: dict[str, Any], ids: list[int], intermediate: int | None = None, draft_vocab: int = 32000
) -> None:
    """An EAGLE3 draft for ``target`` (one layer, SpecForge layout, borrowed embedding, 32,000-token draft vocab;
    its MLP ``intermediate`` wide, else 4 x hidden)."""
    from safetensors.torch import save_file

    h, heads, kv = target["hidden_size"], target["num_attention_heads"], target["num_key_value_heads"]
    hd = target.get("head_dim") or h // heads  # the target's attention shape: heads divisible by the KV heads
    inter, vocab, dv = intermediate or 4 * h, target["vocab_size"], min(draft_vocab, target["vocab_size"])
    g = torch.Generator().manual_seed(1)
    p = "midlayer."
    tensors = {
        "fc.weight": _randn((h, 3 * h), g),
        p + "input_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
        p + "hidden_norm.weight": torch.ones(h, dtype=torch.bfloat16),
        p + "post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
        p + "self_attn.q_proj.weight": _randn((heads * hd, 2 * h), g),
        p + "self_attn.k_proj.weight": _randn((kv * hd, 2 * h), g),
        p + "self_attn.v_proj.weight": _randn((kv * hd, 2 * h), g),
        p + "self_attn.o_proj.weight": _randn((h, heads * hd), g),
        p + "mlp.gate_proj.weight": _randn((inter, h), g),
        p + "mlp.up_proj.weight": _randn((inter, h), g),
        p + "mlp.down_proj.weight": _randn((h, inter), g),
        "norm.weight": torch.ones(h, dtype=torch.bfloat16),
        "lm_head.weight": _randn((dv, h), g),
        "d2t": torch.zeros(dv, dtype=torch.int64),
        "t2d": torch.arange(vocab) < dv,
    }
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": inter,
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": hd,
        "vocab_size": vocab,
        "draft_vocab_size": dv,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True},
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))


def at_scale(name: str, directory: Path, write: Any, config: dict[str, Any], ids: list[int]) -> None:
    """``verify --level target --token-ids`` on the target in a fresh process; nothing written beside it."""
    target, draft = directory / f"target-{name}", directory / f"draft-{name}"
    if not (target / "config.json").is_file():
        started = time.perf_counter()
        write(target)
        print(f"wrote the {name} target ({_bytes(target) / 1e9:.2f} GB) in {time.perf_counter() - started:.0f} s")
    n = config["num_hidden_layers"]
    if not (draft / "config.json").is_file():
        write_draft(draft, config, [1, n // 2 - 1, n - 4])
    ids_file = directory / f"ids-{name}.json"
    g = torch.Generator().manual_seed(2)
    ids_file.write_text(json.dumps(torch.randint(0, 32000, (ids[0], ids[1]), generator=g).tolist()))
    size = _bytes(target)
    cold, warm = read_rate(target, cold=True), read_rate(target, cold=False)
    before = sorted(p.name for p in target.iterdir())
    command = Run(name, ["verify", str(draft), "--target", str(target), "--level", "target", "--token-ids",
                         str(ids_file), "--json", "--no-hash"])  # fmt: skip
    run(command, str(Path(sys.executable).with_name("eagle-convert")), {**os.environ, "COLUMNS": "200"})
    after = sorted(p.name for p in target.iterdir())
    print(f"\n{name}: {size / 1e9:.2f} GB; floor: read once cold {size / cold:.0f} s ({cold / 1e9:.2f} GB/s), "
          f"page cache {size / warm:.0f} s ({warm / 1e9:.2f} GB/s)")  # fmt: skip
    print(f"  verify --level target --token-ids ({ids[0]} x {ids[1]}): exit {command.exit} "
          f"({command.status or 'no report'}), {command.seconds:.0f} s, peak RSS {command.rss_gib:.2f} GiB, "
          f"dtype {command.dtype or '-'}; positions {command.positions}")  # fmt: skip
    for what, seconds in (command.phases or {}).items():
        print(f"  {what}: {seconds:.0f} s")
    print(f"  files beside the target unchanged: {before == after}")
    if command.exit not in (0, 1):
        print(f"  stderr: {command.stderr_tail}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=Path("/tmp/eagle-convert-scale"))
    parser.add_argument("--old", default=OLD)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=["8b", "moe", "gpt-oss"])
    parser.add_argument("--pass", dest="pass_", nargs=2, type=int, default=[4, 256], metavar=("ROWS", "TOKENS"))
    parser.add_argument("--generate", nargs=3, type=int, default=[4, 64, 8], metavar=("PROMPTS", "TOKENS", "NEW"))
    parser.add_argument("--ids", nargs=2, type=int, default=[4, 128], metavar=("ROWS", "TOKENS"))
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    print(
        f"machine: {_cpu()}, {os.cpu_count()} cpus, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"{time.strftime('%Y-%m-%d')}; floor: [1024, 4096] x [4096, 14336] bfloat16 matmul "
        f"{matmul_rate(1024, torch.bfloat16) / 1e9:.0f} GFLOP/s"
    )
    if "8b" in args.only:
        target = args.dir / "target-8b"
        if not (target / "config.json").is_file():
            write_target(target)
        size = _bytes(target)
        cold, warm = read_rate(target, cold=True), read_rate(target, cold=False)
        print(f"8b: {size / 1e9:.2f} GB; floor: read once cold {size / cold:.0f} s, page cache {size / warm:.0f} s")
        sizes = {"pass": [*args.pass_, 0], "generate": list(args.generate)}
        side_by_side(target, old_worktree(args.dir, args.old), args.repeat, sizes)
    if "moe" in args.only:
        at_scale("moe", args.dir, write_moe, MOE, args.ids)
    if "gpt-oss" in args.only:
        at_scale("gpt-oss", args.dir, write_gpt_oss, GPT_OSS, args.ids)
    print(f"\nthis process: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
