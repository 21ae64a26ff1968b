"""``verify --engine-url``: the engine level against a server that already serves the target with the draft.

The run itself is :func:`eagle_convert.real_engine.attach.run` (token-id prompts, greedy, the server's own
counters); this module turns it into the report's ``engine_run`` object and the findings: EC726 when the server
serves another draft, EC727 when other clients' requests moved its counters during the run, EC722 when the measured
acceptance is below the probe's prediction on the same prompts (only when the numbers are this run's alone).

What a server cannot show an outside client is said, never guessed: the hidden states it feeds the draft, the
module it built, the text of the target alone (``not_observed``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle_convert.real_engine import attach
from eagle_convert.real_engine.base import EngineSettings
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import finding

if TYPE_CHECKING:
    from eagle_convert.draft.detect import DraftSpec
    from eagle_convert.errors import EagleConvertError
    from eagle_convert.probe.result import ProbeReport
    from eagle_convert.probe.run import LoadedDraft
    from eagle_convert.probe.target import Target
    from eagle_convert.read.config import TargetConfig

NOT_OBSERVED = [
    "the aux hidden states the server feeds the draft: they are captured inside the engine's own process "
    "(run --level engine without --engine-url on a machine that can hold the target)",
    "the draft module the server built (its flags and where each tensor went): read inside the engine's process",
    "the target alone on the same prompts (lossless): the server runs the target with the draft only",
]


@dataclass(frozen=True)
class AttachedServer:
    """Where and how to reach the running server (``--engine-url`` and its options)."""

    url: str
    token: str | None = None  # --engine-url-token, else $EAGLE_CONVERT_ENGINE_URL_TOKEN; never printed
    concurrency: int = 8  # requests in flight at most
    timeout: float = 300.0  # seconds per HTTP request
    engine: str | None = None  # --engine vllm|sglang: skip detection


def served_findings(
    draft: Path,
    spec: DraftSpec,
    target_config: TargetConfig,
    enabled: Callable[[str], bool],
    settings: EngineSettings,
    server: AttachedServer,
    probe: ProbeReport | None,
    *,
    loaded: LoadedDraft | EagleConvertError | None = None,
    reference: Target | EagleConvertError | None = None,
) -> tuple[list[Finding], dict[str, Any]]:
    """Measure the draft on the server; (findings, the report's ``engine_run`` object). ``loaded`` and
    ``reference``: verify's draft and reference target (or why they could not be): the probe's prediction on the
    same prompts comes from them when the target's weights are here."""
    from eagle_convert.real_engine import BELOW_PROBE_MARGIN, MIN_DRAFTS, engine_prompts, predict

    target = Path(target_config.source).parent
    prompts = engine_prompts(target, settings, target_config)
    measured = attach.run(
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
    run = engine_run(measured)
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
        same_text = predict(draft, target, prompts, replace(settings, steps=steps), None, loaded, reference)
    run["probe_acceptance_length"] = same_text.acceptance_length if same_text else None
    run["probe_same_text"] = same_text.outputs == measured.outputs if same_text else None
    predicted = run["probe_acceptance_length"]
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


def engine_run(measured: attach.AttachedRun) -> dict[str, Any]:
    """The report's ``engine_run`` object for a run against a server (eagle_convert/schemas/verify-report.schema.json):
    the in-process run's fields where a client can know them (null where it cannot), and ``server``."""
    info = measured.server
    return {
        "engine": info.engine,
        "version": info.version,
        "runner": "attached",
        "acceptance_measured": True,
        "not_measured": None,
        "prompts": measured.prompts,
        "tokens": sum(len(o) for o in measured.outputs),
        "drafts": measured.drafts,
        "draft_tokens": measured.draft_tokens,
        "accepted_tokens": measured.accepted_tokens,
        "mean_acceptance_length": round(measured.mean_acceptance_length, 4),
        "acceptance_per_position": [round(r, 4) for r in measured.acceptance_per_position],
        "lossless": None,
        "requested_layers": None,
        "hidden_states": None,
        "hidden_states_from": None,
        "hidden_state_matches": [],
        "flags": None,
        "target_class": None,
        "built_draft": None,
        "tensors": None,
        "dropped_tensors": None,
        "load_s": None,
        "generate_s": round(measured.wall_s, 3),
        "peak_rss_mib": None,
        "settings": None,
        "not_observed": list(NOT_OBSERVED),
        "server": {
            "url": info.url,
            "model": info.model,
            "model_path": info.model_path,
            "method": info.method,
            "draft_path": info.draft_path,
            "num_speculative_tokens": info.num_speculative_tokens,
            "reported_by": list(info.reported_by),
            "not_reported": info.not_reported,
            "concurrency": measured.concurrency,
            "new_tokens": measured.new_tokens,
            "measured_from": measured.measured_from,
            "accepted_per_position": list(measured.accepted_per_position),
            "foreign_traffic": [asdict(m) for m in measured.foreign_traffic],
            "draft_identity": measured.draft_identity,
            "draft_identity_note": measured.draft_identity_note,
        },
    }
