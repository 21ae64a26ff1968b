"""verify's forward levels: the draft's own forward pass (``forward``) and the acceptance probe (``target``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from eagle_convert.draft.detect import DraftSpec, detect
from eagle_convert.errors import EagleConvertError, InputError
from eagle_convert.probe.result import OracleCheck, ProbeReport, SavedStates
from eagle_convert.probe.run import MIN_POSITIONS, LoadedDraft, ProbeRow, load_draft, run_probe_on
from eagle_convert.probe.target import Progress, Target, nearest_boundaries, relative_error
from eagle_convert.read.checkpoint import open_checkpoint
from eagle_convert.read.config import IDS_KEY
from eagle_convert.read.safetensors_header import read_header
from eagle_convert.reference import eagle3_draft
from eagle_convert.reference.compute import CPU_FLOAT32, Compute
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import finding
from eagle_convert.schemas import SAVED_STATES, violation
from eagle_convert.version import docs_url

LOW_AGREEMENT = 0.05


@dataclass(frozen=True)
class ProbeSettings:
    """What ``verify --level target`` probes with (see the verify command's options)."""

    token_ids: list[list[int]] | None = None
    prompts: list[str] | None = None  # --prompts as read
    text: str = "greedy"
    steps: int = 3
    compute: Compute = CPU_FLOAT32
    reference_hidden_states: Path | None = None
    oracle: str | None = None
    progress: Progress | None = None
    min_positions: int = MIN_POSITIONS


def forward_findings(
    draft: LoadedDraft | EagleConvertError, enabled: Callable[[str], bool], compute: Compute = CPU_FLOAT32
) -> list[Finding]:
    """The draft's own forward pass (``draft``: the loaded draft, or why the reference cannot load it)."""
    try:
        if isinstance(draft, EagleConvertError):
            raise draft
        finite, what = forward_chain(draft, compute=compute)
    except EagleConvertError as exc:
        return (
            [finding("EC702", f"the reference forward cannot run this draft: {exc.message}")]
            if enabled("EC702")
            else []
        )
    if not finite and enabled("EC701"):
        return [finding("EC701", f"the draft's forward pass ({what}) produced NaN or Inf")]
    return []


def saved_state_findings(
    spec: DraftSpec, target: Target, path: Path, enabled: Callable[[str], bool]
) -> tuple[list[Finding], SavedStates]:
    """Match hidden states a trainer or engine saved against the target's boundaries."""
    result = saved_states(target, path)
    found = sorted({m.boundary for m in result.matches if m.boundary is not None})
    configured = spec.aux.hidden_state_indices
    pointer = f"/{IDS_KEY}"
    if configured is not None and found != sorted(configured) and enabled("EC714"):
        return [
            finding(
                "EC714",
                f"the saved hidden states are hs{found}, but the config selects hs{configured}",
                file=path.name,
                pointer=pointer,
                expected=found,
                actual=configured,
            )
        ], result
    if enabled("EC715"):
        return [
            finding(
                "EC715",
                f"the saved hidden states are hs{found} (relative errors {[m.relative_error for m in result.matches]})",
                file=path.name,
                pointer=pointer,
                actual=found,
            )
        ], result
    return [], result


def probe_findings(
    draft: LoadedDraft | EagleConvertError,
    target: Target | EagleConvertError,
    enabled: Callable[[str], bool],
    settings: ProbeSettings,
) -> tuple[list[Finding], ProbeReport | None]:
    """The acceptance probe on the loaded pair (each side: loaded, or why it cannot be), then the saved hidden
    states and the oracle when asked; (findings, the typed probe report)."""
    token_ids = settings.token_ids
    try:
        if isinstance(draft, EagleConvertError):
            raise draft
        if isinstance(target, EagleConvertError):
            raise target
        result = run_probe_on(
            draft,
            target,
            token_ids=token_ids,
            prompts=settings.prompts if token_ids is None else None,
            steps=settings.steps,
            progress=settings.progress,
            text=settings.text,
            min_positions=settings.min_positions,
        )
        result = replace(result, dtype_reason=settings.compute.reason)
    except EagleConvertError as exc:
        return (
            [finding("EC702", f"the probe cannot run this draft with this target: {exc.message}")]
            if enabled("EC702")
            else []
        ), None
    spec = draft.spec
    out: list[Finding] = []
    configured = result.row(result.configured)
    pointer = f"/{IDS_KEY}"
    if result.best != result.configured:
        best = result.row(result.best)
        rule = "EC713" if spec.aux.convention == "ambiguous" else "EC711"
        if enabled(rule):
            out.append(
                finding(
                    rule,
                    f"the draft matches the target's next token {best.top1:.1%} of the time when it reads "
                    f"{best.reading} (hs{best.hidden_states}, norm_output {best.norm_output}) but "
                    f"{configured.top1:.1%} as configured (hs{configured.hidden_states}); {_versus(best)}: the "
                    "config does not describe how the draft was trained",
                    file="config.json",
                    pointer=pointer,
                    expected={"hidden_states": best.hidden_states, "norm_output": best.norm_output},
                    actual={"hidden_states": configured.hidden_states, "norm_output": configured.norm_output},
                )
            )
    elif spec.aux.convention == "ambiguous" and enabled("EC713"):
        other = [r for r in result.rows if r is not configured and not r.diagnostic]
        settled = all(r.verdict in ("worse", "no better") for r in other)
        needed = max((r.positions_needed or 0 for r in other), default=0)
        out.append(
            finding(
                "EC713",
                f"the ambiguous ids read best as {configured.reading} (hs{configured.hidden_states}, top-1 "
                f"{configured.top1:.1%}); " + "; ".join(f"{r.reading}: {_versus(r)}" for r in other)
                if settled
                else f"the probe cannot tell the readings of the ambiguous ids apart over {result.positions} "
                f"positions (inconclusive; about {needed} positions would settle it)",
                file="config.json",
                pointer=pointer,
            )
        )
    if all(r.top1 < LOW_AGREEMENT for r in result.rows) and enabled("EC712"):
        out.append(
            finding(
                "EC712",
                f"the draft's first token matches the target's greedy token "
                f"{configured.top1:.1%} of the time over {result.positions} positions: untrained "
                "weights, or the wrong target",
                actual=configured.top1,
            )
        )
    saved = oracle = None
    if settings.reference_hidden_states is not None:
        more, saved = saved_state_findings(spec, target, settings.reference_hidden_states, enabled)
        out += more
    if settings.oracle == "transformers":
        sequence = token_ids[0] if token_ids else list(range(min(32, result.positions + 2)))
        oracle = oracle_on(target, sequence)
        if oracle.max_relative_error > 1e-3 and enabled("EC716"):
            out.append(
                finding(
                    "EC716",
                    f"the reference target differs from transformers by "
                    f"{oracle.max_relative_error:.2e} (relative): the probe's "
                    "numbers cannot be trusted for this model",
                )
            )
    return out, ProbeReport(result, saved, oracle)


def _versus(row: ProbeRow) -> str:
    """A reading against the configured one: the paired differences with their 95% intervals, and the test."""
    return (
        f"top-1 {row.delta_top1:+.1%} (95% CI {row.delta_top1_ci[0]:+.1%} to {row.delta_top1_ci[1]:+.1%}), "
        f"accepted tokens per position {row.delta_accepted:+.3f}, acceptance length {row.acceptance_length:.3f}, "
        f"better at {row.wins} positions and worse at {row.losses}, sign test p {row.p_text}"
    )


# ---------------------------------------------------------------------------------------------------- the checks


def forward_check(draft_dir: str | Path, steps: int = 2, *, compute: Compute = CPU_FLOAT32) -> tuple[bool, str]:
    """Draft only: a chain on seeded random tokens and aux states. (all outputs finite, what was checked)."""
    ckpt = open_checkpoint(draft_dir)
    return forward_chain(load_draft(ckpt, detect(ckpt), compute), steps, compute=compute)


def forward_chain(draft: LoadedDraft, steps: int = 2, *, compute: Compute = CPU_FLOAT32) -> tuple[bool, str]:
    """:func:`forward_check` on a loaded draft (loaded on ``compute``)."""
    cfg, weights = draft.cfg, draft.weights
    device, dtype = compute.device, compute.dtype
    g = torch.Generator().manual_seed(0)
    t_len = 16
    tokens = torch.randint(0, cfg.vocab_size, (t_len,), generator=g).to(device)
    aux = torch.randn(t_len, cfg.num_aux * cfg.target_hidden_size, generator=g).to(device, dtype)
    embed = None
    if weights.get("embed_tokens.weight") is None:  # a [V, H] table without V*H values (an 8B vocab: 2 GB float32):
        # row v is the window base[v : v + H] of one random vector, so every token still has its own row
        base = (torch.randn(cfg.vocab_size + cfg.hidden_size - 1, generator=g) * 0.02).to(device, dtype)  # [V+H-1]
        embed = base.as_strided((cfg.vocab_size, cfg.hidden_size), (1, 1))  # [V, H], a view of base
    chain = eagle3_draft.chain(cfg, weights, tokens, aux, steps, embed=embed)
    finite = all(bool(torch.isfinite(s.logits).all() and torch.isfinite(s.next_hidden).all()) for s in chain)
    return finite, f"{steps}-step chain over {t_len} random tokens ({compute.describe()}, {compute.dtype_name})"


_SAVED_HINT = (
    "save token_ids [T] (integers) and hidden_states [K, T, Ht] (floats) in one safetensors file "
    f"(the schema: {docs_url('eagle_convert/schemas/saved-hidden-states.schema.json')})"
)


def saved_states(target: Target, path: str | Path) -> SavedStates:
    """Which target boundary each hidden state saved by a trainer or engine is (the definitive convention answer).

    The file is safetensors with ``token_ids`` [T] and ``hidden_states`` [K, T, Ht] (the K aux states of those
    tokens, in the trainer's order)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    header = read_header(Path(path))  # checked against its schema before a tensor is read
    wrong = violation({t.name: {"dtype": t.dtype, "shape": list(t.shape)} for t in header.tensors}, SAVED_STATES)
    if wrong is not None:
        raise InputError(f"saved hidden states{wrong.where()}: {wrong.reason}", path=path, hint=_SAVED_HINT)
    try:
        saved = load_file(str(path))
    except (OSError, SafetensorError) as exc:
        raise InputError(f"cannot read saved hidden states: {exc}", path=path) from None
    ids, states = saved["token_ids"], saved["hidden_states"]
    if states.shape[1] != ids.numel():
        raise InputError(
            f"saved hidden states: hidden_states holds {states.shape[1]} positions, token_ids {ids.numel()}",
            path=path,
            hint=_SAVED_HINT,
        )
    out = target.run(ids.to(torch.int64), capture=range(target.num_layers + 1))
    matches = nearest_boundaries(states, {j: h.cpu() for j, h in out.hidden.items()})
    for m in matches:
        if m.boundary is None:
            raise InputError(
                f"saved state {m.state} has shape {list(states[m.state].shape)}, no target boundary matches it",
                path=path,
            )
    return SavedStates(str(path), matches)


def oracle_on(target: Target, token_ids: list[int]) -> OracleCheck:
    """The reference target (transformers' model, its weights streamed a unit at a time through transformers'
    loading step) against transformers' own ``from_pretrained`` of the whole model in memory, on the same tokens: the
    largest relative error over every boundary below N and the final hidden state (HF's hidden_states[N] is after
    the final norm). Both run on the CPU in float32, whatever the probe's device: this checks the streaming, the
    reading of the checkpoint and its formats, not the hardware."""
    from eagle_convert.reference.hf_build import model_class

    target = target.on(CPU_FLOAT32)
    ids = torch.tensor(token_ids)
    ours = target.run(ids, capture=range(target.num_layers))
    model = model_class(target.model.config).from_pretrained(str(target.directory), dtype=torch.float32)
    with torch.no_grad():
        theirs = model(ids[None], output_hidden_states=True).hidden_states
    errors = [relative_error(ours.hidden[j], theirs[j][0]) for j in range(target.num_layers)]
    errors.append(relative_error(ours.final_hidden, theirs[target.num_layers][0]))
    return OracleCheck("transformers", ids.numel(), max(errors))
