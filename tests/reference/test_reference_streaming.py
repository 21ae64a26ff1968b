"""The streamed reference target (eagle_convert.reference.hf_target: transformers' own model, its weights read from
the checkpoint a unit at a time) on tiny real safetensors targets: KV-cached generation gives the same tokens and
states as the uncached path, greedy and sampled; each unit is read once per forward and at most two are held; a
mapped tensor leaves the resident set when dropped; the probe's text comes from the cached generator."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from eagle_convert.probe import target as probe_target  # noqa: E402
from eagle_convert.probe.target import Target, generated  # noqa: E402
from eagle_convert.reference import stream  # noqa: E402
from eagle_convert.reference.compute import Compute  # noqa: E402
from eagle_convert.reference.weights import SafetensorsWeights  # noqa: E402

LAYERS = 4
TINY: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 256,
}
PROMPTS = [[5], [17, 3, 25, 9, 100], [99, 1, 7]]  # different lengths: the batch is left-padded
NEW = 6
CAPTURE = [0, 2, LAYERS]


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama 3 target written by transformers (float32 safetensors)."""
    out = tmp_path_factory.mktemp("llama")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**TINY, tie_word_embeddings=False)
    transformers.LlamaForCausalLM(config).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def llama_bf16(tmp_path_factory: pytest.TempPathFactory, llama: Path) -> Path:
    """The same target stored in bfloat16, in two shards with an index."""
    out = tmp_path_factory.mktemp("llama-bf16")
    state = {k: v.to(torch.bfloat16) for k, v in safetensors_torch.load_file(llama / "model.safetensors").items()}
    first = {k: v for k, v in state.items() if k.startswith(("model.embed", "model.layers.0.", "model.layers.1."))}
    shards = {"model-00001-of-00002.safetensors": first}
    shards["model-00002-of-00002.safetensors"] = {k: v for k, v in state.items() if k not in first}
    weight_map = {}
    for shard, tensors in shards.items():
        safetensors_torch.save_file(tensors, str(out / shard))
        weight_map |= dict.fromkeys(tensors, shard)
    total = sum(v.numel() * v.element_size() for v in state.values())
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    (out / "config.json").write_text((llama / "config.json").read_text())
    return out


def _streamed(path: Path, **kwargs: Any) -> Target:
    return Target(path, resident=False, **kwargs)


@pytest.mark.parametrize("seed", [None, 3], ids=["greedy", "sampled"])
def test_streamed_generation_equals_the_uncached_path(llama: Path, seed: int | None) -> None:
    """KV-cached generation (transformers' generate, left-padded batch) against Target.generate (full recomputation
    per token): the same tokens; the captured states equal a teacher-forced pass over the finished text."""
    target = _streamed(llama)
    gen = target.model.generate(PROMPTS, NEW, capture=CAPTURE, sample_seed=seed)
    assert gen.sequences == target.generate(PROMPTS, NEW, sample_seed=seed)
    for seq, hidden, greedy, prompt in zip(gen.sequences, gen.hidden, gen.greedy, PROMPTS, strict=True):
        full = target.run(torch.tensor(seq), CAPTURE)
        for j in CAPTURE:
            torch.testing.assert_close(hidden[j], full.hidden[j][:-1], rtol=1e-4, atol=1e-5)
        start = len(prompt) - 1
        assert greedy[start:] == full.logits[:-1].argmax(-1)[start:].tolist()


def test_eos_ends_each_sequence(llama: Path) -> None:
    target = _streamed(llama)
    free = target.model.generate(PROMPTS, NEW)
    eos = free.sequences[1][len(PROMPTS[1]) + 1]  # the second sequence's second new token
    stopped = target.model.generate(PROMPTS, NEW, eos=eos)
    for prompt, full, cut in zip(PROMPTS, free.sequences, stopped.sequences, strict=True):
        new = full[len(prompt) :]
        assert cut == list(prompt) + (new[: new.index(eos) + 1] if eos in new else new)


def test_the_targets_own_eos_does_not_end_a_row(llama: Path, tmp_path: Path) -> None:
    """Without ``eos`` every row runs its full length, whatever end-of-sequence token the target's config names
    (transformers' generate would end or pad that row behind the choices)."""
    import shutil

    free = _streamed(llama).model.generate(PROMPTS, NEW)
    token = free.sequences[1][len(PROMPTS[1]) + 1]
    copy = tmp_path / "eos"
    shutil.copytree(llama, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "eos_token_id": token, "pad_token_id": token}))
    assert _streamed(copy).model.generate(PROMPTS, NEW).sequences == free.sequences


class _Counting(SafetensorsWeights):
    """Counts reads of each tensor."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.reads: dict[str, int] = {}

    def read(self, name: str) -> Any:
        self.reads[name] = self.reads.get(name, 0) + 1
        return super().read(name)


def test_each_unit_read_once_per_forward_and_two_held_at_most(llama: Path) -> None:
    """Streamed, every tensor is read once per forward (a generation step included), and no more than two units
    (the one running and the one read ahead) hold real tensors at any time."""
    weights = _Counting(llama)
    target = Target(llama, weights=weights, resident=False)
    model = target.model
    most = [0]

    def count(*_: Any) -> None:
        most[0] = max(most[0], sum(u.loaded for u in model.units))

    hooks = [model.model.get_submodule(u.name).register_forward_hook(count) for u in model.units]
    target.run(torch.tensor(PROMPTS[1]), CAPTURE)
    assert set(weights.reads) == set(weights.names()) and set(weights.reads.values()) == {1}
    weights.reads.clear()
    gen = model.generate(PROMPTS, NEW, capture=CAPTURE)
    assert len(gen.sequences[0]) == len(PROMPTS[0]) + NEW
    assert set(weights.reads.values()) == {NEW}  # the prefill and each step but the last token's
    assert most[0] <= 2
    for h in hooks:
        h.remove()
    assert not any(u.loaded for u in model.units)


def test_resident_and_streamed_agree(llama: Path) -> None:
    ids = torch.tensor(PROMPTS[1] + PROMPTS[2])
    kept = Target(llama, resident=True).run(ids, CAPTURE, lengths=[5, 3])
    streamed = _streamed(llama).run(ids, CAPTURE, lengths=[5, 3])
    for j in CAPTURE:
        assert torch.equal(kept.hidden[j], streamed.hidden[j])
    assert torch.equal(kept.logits, streamed.logits)


def test_packed_sequences_equal_separate_runs(llama: Path) -> None:
    target = _streamed(llama)
    ids = torch.tensor(PROMPTS[1] + PROMPTS[2])
    packed = target.run(ids, CAPTURE, lengths=[5, 3])
    one, two = target.run(ids[:5], CAPTURE), target.run(ids[5:], CAPTURE)
    for j in CAPTURE:
        torch.testing.assert_close(packed.hidden[j], torch.cat([one.hidden[j], two.hidden[j]]), rtol=1e-5, atol=1e-6)


def test_mapped_and_copied_weights_agree(llama: Path, llama_bf16: Path) -> None:
    """bfloat16 shards with an index, mapped and computed in bfloat16 and in float32, against transformers."""
    ids = torch.tensor(PROMPTS[1])
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(llama_bf16), dtype=torch.float32)
    with torch.no_grad():
        ref = hf(ids[None], output_hidden_states=True).hidden_states
    ours = _streamed(llama_bf16).run(ids, [2])
    torch.testing.assert_close(ours.hidden[2], ref[2][0], rtol=1e-5, atol=1e-6)
    bf16 = _streamed(llama_bf16, compute=Compute(torch.device("cpu"), torch.bfloat16)).run(ids, [2])
    assert bf16.hidden[2].dtype == torch.bfloat16
    torch.testing.assert_close(bf16.hidden[2].float(), ref[2][0], rtol=0.05, atol=0.05)


def _rss_mib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS"))


def test_a_dropped_mapped_tensor_leaves_the_resident_set(tmp_path: Path) -> None:
    """256 MiB mapped and read raise VmRSS by about that much; dropping the tensor's views gives it back."""
    size = 256 * 2**20
    safetensors_torch.save_file({"w": torch.ones(size // 2, dtype=torch.bfloat16)}, str(tmp_path / "model.safetensors"))
    weights = SafetensorsWeights(tmp_path)
    gc.collect()
    before = _rss_mib()
    w = weights.get("w")
    assert float(w[::4096].float().sum()) == size // 2 // 4096  # every page read
    stream.touch(w)
    held = _rss_mib()
    row = w[5:9].clone()  # a copy outlives the mapping
    del w
    gc.collect()
    after = _rss_mib()
    assert held - before > 200 and after - before < 50, (before, held, after)
    assert torch.equal(row, torch.ones(4, dtype=torch.bfloat16))


@pytest.mark.parametrize("text", ["greedy", "sampled"])
def test_probe_text_comes_from_the_cached_generator(llama: Path, text: str) -> None:
    """The probe's generated text: the generator's tokens and states; greedy tokens the target's argmax (for sampled
    text not the text's next token); progress counted in steps."""
    target = _streamed(llama)
    probe_target._TEXTS.clear()
    seen: list[tuple[str, int, int]] = []
    chunks = generated(target, PROMPTS, text, CAPTURE, lambda *a: seen.append(a), NEW, ignore_eos=True)
    gen = target.model.generate(PROMPTS, NEW, capture=CAPTURE, sample_seed=0 if text == "sampled" else None)
    for chunk, seq, greedy in zip(chunks, gen.sequences, gen.greedy, strict=True):
        assert chunk.ids.tolist() == seq and chunk.greedy.tolist() == greedy
    assert seen[0] == (probe_target.GENERATING, 0, NEW) and seen[-1] == (probe_target.GENERATING, NEW, NEW)


def test_console_names_each_progress_unit() -> None:
    from eagle_convert.render import progress
    from eagle_convert.verify.report import TENSOR_VALUES

    assert progress._UNITS[probe_target.GENERATING] == "steps"
    assert progress._UNITS.get(probe_target.TARGET_PASSES, "layers") == "layers"
    assert progress._UNITS[TENSOR_VALUES] == "tensors" and progress._UNITS["probe: draft chains"] == "chains"


def test_the_generations_stop_mask_is_on_the_ids_device() -> None:
    """transformers ORs the stopping criterion's mask into its own on the ids' device: a CPU mask stopped every
    generation on CUDA (the GPU check, on an H200). The meta device stands for a device other than the CPU here, and
    the criterion goes through transformers' own StoppingCriteriaList as generate calls it."""
    from transformers import StoppingCriteriaList

    from eagle_convert.reference.decoding import Choices
    from eagle_convert.reference.hf_target import stop_when_ended

    ids, scores = torch.zeros(2, 3, dtype=torch.long, device="meta"), torch.zeros(2, 5, device="meta")
    mask = StoppingCriteriaList([stop_when_ended(Choices(None), None, 2)])(ids, scores)
    assert mask.device.type == "meta" and mask.shape == (2,)
