"""KV-cached DeepSeek generation (eagle_convert.reference.deepseek_decode) against the uncached path on tiny targets:
the same tokens as Target.generate (greedy and sampled, a padded batch, plain / YaRN / no q LoRA / block FP8), the
captured states of a teacher-forced forward_streaming, eos stopping, and one read of each weight per step."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from eagle_convert.errors import InputError  # noqa: E402
from eagle_convert.probe.target import Target  # noqa: E402
from eagle_convert.reference.deepseek import forward_streaming  # noqa: E402
from eagle_convert.reference.deepseek_decode import generate  # noqa: E402
from tests.test_reference_deepseek import YARN, _quantize_fp8, save_random_target, tiny  # noqa: E402

PROMPTS = [[5], [17, 3, 25, 9, 100], [99, 1, 7]]  # different lengths: the batch is left-padded
NEW = 6
TARGETS: dict[str, dict[str, Any]] = {
    "yarn": {"rope_scaling": YARN},
    "plain": {},
    "no-q-lora": {"q_lora_rank": None, "rope_scaling": YARN},
}


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Target]:
    """Tiny DeepSeek-V3 targets (3 layers, the last two MoE), and the first one as block FP8 ("fp8")."""
    out = tmp_path_factory.mktemp("deepseek-decode")
    made = {}
    for name, overrides in TARGETS.items():
        save_random_target(tiny(**overrides), out / name)
        made[name] = Target(out / name)
    made["fp8"] = Target(_fp8_copy(out / "yarn", out / "fp8"))
    return made


def _fp8_copy(src: Path, dst: Path) -> Path:
    """``src`` with its projections stored as DeepSeek-V3's block FP8 (16 x 24 blocks, partial at the edges)."""
    dst.mkdir()
    quantized: dict[str, Any] = {}
    for name, t in safetensors_torch.load_file(src / "model.safetensors").items():
        if name.endswith("proj.weight") and "kv_a_proj" not in name:
            q, s = _quantize_fp8(t, (16, 24))
            quantized |= {name: q, name + "_scale_inv": s}
        else:
            quantized[name] = t
    safetensors_torch.save_file(quantized, str(dst / "model.safetensors"))
    fp8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [16, 24]}
    (dst / "config.json").write_text(
        json.dumps(json.loads((src / "config.json").read_text()) | {"quantization_config": fp8})
    )
    return dst


def _generate(target: Target, prompts: list[list[int]], new: int, **kwargs: Any) -> Any:
    return generate(target._cfg, target.weights, prompts, new, **kwargs)


@pytest.mark.parametrize("seed", [None, 0], ids=["greedy", "sampled"])
@pytest.mark.parametrize("name", [*TARGETS, "fp8"])
def test_cached_generation_equals_the_uncached_path(targets: dict[str, Target], name: str, seed: int | None) -> None:
    """The tokens of Target.generate (the whole text recomputed each step), and the states and argmax tokens of a
    teacher-forced forward over each finished sequence, at every boundary."""
    target = targets[name]
    n = target.num_layers
    steps: list[int] = []
    gen = _generate(target, PROMPTS, NEW, capture=range(n + 1), sample_seed=seed, on_step=steps.append)
    assert gen.sequences == target.generate(PROMPTS, NEW, sample_seed=seed)
    assert steps == list(range(NEW)) and gen.prompt_lengths == [1, 5, 3]
    for prompt, seq, hidden, greedy in zip(PROMPTS, gen.sequences, gen.hidden, gen.greedy, strict=True):
        full = forward_streaming(target._cfg, target.weights, torch.tensor(seq), capture=range(n + 1))
        assert set(hidden) == set(range(n + 1))
        for j, h in hidden.items():
            torch.testing.assert_close(h, full.hidden[j][:-1], rtol=1e-4, atol=1e-5)
        start = len(prompt) - 1
        assert greedy == seq[1 : start + 1] + full.logits[start:-1].argmax(-1).tolist()
        if seed is None:
            assert greedy == seq[1:]
    if seed is not None:  # sampling at temperature 1 leaves the argmax on tiny random targets
        assert any(g != s[1:] for g, s in zip(gen.greedy, gen.sequences, strict=True))


def test_a_sequence_ends_at_eos_and_generation_when_all_have(targets: dict[str, Target]) -> None:
    target = targets["yarn"]
    free = _generate(target, PROMPTS, NEW).sequences
    eos = free[0][len(PROMPTS[0]) + 1]  # the second token sequence 0 generates
    steps: list[int] = []
    gen = _generate(target, PROMPTS, NEW, eos=eos, capture=[2], on_step=steps.append)
    ends = []
    for prompt, seq, cut, hidden, greedy in zip(PROMPTS, free, gen.sequences, gen.hidden, gen.greedy, strict=True):
        cont = seq[len(prompt) :]
        end = cont.index(eos) + 1 if eos in cont else NEW
        ends.append(end)
        assert cut == seq[: len(prompt) + end]
        assert hidden[2].shape == (len(cut) - 1, 64) and greedy == cut[1:]
    assert ends[0] == 2
    assert len(steps) == max(ends)  # the batch stops when every sequence has its eos (or at NEW)


class CountingWeights:
    """A weight source that counts the reads of each tensor."""

    def __init__(self, target: Target) -> None:
        self.inner, self.reads = target.weights, Counter[str]()

    def get(self, name: str) -> torch.Tensor:
        self.reads[name] += 1
        return self.inner.get(name)

    def names(self) -> list[str]:
        return self.inner.names()


def test_each_step_reads_each_weight_once_for_the_batch(targets: dict[str, Target]) -> None:
    """Layers are streamed: every non-expert tensor read once per step for all sequences, an expert at most once per
    step (only when a token was routed to it), the embedding once."""
    target = targets["yarn"]
    weights = CountingWeights(target)
    generate(target._cfg, weights, PROMPTS, NEW)
    experts = {k: v for k, v in weights.reads.items() if ".experts." in k}
    rest = {k: v for k, v in weights.reads.items() if ".experts." not in k}
    assert rest.pop("model.embed_tokens.weight") == 1
    assert (
        set(rest.values()) == {NEW} and "lm_head.weight" in rest and "model.layers.2.self_attn.kv_b_proj.weight" in rest
    )
    assert experts and max(experts.values()) <= NEW
    never = [n for n in target.weights.names() if n not in weights.reads]
    assert all(".experts." in n for n in never)  # the experts no token was routed to, and nothing else


def test_bad_requests_are_input_errors(targets: dict[str, Target]) -> None:
    target = targets["yarn"]
    for prompts, new, capture, match in (
        (PROMPTS, NEW, [4], r"must lie in 0\.\.3"),
        (PROMPTS, 0, [], "at least 1"),
        ([[1], []], NEW, [], "at least one token"),
        ([[1, 128]], NEW, [], r"0\.\.127"),
    ):
        with pytest.raises(InputError, match=match):
            _generate(target, prompts, new, capture=capture)
