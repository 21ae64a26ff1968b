"""``verify_checkpoint()``: the pre-deploy gate. Every rule runs or is reported as skipped, with a reason.

Levels form a ladder (``static`` < ``tensors`` < ``forward`` < ``target``); each runs the rules of the levels below
it. ``static`` reads config and headers only and never imports torch; ``tensors`` streams tensor values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle_convert.draft.detect import DraftSpec, detect
from eagle_convert.draft.expected import expected_tensors
from eagle_convert.draft.model_check import NOT_A_DRAFT
from eagle_convert.errors import EagleConvertError, NothingToCheckError
from eagle_convert.gate.deployment import reads_capture_setting
from eagle_convert.gate.findings import gate_findings, views
from eagle_convert.gate.located import located
from eagle_convert.probe.session import Session
from eagle_convert.read.checkpoint import Checkpoint
from eagle_convert.read.digest import FileDigest, hash_files
from eagle_convert.read.hub_store import HubStore, open_source
from eagle_convert.releases import EngineView
from eagle_convert.rules.finding import SEVERITIES, Finding
from eagle_convert.rules.registry import LEVELS, RULES, finding
from eagle_convert.verify.context import Context, map_names, static_checks
from eagle_convert.verify.report import CheckOutcome, VerifyReport
from eagle_convert.verify.request import (
    FAIL_LEVELS,
    CheckedRequest,
    VerifyRequest,
)

if TYPE_CHECKING:
    from eagle_convert.probe.result import ProbeReport
    from eagle_convert.probe.run import LoadedDraft
    from eagle_convert.probe.target import Target
    from eagle_convert.real_engine.record import EngineRun  # the report's engine_run: one record per kind of run
    from eagle_convert.reference.draft_reader import TensorReader
    from eagle_convert.verify.forward import ProbeSettings


def _selected(rule_id: str, select: tuple[str, ...], ignore: tuple[str, ...]) -> bool:
    return (not select or any(rule_id.startswith(s) for s in select)) and not any(rule_id.startswith(i) for i in ignore)


def checkpoint_files(ckpt: Checkpoint) -> list[str]:
    """The files a deployment would ship: config, index, shards (or pickle files)."""
    names = []
    if ckpt.config_path is not None:
        names.append(ckpt.config_path.name)
    if ckpt.index_path is not None:
        names.append(ckpt.index_path.name)
    names += [s.name for s in ckpt.shards] + [p for p in ckpt.pickle_files if (ckpt.root / p).is_file()]
    return names


@dataclass(frozen=True)
class Hooks:
    """Who hears of a run's progress (the CLI's bars and notices); none is part of the request."""

    progress: Callable[[int], None] | None = None  # bytes hashed for the sha256 manifest
    probe_progress: Callable[[str, int, int], None] | None = None  # tensors read, target layers run
    notice: Callable[[str], None] | None = None  # a line for people before a long target level (its time)


def verify_checkpoint(
    path: str | Path,
    request: VerifyRequest | CheckedRequest | None = None,
    hooks: Hooks | None = None,
    **options: Any,
) -> VerifyReport:
    """Run every selected rule up to the request's level for its engines; never raises for findings (only for bad
    input: every usage error is raised by ``request.validate()`` before the checkpoint is opened).

    ``request``: a :class:`VerifyRequest` (validated here) or one already validated (the CLI validates once for
    several checkpoints); ``options``: the request's options flat instead (``VerifyRequest.build``). The forward
    levels run the reference models where ``request.compute`` says (``auto``: CUDA when torch sees it; float32 where
    it fits and is cheap, else the model's dtype; a run that cannot fit the memory at hand stops with a UsageError
    before anything is loaded, reference/budget.py). The engine level starts the engine (``InProcessEngine``) or
    measures the draft on a running server (``AttachedServer``; the target then needs only its config, the probe's
    prediction runs where the target's weights are here and fit the memory, and without torch the run is the static
    rules and the server's measurement)."""
    heard = {k: options.pop(k) for k in ("progress", "probe_progress", "notice") if k in options}
    if heard:  # the hooks given flat, with the options
        hooks = replace(hooks or Hooks(), **heard)
    if request is None:
        request = VerifyRequest.build(**options)
    elif options:
        raise TypeError("verify_checkpoint takes a request or options, not both")
    checked = request if isinstance(request, CheckedRequest) else request.validate()
    checked.check_source(path)
    if checked.server is not None:  # a dead server is an error before the checkpoint is read or the probe runs
        from eagle_convert.real_engine.attached import reach

        reach(checked.server)
    run = Run.open(path, checked, hooks or Hooks())
    if (recorded := checked.with_recorded(run.ckpt.config)) is not checked:  # a normalized draft: its engines
        checked = recorded
        run = Run.on(run.session, checked, run.hooks)
    ckpt, spec, asked = run.ckpt, run.spec, checked.request
    model = next((f for f in spec.findings if f.rule_id == NOT_A_DRAFT and run.enabled(f.rule_id)), None)
    if model is not None:
        return _model_report(str(path), run, located(spec, ckpt, model))
    found: list[Finding] = []
    found += [
        located(spec, ckpt, f) for f in [*ckpt.notes, *spec.findings, *gate_findings(spec, ckpt.tensors, run.views)]
    ]
    if ckpt.weight_format == "pickle":
        found.append(
            finding(
                "EC003",
                f"weights are pickle ({', '.join(ckpt.pickle_files)}): tensors "
                "were not checked; convert with `eagle-convert normalize --allow-pickle`",
                file=ckpt.pickle_files[0],
            )
        )
    headers = ckpt.weight_format == "safetensors"
    for rule_id, check in static_checks().items():
        if run.enabled(rule_id) and (headers or not RULES[rule_id].needs_headers):
            found += check(run.context)
    probe, engine_run = None, None
    if checked.depth >= LEVELS.index("tensors") and headers:
        if checked.probe_here:
            more, probe, engine_run = _value_levels(run)
        else:  # --engine-url where torch is not installed: the static rules and the server's measurement
            more, probe, engine_run = _served(run, None, REFERENCE_INSTALL_REASON)
        found += more

    found = [f for f in found if run.enabled(f.rule_id)]
    if asked.strict:
        found = [replace(f, severity="error") if RULES[f.rule_id].strict_error else f for f in found]
    found.sort(key=lambda f: (SEVERITIES.index(f.severity), f.rule_id, f.pointer or ""))
    failing = {r for r in ("error", "warning")[: FAIL_LEVELS.index(asked.fail_level) + 1]}
    status = "fail" if any(f.severity in failing for f in found) else "pass"
    return VerifyReport(
        str(path),
        checked.level,
        checked.selection,
        asked.fail_level,
        status,
        found,
        _outcomes(found, checked, ckpt),
        _manifest(ckpt, asked.compute_hashes, run.hooks.progress),
        revision=ckpt.revision,
        probe=probe,
        engine_run=engine_run,
        deployment=dict(checked.deployment),
        capture_settings={v.release: v.capture_setting for v in run.views if reads_capture_setting(v.engine)},
        engine_source=checked.engine_source,
    )


REFERENCE_INSTALL_REASON = "torch is not installed here (pip install 'eagle-convert[reference]')"


def _model_report(path: str, run: Run, model: Finding) -> VerifyReport:
    """The report on a checkpoint that is a model, not a draft: its one finding (EC021); no other rule runs on it, and
    its files are listed unhashed (there is no draft in them to deploy)."""
    checked, ckpt = run.checked, run.ckpt
    asked = checked.request
    why = f"not run: the checkpoint is a model, not an EAGLE3 draft ({NOT_A_DRAFT})"
    outcomes = [
        o if o.rule_id == NOT_A_DRAFT or o.outcome == "skipped" else replace(o, outcome="skipped", reason=why)
        for o in _outcomes([model], checked, ckpt)
    ]
    return VerifyReport(
        path, checked.level, checked.selection, asked.fail_level, "fail", [model], outcomes,
        _manifest(ckpt, False, None), revision=ckpt.revision, deployment=dict(checked.deployment),
        engine_source=checked.engine_source,
    )  # fmt: skip


@dataclass
class Run:
    """One verify run on one checkpoint: the request as checked, the views and the rule context built once, and the
    session (probe/session.py) every level that reads values shares: the checkpoint opened once, detected once with
    everything the user declared, and what the value levels build on it once. Nothing below re-opens a checkpoint or
    re-detects."""

    checked: CheckedRequest
    session: Session
    views: list[EngineView]
    context: Context
    hooks: Hooks

    @classmethod
    def open(cls, path: str | Path, checked: CheckedRequest, hooks: Hooks) -> Run:
        asked = checked.request
        ckpt = open_source(path, asked.hub_token)
        if ckpt.weight_format == "none" and checked.level != LEVELS[0]:  # a bare config is gated at static
            raise NothingToCheckError(
                f"no weight files: --level {checked.level} has nothing to read beyond the config", path=path,
                hint="verify a config alone at --level static (its config rules), or point at the checkpoint with "
                "weights",
            )  # fmt: skip
        spec = detect(ckpt, checked.target, asked.aux_convention)
        session = Session(
            ckpt, spec, checked.target, device=asked.compute.device, dtype=asked.compute.dtype,
            token_ids=checked.token_ids, positions=asked.probe.positions, steps=asked.probe.steps,
            served=checked.server is not None, notice=hooks.notice,
        )  # fmt: skip
        return cls.on(session, checked, hooks)

    @classmethod
    def on(cls, session: Session, checked: CheckedRequest, hooks: Hooks) -> Run:
        """The run of ``checked`` on a checkpoint already opened and detected (``session``): its views and its rule
        context (a normalized draft is verified for the engines it records, on the same session)."""
        ckpt, spec = session.ckpt, session.spec
        canonical, unplaced = map_names(ckpt, spec)
        chosen_views = views(spec, checked.releases, checked.deployment)
        context = Context(
            ckpt, spec, checked.target, checked.engines, checked.request.strict, expected_tensors(spec),
            canonical, unplaced, chosen_views,
        )  # fmt: skip
        return cls(checked, session, chosen_views, context, hooks)

    @property
    def ckpt(self) -> Checkpoint:
        return self.session.ckpt

    @property
    def spec(self) -> DraftSpec:
        return self.session.spec

    def enabled(self, rule_id: str) -> bool:
        rule, checked = RULES[rule_id], self.checked
        return (
            _selected(rule_id, checked.select, checked.ignore)
            and LEVELS.index(rule.level) <= checked.depth
            and bool(set(rule.engines) & set(checked.engines))
        )


def _value_levels(run: Run) -> tuple[list[Finding], ProbeReport | None, EngineRun | None]:
    """The levels that read tensor values, in order, on the run's session: tensors (streamed, kept for the forward
    levels), forward (the draft loaded once), target (the probe on one reference target), engine (in-process or a
    server)."""
    from eagle_convert.reference.draft_reader import TensorReader
    from eagle_convert.verify.tensors import content_findings

    checked = run.checked
    forward = checked.depth >= LEVELS.index("forward")
    if forward:  # sized and decided before a tensor is read
        run.session.plan_compute(with_target=checked.depth >= LEVELS.index("target"))
    found: list[Finding] = []
    probe: ProbeReport | None = None
    engine_run: EngineRun | None = None
    with TensorReader(run.ckpt, keep=forward) as reader:
        found += content_findings(
            run.context, run.enabled, run.hooks.probe_progress, reader, run.session.target_weights
        )
        if forward:
            more, probe, engine_run = _forward_levels(run, reader)
            found += more
    return found, probe, engine_run


def _forward_levels(run: Run, reader: TensorReader) -> tuple[list[Finding], ProbeReport | None, EngineRun | None]:
    """The forward, target and engine levels on the draft loaded once (from the tensors ``reader`` kept) and one
    reference target: (findings, the probe report, the engine run)."""
    from eagle_convert.verify.forward import forward_findings, probe_findings

    checked, session = run.checked, run.session
    assert session.compute is not None
    draft = session.load_draft(reader)
    reader.close()  # the loaded weights hold what they need
    found = forward_findings(draft, run.enabled, session.compute)
    if checked.server is not None and checked.target is not None:
        more, probe, engine_run = _served(run, draft, session.no_probe)
        return found + more, probe, engine_run
    if checked.depth < LEVELS.index("target") or checked.target is None:
        return found, None, None
    more, probe = probe_findings(draft, session.reference, run.enabled, _probe_settings(run))
    found += more
    if checked.depth < LEVELS.index("engine"):
        return found, probe, None
    from eagle_convert.real_engine import EngineSettings, engine_findings
    from eagle_convert.real_engine.base import ENGINE_DTYPE_AUTO
    from eagle_convert.reference.compute import REFERENCE_DTYPE_AUTO

    asked = checked.request
    chosen_engine = replace(
        checked.engine_settings or EngineSettings(),  # its engine decided once, by validate (_runner_settings)
        token_ids=checked.token_ids,
        prompts=checked.prompts,
        steps=asked.probe.steps,
        device=session.compute.device.type,
        # the reference's auto and the engine's auto are two meanings, named apart (reference/compute.py)
        dtype=ENGINE_DTYPE_AUTO if asked.compute.dtype == REFERENCE_DTYPE_AUTO else asked.compute.dtype,
    )
    more, engine_run = engine_findings(
        session.ckpt.root, session.spec, checked.target, run.enabled, chosen_engine, probe, session.compute,
        loaded=draft, reference=session.reference,
    )  # fmt: skip
    return found + more, probe, engine_run


def _served(
    run: Run, draft: LoadedDraft | EagleConvertError | None, no_probe: str | None
) -> tuple[list[Finding], ProbeReport | None, EngineRun]:
    """The target level where the reference can run here (``no_probe`` None), then the engine level on the running
    server: (findings, the probe report, the engine run). ``draft`` None: nothing runs here (no torch)."""
    from eagle_convert.real_engine import EngineSettings
    from eagle_convert.real_engine.served import served_findings

    checked = run.checked
    assert checked.server is not None and checked.target is not None
    found: list[Finding] = []
    probe: ProbeReport | None = None
    reference: Target | EagleConvertError | None = None
    if no_probe is None and draft is not None:
        from eagle_convert.verify.forward import probe_findings

        reference = run.session.reference
        found, probe = probe_findings(draft, reference, run.enabled, _probe_settings(run))
    settings = replace(
        checked.engine_settings or EngineSettings(),
        token_ids=checked.token_ids,
        prompts=checked.prompts,
        steps=checked.request.probe.steps,
    )
    more, engine_run = served_findings(
        run.ckpt.root, run.spec, checked.target, run.enabled, settings, checked.server, probe,
        loaded=draft if reference is not None else None, reference=reference, probe_not_run=no_probe,
    )  # fmt: skip
    return found + more, probe, engine_run


def _probe_settings(run: Run) -> ProbeSettings:
    from eagle_convert.verify.forward import ProbeSettings

    checked, compute = run.checked, run.session.compute
    probe = checked.request.probe
    assert compute is not None
    return ProbeSettings(
        checked.token_ids,
        checked.prompts,
        probe.text,
        probe.steps,
        compute,
        probe.reference_hidden_states,
        probe.oracle,
        run.hooks.probe_progress,
        min_positions=probe.positions,
    )


def _manifest(ckpt: Checkpoint, compute: bool, progress: Callable[[int], None] | None) -> list[FileDigest]:
    names = checkpoint_files(ckpt)
    store = ckpt.store
    if ckpt.revision is not None and isinstance(store, HubStore):  # LFS hashes from the Hub; small files as read
        return [FileDigest(n, store.files[n].size, store.digest(n) if compute else None) for n in names]
    if compute:
        return hash_files(ckpt.root, names, progress, {s.name: s.fingerprint for s in ckpt.shards})
    return [FileDigest(n, (ckpt.root / n).stat().st_size, None) for n in names]


def _outcomes(found: list[Finding], checked: CheckedRequest, ckpt: Checkpoint) -> list[CheckOutcome]:
    """Every rule's outcome: pass, fail, or skipped with the reason."""
    failed = {f.rule_id for f in found}
    depth, engines, has_target = checked.depth, checked.engines, checked.target is not None
    out = []
    for rule in RULES.values():
        if not _selected(rule.id, checked.select, checked.ignore):
            out.append(CheckOutcome(rule.id, rule.name, "skipped", "not selected"))
        elif not set(rule.engines) & set(engines):
            out.append(CheckOutcome(rule.id, rule.name, "skipped", f"concerns {', '.join(rule.engines)} only"))
        elif LEVELS.index(rule.level) > depth:
            out.append(CheckOutcome(rule.id, rule.name, "skipped", f"needs --level {rule.level}"))
        elif ckpt.weight_format != "safetensors" and (rule.level == "tensors" or rule.needs_headers):
            bare = ckpt.weight_format == "none"
            why = "needs the weights (a config alone)" if bare else "weights are not safetensors"
            out.append(CheckOutcome(rule.id, rule.name, "skipped", why))
        elif not checked.probe_here and rule.level in ("tensors", "forward", "target"):
            out.append(CheckOutcome(rule.id, rule.name, "skipped", f"needs torch: {REFERENCE_INSTALL_REASON}"))
        elif not has_target and rule.needs_target:
            out.append(CheckOutcome(rule.id, rule.name, "skipped", "needs --target"))
        else:
            out.append(CheckOutcome(rule.id, rule.name, "fail" if rule.id in failed else "pass"))
    return out
