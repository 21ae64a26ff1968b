"""verify's forward levels: the draft's own forward pass (``forward``) and the acceptance probe (``target``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from eagle_convert.checkpoint import Checkpoint
from eagle_convert.compute import CPU_FLOAT32, Compute
from eagle_convert.detect import DraftSpec
from eagle_convert.errors import EagleConvertError
from eagle_convert.probe import (
    MIN_POSITIONS,
    ProbeRow,
    Progress,
    forward_check,
    match_saved_states,
    oracle_check,
    run_probe,
)
from eagle_convert.probe_text import read_prompts
from eagle_convert.verify_report import VerifyFinding

LOW_AGREEMENT = 0.05


@dataclass(frozen=True)
class ProbeSettings:
    """What ``verify --level target`` probes with (see the verify command's options)."""

    token_ids: list[list[int]] | None = None
    prompts: Path | None = None
    text: str = "greedy"
    steps: int = 3
    compute: Compute = CPU_FLOAT32
    reference_hidden_states: Path | None = None
    oracle: str | None = None
    progress: Progress | None = None
    min_positions: int = MIN_POSITIONS


def forward_findings(
    ckpt: Checkpoint, enabled: Callable[[str], bool], compute: Compute = CPU_FLOAT32
) -> list[VerifyFinding]:
    try:
        finite, what = forward_check(ckpt.root, compute=compute)
    except EagleConvertError as exc:
        return (
            [VerifyFinding("EC702", "error", f"the reference forward cannot run this draft: {exc.message}", None, None)]
            if enabled("EC702")
            else []
        )
    if not finite and enabled("EC701"):
        return [VerifyFinding("EC701", "error", f"the draft's forward pass ({what}) produced NaN or Inf", None, None)]
    return []


def saved_state_findings(
    spec: DraftSpec, target: Path, path: Path, enabled: Callable[[str], bool], compute: Compute = CPU_FLOAT32
) -> tuple[list[VerifyFinding], dict[str, Any]]:
    """Match hidden states a trainer or engine saved against the target's boundaries."""
    result = match_saved_states(target, path, compute)
    found = sorted({m["boundary"] for m in result["matches"]})
    configured = spec.aux.hidden_state_indices
    pointer = "/eagle_aux_hidden_state_layer_ids"
    if configured is not None and found != sorted(configured) and enabled("EC714"):
        return [
            VerifyFinding(
                "EC714",
                "error",
                f"the saved hidden states are hs{found}, but the config selects hs{configured}",
                path.name,
                pointer,
                expected=found,
                actual=configured,
            )
        ], result
    if enabled("EC715"):
        return [
            VerifyFinding(
                "EC715",
                "info",
                f"the saved hidden states are hs{found} (relative errors "
                f"{[m['relative_error'] for m in result['matches']]})",
                path.name,
                pointer,
                actual=found,
            )
        ], result
    return [], result


def probe_findings(
    ckpt: Checkpoint,
    spec: DraftSpec,
    target: Path,
    enabled: Callable[[str], bool],
    settings: ProbeSettings,
) -> tuple[list[VerifyFinding], dict[str, Any] | None]:
    token_ids = settings.token_ids
    try:
        result = run_probe(
            ckpt.root,
            target,
            token_ids=token_ids,
            prompts=read_prompts(settings.prompts) if token_ids is None and settings.prompts is not None else None,
            steps=settings.steps,
            compute=settings.compute,
            progress=settings.progress,
            text=settings.text,
            min_positions=settings.min_positions,
        )
    except EagleConvertError as exc:
        return (
            [
                VerifyFinding(
                    "EC702", "error", f"the probe cannot run this draft with this target: {exc.message}", None, None
                )
            ]
            if enabled("EC702")
            else []
        ), None
    out: list[VerifyFinding] = []
    configured = result.row(result.configured)
    pointer = "/eagle_aux_hidden_state_layer_ids"
    if result.best != result.configured:
        best = result.row(result.best)
        rule = "EC713" if spec.aux.convention == "ambiguous" else "EC711"
        if enabled(rule):
            out.append(
                VerifyFinding(
                    rule,
                    "info" if rule == "EC713" else "error",
                    f"the draft matches the target's next token {best.top1:.1%} of the time when it reads "
                    f"{best.reading} (hs{best.hidden_states}, norm_output {best.norm_output}) but "
                    f"{configured.top1:.1%} as configured (hs{configured.hidden_states}); {_versus(best)}: the "
                    "config does not describe how the draft was trained",
                    "config.json",
                    pointer,
                    expected={"hidden_states": best.hidden_states, "norm_output": best.norm_output},
                    actual={"hidden_states": configured.hidden_states, "norm_output": configured.norm_output},
                )
            )
    elif spec.aux.convention == "ambiguous" and enabled("EC713"):
        other = [r for r in result.rows if r is not configured and not r.diagnostic]
        settled = all(r.verdict in ("worse", "no better") for r in other)
        needed = max((r.positions_needed or 0 for r in other), default=0)
        out.append(
            VerifyFinding(
                "EC713",
                "info",
                f"the ambiguous ids read best as {configured.reading} (hs{configured.hidden_states}, top-1 "
                f"{configured.top1:.1%}); " + "; ".join(f"{r.reading}: {_versus(r)}" for r in other)
                if settled
                else f"the probe cannot tell the readings of the ambiguous ids apart over {result.positions} "
                f"positions (inconclusive; about {needed} positions would settle it)",
                "config.json",
                pointer,
            )
        )
    if all(r.top1 < LOW_AGREEMENT for r in result.rows) and enabled("EC712"):
        out.append(
            VerifyFinding(
                "EC712",
                "warning",
                f"the draft's first token matches the target's greedy token "
                f"{configured.top1:.1%} of the time over {result.positions} positions: untrained "
                "weights, or the wrong target",
                None,
                None,
                actual=configured.top1,
            )
        )
    table = asdict(result)
    if settings.reference_hidden_states is not None:
        more, table["saved_states"] = saved_state_findings(
            spec, target, settings.reference_hidden_states, enabled, settings.compute
        )
        out += more
    if settings.oracle == "transformers":
        sequence = token_ids[0] if token_ids else list(range(min(32, result.positions + 2)))
        table["oracle"] = oracle_check(target, sequence)
        if table["oracle"]["max_relative_error"] > 1e-3 and enabled("EC716"):
            out.append(
                VerifyFinding(
                    "EC716",
                    "error",
                    f"the reference target differs from transformers by "
                    f"{table['oracle']['max_relative_error']:.2e} (relative): the probe's "
                    "numbers cannot be trusted for this model",
                    None,
                    None,
                )
            )
    return out, table


def _versus(row: ProbeRow) -> str:
    """A reading against the configured one: the paired differences with their 95% intervals, and the test."""
    return (
        f"top-1 {row.delta_top1:+.1%} (95% CI {row.delta_top1_ci[0]:+.1%} to {row.delta_top1_ci[1]:+.1%}), "
        f"accepted tokens per position {row.delta_accepted:+.3f}, acceptance length {row.acceptance_length:.3f}, "
        f"better at {row.wins} positions and worse at {row.losses}, sign test p = {row.p_value:.1e}"
    )
