"""The acceptance probe: run the target and the draft together and measure how well the draft predicts.

The target runs layer by layer (reference/llama.py or reference/deepseek.py) over token sequences, capturing every
hidden state a reading of the draft's config could select. The draft then runs k-step greedy chains from every
position (reference/eagle3_draft.py) under the configured reading and under the alternatives a deployment could
silently apply: aux-layer ids read in the other convention (the states one layer earlier or later) and
``norm_output`` flipped. For each reading: top-1 agreement of the first draft token with the target's greedy next
token, and the expected acceptance length of the chain. When an alternative clearly beats the configured reading
(by a margin, and by a paired sign test over the same positions), the config says something the weights were not
trained on.

Acceptance is counted along the text: a draft token is accepted while it equals the text's next token and that token
is the target's greedy choice. On the target's own greedy text that is exactly greedy speculative decoding; on
sampled or given text it is a lower bound (the chain stops where the text leaves the greedy path). Top-1 agreement
is exact on any text.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from eagle_convert.checkpoint import Checkpoint, open_checkpoint
from eagle_convert.compute import CPU_FLOAT32, Compute
from eagle_convert.config import TargetConfig
from eagle_convert.detect import DraftSpec, detect
from eagle_convert.errors import InputError, UsageError
from eagle_convert.mapping import map_key
from eagle_convert.reference import eagle3_draft, fp8
from eagle_convert.reference.llama import SafetensorsWeights
from eagle_convert.reference.packing import segments

MARGIN = 0.05  # an alternative must beat the configured reading's top-1 by this much to be reported
ACCEPTANCE_MARGIN = 0.1  # ... or its expected acceptance length by this many tokens
ALPHA = 0.01  # ... and the paired sign test must call the difference real at this level
# Default probe text: the target's own continuations of one random token each, sampled at temperature 1 (seeded):
# contexts from the target's own distribution, more varied than greedy text, which tells readings apart far better
# at the same cost (each new token is one pass over the target's weights).
DEFAULT_SEQUENCES, DEFAULT_PROMPT, DEFAULT_CONTINUATION = 8, 1, 31
TEXTS = ("sampled", "greedy")
# Tokens per packed target pass: the pass holds [tokens, vocab] logits, kept near 512 MiB in float32.
LOGITS_BUDGET, MIN_PACK, MAX_PACK = 2**27, 256, 8192

Progress = Callable[[str, int, int], None]
"""``(what, done, total)``: target layers run so far in a long part of the probe."""


@dataclass(frozen=True)
class Reading:
    name: str
    hidden_states: tuple[int, ...]
    norm_output: bool


@dataclass(frozen=True)
class ProbeRow:
    reading: str
    hidden_states: list[int]
    norm_output: bool
    top1: float  # first draft token == the target's greedy next token
    acceptance_length: float  # 1 + mean accepted draft tokens of a k-step greedy chain
    wins: int = 0  # positions where this reading does better than the configured one (accepted, then first token)
    losses: int = 0  # ... and worse
    p_value: float = 1.0  # two-sided exact sign test of wins against losses


@dataclass(frozen=True)
class ProbeResult:
    sequences: int
    positions: int
    steps: int
    configured: str
    best: str
    rows: list[ProbeRow]
    device: str = "cpu"
    dtype: str = "float32"
    text: str = "given"  # "given" (--token-ids / --prompts), or the target's own "sampled" or "greedy" text

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
    return name, out


class Target:
    """A target model for the probe: config, weights and its streaming forward on one device and dtype."""

    def __init__(self, directory: Path, compute: Compute = CPU_FLOAT32) -> None:
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


def _raw_config(directory: Path) -> dict[str, Any]:
    from eagle_convert.errors import ConfigError
    from eagle_convert.jsonstrict import load_json_object

    path = directory / "config.json" if directory.is_dir() else directory
    return load_json_object(path, ConfigError, "target config")


def default_sequences(
    target: Target, vocab: int, text: str = "sampled", progress: Progress | None = None
) -> list[list[int]]:
    if text not in TEXTS:
        raise UsageError(f"unknown probe text {text!r}; choose from {', '.join(TEXTS)}")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab, (DEFAULT_PROMPT,), generator=g).tolist() for _ in range(DEFAULT_SEQUENCES)]
    return target.generate(prompts, DEFAULT_CONTINUATION, progress, sample_seed=0 if text == "sampled" else None)


def measure_convention(
    draft_dir: str | Path, target_dir: str | Path, *, steps: int = 3, compute: Compute = CPU_FLOAT32
) -> tuple[str, str]:
    """(convention, evidence): which reading of the draft's ids the target's hidden states confirm.

    Both readings are measured whatever the config says; a win smaller than the margin, or one the sign test cannot
    tell from chance, is refused, never guessed.
    """
    spec = detect(open_checkpoint(draft_dir))
    ids = sorted(set(spec.aux.ids or []))
    if not ids:
        raise UsageError("the draft has no aux-layer ids, so there is no convention to measure", path=draft_dir)
    norm_output = spec.flags.norm_output.value
    both = [Reading("input-to", tuple(ids), norm_output), Reading("output-of", tuple(i + 1 for i in ids), norm_output)]
    result = run_probe(draft_dir, target_dir, steps=steps, candidates=both, compute=compute)
    a, b = result.row("input-to"), result.row("output-of")
    winner, loser = (a, b) if (a.top1, a.acceptance_length) >= (b.top1, b.acceptance_length) else (b, a)
    evidence = (
        f"measured against the target: {winner.reading} hs{winner.hidden_states} top-1 {winner.top1:.1%}, "
        f"{loser.reading} hs{loser.hidden_states} top-1 {loser.top1:.1%} over {result.positions} positions "
        f"(sign test p = {b.p_value:.2g})"
    )
    if not clearly_better(winner, loser, b.p_value):
        raise UsageError(
            f"the probe cannot tell the conventions apart ({evidence})",
            path=draft_dir,
            hint="pass --aux-convention output-of or input-to, or probe with more text",
        )
    return winner.reading, evidence


def clearly_better(a: ProbeRow, b: ProbeRow, p_value: float) -> bool:
    """``a`` beats ``b`` by a margin (first-token agreement, or, with the same first step as for ``norm_output``,
    expected acceptance length) and the paired sign test says the difference is not chance."""
    margin = a.top1 - b.top1 > MARGIN or a.acceptance_length - b.acceptance_length > ACCEPTANCE_MARGIN
    return margin and p_value < ALPHA


def run_probe(
    draft_dir: str | Path,
    target_dir: str | Path,
    *,
    token_ids: list[list[int]] | None = None,
    steps: int = 3,
    candidates: list[Reading] | None = None,
    compute: Compute = CPU_FLOAT32,
    progress: Progress | None = None,
    text: str = "sampled",
) -> ProbeResult:
    """Measure the draft against the target under every reading; see the module docstring."""
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
    given = token_ids is not None
    source = token_ids if token_ids is not None else default_sequences(target, vocab, text, progress)
    sequences = [s for s in source if len(s) >= 3]
    if not sequences:
        raise InputError("the probe needs token sequences of at least 3 tokens", hint="pass longer --token-ids")
    wanted = sorted({j for r in candidates for j in r.hidden_states})
    outcomes: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {r.name: [] for r in candidates}
    plan = target.passes([len(s) for s in sequences])
    ticker = _Ticker(progress, "probe: target + draft", len(plan) * target.num_layers)
    for group in plan:
        out, spans = target.run_packed(sequences, group, wanted, ticker)
        greedy_all = out.logits.argmax(-1).cpu()  # the target's next token after each position
        for i, (a, b) in zip(group, spans, strict=True):
            ids = torch.tensor(sequences[i], dtype=torch.int64)
            for r in candidates:
                aux = torch.cat([out.hidden[j][a : b - 1] for j in r.hidden_states], dim=-1)  # [T-1, K*Ht]
                rcfg = dataclasses.replace(cfg, norm_output=r.norm_output)
                chain = eagle3_draft.chain(rcfg, weights, ids[1:].to(compute.device), aux, steps, embed=embed)
                outcomes[r.name].append(_outcomes(chain, ids, greedy_all[a:b]))
    per_reading = {
        name: (torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])) for name, outs in outcomes.items()
    }
    rows = [_row(r, per_reading[r.name], per_reading[configured]) for r in candidates]
    best = max(rows, key=lambda row: (round(row.top1 + row.acceptance_length, 4), row.top1)).reading
    positions = int(per_reading[configured][0].numel())
    return ProbeResult(
        len(sequences),
        positions,
        steps,
        configured,
        best,
        rows,
        compute.describe(),
        compute.dtype_name,
        "given" if given else text,
    )


def _outcomes(
    chain: list[eagle3_draft.StepOutput], ids: torch.Tensor, greedy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position t (0..T-3): (first draft token is the target's greedy token, accepted draft tokens).

    Row t of the chain drafts tokens t+2, t+3, ...; a draft token is accepted while it equals the next token of the
    sequence and that token is the target's greedy choice (so the context stays the target's own)."""
    t_len = ids.numel()
    rows = torch.arange(t_len - 2)
    tokens = [step.target_tokens[: t_len - 2].cpu() for step in chain]
    top1 = tokens[0] == greedy[1 : t_len - 1]
    alive = torch.ones(t_len - 2, dtype=torch.bool)
    accepted = torch.zeros(t_len - 2, dtype=torch.int64)
    for s, drafted in enumerate(tokens):
        pos = rows + 2 + s
        inside = pos < t_len
        pos = pos.clamp(max=t_len - 1)
        alive &= inside & (drafted == ids[pos]) & (ids[pos] == greedy[pos - 1])
        accepted += alive
    return top1, accepted


def _row(r: Reading, mine: tuple[torch.Tensor, torch.Tensor], base: tuple[torch.Tensor, torch.Tensor]) -> ProbeRow:
    """A reading's rates, and its paired comparison with the configured reading position by position."""
    top1, accepted = mine
    n = top1.numel()
    better = (accepted > base[1]) | ((accepted == base[1]) & top1 & ~base[0])
    worse = (accepted < base[1]) | ((accepted == base[1]) & ~top1 & base[0])
    wins, losses = int(better.sum()), int(worse.sum())
    return ProbeRow(
        r.name,
        list(r.hidden_states),
        r.norm_output,
        _rate(float(top1.sum()), n),
        1.0 + _rate(float(accepted.sum()), n),
        wins,
        losses,
        sign_test(wins, losses),
    )


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test: the chance of a split at least this uneven if neither reading were better."""
    n, k = wins + losses, min(wins, losses)
    if n == 0:
        return 1.0
    log_half = n * math.log(0.5)
    tail = sum(
        math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half) for i in range(k + 1)
    )
    return min(1.0, 2 * tail)


def _rate(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 4) if denominator else 0.0


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


def prompt_token_ids(
    target_dir: str | Path,
    prompts_file: str | Path,
    continuation: int = DEFAULT_CONTINUATION,
    *,
    compute: Compute = CPU_FLOAT32,
    progress: Progress | None = None,
) -> list[list[int]]:
    """Token ids for the probe from text prompts (one per line), tokenized with the target's ``tokenizer.json``
    (the ``tokenizers`` package), each followed by the target's own greedy continuation."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UsageError("--prompts needs the tokenizers package", hint="pip install tokenizers") from None
    directory = Path(target_dir)
    vocab_file = (directory if directory.is_dir() else directory.parent) / "tokenizer.json"
    if not vocab_file.is_file():
        raise InputError(
            "the target has no tokenizer.json to tokenize --prompts with",
            path=vocab_file.parent,
            hint="pass --token-ids FILE instead",
        )
    try:
        lines = [line for line in Path(prompts_file).read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read prompts: {exc}", path=prompts_file) from None
    if not lines:
        raise InputError("no prompts in the file", path=prompts_file)
    tokenizer = Tokenizer.from_file(str(vocab_file))
    target = Target(directory, compute)
    return target.generate([tokenizer.encode(line).ids for line in lines], continuation, progress)
