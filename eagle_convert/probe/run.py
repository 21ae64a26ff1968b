"""The acceptance probe: run the target and the draft together and measure how well the draft predicts.

The target runs layer by layer (reference/llama.py or reference/deepseek.py) over token sequences, capturing every
hidden state a reading of the draft's config could select. The draft then runs k-step greedy chains from every
position (reference/eagle3_draft.py) under the configured reading and under the alternatives a deployment could
silently apply (see :func:`readings`), all readings of a sequence as one batch (one forward per chain step; later
steps only on the rows the text still accepts). For each reading: top-1 agreement of the first draft token with the
target's greedy next token over every position, and acceptance as the engines count it (probe_stats.py: speculative
decoding along the text, cycle by cycle). Readings are compared with the configured one position by position; one
that beats it decisively means the config says something the weights were not trained on.

Text (probe_text.py): by default the target's own greedy continuations of varied prompts, generated with a KV cache
(reference/llama_decode.py) that captures the hidden states on the way, ROUND prompts at a time: at least
``min_positions`` scored positions, and more rounds (up to MAX_ROUNDS_FACTOR times as many) while a comparison is
inconclusive. Given token ids are scored in packed, teacher-forced passes; acceptance on text that leaves the
target's greedy path is a lower bound (a chain stops where the text does). Top-1 agreement is exact on any text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from eagle_convert.draft.aux_layers import SHIFT, to_hidden_states
from eagle_convert.draft.detect import DraftSpec, detect
from eagle_convert.draft.mapping import map_key
from eagle_convert.errors import InputError, UsageError
from eagle_convert.probe.result import MIN_POSITIONS, ProbeResult, ProbeRow
from eagle_convert.probe.stats import Cycles, Paired, compare, sign_test, simulate, wilson
from eagle_convert.probe.target import Chunk, Progress, Target, Ticker, generated, teacher_forced
from eagle_convert.probe.text import NEW_TOKENS, ROUND, check_text, prompt_pool
from eagle_convert.read.checkpoint import Checkpoint, open_checkpoint
from eagle_convert.reference import eagle3_config, eagle3_draft
from eagle_convert.reference.budget import CHAIN_BYTES
from eagle_convert.reference.compute import CPU_FLOAT32, Compute
from eagle_convert.reference.draft_reader import TensorReader

__all__ = ["MIN_POSITIONS", "ProbeResult", "ProbeRow", "sign_test"]
MAX_ROUNDS_FACTOR = 4  # while undecided, more text up to this many times min_positions


@dataclass(frozen=True)
class Reading:
    name: str
    hidden_states: tuple[int, ...]
    norm_output: bool  # the next chain step takes the post-norm hidden state (the engines' meaning)
    head_norm: bool = True  # lm_head reads norm(hidden); SpecForge 0.2.0 skips the norm when its norm_output is false
    diagnostic: bool = False  # reported, never a finding (one aux state shifted alone)


def _draft_state(ckpt: Checkpoint, spec: DraftSpec, tensors: TensorReader | None = None) -> dict[str, torch.Tensor]:
    """The draft's tensors under canonical names (a rename only: fused or legacy layouts must be normalized), read
    through ``tensors`` (what an earlier level kept) or each shard opened once."""
    renamed: dict[str, str] = {}
    for name in ckpt.tensors:
        mapped = map_key(name, spec.layer_prefix or "midlayer.", str(ckpt.root))
        if mapped.action == "drop":
            continue
        if mapped.action == "split" or "aux_norm" in name:
            raise UsageError(
                "the forward levels read canonical drafts: run `eagle-convert normalize` first",
                path=ckpt.root,
                hint="then verify the normalized output",
            )
        renamed[name] = mapped.target
    if tensors is not None:
        return {target: tensors.get(name) for name, target in renamed.items()}
    with TensorReader(ckpt) as reader:
        return {target: reader.get(name) for name, target in renamed.items()}


def _draft_config(spec: DraftSpec) -> eagle3_config.Eagle3Config:
    """The reference forward's config, from the config detection parsed (nothing parsed again)."""
    from eagle_convert.read.config import flatten_source

    raw, _ = flatten_source(spec.config.raw)  # the speculators format keeps the layer settings nested
    raw.pop("use_aux_norm", None)
    return eagle3_config.Eagle3Config.from_parsed(dataclasses.replace(spec.config, use_aux_norm=None), raw)


@dataclass(frozen=True)
class LoadedDraft:
    """A draft loaded for the reference forward: its detection, its config and its weights on one device/dtype."""

    spec: DraftSpec
    cfg: eagle3_config.Eagle3Config
    weights: eagle3_config.DraftWeights

    def embedding(self, target: Target) -> torch.Tensor | None:
        """The embedding the draft borrows from the target, or None when it has its own."""
        return None if self.weights.get("embed_tokens.weight") is not None else target.embedding()


def load_draft(
    ckpt: Checkpoint, spec: DraftSpec, compute: Compute = CPU_FLOAT32, tensors: TensorReader | None = None
) -> LoadedDraft:
    """The draft of ``ckpt`` (detected as ``spec``) for the reference forward; its tensors come through ``tensors``
    when given (what the tensors level kept). A draft the reference cannot run raises an EagleConvertError."""
    cfg = _draft_config(spec)
    state = _draft_state(ckpt, spec, tensors)
    return LoadedDraft(spec, cfg, eagle3_config.load_draft(cfg, state, dtype=compute.dtype, device=compute.device))


def open_pair(draft_dir: str | Path, target_dir: str | Path, compute: Compute) -> tuple[LoadedDraft, Target]:
    """The library entry points' one read of a pair: the target, and the draft detected against it."""
    target = Target(Path(target_dir), compute)
    ckpt = open_checkpoint(draft_dir)
    return load_draft(ckpt, detect(ckpt, target.config), compute), target


def readings(spec: DraftSpec, num_layers: int) -> tuple[str, list[Reading]]:
    """(name of the configured reading, every reading to measure)."""
    name, configured = spec.aux.probed(num_layers)  # ambiguous ids: both readings of them are measured
    norm_output = spec.flags.norm_output.value
    out = [Reading(name, tuple(configured), norm_output)]
    gap = SHIFT["output-of"] - SHIFT["input-to"]  # the same ids read in the other convention move by this
    for shift, label in ((gap, "ids read as output-of (one layer later)"), (-gap, "ids one layer earlier")):
        shifted = tuple(j + shift for j in configured)
        if all(0 <= j <= num_layers for j in shifted):
            out.append(
                Reading(
                    label if name != "ids as input-to" or shift != gap else "ids as output-of", shifted, norm_output
                )
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


Score = tuple[torch.Tensor, torch.Tensor, list[int]]  # a reading's (top-1 hits, accepted tokens, cycles) on a chunk


def _score(
    chunk: Chunk,
    reading: Reading,
    cfg: eagle3_config.Eagle3Config,
    weights: eagle3_config.DraftWeights,
    embed: torch.Tensor | None,
    steps: int,
    stop: int | None = None,
) -> Score:
    """One reading's chains over one chunk, scored by :func:`_judge` (see there); :func:`_score_readings` runs many
    readings at once with the same arithmetic per reading."""
    device = weights["norm.weight"].device
    aux = torch.cat([chunk.hidden[j] for j in reading.hidden_states], dim=-1).to(device)  # [T-1, K*Ht]
    rcfg = dataclasses.replace(cfg, norm_output=reading.norm_output, head_norm=reading.head_norm)
    steps = 1 if reading.diagnostic else steps  # diagnostics compare the first draft token only
    chain = eagle3_draft.chain(rcfg, weights, chunk.ids[1:].to(device), aux, steps, embed=embed)
    return _judge(chunk, [step.target_tokens for step in chain], steps, stop)


def _score_readings(
    chunk: Chunk,
    readings: list[Reading],
    cfg: eagle3_config.Eagle3Config,
    weights: eagle3_config.DraftWeights,
    embed: torch.Tensor | None,
    steps: int,
    budget: int | None = None,
) -> list[Score]:
    """:func:`_score` for every reading, the readings batched (eagle3_draft.chains: one forward per chain step for
    a batch of readings) as many at a time as fit ``budget`` bytes of activations (default CHAIN_BYTES); a reading
    that alone exceeds it runs alone. A chain goes on only from rows :func:`_judge` scores and while its tokens are
    accepted: the later steps of the others change no score."""
    device, dtype = weights["norm.weight"].device, weights["norm.weight"].dtype
    t_len = chunk.ids.numel() - 1
    per_reading = eagle3_draft.chain_elements(cfg, t_len, steps) * dtype.itemsize
    size = max(1, (CHAIN_BYTES if budget is None else budget) // per_reading)
    ids, needed = chunk.ids[1:].to(device), _accepted(chunk, device)
    out: list[Score] = []
    for i in range(0, len(readings), size):
        batch = readings[i : i + size]
        aux = [torch.cat([chunk.hidden[j] for j in r.hidden_states], dim=-1) for r in batch]  # [T-1, K*Ht] each
        rows = [eagle3_draft.ChainRow(r.norm_output, r.head_norm, 1 if r.diagnostic else steps) for r in batch]
        drafted = eagle3_draft.chains(cfg, weights, ids, torch.stack(aux).to(device), rows, embed=embed, needed=needed)
        out += [_judge(chunk, tokens, row.steps) for tokens, row in zip(drafted, rows, strict=True)]
    return out


def _accepted(chunk: Chunk, device: torch.device) -> Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]:
    """eagle3_draft.chains' ``needed`` for :func:`_judge`: a chain row it scores (from ``chunk.start``) whose step-s
    token the text accepts (as _judge counts it)."""
    ids = chunk.ids.to(device)
    greedy = torch.cat([chunk.greedy, torch.tensor([-1])]).to(device)  # [T]: no greedy token after the last one

    def needed(s: int, at: torch.Tensor, drafted: torch.Tensor) -> torch.Tensor:
        pos = (at + 2 + s).clamp(max=ids.numel() - 1)  # the text's token that row at's step-s token must match
        ok = (at >= chunk.start) & (at + 2 + s < ids.numel()) & (ids[pos] == greedy[pos - 1])  # [N]
        return ok & (drafted == ids[pos])  # [R', N]

    return needed


def _judge(chunk: Chunk, tokens: list[torch.Tensor], steps: int, stop: int | None = None) -> Score:
    """(first draft token is the target's greedy token, accepted draft tokens) for each scored row, and the accepted
    count of each draft/verify cycle along the sequence, up to row ``stop`` (default: the last row whose chain the
    text can verify whole), from the chains' draft tokens ``tokens`` ([T-1] per step).

    Row t of the chain takes the states of position t and token t+1, and drafts tokens t+2, t+3, ...; a draft token
    is accepted while it equals the text's next token and that token is the target's greedy choice."""
    ids, t_len = chunk.ids, chunk.ids.numel()
    rows = torch.arange(t_len - 2)
    greedy = torch.cat([chunk.greedy, torch.tensor([-1])])  # [T]: no greedy token after the last one
    drafted_rows = [step[: t_len - 2].cpu() for step in tokens]
    top1 = drafted_rows[0] == greedy[1 : t_len - 1]
    alive = torch.ones(t_len - 2, dtype=torch.bool)
    accepted = torch.zeros(t_len - 2, dtype=torch.int64)
    for s, drafted in enumerate(drafted_rows):
        pos = (rows + 2 + s).clamp(max=t_len - 1)
        alive &= (rows + 2 + s < t_len) & (drafted == ids[pos]) & (ids[pos] == greedy[pos - 1])
        accepted += alive
    cycles = simulate(accepted, chunk.start, t_len - 1 - steps if stop is None else stop)
    return top1[chunk.start :], accepted[chunk.start :], cycles


def _rows(candidates: list[Reading], scores: dict[str, list[Score]], steps: int) -> list[ProbeRow]:
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


def measure_convention_on(
    draft: LoadedDraft,
    target: Target,
    *,
    steps: int = 3,
    token_ids: list[list[int]] | None = None,
    prompts: list[str] | None = None,
    min_positions: int = MIN_POSITIONS,
    progress: Progress | None = None,
) -> tuple[str, str]:
    """(convention, evidence): which reading of the draft's ids the target's hidden states confirm.

    Both readings are measured whatever the config says; a difference the paired test cannot call decisive, or one
    below the effect floor, is refused, never guessed."""
    spec = draft.spec
    ids = sorted(set(spec.aux.ids or []))
    if not ids:
        raise UsageError(
            "the draft has no aux-layer ids, so there is no convention to measure",
            path=Path(spec.config.source).parent,
        )
    norm_output = spec.flags.norm_output.value
    both = [Reading(c, tuple(to_hidden_states(ids, c)), norm_output) for c in ("input-to", "output-of")]
    result = run_probe_on(
        draft,
        target,
        steps=steps,
        candidates=both,
        token_ids=token_ids,
        prompts=prompts,
        min_positions=min_positions,
        progress=progress,
    )
    a, b = result.row("input-to"), result.row("output-of")
    evidence = (
        f"measured against the target over {result.positions} positions: input-to hs{a.hidden_states} top-1 "
        f"{a.top1:.1%}, output-of hs{b.hidden_states} top-1 {b.top1:.1%} (difference {b.delta_top1:+.1%}, 95% CI "
        f"{b.delta_top1_ci[0]:+.1%} to {b.delta_top1_ci[1]:+.1%}, sign test p {b.p_text})"
    )
    if b.verdict == "better":
        return "output-of", evidence
    if b.verdict == "worse":
        return "input-to", evidence
    needed = f"; about {b.positions_needed} positions would settle it" if b.positions_needed else ""
    raise UsageError(
        f"the probe cannot tell the conventions apart ({evidence}{needed})",
        path=Path(spec.config.source).parent,
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
    draft, target = open_pair(draft_dir, target_dir, compute)
    return run_probe_on(
        draft,
        target,
        token_ids=token_ids,
        prompts=prompts,
        steps=steps,
        candidates=candidates,
        progress=progress,
        text=text,
        min_positions=min_positions,
    )


def run_probe_on(
    draft: LoadedDraft,
    target: Target,
    *,
    token_ids: list[list[int]] | None = None,
    prompts: list[str] | None = None,
    steps: int = 3,
    candidates: list[Reading] | None = None,
    progress: Progress | None = None,
    text: str = "greedy",
    min_positions: int = MIN_POSITIONS,
) -> ProbeResult:
    """:func:`run_probe` on a loaded pair (on the target's device and dtype)."""
    check_text(text)
    compute = target.compute
    spec, cfg, weights, embed = draft.spec, draft.cfg, draft.weights, draft.embedding(target)
    if candidates is None:
        configured, candidates = readings(spec, target.num_layers)
    else:
        configured = candidates[0].name
    vocab = target.config.vocab_size or cfg.vocab_size
    wanted = sorted({j for r in candidates for j in r.hidden_states})
    scores: dict[str, list[Score]] = {r.name: [] for r in candidates}
    if token_ids is not None:
        given = [s for s in token_ids if len(s) >= 3]
        if not given:
            raise InputError("the probe needs token sequences of at least 3 tokens", hint="pass longer --token-ids")
        rounds: list[list[list[int]]] = [given]
    else:
        pool = prompt_pool(target.directory, vocab, prompts)
        rounds = [pool[i : i + ROUND] for i in range(0, len(pool), ROUND)]
    new_tokens = min(NEW_TOKENS, -(-min_positions // ROUND) + 16)  # a small --probe-positions: shorter text
    n_sequences, rows = 0, []
    for batch in rounds:
        if token_ids is not None:
            chunks = teacher_forced(target, batch, [0] * len(batch), wanted, progress)
        else:
            chunks = generated(target, batch, text, wanted, progress, new_tokens)
        chunks = [c for c in chunks if c.ids.numel() - 2 > c.start]
        n_sequences += len(chunks)
        ticker = Ticker(progress, "probe: draft chains", len(chunks) * len(candidates))
        for chunk in chunks:
            scored = _score_readings(chunk, candidates, cfg, weights, embed, steps)
            for r, score in zip(candidates, scored, strict=True):
                scores[r.name].append(score)
                ticker(0)  # one reading's chains over one sequence
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


@dataclass(frozen=True)
class EngineRunPrediction:
    """What the probe predicts for an engine's run: greedy speculative decoding of ``new_tokens`` from each prompt,
    ``steps`` draft tokens per cycle, the draft read as configured."""

    acceptance_length: float  # 1 + accepted draft tokens per draft/verify cycle
    acceptance_rates: list[float]  # per draft position: share of cycles accepting it
    cycles: int
    outputs: list[list[int]]  # the reference target's greedy continuation of each prompt (the text it ran on)


def predict_engine_run(
    draft_dir: str | Path,
    target_dir: str | Path,
    prompts: list[list[int]],
    new_tokens: int,
    *,
    steps: int = 3,
    compute: Compute = CPU_FLOAT32,
) -> EngineRunPrediction:
    """The probe on exactly the run the engine level makes: the target's greedy continuation of each prompt,
    ``new_tokens`` of them whatever the end-of-sequence token (the engine level ignores it), cycles counted as the
    engines count them: the target's prefill yields the first new token, each cycle drafts ``steps`` tokens from the
    last verified one and verifies them, and a prompt is done once its new tokens are out. Its last cycle verifies a
    whole chain even past ``new_tokens``, so the text is generated ``steps`` tokens further."""
    draft, target = open_pair(draft_dir, target_dir, compute)
    return predict_engine_run_on(draft, target, prompts, new_tokens, steps=steps)


def predict_engine_run_on(
    draft: LoadedDraft, target: Target, prompts: list[list[int]], new_tokens: int, *, steps: int = 3
) -> EngineRunPrediction:
    """:func:`predict_engine_run` on a loaded pair."""
    cfg, weights, embed = draft.cfg, draft.weights, draft.embedding(target)
    reading = readings(draft.spec, target.num_layers)[1][0]  # the configured one
    wanted = list(reading.hidden_states)
    chunks = generated(target, prompts, "greedy", wanted, None, new_tokens + steps, ignore_eos=True)
    cycles: list[int] = []
    for chunk in chunks:
        # the cycle at row t follows t + 2 known tokens: drafting goes on while fewer than new_tokens are out
        cycles += _score(chunk, reading, cfg, weights, embed, steps, chunk.start + new_tokens - 1)[2]
    run = Cycles(torch.tensor(cycles, dtype=torch.int64), steps)
    outputs = [c.ids[len(p) : len(p) + new_tokens].tolist() for p, c in zip(prompts, chunks, strict=True)]
    return EngineRunPrediction(round(run.acceptance_length, 4), run.rates(), len(cycles), outputs)
