"""The prepared GPU check (issue 37, item 5): the reference at the sizes that matter, on a lent device, in one call.

    # on the device (the run tool; what it lacks comes from the wheelhouse bench/gpu_check.sh builds here):
    bash bench/gpu_check.sh                        # --device cuda; writes $OUT/gpu_check.json
    # here, on this CPU, at toy sizes (tests/reference/test_gpu_check.py runs this):
    .venv/bin/python bench/gpu_check.py --device cpu --small --out /tmp/gpu_check.json

Three runs, each the command a user types (`eagle-convert verify DRAFT --target T --level target ...`), each in a
fresh process whose wall time, exit code, peak RSS and peak GPU memory (``torch.cuda.max_memory_allocated``) are
recorded:

1. ``8b-teacher-forced``: the Llama-3.1-8B-shaped target of bench/bench_scale.py (16 GB, bfloat16) on given token ids
   (2 sequences of 256 tokens): one packed target pass and the draft's chains;
2. ``8b-generation``: the same target, the probe's own text (seeded one-token prompts, KV-cached generation), at
   least 256 positions;
3. ``kimi-k2``: the Kimi-K2-shaped target of bench/bench_experts.py (8 layers, 384 routed experts in block FP8,
   sparse files) on 16 tokens: the routed experts streamed in groups, the groups sized to the device's free memory.

``--small`` swaps the targets for the toy Llama and DeepSeek-V3 families of fixtures/families.py (seconds, not
minutes) so that the plumbing is tested on any machine. The JSON beside the printed table holds the machine (torch,
transformers, the device's name) and every figure; the CPU figures of the same runs at full size are in
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The child: the CLI as a user runs it, then its peak memory on one line of stderr.
_CHILD = """
import json, resource, sys
from eagle_convert.cli.main import main
code = main(sys.argv[1:])
peak_gpu = None
if "torch" in sys.modules and sys.modules["torch"].cuda.is_available():
    peak_gpu = sys.modules["torch"].cuda.max_memory_allocated()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
sys.stderr.write("GPU-CHECK " + json.dumps({"peak_gpu_bytes": peak_gpu, "peak_rss_bytes": rss}) + "\\n")
sys.exit(code)
"""


def write_cases(directory: Path, small: bool) -> dict[str, list[str]]:
    """Each case's targets and drafts under ``directory`` (written once), and its verify arguments."""
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    dense, moe = directory / "target-dense", directory / "target-moe"
    if small:
        from fixtures.families import write_family_target

        if not (dense / "config.json").is_file():
            write_family_target("llama", dense)
        if not (moe / "config.json").is_file():
            write_family_target("deepseek_v3", moe)
    else:
        from bench.bench_experts import write_target as write_moe
        from bench.bench_scale import write_target as write_dense

        if not (dense / "config.json").is_file():
            write_dense(dense)
        if not (moe / "config.json").is_file():
            write_moe("kimi-k2", moe)
    from bench.bench_stream import write_draft

    out: dict[str, list[str]] = {}
    for name, target in (("dense", dense), ("moe", moe)):
        config = json.loads((target / "config.json").read_text())
        draft = directory / f"draft-{name}"
        if not (draft / "config.json").is_file():
            n = config["num_hidden_layers"]
            ids = [1, n // 2 - 1, n - 4] if n >= 8 else [0, 1, 2]  # the toy families have 4 layers
            write_draft(draft, config, ids, intermediate=config.get("intermediate_size"))
        vocab = min(int(config["vocab_size"]), 32000)
        g = torch.Generator().manual_seed(2)
        lengths = {"dense": (2, 256), "moe": (1, 16)}[name]
        ids = directory / f"ids-{name}.json"
        ids.write_text(json.dumps(torch.randint(3, vocab, lengths, generator=g).tolist()))
        base = ["verify", str(draft), "--target", str(target), "--level", "target", "--json", "--no-hash"]
        if name == "dense":
            out["8b-teacher-forced"] = [*base, "--token-ids", str(ids)]
            out["8b-generation"] = [*base, "--probe-positions", "256"]
        else:
            out["kimi-k2"] = [*base, "--token-ids", str(ids)]
    return out


def run_case(args: list[str], device: str, timeout: float) -> dict[str, Any]:
    """One verify run in a fresh process: wall time, exit code, verdict, peak RSS and peak GPU memory."""
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, *args, "--device", device],
            capture_output=True, text=True, cwd=ROOT, timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"exit": None, "seconds": round(time.perf_counter() - started, 1), "error": f"over {timeout:.0f} s"}
    seconds = time.perf_counter() - started
    peaks = next(
        (json.loads(line[10:]) for line in done.stderr.splitlines() if line.startswith("GPU-CHECK ")),
        {"peak_gpu_bytes": None, "peak_rss_bytes": None},
    )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        report = {}
    probe = (report.get("probe") or {}) if isinstance(report, dict) else {}
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    return {
        "exit": done.returncode,
        "status": report.get("status") if isinstance(report, dict) else None,
        "seconds": round(seconds, 1),
        **peaks,
        "dtype": probe.get("dtype"),
        "positions": probe.get("positions"),
        "error": errors[0] if errors else None,
    }


def machine(device: str) -> dict[str, Any]:
    import torch
    import transformers

    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") and torch.cuda.is_available() else None
    return {
        "device": device,
        "gpu": gpu,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (the lent device) or cpu (to try it here)")
    parser.add_argument("--small", action="store_true", help="toy targets: the plumbing, in seconds")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/eagle-convert-gpu-check"))
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "gpu_check.json")
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds one run may take")
    args = parser.parse_args()
    result: dict[str, Any] = {"machine": machine(args.device), "small": args.small, "runs": {}}
    started = time.perf_counter()
    cases = write_cases(args.dir, args.small)
    result["write_s"] = round(time.perf_counter() - started, 1)
    print(f"targets written in {result['write_s']} s; {result['machine']}", flush=True)
    for name, case in cases.items():
        result["runs"][name] = run = run_case(case, args.device, args.timeout)
        gpu = run.get("peak_gpu_bytes")
        rss = run.get("peak_rss_bytes")
        print(
            f"{name}: exit {run['exit']} ({run.get('status')}), {run['seconds']} s, peak RSS "
            f"{(rss or 0) / 2**30:.2f} GiB, peak GPU {'-' if gpu is None else f'{gpu / 2**30:.2f} GiB'}"
            + (f", {run['error']}" if run.get("error") else ""),
            flush=True,
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))  # after every run: a timeout keeps what was measured
    return 0 if all(r["exit"] in (0, 1) for r in result["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
