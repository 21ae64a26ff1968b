"""The probe's target: the reference forward of the target model, and the text the probe scores with its states.

:class:`Target` runs transformers' own model of the target, its weights streamed from the checkpoint a layer at
a time (reference/hf_target.py), on one device and dtype; :func:`teacher_forced` scores given text in packed passes;
:func:`generated` has the target continue prompts (greedy or sampled) with transformers' KV-cached generation for
the whole batch, capturing the hidden states on the way, and keeps the last few texts for the rest of the process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from eagle_convert.probe.result import BoundaryMatch
from eagle_convert.probe.text import NEW_TOKENS
from eagle_convert.read.config import TargetConfig

# Tokens per packed target pass: the pass holds [tokens, vocab] logits, kept near 512 MiB in float32.
from eagle_convert.reference.budget import CACHE_BYTES, LOGITS_BUDGET, MAX_PACK, MIN_PACK  # one place: the sizing's
from eagle_convert.reference.compute import CPU_FLOAT32, Compute
from eagle_convert.reference.hf_target import StreamedModel, TargetOutput
from eagle_convert.reference.packing import segments
from eagle_convert.reference.weights import SafetensorsWeights, resident_fits

__all__ = ["SafetensorsWeights", "Target", "TargetOutput"]

Progress = Callable[[str, int, int], None]
"""``(what, done, total)``: target layers (or generation steps) run so far in a long part of the probe."""

GENERATING = "target: generating probe text"  # counts generation steps (render/progress.py names the unit)
TARGET_PASSES = "probe: target passes"  # counts target layers


class Target:
    """A target model for the probe: its config, its weights and transformers' model of it, streamed on one device
    and dtype (reference/hf_target.py).

    ``config`` (the TargetConfig a command already read) and ``weights`` are taken as given: a verify reads the
    target's config.json once and builds one Target for every level."""

    def __init__(
        self,
        directory: Path,
        compute: Compute = CPU_FLOAT32,
        *,
        config: TargetConfig | None = None,
        weights: SafetensorsWeights | None = None,
        resident: bool | None = None,
    ) -> None:
        self.directory = directory.resolve()
        self.config = config if config is not None else TargetConfig.from_path(directory)
        self.weights = weights or SafetensorsWeights(directory)
        self.compute = compute
        if resident is None:
            resident = resident_fits(self.weights, compute.dtype)
        self.model = StreamedModel(
            self.directory,
            self.config.raw,
            self.weights,
            device=compute.device,
            dtype=compute.dtype,
            resident=resident,
            experts_per_group=compute.experts_per_group,
        )
        self.num_layers = self.model.num_layers
        self.hidden_size = self.model.hidden_size
        self.vocab_size = self.model.vocab_size
        self.pack_tokens = max(MIN_PACK, min(MAX_PACK, LOGITS_BUDGET // self.vocab_size))
        self.eos = self.config.eos_token_id
        self._embedding: torch.Tensor | None = None

    @classmethod
    def of(
        cls, config: TargetConfig, compute: Compute = CPU_FLOAT32, weights: SafetensorsWeights | None = None
    ) -> Target:
        """The target whose config.json was read as ``config`` (its directory holds the weights)."""
        return cls(config.directory, compute, config=config, weights=weights)

    def on(self, compute: Compute) -> Target:
        """This target (same config and weights, nothing re-read) on another device or dtype."""
        return (
            self
            if compute == self.compute and compute.experts_per_group == self.compute.experts_per_group
            else Target(self.directory, compute, config=self.config, weights=self.weights)
        )

    def run(
        self,
        ids: torch.Tensor,
        capture: Iterable[int],
        *,
        lengths: Sequence[int] | None = None,
        on_layer: Callable[[int], None] | None = None,
    ) -> TargetOutput:
        """A teacher-forced pass: boundary j's states for j in ``capture``, the logits and the head's input."""
        return self.model.forward(ids, capture=capture, lengths=lengths, on_layer=on_layer)

    def passes(self, lengths: Sequence[int]) -> list[list[int]]:
        """Sequence indices grouped into packed passes of at most ``pack_tokens`` tokens (a longer one alone)."""
        groups: list[list[int]] = []
        size = 0
        for i, n in enumerate(lengths):
            if not groups or size + n > self.pack_tokens:
                groups.append([])
                size = 0
            groups[-1].append(i)
            size += n
        return groups

    def run_packed(
        self, sequences: Sequence[Sequence[int]], group: list[int], capture: Iterable[int], tick: Callable[[int], None]
    ) -> tuple[Any, tuple[tuple[int, int], ...]]:
        """One packed pass over ``sequences[i]`` for i in ``group``: (output, each sequence's (start, stop))."""
        lengths = [len(sequences[i]) for i in group]
        ids = torch.tensor([t for i in group for t in sequences[i]], dtype=torch.int64)
        return self.run(ids, capture, lengths=lengths, on_layer=tick), segments(lengths)

    def embedding(self) -> torch.Tensor:
        """The target's input embedding on the compute's device and dtype (read once)."""
        if self._embedding is None:
            self._embedding = self.model.parameter(self.model.embedding_name())
        return self._embedding

    def generate(
        self,
        prompts: list[list[int]],
        new_tokens: int,
        progress: Progress | None = None,
        *,
        sample_seed: int | None = None,
    ) -> list[list[int]]:
        """Each prompt followed by the target's own continuation, greedy or (``sample_seed``) sampled at temperature
        1, all prompts packed into each pass (one read of the weights per new token; full recomputation, no cache:
        the oracle of the KV-cached decoders). Progress counts steps."""
        seqs = [list(p) for p in prompts]
        g = torch.Generator().manual_seed(sample_seed) if sample_seed is not None else None
        ticker = Ticker(progress, GENERATING, new_tokens)
        for step in range(new_tokens):
            for group in self.passes([len(p) + step for p in prompts]):
                out, spans = self.run_packed(seqs, group, (), lambda _layer: None)
                for i, (_, stop) in zip(group, spans, strict=True):
                    last = out.logits[stop - 1].float().cpu()
                    pick = last.argmax() if g is None else torch.multinomial(last.softmax(-1), 1, generator=g)[0]
                    seqs[i].append(int(pick))
            ticker(step)
        return seqs


class Ticker:
    """Counts what a piece of work reports (target layers, generation steps, chains) for a :data:`Progress`
    callback."""

    def __init__(self, progress: Progress | None, what: str, total: int) -> None:
        self.progress, self.what, self.total, self.done = progress, what, total, 0
        if progress is not None:
            progress(what, 0, total)

    def __call__(self, _index: int) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.what, self.done, self.total)

    def finish(self) -> None:
        """Done early (generation that every sequence ended before its last step)."""
        if self.progress is not None and self.done < self.total:
            self.done = self.total
            self.progress(self.what, self.done, self.total)


@dataclass(frozen=True)
class Chunk:
    """One scored sequence: tokens ``[T]``, the first row to score, the target's states at positions 0..T-2 for
    every wanted boundary, and its greedy next token after each of those positions ``[T-1]``."""

    ids: torch.Tensor
    start: int
    hidden: dict[int, torch.Tensor]
    greedy: torch.Tensor


def teacher_forced(
    target: Target, sequences: list[list[int]], starts: list[int], wanted: list[int], progress: Progress | None
) -> list[Chunk]:
    """Packed teacher-forced passes over the sequences (given text, or text generated without a cache)."""
    plan = target.passes([len(s) for s in sequences])
    ticker = Ticker(progress, TARGET_PASSES, len(plan) * target.num_layers)
    chunks: list[Chunk] = []
    for group in plan:
        out, spans = target.run_packed(sequences, group, wanted, ticker)
        greedy = out.logits.argmax(-1).cpu()  # the target's next token after each position
        for i, (a, b) in zip(group, spans, strict=True):
            hidden = {j: out.hidden[j][a : b - 1] for j in wanted}
            chunks.append(Chunk(torch.tensor(sequences[i]), starts[i], hidden, greedy[a : b - 1]))
    return chunks


def generated(
    target: Target,
    prompts: list[list[int]],
    text: str,
    wanted: list[int],
    progress: Progress | None,
    new_tokens: int = NEW_TOKENS,
    *,
    ignore_eos: bool = False,
) -> list[Chunk]:
    """The target's own continuations of ``prompts``, scored from the last prompt position on; each ends at the
    target's end-of-sequence token unless ``ignore_eos`` (the engine level generates a fixed number of tokens).

    Kept for the rest of the process (the last few texts), with every boundary when that is small: probing several
    drafts of one target (CI, or verify after normalize) generates the text once."""
    hidden_size = target.hidden_size
    width = max(len(p) for p in prompts) + new_tokens
    if (target.num_layers + 1) * hidden_size * len(prompts) * width * 4 <= CACHE_BYTES:
        wanted = list(range(target.num_layers + 1))
    same = (str(target.directory), tuple(map(tuple, prompts)), text, new_tokens, str(target.compute), ignore_eos)
    hit = next((v for k, v in _TEXTS if k[:-1] == same and set(wanted) <= set(k[-1])), None)
    if hit is None:
        hit = _generate_text(target, prompts, text, wanted, progress, new_tokens, None if ignore_eos else target.eos)
        key = (*same, tuple(wanted))
        _TEXTS.append((key, hit))
        del _TEXTS[:-3]
    return hit


_TEXTS: list[tuple[tuple[Any, ...], list[Chunk]]] = []


def _generate_text(
    target: Target,
    prompts: list[list[int]],
    text: str,
    wanted: list[int],
    progress: Progress | None,
    new_tokens: int,
    eos: int | None,
) -> list[Chunk]:
    """The target's own text from transformers' KV-cached generation (reference/hf_target.py): greedy, or sampled
    with seed 0; each chunk's greedy tokens are the target's argmax after each position (for sampled text not the
    text's next token)."""
    ticker = Ticker(progress, GENERATING, new_tokens)
    gen = target.model.generate(
        prompts,
        new_tokens,
        capture=wanted,
        eos=eos,
        on_step=ticker,
        sample_seed=0 if text == "sampled" else None,
    )
    ticker.finish()
    starts = [max(len(p) - 1, 0) for p in prompts]
    return [
        Chunk(torch.tensor(s), start, hidden, torch.tensor(greedy))
        for s, start, hidden, greedy in zip(gen.sequences, starts, gen.hidden, gen.greedy, strict=True)
    ]


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """``|a - b| / |b|`` in float32."""
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def nearest_boundaries(states: torch.Tensor, hidden: dict[int, torch.Tensor]) -> list[BoundaryMatch]:
    """For each state ``[T, Ht]`` of ``states`` ``[K, T, Ht]``: the target boundary ``hs[j]`` of ``hidden`` it is
    closest to (boundary None when no boundary has its shape)."""
    out: list[BoundaryMatch] = []
    for k, state in enumerate(states):
        errors = {j: relative_error(state, h) for j, h in hidden.items() if h.shape == state.shape}
        best = min(errors, key=lambda j: errors[j]) if errors else None
        out.append(BoundaryMatch(k, best, None if best is None else round(errors[best], 6)))
    return out
