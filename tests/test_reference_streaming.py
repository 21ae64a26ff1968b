"""The layer streamer (eagle_convert.reference.stream) and the streamed KV-cached Llama decoder
(eagle_convert.reference.llama_decode) on tiny real safetensors targets: the same tokens and states as the uncached
path (Target.generate, forward_streaming), greedy and sampled, on a left-padded batch; each weight read once per
step; at most two layers held; mapped (zero-copy) and copied weights alike; the resident set falling back when a
mapped tensor is dropped; and the CUDA lane's ordering, run on the CPU with recording streams."""

from __future__ import annotations

import gc
import json
import re
import weakref
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from eagle_convert.probe import target as probe_target  # noqa: E402
from eagle_convert.probe.target import Target, generated  # noqa: E402
from eagle_convert.reference import stream  # noqa: E402
from eagle_convert.reference.llama import (  # noqa: E402
    DictWeights,
    LlamaConfig,
    SafetensorsWeights,
    forward_streaming,
    layer_groups,
)
from eagle_convert.reference.llama_decode import generate  # noqa: E402
from eagle_convert.reference.stream import CopyLane, LayerStream  # noqa: E402

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


@pytest.mark.parametrize("seed", [None, 3], ids=["greedy", "sampled"])
def test_streamed_generation_equals_the_uncached_path(llama: Path, seed: int | None) -> None:
    """Tokens equal Target.generate's (the same draws when sampled); each captured state and greedy token equals a
    teacher-forced forward_streaming over the finished sequence."""
    target = Target(llama)
    steps: list[int] = []
    gen = generate(target._cfg, target.weights, PROMPTS, NEW, capture=CAPTURE, sample_seed=seed, on_step=steps.append)
    assert gen.sequences == target.generate(PROMPTS, NEW, sample_seed=seed)
    assert steps == list(range(NEW)) and gen.prompt_lengths == [len(p) for p in PROMPTS]
    for prompt, seq, hidden, greedy in zip(PROMPTS, gen.sequences, gen.hidden, gen.greedy, strict=True):
        full = forward_streaming(target._cfg, target.weights, torch.tensor(seq), capture=CAPTURE)
        for j in CAPTURE:
            torch.testing.assert_close(hidden[j], full.hidden[j][:-1], rtol=1e-4, atol=1e-5)
        argmax = full.logits[:-1].argmax(-1).tolist()
        assert greedy[: len(prompt) - 1] == seq[1 : len(prompt)]  # inside the prompt: the prompt's next token
        assert greedy[len(prompt) - 1 :] == argmax[len(prompt) - 1 :]
    if seed is not None:
        assert any(g[len(p) - 1 :] != s[len(p) :] for p, s, g in zip(PROMPTS, gen.sequences, gen.greedy, strict=True))


def test_eos_ends_each_sequence(llama: Path) -> None:
    target = Target(llama)
    free = generate(target._cfg, target.weights, PROMPTS, NEW)
    eos = free.sequences[1][len(PROMPTS[1]) + 1]  # the second sequence's second new token
    stopped = generate(target._cfg, target.weights, PROMPTS, NEW, eos=eos)
    for prompt, full, cut in zip(PROMPTS, free.sequences, stopped.sequences, strict=True):
        new = full[len(prompt) :]
        assert cut == list(prompt) + (new[: new.index(eos) + 1] if eos in new else new)


class _Counting:
    """A WeightSource that hands out fresh copies, counts reads, and checks at each read that no more than one other
    group (a layer, or the final norm and head) still has a tensor alive."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.reads = inner, Counter[str]()
        self.alive: dict[str, list[weakref.ref[torch.Tensor]]] = {}
        self.most_alive = 0

    def names(self) -> list[str]:
        return list(self.inner.names())

    def get(self, name: str) -> torch.Tensor:
        group = _group(name)
        others = [g for g, refs in self.alive.items() if g != group and any(r() is not None for r in refs)]
        self.most_alive = max(self.most_alive, len(others) + 1)
        assert len(others) <= 1, f"reading {name} while {others} are alive"
        self.reads[name] += 1
        tensor = self.inner.get(name).clone()
        if group != "embedding":  # the embedding gives up its rows and goes
            self.alive.setdefault(group, []).append(weakref.ref(tensor))
        return tensor


def _group(name: str) -> str:
    match = re.match(r"model\.layers\.(\d+)\.", name)
    return f"layer {match.group(1)}" if match else "embedding" if "embed_tokens" in name else "final"


def test_each_weight_read_once_per_step_and_two_layers_at_most(llama: Path) -> None:
    target = Target(llama)
    source = _Counting(target.weights)
    gen = generate(target._cfg, source, PROMPTS, NEW, capture=CAPTURE)
    assert gen.sequences == generate(target._cfg, target.weights, PROMPTS, NEW).sequences
    assert set(source.reads) == set(target.weights.names()) and set(source.reads.values()) == {NEW}
    assert source.most_alive == 2  # one group computed on while the next is read
    assert all(r() is None for refs in source.alive.values() for r in refs)  # nothing kept after generation


def test_mapped_and_copied_weights_agree(llama: Path, llama_bf16: Path) -> None:
    """Mapped safetensors (zero-copy where the dtype matches, converted on the reader thread where not) against the
    same tensors copied into memory: identical tokens and states, in float32 and bfloat16."""
    for directory in (llama, llama_bf16):
        mapped = SafetensorsWeights(directory)
        copied = DictWeights({n: mapped.get(n).clone() for n in mapped.names()})
        cfg = LlamaConfig.from_hf(json.loads((directory / "config.json").read_text()))
        for dtype in (torch.float32, torch.bfloat16):
            a = generate(cfg, mapped, PROMPTS, NEW, capture=CAPTURE, dtype=dtype)
            b = generate(cfg, copied, PROMPTS, NEW, capture=CAPTURE, dtype=dtype)
            assert a.sequences == b.sequences and a.greedy == b.greedy
            assert all(torch.equal(x[j], y[j]) for x, y in zip(a.hidden, b.hidden, strict=True) for j in CAPTURE)
            assert all(h[j].dtype == dtype for h in a.hidden for j in CAPTURE)  # states kept in the compute dtype
    view = SafetensorsWeights(llama_bf16).get("model.layers.2.mlp.up_proj.weight")
    assert view.dtype == torch.bfloat16 and view.to(torch.bfloat16) is view  # used as stored: no copy


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


class _Recorder:
    """The CopyLane's view of a device, on the CPU: synchronous copies, events and stream switches written to a log."""

    def __init__(self) -> None:
        self.copy, self.compute = "copy", "compute"
        self.log: list[str] = []
        self.count = 0
        self._on = "compute"

    def event(self) -> Any:
        recorder, self.count = self, self.count + 1
        number = self.count

        class Event:
            def record(self, stream: str) -> None:
                recorder.log.append(f"record e{number} on {stream}")

            def synchronize(self) -> None:
                recorder.log.append(f"host waits e{number}")

            def __repr__(self) -> str:
                return f"e{number}"

        return Event()

    @contextmanager
    def on(self, stream: str) -> Any:
        self._on, before = stream, self._on
        yield
        self._on = before

    def wait(self, stream: str, event: Any) -> None:
        self.log.append(f"{stream} waits {event!r}")

    def pinned(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8)

    def device_bytes(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8)


def test_copy_lane_orders_copies_after_releases() -> None:
    """Group g's copy into its slot waits for the release of group g - 2 (the slot's last tenant), its pinned buffer
    for its last copy; compute waits for each group's copy; tensors arrive intact and converted."""
    torch.manual_seed(0)
    state = {f"g{g}.w": torch.randn(3, 5 + g, dtype=torch.bfloat16) for g in range(5)}
    recorder = _Recorder()
    lane = CopyLane(recorder)
    walk = LayerStream(DictWeights(state), "cpu", torch.float32, lane=lane)
    got = []
    for g, tensors in enumerate(walk.walk([{f"g{g}.w": (3, 5 + g)} for g in range(5)])):
        (t,) = tensors.values()
        got.append(t.clone())
        recorder.log.append(f"compute g{g}")
    walk.close()
    assert all(torch.equal(got[g], state[f"g{g}.w"].float()) for g in range(5))
    log = recorder.log
    for g in range(5):
        copied = log.index(f"record e{_copy_event(log, g)} on copy")
        assert log.index(f"compute waits e{_copy_event(log, g)}") < log.index(f"compute g{g}")
        if g >= 2:
            used = log.index(f"compute g{g - 2}")  # the slot's last tenant, then its release on the compute stream
            release = next(i for i in range(used, len(log)) if log[i].startswith("record") and "compute" in log[i])
            released = log[release].split()[1]
            assert release < log.index(f"copy waits {released}") < copied
    assert log.count("host waits e1") == 1  # slot 0's pinned buffer reused after its first copy finished


def _copy_event(log: list[str], g: int) -> int:
    """The number of the event recorded on the copy stream for group g (the g-th such record)."""
    records = [line for line in log if line.startswith("record") and line.endswith("on copy")]
    return int(records[g].split()[1][1:])


def test_generation_through_the_copy_lane_equals_the_host_lane(llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA path's logic (slots, staging, events, on-device conversion) run on the CPU gives the same text."""
    target = Target(llama)
    host = generate(target._cfg, target.weights, PROMPTS, NEW, capture=CAPTURE, dtype=torch.bfloat16)
    monkeypatch.setattr(stream, "HostLane", lambda: CopyLane(_Recorder()))
    lane = generate(target._cfg, target.weights, PROMPTS, NEW, capture=CAPTURE, dtype=torch.bfloat16)
    assert lane.sequences == host.sequences
    assert all(torch.equal(a[j], b[j]) for a, b in zip(lane.hidden, host.hidden, strict=True) for j in CAPTURE)


def test_layer_groups_cover_the_target(llama: Path) -> None:
    target = Target(llama)
    names = [n for g in layer_groups(target._cfg) for n in g]
    assert sorted([*names, "model.embed_tokens.weight"]) == target.weights.names()


@pytest.mark.parametrize("text", ["greedy", "sampled"])
def test_probe_text_comes_from_the_cached_decoder(llama: Path, text: str) -> None:
    """The probe's generated text: the decoder's tokens and states; greedy tokens the target's argmax (for sampled
    text not the text's next token); progress counted in steps."""
    target = Target(llama)
    probe_target._TEXTS.clear()
    seen: list[tuple[str, int, int]] = []
    chunks = generated(target, PROMPTS, text, CAPTURE, lambda *a: seen.append(a), NEW, ignore_eos=True)
    gen = generate(
        target._cfg, target.weights, PROMPTS, NEW, capture=CAPTURE, sample_seed=0 if text == "sampled" else None
    )
    for chunk, seq, greedy in zip(chunks, gen.sequences, gen.greedy, strict=True):
        assert chunk.ids.tolist() == seq and chunk.greedy.tolist() == greedy
    assert seen[0] == (probe_target.GENERATING, 0, NEW) and seen[-1] == (probe_target.GENERATING, NEW, NEW)


def test_console_names_each_progress_unit() -> None:
    from eagle_convert.render import console
    from eagle_convert.verify.report import TENSOR_VALUES

    assert console._UNITS[probe_target.GENERATING] == "steps"
    assert console._UNITS.get(probe_target.TARGET_PASSES, "layers") == "layers"
    assert console._UNITS[TENSOR_VALUES] == "tensors" and console._UNITS["probe: draft chains"] == "chains"


def test_deepseek_probe_text_is_kv_cached_and_sampled_alike(tmp_path: Path) -> None:
    """A DeepSeek target's sampled probe text comes from deepseek_decode (streamed), with Target.generate's draws."""
    from tests.test_reference_deepseek import save_random_target, tiny

    save_random_target(tiny(), tmp_path)
    target = Target(tmp_path)
    probe_target._TEXTS.clear()
    chunks = generated(target, PROMPTS, "sampled", [0, 3], None, NEW, ignore_eos=True)
    assert [c.ids.tolist() for c in chunks] == target.generate(PROMPTS, NEW, sample_seed=0)
    for chunk in chunks:
        full = target.run(chunk.ids, [0, 3])
        torch.testing.assert_close(chunk.hidden[3], full.hidden[3][:-1], rtol=1e-4, atol=1e-5)
        start = chunk.start
        assert chunk.greedy[start:].tolist() == full.logits[:-1].argmax(-1)[start:].tolist()
