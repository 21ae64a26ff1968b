"""``verify --engine-url``: the engine level against a server that already serves the target with the draft.

The run itself is :func:`eagle_convert.real_engine.attached.run` (token-id prompts, greedy, the server's own
counters); this module turns it into the report's ``engine_run`` record (``record.ServedRun``) and the findings:
EC726 when the server serves another draft, EC727 when other clients' requests moved its counters during the run,
EC722 when the measured acceptance is below the probe's prediction on the same prompts (only when the numbers are
this run's alone).

What a server cannot show an outside client is said, never guessed: the hidden states it feeds the draft, the
module it built, the text of the target alone (``not_observed``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from eagle_convert.real_engine import attached
from eagle_convert.real_engine.base import EngineSettings
from eagle_convert.real_engine.record import ServedRun
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import finding

if TYPE_CHECKING:
    from eagle_convert.draft.detect import DraftSpec
    from eagle_convert.errors import EagleConvertError
    from eagle_convert.probe.result import ProbeReport
    from eagle_convert.probe.run import LoadedDraft
    from eagle_convert.probe.target import Target
    from eagle_convert.read.config import TargetConfig


def served_findings(
    draft: Path,
    spec: DraftSpec,
    target: TargetConfig,
    enabled: Callable[[str], bool],
    settings: EngineSettings,
    server: attached.AttachedServer,
    probe: ProbeReport | None,
    *,
    loaded: LoadedDraft | EagleConvertError | None = None,
    reference: Target | EagleConvertError | None = None,
    probe_not_run: str | None = None,
) -> tuple[list[Finding], ServedRun]:
    """Measure the draft on the server; (findings, the report's ``engine_run`` record). ``loaded`` and
    ``reference``: verify's draft and reference target (or why they could not be): the probe's prediction on the
    same prompts comes from them when the target's weights are here. ``probe_not_run``: why it does not (the
    target's weights absent or too big, no torch here)."""
    from eagle_convert.real_engine import BELOW_PROBE_MARGIN, MIN_DRAFTS, engine_prompts, predict

    prompts = engine_prompts(target, settings)
    measured = attached.run(
        server.url,
        server.token,
        prompts,
        settings.new_tokens,
        server.concurrency,
        server.timeout,
        server.engine,
        draft,
    )
    info = measured.server
    steps = info.num_speculative_tokens or len(measured.accepted_per_position) or settings.steps
    out: list[Finding] = []
    who = f"the {info.engine} {info.version} server at {info.url}"
    if measured.draft_identity == "different" and enabled("EC726"):
        out.append(
            finding(
                "EC726",
                f"{who} serves another draft: {measured.draft_identity_note}",
                expected=str(draft),
                actual=info.draft_path,
            )
        )
    if measured.foreign_traffic and enabled("EC727"):
        moved = ", ".join(f"{m.counter} {m.observed:g} (this run: {m.expected:g})" for m in measured.foreign_traffic)
        out.append(
            finding(
                "EC727",
                f"other requests reached {who} during the run ({moved}): its acceptance counters mix them in",
                expected=0,
                actual=len(measured.foreign_traffic),
            )
        )
    same_text = None
    if reference is not None and loaded is not None:
        same_text = predict(draft, target.directory, prompts, replace(settings, steps=steps), None, loaded, reference)
    run = ServedRun(
        measured,
        probe_acceptance_length=same_text.acceptance_length if same_text else None,
        # a server that returns no token ids (trtllm-serve without them in its answer) cannot be compared
        probe_same_text=same_text.outputs == measured.outputs if same_text and all(measured.outputs) else None,
        probe_not_run=probe_not_run,
    )
    predicted = run.probe_acceptance_length
    if predicted is None and probe is not None:
        row = next((r for r in probe.result.rows if r.reading == probe.result.configured), None)
        predicted = float(row.acceptance_length) if row else None
    mean = measured.mean_acceptance_length
    if (
        predicted is not None
        and not measured.foreign_traffic
        and measured.draft_identity != "different"
        and measured.drafts >= MIN_DRAFTS
        and mean < predicted - BELOW_PROBE_MARGIN
        and enabled("EC722")
    ):
        where = "on the same prompts" if same_text else "on its own text"
        out.append(
            finding(
                "EC722",
                f"{who} measured a mean acceptance length of {mean:.2f} over {measured.drafts} drafts; the probe "
                f"predicts {predicted:.2f} for the configured reading {where}: the server runs the draft differently "
                "from the reference (or serves another one)",
                expected=predicted,
                actual=mean,
            )
        )
    return out, run
