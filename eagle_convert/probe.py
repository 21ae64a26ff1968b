"""The acceptance probe: run the target and the draft together and measure how well the draft predicts.

The target runs layer by layer (reference/llama.py or reference/deepseek.py) over token sequences, capturing every
hidden state a reading of the draft's config could select. The draft then runs k-step greedy chains from every
position (reference/eagle3_draft.py) under the configured reading and under the alternatives a deployment could
silently apply: aux-layer ids read in the other convention (the states one layer earlier or later) and
``norm_output`` flipped. For each reading: top-1 agreement of the first draft token with the target's greedy next
token, and the expected acceptance length of the chain. When an alternative clearly beats the configured reading,
the config says something the weights were not trained on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from eagle_convert.checkpoint import Checkpoint, open_checkpoint
from eagle_convert.config import TargetConfig
from eagle_convert.detect import DraftSpec, detect
from eagle_convert.errors import InputError, UsageError
from eagle_convert.mapping import map_key
from eagle_convert.reference import eagle3_draft
from eagle_convert.reference.llama import SafetensorsWeights

MARGIN = 0.05  # an alternative must beat the configured reading's top-1 by this much to be reported
# Default probe text: the target's own greedy continuations of one random token each (in its own distribution).
DEFAULT_SEQUENCES, DEFAULT_PROMPT, DEFAULT_CONTINUATION = 8, 1, 31


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


@dataclass(frozen=True)
class ProbeResult:
    sequences: int
    positions: int
    steps: int
    configured: str
    best: str
    rows: list[ProbeRow]

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
    """A target model for the probe: config, weights and its streaming forward."""

    def __init__(self, directory: Path) -> None:
        self.config = TargetConfig.from_path(directory)
        raw = _raw_config(directory)
        self.weights = SafetensorsWeights(directory)
        if self.config.family == "deepseek":
            from eagle_convert.reference import deepseek

            self._cfg: Any = deepseek.DeepseekConfig.from_hf(raw)
            self._forward: Any = deepseek.forward_streaming
        else:
            from eagle_convert.reference import llama

            self._cfg = llama.LlamaConfig.from_hf(raw)
            self._forward = llama.forward_streaming
        self.num_layers = self.config.num_hidden_layers

    def run(self, ids: torch.Tensor, capture: Sequence[int]) -> Any:
        return self._forward(self._cfg, self.weights, ids, capture=capture)

    def embedding(self) -> torch.Tensor:
        name = next((n for n in self.weights.names() if n.endswith("embed_tokens.weight")), None)
        if name is None:
            raise InputError("the target has no embed_tokens weight", path=self.config.source)
        return self.weights.get(name).to(torch.float32)

    def greedy(self, prompt: list[int], new_tokens: int) -> list[int]:
        """The target's own greedy continuation (full recomputation per token: exact, slow only on big targets)."""
        ids = list(prompt)
        for _ in range(new_tokens):
            logits = self.run(torch.tensor(ids), capture=()).logits
            ids.append(int(logits[-1].argmax()))
        return ids


def _raw_config(directory: Path) -> dict[str, Any]:
    from eagle_convert.errors import ConfigError
    from eagle_convert.jsonstrict import load_json_object

    path = directory / "config.json" if directory.is_dir() else directory
    return load_json_object(path, ConfigError, "target config")


def default_sequences(target: Target, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab, (DEFAULT_PROMPT,), generator=g).tolist() for _ in range(DEFAULT_SEQUENCES)]
    return [target.greedy(p, DEFAULT_CONTINUATION) for p in prompts]


def measure_convention(draft_dir: str | Path, target_dir: str | Path, *, steps: int = 3) -> tuple[str, str]:
    """(convention, evidence): which reading of the draft's ids the target's hidden states confirm.

    Both readings are measured whatever the config says; a win smaller than the margin is refused, never guessed.
    """
    spec = detect(open_checkpoint(draft_dir))
    ids = sorted(set(spec.aux.ids or []))
    if not ids:
        raise UsageError("the draft has no aux-layer ids, so there is no convention to measure", path=draft_dir)
    norm_output = spec.flags.norm_output.value
    both = [Reading("input-to", tuple(ids), norm_output), Reading("output-of", tuple(i + 1 for i in ids), norm_output)]
    result = run_probe(draft_dir, target_dir, steps=steps, candidates=both)
    a, b = result.row("input-to"), result.row("output-of")
    winner, loser = (a, b) if (a.top1, a.acceptance_length) >= (b.top1, b.acceptance_length) else (b, a)
    evidence = (
        f"measured against the target: {winner.reading} hs{winner.hidden_states} top-1 {winner.top1:.1%}, "
        f"{loser.reading} hs{loser.hidden_states} top-1 {loser.top1:.1%} over {result.positions} positions"
    )
    if winner.top1 - loser.top1 <= MARGIN and winner.acceptance_length - loser.acceptance_length <= 0.1:
        raise UsageError(
            f"the probe cannot tell the conventions apart ({evidence})",
            path=draft_dir,
            hint="pass --aux-convention output-of or input-to",
        )
    return winner.reading, evidence


def run_probe(
    draft_dir: str | Path,
    target_dir: str | Path,
    *,
    token_ids: list[list[int]] | None = None,
    steps: int = 3,
    candidates: list[Reading] | None = None,
) -> ProbeResult:
    """Measure the draft against the target under every reading; see the module docstring."""
    target = Target(Path(target_dir))
    ckpt = open_checkpoint(draft_dir)
    spec = detect(ckpt, target.config)
    cfg = _draft_config(spec)
    weights = eagle3_draft.load_draft(cfg, _draft_state(ckpt, spec))
    embed = None if weights.get("embed_tokens.weight") is not None else target.embedding()
    if candidates is None:
        configured, candidates = readings(spec, target.num_layers)
    else:
        configured = candidates[0].name
    vocab = target.config.vocab_size or cfg.vocab_size
    sequences = token_ids if token_ids is not None else default_sequences(target, vocab)
    wanted = sorted({j for r in candidates for j in r.hidden_states})
    stats = {r.name: [0.0, 0.0, 0] for r in candidates}  # top-1 hits, accepted tokens, positions
    for seq in sequences:
        if len(seq) < 3:
            continue
        ids = torch.tensor(seq)
        out = target.run(ids, capture=wanted)
        greedy = out.logits.argmax(-1)  # [T]: the target's next token after each position
        for r in candidates:
            aux = torch.cat([out.hidden[j][:-1].float() for j in r.hidden_states], dim=-1)  # [T-1, K*Ht]
            rcfg = dataclasses.replace(cfg, norm_output=r.norm_output)
            chain = eagle3_draft.chain(rcfg, weights, ids[1:], aux, steps, embed=embed)
            _score(stats[r.name], chain, ids, greedy)
    rows = [
        ProbeRow(
            r.name,
            list(r.hidden_states),
            r.norm_output,
            _rate(stats[r.name][0], stats[r.name][2]),
            1.0 + _rate(stats[r.name][1], stats[r.name][2]),
        )
        for r in candidates
    ]
    best = max(rows, key=lambda row: (round(row.top1 + row.acceptance_length, 4), row.top1)).reading
    positions = int(stats[configured][2])
    return ProbeResult(len(sequences), positions, steps, configured, best, rows)


def _score(acc: list[float], chain: list[eagle3_draft.StepOutput], ids: torch.Tensor, greedy: torch.Tensor) -> None:
    """Row t of the chain drafts tokens t+2, t+3, ...; a draft token is accepted while it equals the next token of
    the sequence and that token is the target's greedy choice (so the context stays the target's own)."""
    t_len = ids.numel()
    for t in range(t_len - 2):
        acc[2] += 1
        first = int(chain[0].target_tokens[t])
        acc[0] += first == int(greedy[t + 1])
        accepted = 0
        for s, step in enumerate(chain):
            pos = t + 2 + s
            if pos >= t_len or int(step.target_tokens[t]) != int(ids[pos]) or int(ids[pos]) != int(greedy[pos - 1]):
                break
            accepted += 1
        acc[1] += accepted


def _rate(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 4) if denominator else 0.0


def forward_check(draft_dir: str | Path, steps: int = 2) -> tuple[bool, str]:
    """Draft only: a chain on seeded random tokens and aux states. (all outputs finite, what was checked)."""
    ckpt = open_checkpoint(draft_dir)
    spec = detect(ckpt)
    cfg = _draft_config(spec)
    weights = eagle3_draft.load_draft(cfg, _draft_state(ckpt, spec))
    g = torch.Generator().manual_seed(0)
    t_len = 16
    tokens = torch.randint(0, cfg.vocab_size, (t_len,), generator=g)
    aux = torch.randn(t_len, cfg.num_aux * cfg.target_hidden_size, generator=g)
    embed = None
    if weights.get("embed_tokens.weight") is None:
        embed = torch.randn(cfg.vocab_size, cfg.hidden_size, generator=g) * 0.02
    chain = eagle3_draft.chain(cfg, weights, tokens, aux, steps, embed=embed)
    finite = all(bool(torch.isfinite(s.logits).all() and torch.isfinite(s.next_hidden).all()) for s in chain)
    return finite, f"{steps}-step chain over {t_len} random tokens"


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def match_saved_states(target_dir: str | Path, path: str | Path) -> dict[str, Any]:
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
    target = Target(Path(target_dir))
    out = target.run(ids.to(torch.int64), capture=range(target.num_layers + 1))
    matches = []
    for k in range(states.shape[0]):
        errors = {j: _relative_error(h, states[k]) for j, h in out.hidden.items() if h.shape == states[k].shape}
        if not errors:
            raise InputError(
                f"saved state {k} has shape {list(states[k].shape)}, no target boundary matches it", path=path
            )
        best = min(errors, key=lambda j: errors[j])
        matches.append({"state": k, "boundary": best, "relative_error": round(errors[best], 6)})
    return {"file": str(path), "matches": matches}


def oracle_check(target_dir: str | Path, token_ids: list[int]) -> dict[str, Any]:
    """The reference target against transformers (when installed) on the same tokens: the largest relative error
    over every boundary below N and the final hidden state (HF's hidden_states[N] is after the final norm)."""
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
    target_dir: str | Path, prompts_file: str | Path, continuation: int = DEFAULT_CONTINUATION
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
    target = Target(directory)
    return [target.greedy(tokenizer.encode(line).ids, continuation) for line in lines]
