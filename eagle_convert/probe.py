"""The acceptance probe: run the target and the draft together and measure how well the draft predicts.

The target runs layer by layer (reference/llama.py or reference/deepseek.py) over token sequences, capturing every
hidden state a reading of the draft's config could select. The draft then runs k-step greedy chains from every
position (reference/eagle3_draft.py) under the configured reading and under the alternatives a deployment could
silently apply (see :func:`readings`). For each reading: top-1 agreement of the first draft token with the target's
greedy next token over every position, and acceptance as the engines count it (probe_stats.py: speculative decoding
along the text, cycle by cycle). Readings are compared with the configured one position by position; one that beats
it decisively means the config says something the weights were not trained on.

Text (probe_text.py): by default the target's own greedy continuations of varied prompts, generated with a KV cache
(reference/llama_decode.py) that captures the hidden states on the way, ROUND prompts at a time: at least
``min_positions`` scored positions, and more rounds (up to MAX_ROUNDS_FACTOR times as many) while a comparison is
inconclusive. Given token ids are scored in packed, teacher-forced passes; acceptance on text that leaves the
target's greedy path is a lower bound (a chain stops where the text does). Top-1 agreement is exact on any text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from eagle_convert.checkpoint import Checkpoint, open_checkpoint
from eagle_convert.compute import CPU_FLOAT32, Compute
from eagle_convert.config import TargetConfig
from eagle_convert.detect import DraftSpec, detect
from eagle_convert.errors import InputError, UsageError
from eagle_convert.mapping import map_key
from eagle_convert.probe_stats import Cycles, Paired, compare, sign_test, simulate, wilson
from eagle_convert.probe_text import NEW_TOKENS, ROUND, eos_id, prompt_pool
from eagle_convert.reference import eagle3_draft, fp8
from eagle_convert.reference.llama import SafetensorsWeights
from eagle_convert.reference.packing import segments

__all__ = ["sign_test"]
MIN_POSITIONS = 4096  # scored positions of the default probe: a ~1-point top-1 difference reaches p < 0.01
MAX_ROUNDS_FACTOR = 4  # while undecided, more text up to this many times min_positions
TEXTS = ("greedy", "sampled")
# Tokens per packed target pass: the pass holds [tokens, vocab] logits, kept near 512 MiB in float32.
LOGITS_BUDGET, MIN_PACK, MAX_PACK = 2**27, 256, 8192

Progress = Callable[[str, int, int], None]
"""``(what, done, total)``: target layers (or generation steps) run so far in a long part of the probe."""


@dataclass(frozen=True)
class Reading:
    name: str
    hidden_states: tuple[int, ...]
    norm_output: bool  # the next chain step takes the post-norm hidden state (the engines' meaning)
    head_norm: bool = True  # lm_head reads norm(hidden); SpecForge 0.2.0 skips the norm when its norm_output is false
    diagnostic: bool = False  # reported, never a finding (one aux state shifted alone)


@dataclass(frozen=True)
class ProbeRow:
    reading: str
    hidden_states: list[int]
    norm_output: bool
    top1: float  # first draft token == the target's greedy next token, over every position
    acceptance_length: float  # engine definition: 1 + accepted draft tokens per draft/verify cycle
    wins: int = 0  # positions where this reading does better than the configured one (accepted, then first token)
    losses: int = 0  # ... and worse
    p_value: float = 1.0  # two-sided exact sign test of wins against losses
    top1_ci: list[float] = field(default_factory=lambda: [0.0, 1.0])  # 95% Wilson interval
    acceptance_length_ci: list[float] = field(default_factory=lambda: [1.0, 1.0])  # 95%
    acceptance_rates: list[float] = field(default_factory=list)  # per draft position: share of cycles accepting it
    cycles: int = 0
    delta_top1: float = 0.0  # this reading minus the configured one, paired over the same positions
    delta_top1_ci: list[float] = field(default_factory=lambda: [0.0, 0.0])
    delta_accepted: float = 0.0  # accepted draft tokens per position, this reading minus the configured one
    delta_accepted_ci: list[float] = field(default_factory=lambda: [0.0, 0.0])
    verdict: str = "configured"  # configured | better | worse | no better | inconclusive
    positions_needed: int | None = None  # when inconclusive: about how many positions would settle it
    head_norm: bool = True
    diagnostic: bool = False


@dataclass(frozen=True)
class ProbeResult:
    sequences: int
    positions: int
    steps: int
    configured: str
    best: str  # a reading that decisively beats the configured one, else the configured one
    rows: list[ProbeRow]
    device: str = "cpu"
    dtype: str = "float32"
    text: str = "given"  # "given" (--token-ids), or the target's own "greedy" or "sampled" continuations
    decided: bool = True  # every comparison that can raise a finding is decided (none inconclusive)
    min_positions: int = MIN_POSITIONS

    def row(self, name: str) -> ProbeRow:
        return next(r for r in self.rows if r.reading == name)


def _draft_state(ckpt: Checkpoint, spec: DraftSpec) -> dict[str, torch.Tensor]:
    """The draft's tensors under canonical names (a rename only: fused or legacy layouts must be normalized)."""
    from safetensors import safe_open

    state: dict[str, torch.Tensor] = {}
    by_shard: dict[str, list[str]] = {}
    for name, info in ckpt.tensors.items():
        by_shard.setdefault(info.shard, []).append(name)
    for shard, names in by_shard.items():
        with safe_open(str(ckpt.root / shard), framework="pt") as f:
            for name in names:
                mapped = map_key(name, spec.layer_prefix or "midlayer.", str(ckpt.root))
                if mapped.action == "drop":
                    continue
                if mapped.action == "split" or "aux_norm" in name:
                    raise UsageError(
                        "the forward levels read canonical drafts: run `eagle-convert normalize` first",
                        path=ckpt.root,
                        hint="then verify the normalized output",
                    )
                state[mapped.target] = f.get_tensor(name)
    return state


def _draft_config(spec: DraftSpec) -> eagle3_draft.DraftConfig:
    from eagle_convert.profiles import flatten_source

    raw, _ = flatten_source(spec.config.raw)  # the speculators format keeps the layer settings nested
    raw.pop("use_aux_norm", None)
    return eagle3_draft.DraftConfig.from_config(raw)


def readings(spec: DraftSpec, num_layers: int) -> tuple[str, list[Reading]]:
    """(name of the configured reading, every reading to measure)."""
    configured = spec.aux.hidden_state_indices
    name = "configured"
    if configured is None and spec.aux.ids:  # ambiguous: measure both readings of the ids
        configured, name = sorted(set(spec.aux.ids)), "ids as input-to"
    if configured is None:
        configured = sorted({2, num_layers // 2, num_layers - 3})
        name = "engine defaults"
    norm_output = spec.flags.norm_output.value
    out = [Reading(name, tuple(configured), norm_output)]
    for shift, label in ((1, "ids read as output-of (one layer later)"), (-1, "ids one layer earlier")):
        shifted = tuple(j + shift for j in configured)
        if all(0 <= j <= num_layers for j in shifted):
            out.append(
                Reading(label if name != "ids as input-to" or shift != 1 else "ids as output-of", shifted, norm_output)
            )
    out.append(Reading(f"norm_output {str(not norm_output).lower()}", tuple(configured), not norm_output))
    # SpecForge 0.2.0: norm_output (default true) gates the final norm before lm_head, and training always feeds the
    # next step the pre-norm hidden state (llama3_eagle.py:1690,1772-1777; algorithms/eagle3/model.py:397).
    raw = spec.config.raw.get("norm_output")
    specforge = Reading("norm_output as SpecForge 0.2.0 reads it", tuple(configured), False, raw is not False)
    if all((r.hidden_states, r.norm_output, r.head_norm) != (specforge.hidden_states, False, specforge.head_norm)
           for r in out):  # fmt: skip
        out.append(specforge)
    for k, j in enumerate(configured):  # diagnostics: which aux state the draft leans on
        for shift in (-1, 1):
            moved = list(configured)
            moved[k] = j + shift
            if 0 <= j + shift <= num_layers and len(set(moved)) == len(moved):
                label = f"hs[{j}] alone {'one layer earlier' if shift < 0 else 'one layer later'}"
                out.append(Reading(label, tuple(moved), norm_output, diagnostic=True))
    return name, out


class Target:
    """A target model for the probe: config, weights and its streaming forward on one device and dtype."""

    def __init__(self, directory: Path, compute: Compute = CPU_FLOAT32) -> None:
        self.directory = directory.resolve()
        self.config = TargetConfig.from_path(directory)
        raw = _raw_config(directory)
        self.weights = SafetensorsWeights(directory, fp8.block_size(self.config.quantization_config))
        self.compute = compute
        if self.config.family == "deepseek":
            from eagle_convert.reference import deepseek

            self._cfg: Any = deepseek.DeepseekConfig.from_hf(raw)
            self._forward: Any = deepseek.forward_streaming
        else:
            from eagle_convert.reference import llama

            self._cfg = llama.LlamaConfig.from_hf(raw)
            self._forward = llama.forward_streaming
        self.num_layers = self.config.num_hidden_layers
        self.vocab_size = int(self._cfg.vocab_size)
        self.pack_tokens = max(MIN_PACK, min(MAX_PACK, LOGITS_BUDGET // self.vocab_size))
        self.eos = eos_id(directory)

    def run(
        self,
        ids: torch.Tensor,
        capture: Iterable[int],
        *,
        lengths: Sequence[int] | None = None,
        on_layer: Callable[[int], None] | None = None,
    ) -> Any:
        device, dtype = self.compute.device, self.compute.dtype
        return self._forward(
            self._cfg,
            self.weights,
            ids,
            capture=capture,
            device=device,
            dtype=dtype,
            lengths=lengths,
            on_layer=on_layer,
        )

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
        name = next((n for n in self.weights.names() if n.endswith("embed_tokens.weight")), None)
        if name is None:
            raise InputError("the target has no embed_tokens weight", path=self.config.source)
        return self.weights.get(name).to(self.compute.device, self.compute.dtype)

    def generate(
        self,
        prompts: list[list[int]],
        new_tokens: int,
        progress: Progress | None = None,
        *,
        sample_seed: int | None = None,
    ) -> list[list[int]]:
        """Each prompt followed by the target's own continuation, greedy or (``sample_seed``) sampled at temperature
        1, all prompts packed into each pass (one read of the weights per new token; full recomputation, no cache)."""
        seqs = [list(p) for p in prompts]
        g = torch.Generator().manual_seed(sample_seed) if sample_seed is not None else None
        plans = [self.passes([len(p) + step for p in prompts]) for step in range(new_tokens)]
        ticker = _Ticker(progress, "target: generating probe text", sum(map(len, plans)) * self.num_layers)
        for plan in plans:
            for group in plan:
                out, spans = self.run_packed(seqs, group, (), ticker)
                for i, (_, stop) in zip(group, spans, strict=True):
                    last = out.logits[stop - 1].float().cpu()
                    pick = last.argmax() if g is None else torch.multinomial(last.softmax(-1), 1, generator=g)[0]
                    seqs[i].append(int(pick))
        return seqs


class _Ticker:
    """Counts target layers for a :data:`Progress` callback."""

    def __init__(self, progress: Progress | None, what: str, total: int) -> None:
        self.progress, self.what, self.total, self.done = progress, what, total, 0
        if progress is not None:
            progress(what, 0, total)

    def __call__(self, _layer: int) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.what, self.done, self.total)

    def finish(self) -> None:
        """Done early (generation that every sequence ended before its last step)."""
        if self.progress is not None and self.done < self.total:
            self.done = self.total
            self.progress(self.what, self.done, self.total)


def _raw_config(directory: Path) -> dict[str, Any]:
    from eagle_convert.errors import ConfigError
    from eagle_convert.jsonstrict import load_json_object

    path = directory / "config.json" if directory.is_dir() else directory
    return load_json_object(path, ConfigError, "target config")


@dataclass(frozen=True)
class Chunk:
    """One scored sequence: tokens ``[T]``, the first row to score, the target's states at positions 0..T-2 for
    every wanted boundary, and its greedy next token after each of those positions ``[T-1]``."""

    ids: torch.Tensor
    start: int
    hidden: dict[int, torch.Tensor]
    greedy: torch.Tensor


def _teacher_forced(
    target: Target, sequences: list[list[int]], starts: list[int], wanted: list[int], progress: Progress | None
) -> list[Chunk]:
    """Packed teacher-forced passes over the sequences (given text, or text generated without a cache)."""
    plan = target.passes([len(s) for s in sequences])
    ticker = _Ticker(progress, "probe: target passes", len(plan) * target.num_layers)
    chunks: list[Chunk] = []
    for group in plan:
        out, spans = target.run_packed(sequences, group, wanted, ticker)
        greedy = out.logits.argmax(-1).cpu()  # the target's next token after each position
        for i, (a, b) in zip(group, spans, strict=True):
            hidden = {j: out.hidden[j][a : b - 1] for j in wanted}
            chunks.append(Chunk(torch.tensor(sequences[i]), starts[i], hidden, greedy[a : b - 1]))
    return chunks


def _generated(
    target: Target,
    prompts: list[list[int]],
    text: str,
    wanted: list[int],
    progress: Progress | None,
    new_tokens: int = NEW_TOKENS,
) -> list[Chunk]:
    """The target's own continuations of ``prompts``, scored from the last prompt position on.

    Kept for the rest of the process (the last few texts), with every boundary when that is small: probing several
    drafts of one target (CI, or verify after normalize) generates the text once."""
    hidden_size = int(target._cfg.hidden_size)
    width = max(len(p) for p in prompts) + new_tokens
    if (target.num_layers + 1) * hidden_size * len(prompts) * width * 4 <= CACHE_BYTES:
        wanted = list(range(target.num_layers + 1))
    key = (str(target.directory), tuple(map(tuple, prompts)), text, new_tokens, str(target.compute), tuple(wanted))
    hit = next((v for k, v in _TEXTS if k[:5] == key[:5] and set(wanted) <= set(k[5])), None)
    if hit is None:
        hit = _generate_text(target, prompts, text, wanted, progress, new_tokens)
        _TEXTS.append((key, hit))
        del _TEXTS[:-3]
    return hit


_TEXTS: list[tuple[tuple[Any, ...], list[Chunk]]] = []
CACHE_BYTES = 2**30  # capture every boundary of the generated text when it takes at most this much


def _generate_text(
    target: Target,
    prompts: list[list[int]],
    text: str,
    wanted: list[int],
    progress: Progress | None,
    new_tokens: int,
) -> list[Chunk]:
    starts = [max(len(p) - 1, 0) for p in prompts]
    if text == "greedy" and target.config.family != "deepseek":
        from eagle_convert.reference.llama_decode import generate_greedy

        ticker = _Ticker(progress, "target: generating probe text", new_tokens)
        gen = generate_greedy(
            target._cfg,
            target.weights,
            prompts,
            new_tokens,
            capture=wanted,
            eos=target.eos,
            device=target.compute.device,
            dtype=target.compute.dtype,
            on_step=ticker,
        )
        ticker.finish()
        return [
            Chunk(torch.tensor(s), start, hidden, torch.tensor(s[1:]))  # greedy text: the next token is the greedy one
            for s, start, hidden in zip(gen.sequences, starts, gen.hidden, strict=True)
        ]
    seqs = target.generate(prompts, new_tokens, progress, sample_seed=0 if text == "sampled" else None)
    return _teacher_forced(target, seqs, starts, wanted, progress)


def _score(
    chunk: Chunk,
    reading: Reading,
    cfg: eagle3_draft.DraftConfig,
    weights: eagle3_draft.DraftWeights,
    embed: torch.Tensor | None,
    steps: int,
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """(first draft token is the target's greedy token, accepted draft tokens) for each scored row, and the accepted
    count of each draft/verify cycle along the sequence.

    Row t of the chain takes the states of position t and token t+1, and drafts tokens t+2, t+3, ...; a draft token
    is accepted while it equals the text's next token and that token is the target's greedy choice."""
    ids, t_len = chunk.ids, chunk.ids.numel()
    device = weights["norm.weight"].device
    aux = torch.cat([chunk.hidden[j] for j in reading.hidden_states], dim=-1).to(device)  # [T-1, K*Ht]
    rcfg = dataclasses.replace(cfg, norm_output=reading.norm_output, head_norm=reading.head_norm)
    steps = 1 if reading.diagnostic else steps  # diagnostics compare the first draft token only
    chain = eagle3_draft.chain(rcfg, weights, ids[1:].to(device), aux, steps, embed=embed)
    rows = torch.arange(t_len - 2)
    greedy = torch.cat([chunk.greedy, torch.tensor([-1])])  # [T]: no greedy token after the last one
    tokens = [step.target_tokens[: t_len - 2].cpu() for step in chain]
    top1 = tokens[0] == greedy[1 : t_len - 1]
    alive = torch.ones(t_len - 2, dtype=torch.bool)
    accepted = torch.zeros(t_len - 2, dtype=torch.int64)
    for s, drafted in enumerate(tokens):
        pos = (rows + 2 + s).clamp(max=t_len - 1)
        alive &= (rows + 2 + s < t_len) & (drafted == ids[pos]) & (ids[pos] == greedy[pos - 1])
        accepted += alive
    cycles = simulate(accepted, chunk.start, t_len - 1 - steps)
    return top1[chunk.start :], accepted[chunk.start :], cycles


def _rows(
    candidates: list[Reading], scores: dict[str, list[tuple[torch.Tensor, torch.Tensor, list[int]]]], steps: int
) -> list[ProbeRow]:
    base_top1 = torch.cat([s[0] for s in scores[candidates[0].name]])
    base_acc = torch.cat([s[1] for s in scores[candidates[0].name]])
    out = []
    for i, r in enumerate(candidates):
        top1 = torch.cat([s[0] for s in scores[r.name]])
        acc = torch.cat([s[1] for s in scores[r.name]])
        cycles = Cycles(torch.tensor([c for s in scores[r.name] for c in s[2]], dtype=torch.int64), steps)
        paired: Paired | None = None
        if r.diagnostic:  # one draft step: paired on the first token alone
            paired = compare(top1, top1.long(), base_top1, base_top1.long())
            cycles = dataclasses.replace(cycles, steps=1)
        else:
            paired = compare(top1, acc, base_top1, base_acc) if i else None
        out.append(_row(r, top1, cycles, paired))
    return out


def _row(r: Reading, top1: torch.Tensor, cycles: Cycles, paired: Paired | None) -> ProbeRow:
    n, hits = top1.numel(), int(top1.sum())
    low, high = cycles.interval()
    extra: dict[str, Any] = {}
    if paired is not None:
        extra = {k: getattr(paired, k) for k in ("wins", "losses", "p_value", "delta_top1", "delta_accepted")}
        extra |= {k: list(getattr(paired, k)) for k in ("delta_top1_ci", "delta_accepted_ci")}
        extra["verdict"] = paired.verdict
        extra["positions_needed"] = paired.positions_needed
    return ProbeRow(
        r.name,
        list(r.hidden_states),
        r.norm_output,
        round(hits / n, 4) if n else 0.0,
        round(cycles.acceptance_length, 4),
        top1_ci=list(wilson(hits, n)),
        acceptance_length_ci=[round(low, 4), round(high, 4)],
        acceptance_rates=cycles.rates(),
        cycles=int(cycles.accepted.numel()),
        head_norm=r.head_norm,
        diagnostic=r.diagnostic,
        **extra,
    )


def decided(rows: list[ProbeRow]) -> bool:
    """No comparison that can raise a finding is inconclusive."""
    return all(r.verdict != "inconclusive" for r in rows if not r.diagnostic)


def winner(rows: list[ProbeRow]) -> ProbeRow | None:
    """The reading that beats the configured one most, when one beats it decisively (never on weak evidence)."""
    better = [r for r in rows if r.verdict == "better" and not r.diagnostic]
    return max(better, key=lambda r: (r.delta_accepted + r.delta_top1, r.delta_top1)) if better else None


def measure_convention(
    draft_dir: str | Path,
    target_dir: str | Path,
    *,
    steps: int = 3,
    compute: Compute = CPU_FLOAT32,
    token_ids: list[list[int]] | None = None,
    prompts: list[str] | None = None,
    min_positions: int = MIN_POSITIONS,
    progress: Progress | None = None,
) -> tuple[str, str]:
    """(convention, evidence): which reading of the draft's ids the target's hidden states confirm.

    Both readings are measured whatever the config says; a difference the paired test cannot call decisive, or one
    below the effect floor, is refused, never guessed."""
    spec = detect(open_checkpoint(draft_dir))
    ids = sorted(set(spec.aux.ids or []))
    if not ids:
        raise UsageError("the draft has no aux-layer ids, so there is no convention to measure", path=draft_dir)
    norm_output = spec.flags.norm_output.value
    both = [Reading("input-to", tuple(ids), norm_output), Reading("output-of", tuple(i + 1 for i in ids), norm_output)]
    result = run_probe(
        draft_dir,
        target_dir,
        steps=steps,
        candidates=both,
        compute=compute,
        token_ids=token_ids,
        prompts=prompts,
        min_positions=min_positions,
        progress=progress,
    )
    a, b = result.row("input-to"), result.row("output-of")
    evidence = (
        f"measured against the target over {result.positions} positions: input-to hs{a.hidden_states} top-1 "
        f"{a.top1:.1%}, output-of hs{b.hidden_states} top-1 {b.top1:.1%} (difference {b.delta_top1:+.1%}, 95% CI "
        f"{b.delta_top1_ci[0]:+.1%} to {b.delta_top1_ci[1]:+.1%}, sign test p = {b.p_value:.2g})"
    )
    if b.verdict == "better":
        return "output-of", evidence
    if b.verdict == "worse":
        return "input-to", evidence
    needed = f"; about {b.positions_needed} positions would settle it" if b.positions_needed else ""
    raise UsageError(
        f"the probe cannot tell the conventions apart ({evidence}{needed})",
        path=draft_dir,
        hint="pass --aux-convention output-of or input-to, or probe with more text (--probe-positions, --prompts)",
    )


def run_probe(
    draft_dir: str | Path,
    target_dir: str | Path,
    *,
    token_ids: list[list[int]] | None = None,
    prompts: list[str] | None = None,
    steps: int = 3,
    candidates: list[Reading] | None = None,
    compute: Compute = CPU_FLOAT32,
    progress: Progress | None = None,
    text: str = "greedy",
    min_positions: int = MIN_POSITIONS,
) -> ProbeResult:
    """Measure the draft against the target under every reading; see the module docstring."""
    if text not in TEXTS:
        raise UsageError(f"unknown probe text {text!r}; choose from {', '.join(TEXTS)}")
    target = Target(Path(target_dir), compute)
    ckpt = open_checkpoint(draft_dir)
    spec = detect(ckpt, target.config)
    cfg = _draft_config(spec)
    weights = eagle3_draft.load_draft(cfg, _draft_state(ckpt, spec), dtype=compute.dtype, device=compute.device)
    embed = None if weights.get("embed_tokens.weight") is not None else target.embedding()
    if candidates is None:
        configured, candidates = readings(spec, target.num_layers)
    else:
        configured = candidates[0].name
    vocab = target.config.vocab_size or cfg.vocab_size
    wanted = sorted({j for r in candidates for j in r.hidden_states})
    scores: dict[str, list[tuple[torch.Tensor, torch.Tensor, list[int]]]] = {r.name: [] for r in candidates}
    if token_ids is not None:
        given = [s for s in token_ids if len(s) >= 3]
        if not given:
            raise InputError("the probe needs token sequences of at least 3 tokens", hint="pass longer --token-ids")
        rounds: list[list[list[int]]] = [given]
    else:
        pool = prompt_pool(Path(target_dir), vocab, prompts)
        rounds = [pool[i : i + ROUND] for i in range(0, len(pool), ROUND)]
    new_tokens = min(NEW_TOKENS, -(-min_positions // ROUND) + 16)  # a small --probe-positions: shorter text
    n_sequences, rows = 0, []
    for batch in rounds:
        if token_ids is not None:
            chunks = _teacher_forced(target, batch, [0] * len(batch), wanted, progress)
        else:
            chunks = _generated(target, batch, text, wanted, progress, new_tokens)
        chunks = [c for c in chunks if c.ids.numel() - 2 > c.start]
        n_sequences += len(chunks)
        ticker = _Ticker(progress, "probe: draft chains", len(chunks) * len(candidates))
        for chunk in chunks:
            for r in candidates:
                scores[r.name].append(_score(chunk, r, cfg, weights, embed, steps))
                ticker(0)
        if not scores[configured]:
            continue
        rows = _rows(candidates, scores, steps)
        positions = sum(s[0].numel() for s in scores[configured])
        if positions >= MAX_ROUNDS_FACTOR * min_positions or (positions >= min_positions and decided(rows)):
            break
    if not rows:
        raise InputError("the probe text left no position to score", hint="pass longer --token-ids or --prompts")
    best = winner(rows)
    return ProbeResult(
        n_sequences,
        sum(s[0].numel() for s in scores[configured]),
        steps,
        configured,
        best.reading if best else configured,
        rows,
        compute.describe(),
        compute.dtype_name,
        "given" if token_ids is not None else text,
        decided(rows),
        min_positions,
    )


def forward_check(draft_dir: str | Path, steps: int = 2, *, compute: Compute = CPU_FLOAT32) -> tuple[bool, str]:
    """Draft only: a chain on seeded random tokens and aux states. (all outputs finite, what was checked)."""
    ckpt = open_checkpoint(draft_dir)
    spec = detect(ckpt)
    cfg = _draft_config(spec)
    device, dtype = compute.device, compute.dtype
    weights = eagle3_draft.load_draft(cfg, _draft_state(ckpt, spec), dtype=dtype, device=device)
    g = torch.Generator().manual_seed(0)
    t_len = 16
    tokens = torch.randint(0, cfg.vocab_size, (t_len,), generator=g).to(device)
    aux = torch.randn(t_len, cfg.num_aux * cfg.target_hidden_size, generator=g).to(device, dtype)
    embed = None
    if weights.get("embed_tokens.weight") is None:
        embed = (torch.randn(cfg.vocab_size, cfg.hidden_size, generator=g) * 0.02).to(device, dtype)
    chain = eagle3_draft.chain(cfg, weights, tokens, aux, steps, embed=embed)
    finite = all(bool(torch.isfinite(s.logits).all() and torch.isfinite(s.next_hidden).all()) for s in chain)
    return finite, f"{steps}-step chain over {t_len} random tokens ({compute.describe()}, {compute.dtype_name})"


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def match_saved_states(target_dir: str | Path, path: str | Path, compute: Compute = CPU_FLOAT32) -> dict[str, Any]:
    """Which target boundary each hidden state saved by a trainer or engine is (the definitive convention answer).

    The file is safetensors with ``token_ids`` [T] and ``hidden_states`` [K, T, Ht] (the K aux states of those
    tokens, in the trainer's order).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        saved = load_file(str(path))
    except (OSError, SafetensorError) as exc:
        raise InputError(f"cannot read saved hidden states: {exc}", path=path) from None
    ids, states = saved.get("token_ids"), saved.get("hidden_states")
    if ids is None or states is None or ids.dim() != 1 or states.dim() != 3 or states.shape[1] != ids.numel():
        raise InputError("expected tensors token_ids [T] and hidden_states [K, T, Ht]", path=path)
    target = Target(Path(target_dir), compute)
    out = target.run(ids.to(torch.int64), capture=range(target.num_layers + 1))
    matches = []
    for k in range(states.shape[0]):
        errors = {j: _relative_error(h.cpu(), states[k]) for j, h in out.hidden.items() if h.shape == states[k].shape}
        if not errors:
            raise InputError(
                f"saved state {k} has shape {list(states[k].shape)}, no target boundary matches it", path=path
            )
        best = min(errors, key=lambda j: errors[j])
        matches.append({"state": k, "boundary": best, "relative_error": round(errors[best], 6)})
    return {"file": str(path), "matches": matches}


def oracle_check(target_dir: str | Path, token_ids: list[int]) -> dict[str, Any]:
    """The reference target against transformers (when installed) on the same tokens: the largest relative error
    over every boundary below N and the final hidden state (HF's hidden_states[N] is after the final norm).
    Both run on the CPU in float32, whatever the probe's device: this checks the implementation, not the hardware."""
    try:
        import transformers
    except ImportError:
        raise UsageError(
            "--oracle transformers needs the transformers package",
            hint="pip install transformers (or eagle-convert[test])",
        ) from None
    target = Target(Path(target_dir))
    ids = torch.tensor(token_ids)
    ours = target.run(ids, capture=range(target.num_layers))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32)
    with torch.no_grad():
        theirs = model(ids[None], output_hidden_states=True).hidden_states
    errors = [_relative_error(ours.hidden[j], theirs[j][0]) for j in range(target.num_layers)]
    errors.append(_relative_error(ours.final_hidden, theirs[target.num_layers][0]))
    return {"oracle": "transformers", "tokens": ids.numel(), "max_relative_error": max(errors)}
