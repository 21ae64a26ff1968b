"""The reference target on CUDA: parity with the CPU run and with transformers on SmolLM2, and timings.

    bash bench/gpu.sh            # exits 0 with a note when no CUDA device is present

Runs the streaming reference forward of SmolLM2-135M-Instruct (fixtures/smollm2.py) on the CPU and on the GPU in
float32 over the same 256 tokens, and transformers' forward on the GPU; prints the largest relative difference of
the captured boundaries and logits, and the median time of 3 runs of each.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eagle_convert.aux_layers import default_hidden_states
from eagle_convert.errors import ConfigError
from eagle_convert.jsonstrict import load_json_object
from eagle_convert.reference.llama import LlamaConfig, SafetensorsWeights, forward_streaming
from fixtures.smollm2 import smollm2_checkpoint


def _median_time(fn: object, repeat: int = 3) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()  # type: ignore[operator]
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (the CPU path is covered by the test suite)")
        return 0
    directory = smollm2_checkpoint()
    config = LlamaConfig.from_hf(load_json_object(directory / "config.json", ConfigError, "config"))
    weights = SafetensorsWeights(directory)
    ids = torch.randint(0, config.vocab_size, (256,), generator=torch.Generator().manual_seed(0))
    capture = default_hidden_states(config.num_layers)
    cpu_time, cpu = _median_time(lambda: forward_streaming(config, weights, ids, capture=capture, device="cpu"))
    gpu_time, gpu = _median_time(lambda: forward_streaming(config, weights, ids, capture=capture, device="cuda"))
    worst = max(float((gpu.hidden[j].cpu() - cpu.hidden[j]).norm() / cpu.hidden[j].norm()) for j in capture)  # type: ignore[attr-defined]
    logits = float((gpu.logits.cpu() - cpu.logits).norm() / cpu.logits.norm())  # type: ignore[attr-defined]
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).to("cuda")
    with torch.no_grad():
        hf_time, hf = _median_time(lambda: model(ids[None].to("cuda"), output_hidden_states=True))
    hf_logits = float((hf.logits[0].cpu() - cpu.logits).norm() / cpu.logits.norm())  # type: ignore[attr-defined]
    print(f"device: {torch.cuda.get_device_name()}; SmolLM2-135M float32, 256 tokens, median of 3")
    print(f"reference cpu {cpu_time:.3f} s, reference cuda {gpu_time:.3f} s, transformers cuda {hf_time:.3f} s")
    print(f"cuda vs cpu: boundaries {worst:.2e}, logits {logits:.2e}; transformers vs reference logits {hf_logits:.2e}")
    return 0 if max(worst, logits, hf_logits) < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
