"""The reference target and the acceptance probe on CUDA: parity with the CPU run and with transformers, timings.

    bash bench/gpu.sh            # exits 0 with a note when no CUDA device is present

1. Runs the streaming reference forward of SmolLM2-135M-Instruct (fixtures/smollm2.py) on the CPU and on the GPU in
   float32 over the same 256 tokens, and transformers' forward on the GPU; prints the largest relative difference of
   the captured boundaries and logits, and the median time of 3 runs of each.
2. Runs the acceptance probe of the trained pair (fixtures/trained_pair.py) on the CPU in float32 and on the GPU in
   float32 and bfloat16; prints each table's rows and checks that the GPU reaches the CPU's verdict.
3. Streams a target's weights to the GPU the way the probe does (reference/hf_target.py: transformers' model, each
   unit read from the checkpoint and copied to the device while the one before it runs) over a one-token forward,
   and prints the bandwidth achieved against a plain pinned host-to-device copy measured in the same run (the
   device's floor): ``--stream DIR [DIR ...]`` streams those checkpoints (the 8B-shaped target of
   bench/bench_scale.py and a hybrid-attention one, e.g. a Qwen3-Next or Qwen3.5 checkpoint), else SmolLM2-135M.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eagle_convert.draft.aux_layers import default_hidden_states
from eagle_convert.probe.target import Target
from eagle_convert.reference.compute import resolve
from fixtures.smollm2 import smollm2_checkpoint

T = TypeVar("T")


def _median_time(fn: Callable[[], T], repeat: int = 3) -> tuple[float, T]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    assert result is not None
    return statistics.median(times), result


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (the CPU path is covered by the test suite)")
        return 0
    directory = smollm2_checkpoint()
    on_cpu = Target(directory, resolve("cpu", "float32"), resident=False)
    on_gpu = Target(directory, resolve("cuda", "float32"), resident=False)
    ids = torch.randint(0, on_cpu.vocab_size, (256,), generator=torch.Generator().manual_seed(0))
    capture = default_hidden_states(on_cpu.num_layers)
    cpu_time, cpu = _median_time(lambda: on_cpu.run(ids, capture))
    gpu_time, gpu = _median_time(lambda: on_gpu.run(ids, capture))
    worst = max(float((gpu.hidden[j].cpu() - cpu.hidden[j]).norm() / cpu.hidden[j].norm()) for j in capture)
    logits = float((gpu.logits.cpu() - cpu.logits).norm() / cpu.logits.norm())
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).to("cuda")
    with torch.no_grad():
        hf_time, hf = _median_time(lambda: model(ids[None].to("cuda"), output_hidden_states=True))
    hf_logits = float((hf.logits[0].cpu() - cpu.logits).norm() / cpu.logits.norm())
    print(f"device: {torch.cuda.get_device_name()}; SmolLM2-135M float32, 256 tokens, median of 3")
    print(f"reference cpu {cpu_time:.3f} s, reference cuda {gpu_time:.3f} s, transformers cuda {hf_time:.3f} s")
    print(f"cuda vs cpu: boundaries {worst:.2e}, logits {logits:.2e}; transformers vs reference logits {hf_logits:.2e}")
    parity_ok = max(worst, logits, hf_logits) < 1e-3
    at = sys.argv.index("--stream") + 1 if "--stream" in sys.argv else len(sys.argv)
    for stream_dir in [Path(a) for a in sys.argv[at:] if not a.startswith("--")] or [directory]:
        streaming_bandwidth(stream_dir)
    return 0 if parity_ok and probe_on(RUNS) else 1


def streaming_bandwidth(directory: Path, repeat: int = 3) -> tuple[float, float]:
    """(achieved, floor) bytes/s: a one-token forward of the target on the GPU in bfloat16, every unit streamed from
    the checkpoint (its compute is tiny, so the time is the streaming), against one pinned 1 GiB host-to-device
    copy."""
    target = Target(directory, resolve("cuda", "bfloat16"), resident=False)
    total = sum(target.weights.nbytes(key) for unit in target.model.units for key in unit.keys)
    ids = torch.tensor([1])

    def walk() -> None:
        target.run(ids, ())

    walk()  # warm: the page cache
    seconds, _ = _median_time(walk, repeat)
    host = torch.empty(2**30, dtype=torch.uint8, pin_memory=True)
    floor_s, _ = _median_time(lambda: host.to("cuda", non_blocking=True), repeat)
    achieved, floor = total / seconds, 2**30 / floor_s
    print(f"streamed {total / 1e9:.2f} GB of weights ({directory.name}) in {seconds:.2f} s: {achieved / 1e9:.1f} GB/s; "
          f"pinned host-to-device copy {floor / 1e9:.1f} GB/s; achieved / floor {achieved / floor:.2f}")  # fmt: skip
    return achieved, floor


RUNS = (("cpu", "float32"), ("cuda", "float32"), ("cuda", "bfloat16"))


def probe_on(runs: tuple[tuple[str, str], ...]) -> bool:
    """The trained pair's probe on each (device, dtype), against the first run: same best reading, top-1 within 2
    points in float32 and 5 points in bfloat16."""
    from eagle_convert.probe.run import run_probe
    from eagle_convert.reference.compute import resolve
    from fixtures.trained_pair import trained_pair

    pair = trained_pair()
    results = {}
    for device, dtype in runs:
        probe = functools.partial(run_probe, pair.draft_dir, pair.target_dir, compute=resolve(device, dtype))
        seconds, result = _median_time(probe, repeat=1)
        results[(device, dtype)] = result
        print(f"probe on {result.device} {result.dtype}: {seconds:.2f} s, best reading {result.best}")
        for row in result.rows:
            print(f"    {row.reading:42s} top-1 {row.top1:.3f}  acceptance length {row.acceptance_length:.3f}")
    cpu = results[runs[0]]
    ok = True
    for (device, dtype), result in results.items():
        tolerance = 0.02 if dtype == "float32" else 0.05
        same = result.best == cpu.best
        close = all(abs(a.top1 - b.top1) <= tolerance for a, b in zip(cpu.rows, result.rows, strict=True))
        ok &= same and close
        print(f"{device} {dtype} vs {' '.join(runs[0])}: same best reading {same}, top-1 within {tolerance}: {close}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
