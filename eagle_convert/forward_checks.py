"""verify's forward levels: the draft's own forward pass (``forward``) and the acceptance probe (``target``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from eagle_convert.checkpoint import Checkpoint
from eagle_convert.detect import DraftSpec
from eagle_convert.errors import EagleConvertError
from eagle_convert.probe import MARGIN, forward_check, run_probe
from eagle_convert.verify_report import VerifyFinding

LOW_AGREEMENT = 0.05
ACCEPTANCE_MARGIN = 0.1  # tokens of expected acceptance length


def _beats(alternative: Any, configured: Any) -> bool:
    """A clear win: better first-token agreement, or (same first step, e.g. norm_output) longer accepted chains."""
    return bool(
        alternative.top1 - configured.top1 > MARGIN
        or alternative.acceptance_length - configured.acceptance_length > ACCEPTANCE_MARGIN
    )


def forward_findings(ckpt: Checkpoint, enabled: Callable[[str], bool]) -> list[VerifyFinding]:
    try:
        finite, what = forward_check(ckpt.root)
    except EagleConvertError as exc:
        return (
            [VerifyFinding("EC702", "error", f"the reference forward cannot run this draft: {exc.message}", None, None)]
            if enabled("EC702")
            else []
        )
    if not finite and enabled("EC701"):
        return [VerifyFinding("EC701", "error", f"the draft's forward pass ({what}) produced NaN or Inf", None, None)]
    return []


def probe_findings(
    ckpt: Checkpoint,
    spec: DraftSpec,
    target: Path,
    enabled: Callable[[str], bool],
    token_ids: list[list[int]] | None,
    steps: int,
) -> tuple[list[VerifyFinding], dict[str, Any] | None]:
    try:
        result = run_probe(ckpt.root, target, token_ids=token_ids, steps=steps)
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
    best = result.row(result.best)
    pointer = "/eagle_aux_hidden_state_layer_ids"
    if best.reading != configured.reading and _beats(best, configured):
        rule = "EC713" if spec.aux.convention == "ambiguous" else "EC711"
        if enabled(rule):
            out.append(
                VerifyFinding(
                    rule,
                    "info" if rule == "EC713" else "error",
                    f"the draft matches the target's next token {best.top1:.0%} of the time when it reads "
                    f"{best.reading} (hs{best.hidden_states}, norm_output {best.norm_output}) but "
                    f"{configured.top1:.0%} as configured (hs{configured.hidden_states}): the config does not "
                    "describe how the draft was trained",
                    "config.json",
                    pointer,
                    expected={"hidden_states": best.hidden_states, "norm_output": best.norm_output},
                    actual={"hidden_states": configured.hidden_states, "norm_output": configured.norm_output},
                )
            )
    elif spec.aux.convention == "ambiguous" and enabled("EC713"):
        out.append(
            VerifyFinding(
                "EC713",
                "info",
                f"the ambiguous ids read best as {best.reading} (hs{best.hidden_states}, top-1 {best.top1:.0%})",
                "config.json",
                pointer,
            )
        )
    if configured.top1 < LOW_AGREEMENT and best.top1 < LOW_AGREEMENT and enabled("EC712"):
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
    return out, asdict(result)
