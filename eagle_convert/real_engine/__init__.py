"""verify's ``engine`` level: the draft run with its target in a real engine, measured by the engine itself, or
measured on the user's own running server (``--engine-url``: ``attached/``, ``served``).

One interface (:class:`~eagle_convert.real_engine.base.EngineRunner`), one implementation per engine the level runs:
vLLM (``vllm_runner``, tested on the CPU build) and SGLang (``sglang_runner``, GPU only). The engine runs greedy
speculative decoding on the probe's prompts in a child process of its own environment (``env``, the pinned
``envs/``); this module then matches the hidden states the engine fed the draft against the reference target's
boundaries, compares what it measured with the probe's prediction, and turns the differences into findings; each
kind of run is one record in the report (``record``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle_convert import engines
from eagle_convert.read.config import IDS_KEY
from eagle_convert.real_engine.base import (
    EngineObservation,
    EngineRequest,
    EngineRunner,
    EngineSettings,
    engine_dtype,
    engine_python,
    scratch_dir,
)
from eagle_convert.real_engine.engine_args import check_engine_args
from eagle_convert.real_engine.record import (
    UNLOADED_BY_DESIGN,
    EngineRun,
    InProcessRun,
    LoadOnlyRun,
    ServedRun,
    dropped_tensors,
)
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import finding

if TYPE_CHECKING:  # torch stays unimported until an engine run needs the reference target
    from eagle_convert.draft.detect import DraftSpec
    from eagle_convert.errors import EagleConvertError
    from eagle_convert.probe.result import BoundaryMatch, ProbeReport
    from eagle_convert.probe.run import EngineRunPrediction, LoadedDraft
    from eagle_convert.probe.target import Target
    from eagle_convert.read.config import TargetConfig
    from eagle_convert.reference.compute import Compute

__all__ = [
    "RUNNERS",
    "UNLOADED_BY_DESIGN",
    "EngineObservation",
    "EngineRequest",
    "EngineRun",
    "EngineSettings",
    "InProcessRun",
    "LoadOnlyRun",
    "ServedRun",
    "dropped_tensors",
    "engine_findings",
    "engine_prompts",
    "engine_python",
    "engine_run",
    "fed_hidden_states",
    "observe",
]

REFUSED_RULE = "EC728"  # the engine refused to load the draft while the target alone starts
BELOW_PROBE_MARGIN = 0.15  # measured acceptance length this far below the probe's configured reading is a finding
MIN_DRAFTS = 20  # ... when the engine drafted at least this often


def _runner(name: str) -> EngineRunner:
    if name == "sglang":
        from eagle_convert.real_engine.sglang_runner import SglangRunner

        return SglangRunner()
    from eagle_convert.real_engine.vllm_runner import VllmRunner

    return VllmRunner()


RUNNERS = engines.RUNNERS  # the engines the engine level starts (eagle_convert/engines.py)


def observe(
    target: Path, drafts: list[Path], prompts: list[list[int]], settings: EngineSettings, workdir: Path
) -> list[EngineObservation]:
    """Run ``drafts`` (one engine each) with ``target`` on ``prompts``: the library call under the engine level.
    EngineArgsError (exit 2) for a setting the engine level sets itself, or one the engine refuses."""
    check_engine_args(settings.engine, settings.engine_args)
    python = engine_python(settings.python, engine=settings.engine)
    request = EngineRequest(
        target,
        drafts,
        prompts,
        settings.new_tokens,
        settings.steps,
        engine_dtype(settings.dtype, settings.device),
        settings.device,
        settings.baseline,
        engine_args=dict(settings.engine_args),
    )
    return _runner(settings.engine).run(python, request, workdir)


DEFAULT_ENGINE_PROMPTS = 8  # the first prompts of the probe's default set: the engine generates from each


def engine_prompts(target: TargetConfig, settings: EngineSettings) -> list[list[int]]:
    """The probe's prompts, through the target's chat template as the probe renders them: --token-ids as given,
    --prompts tokenized, else the first DEFAULT_ENGINE_PROMPTS of the probe's default prompt set."""
    if settings.token_ids is not None:
        return [list(p) for p in settings.token_ids]
    from eagle_convert.probe.text import prompt_pool

    vocab = target.vocab_size or 2
    if settings.prompts is not None:
        return prompt_pool(target.directory, vocab, list(settings.prompts))
    return prompt_pool(target.directory, vocab)[:DEFAULT_ENGINE_PROMPTS]


def fed_hidden_states(
    target: Path,
    observations: list[EngineObservation],
    compute: Compute | None = None,
    reference: Target | EagleConvertError | None = None,
) -> list[list[BoundaryMatch]]:
    """Which target boundary each aux state the engine fed the draft is, per observation: one match per state
    (its nearest boundary and the relative error) in the order the draft's ``fc`` reads them (empty when nothing was
    captured).

    The reference target computes every boundary hs[0..N] once per distinct capture text (the drafts of one request
    share it: greedy output does not depend on the draft); each fed state is the boundary it is closest to.
    ``reference``: the reference target already built (or why it could not be), else built here."""
    import torch
    from safetensors.torch import load_file

    from eagle_convert.probe.target import Target, nearest_boundaries
    from eagle_convert.reference.compute import CPU_FLOAT32

    if all(o.capture_path is None for o in observations):
        return [[] for _ in observations]
    if reference is None:
        reference = Target(target, compute or CPU_FLOAT32)
    elif not isinstance(reference, Target):
        raise reference
    boundaries: dict[tuple[int, ...], dict[int, torch.Tensor]] = {}
    out: list[list[BoundaryMatch]] = []
    for observation in observations:
        if observation.capture_path is None:
            out.append([])
            continue
        saved = load_file(str(observation.capture_path))
        ids = tuple(saved["token_ids"].tolist())
        if ids not in boundaries:
            run = reference.run(saved["token_ids"], capture=range(reference.num_layers + 1))
            boundaries[ids] = {j: h.float().cpu() for j, h in run.hidden.items()}
        out.append(list(nearest_boundaries(saved["hidden_states"].float(), boundaries[ids])))
    return out


def engine_run(
    target: Path,
    observation: EngineObservation,
    compute: Compute | None = None,
    reference: Target | EagleConvertError | None = None,
    *,
    probe_acceptance_length: float | None = None,
    probe_same_text: bool | None = None,
) -> LoadOnlyRun | InProcessRun:
    """The report's ``engine_run`` record for one observation: load-only when nothing was decoded (``not_measured``
    or ``refused``), else the in-process run with the probe's prediction on it."""
    (matches,) = fed_hidden_states(target, [observation], compute, reference)
    states: list[int | None] | None  # None in it: a fed state no boundary has the shape of
    if matches:
        states, states_from = [m.boundary for m in matches], "fed"
    elif observation.captured_layers is not None and observation.not_measured is not None:
        states, states_from = list(observation.captured_layers), "captured"
    else:
        states, states_from = None, None
    if observation.not_measured is not None or observation.refused is not None:
        return LoadOnlyRun(observation, states, states_from, matches)
    return InProcessRun(observation, states, states_from, matches, probe_acceptance_length, probe_same_text)


def engine_findings(
    draft: Path,
    spec: DraftSpec,
    target: TargetConfig,
    enabled: Callable[[str], bool],
    settings: EngineSettings,
    probe: ProbeReport | None,
    compute: Compute | None = None,
    *,
    loaded: LoadedDraft | EagleConvertError | None = None,
    reference: Target | EagleConvertError | None = None,
) -> tuple[list[Finding], LoadOnlyRun | InProcessRun]:
    """Run the draft in the engine; (findings, the report's ``engine_run`` record). An engine that refuses the draft
    while the target alone starts gives EC728 with the engine's own message (exit 1, not "could not verify").
    ``compute`` is where the reference target runs to identify the fed hidden states; ``probe`` is the target
    level's report. ``loaded`` and ``reference``: the draft and the reference target verify already loaded (or why
    they could not be); without them the prediction and the matching read ``draft`` and ``target`` themselves."""
    prompts = engine_prompts(target, settings)
    folder = target.directory
    with scratch_dir() as tmp:
        (observation,) = observe(folder, [draft], prompts, settings, Path(tmp))
        run = engine_run(folder, observation, compute, reference)
    out: list[Finding] = []
    who = f"{observation.engine} {observation.version}"
    if observation.refused is not None:  # the target alone starts: the engine refused this draft (or its config)
        if enabled(REFUSED_RULE):
            out.append(
                finding(
                    REFUSED_RULE,
                    f"{who} refused to load the draft with this target: {observation.refused}",
                    actual=observation.refused,
                )
            )
        return out, run
    trained, fed = spec.aux.trained(probe.result.best_states if probe else None), run.hidden_states
    if trained is not None and fed is not None and fed != trained and enabled("EC721"):
        does = "fed the draft" if run.hidden_states_from == "fed" else "captures for the draft"
        out.append(
            finding(
                "EC721",
                f"{who} {does} the target's hs{fed}, but its weights were trained "
                f"on hs{trained}: the engine reads this config differently from the trainer",
                file="config.json",
                pointer=f"/{IDS_KEY}",
                expected=trained,
                actual=fed,
            )
        )
    out += built_findings(spec, observation, enabled)
    if not isinstance(run, InProcessRun):  # loaded, not decoded: nothing to compare acceptance or text with
        return out, run
    same_text = predict(draft, folder, prompts, settings, compute, loaded, reference)
    run = replace(
        run,
        probe_acceptance_length=same_text.acceptance_length if same_text else None,
        probe_same_text=same_text.outputs == observation.outputs if same_text else None,
    )
    predicted = run.probe_acceptance_length
    where = "on the same text"
    if predicted is None:
        predicted, where = _probe_prediction(probe), "on its own text"
    measured = run.mean_acceptance_length
    if (
        predicted is not None
        and run.drafts >= MIN_DRAFTS
        and measured < predicted - BELOW_PROBE_MARGIN
        and enabled("EC722")
    ):
        out.append(
            finding(
                "EC722",
                f"{run.engine} measured a mean acceptance length of {measured:.2f} over {run.drafts} drafts; the "
                f"probe predicts {predicted:.2f} for the configured reading {where}: the engine runs the draft "
                "differently from the reference",
                expected=predicted,
                actual=measured,
            )
        )
    changed = _first_differences(observation.outputs, observation.baseline_outputs)
    if changed and enabled("EC723"):
        first = ", ".join(f"prompt {i} at new token {t}" for i, t in changed[:3])
        out.append(
            finding(
                "EC723",
                f"{who} with the draft generated other greedy text than the target alone on "
                f"{len(changed)} of {len(observation.outputs)} prompts (first difference: {first})",
                expected=len(observation.outputs),
                actual=len(observation.outputs) - len(changed),
            )
        )
    return out, run


def built_findings(spec: DraftSpec, observation: EngineObservation, enabled: Callable[[str], bool]) -> list[Finding]:
    """EC724 (a trained tensor went into no parameter) and EC725 (a trained switch built otherwise), read off the
    draft module the engine built; nothing when the engine did not report its module."""
    from eagle_convert.draft.truth import draft_truth

    if observation.built is None or observation.tensors is None:
        return []
    who = f"{observation.engine} {observation.version}"
    out: list[Finding] = []
    dropped = dropped_tensors(observation) or []
    if dropped and enabled("EC724"):
        out.append(
            finding(
                "EC724",
                f"{who} loaded {', '.join(dropped)} into no parameter of the draft it built "
                f"({observation.built.get('class')}): the draft runs without {'it' if len(dropped) == 1 else 'them'}",
                subject=dropped[0],
                actual=dropped,
            )
        )
    truth = draft_truth(spec, observation.tensors)
    switches: list[tuple[str, bool | int, Any, str]] = [
        ("fc_norm", truth.fc_norm, observation.built.get("fc_norm"), "the per-chunk fc_norm weights"),
        ("norm_before_fc", truth.norm_before_fc, observation.built.get("input_norm"), "input_norm.weight"),
    ]
    if truth.num_aux_source.startswith("fc"):
        switches.append(("num_aux_hidden_states", truth.num_aux, observation.built.get("num_aux"), "fc's width"))
    for key, trained, built, what in switches:
        if built is None or built == trained or not enabled("EC725"):
            continue
        out.append(
            finding(
                "EC725",
                f"{who} built the draft with {key}={built}; the weights ({what}) were trained with {key}={trained}",
                subject=key,
                expected=trained,
                actual=built,
            )
        )
    return out


def _first_differences(outputs: list[list[int]], baseline: list[list[int]] | None) -> list[tuple[int, int]]:
    """(prompt, first new token that differs) for each prompt whose output differs from the target alone's."""
    if baseline is None:
        return []
    out = []
    for i, (a, b) in enumerate(zip(outputs, baseline, strict=True)):
        if a != b:
            first = (t for t, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
            out.append((i, next(first, min(len(a), len(b)))))  # or where the shorter one ends
    return out


def predict(
    draft: Path,
    target: Path,
    prompts: list[list[int]],
    settings: EngineSettings,
    compute: Compute | None = None,
    loaded: LoadedDraft | EagleConvertError | None = None,
    reference: Target | EagleConvertError | None = None,
) -> EngineRunPrediction | None:
    """The probe's acceptance for the engine's run (same prompts, tokens and draft length), or None when the
    reference forward cannot run this draft (the target level has said why). With ``loaded`` and ``reference``
    (verify's pair), nothing is read again."""
    from eagle_convert.errors import EagleConvertError
    from eagle_convert.probe.run import predict_engine_run, predict_engine_run_on
    from eagle_convert.reference.compute import CPU_FLOAT32

    try:
        if loaded is None or reference is None:
            return predict_engine_run(
                draft, target, prompts, settings.new_tokens, steps=settings.steps, compute=compute or CPU_FLOAT32
            )
        if isinstance(loaded, EagleConvertError) or isinstance(reference, EagleConvertError):
            return None
        return predict_engine_run_on(loaded, reference, prompts, settings.new_tokens, steps=settings.steps)
    except EagleConvertError:
        return None


def _probe_prediction(probe: ProbeReport | None) -> float | None:
    if probe is None:
        return None
    row = next((r for r in probe.result.rows if r.reading == probe.result.configured), None)
    return float(row.acceptance_length) if row else None
