"""``verify_checkpoint()``: the pre-deploy gate. Every rule runs or is reported as skipped, with a reason.

Levels form a ladder (``static`` < ``tensors`` < ``forward`` < ``target``); each runs the rules of the levels below
it. ``static`` reads config and headers only and never imports torch; ``tensors`` streams tensor values.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle_convert.draft.detect import DraftSpec, detect
from eagle_convert.draft.expected import expected_tensors
from eagle_convert.errors import EagleConvertError, NothingToCheckError, UsageError, check_choice, require_torch
from eagle_convert.read.checkpoint import Checkpoint
from eagle_convert.read.config import IDS_KEY, TargetConfig
from eagle_convert.read.digest import FileDigest, hash_files
from eagle_convert.read.hub_store import HubStore, open_source
from eagle_convert.read.regular import read_text
from eagle_convert.releases import DEFAULT_ENGINES, Release, engine_level_engine, resolve_engines
from eagle_convert.rules.finding import SEVERITIES, Finding
from eagle_convert.rules.registry import LEVELS, RULES, finding
from eagle_convert.schemas import SETTINGS as SETTINGS_SCHEMA
from eagle_convert.schemas import Violation, violation
from eagle_convert.schemas import load as load_schema
from eagle_convert.verify.context import CONFIG, Context, config_pointer, map_names, static_checks
from eagle_convert.verify.gate import gate_findings, views
from eagle_convert.verify.report import CheckOutcome, VerifyReport
from eagle_convert.version import docs_url

if TYPE_CHECKING:
    from eagle_convert.probe.result import ProbeReport
    from eagle_convert.probe.run import LoadedDraft
    from eagle_convert.real_engine import EngineSettings
    from eagle_convert.real_engine.served import AttachedServer
    from eagle_convert.reference.budget import ReferenceRun
    from eagle_convert.reference.compute import Compute
    from eagle_convert.reference.draft_reader import TensorReader
    from eagle_convert.reference.weights import SafetensorsWeights
    from eagle_convert.verify.forward import ProbeSettings

FAIL_LEVELS = ("error", "warning")
ORACLES = ("transformers",)  # --oracle: what the reference target is checked against (verify/forward.py)


def parse_rule_list(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """'EC101,EC2' or ['EC101', 'EC2'] -> ('EC101', 'EC2'); a prefix selects every id that starts with it."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    out = tuple(i.strip().upper() for i in items if i.strip())
    unknown = [i for i in out if not any(r.startswith(i) for r in RULES)]
    if unknown:
        raise UsageError(f"no rule id starts with {', '.join(unknown)}", hint="run `eagle-convert rules` for the list")
    return out


def _selected(rule_id: str, select: tuple[str, ...], ignore: tuple[str, ...]) -> bool:
    return (not select or any(rule_id.startswith(s) for s in select)) and not any(rule_id.startswith(i) for i in ignore)


def load_settings(start: Path) -> dict[str, Any]:
    """``[tool.eagle-convert]`` from the nearest pyproject.toml at or above ``start`` (empty when none)."""
    for directory in (start.resolve(), *start.resolve().parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            try:
                doc = tomllib.loads(read_text(candidate, "pyproject.toml"))
            except tomllib.TOMLDecodeError as exc:
                raise UsageError(f"cannot read [tool.eagle-convert]: {exc}", path=candidate) from None
            settings = doc.get("tool", {}).get("eagle-convert", {})
            if not isinstance(settings, dict):
                raise UsageError("[tool.eagle-convert] must be a table", path=candidate)
            _check_settings(settings, candidate)
            return settings
    return {}


def _check_settings(settings: dict[str, Any], path: Path) -> None:
    """The table against eagle_convert/schemas/settings.schema.json, then the values the schema cannot know (engine
    releases, rule ids); every mistake is a usage error naming pyproject.toml and the key (a typo must not be
    ignored silently)."""
    wrong = violation(settings, SETTINGS_SCHEMA)
    if wrong is not None:
        raise _settings_error(wrong, path)
    if "engine" in settings:
        try:
            resolve_engines(settings["engine"])
        except UsageError as exc:
            raise UsageError(
                f"[tool.eagle-convert] engine = {settings['engine']!r}: {exc.cause}", path=path, hint=exc.hint
            ) from None
    for key in ("select", "ignore"):
        try:
            parse_rule_list(settings.get(key))
        except UsageError as exc:
            raise UsageError(f"[tool.eagle-convert] {key}: {exc.cause}", path=path, hint=exc.hint) from None


def _settings_error(wrong: Violation, path: Path) -> UsageError:
    """A schema violation of [tool.eagle-convert] said as the user wrote it: the key, its value, what it must be."""
    keys = tuple(load_schema(SETTINGS_SCHEMA)["properties"])
    if wrong.keyword == "additionalProperties":
        unknown = next(k for k in wrong.value if k not in keys)
        close = [k for k in keys if k.replace("-", "") == unknown.replace("-", "").replace("_", "")]
        return UsageError(
            f"unknown key {unknown!r} in [tool.eagle-convert]",
            path=path,
            hint=(f"did you mean {close[0]!r}? " if close else "")
            + f"the keys are {', '.join(keys)} ({docs_url('docs/ci.md')})",
        )
    key = str(wrong.location[0]) if wrong.location else ""
    spec = load_schema(SETTINGS_SCHEMA)["properties"].get(key, {})
    if "enum" in spec:
        choices = ", ".join(spec["enum"])
        return UsageError(
            f"[tool.eagle-convert] {key} = {wrong.value!r} is not one of {choices}",
            path=path,
            hint=f"set {key} to one of {choices}",
        )
    examples = spec.get("examples", [])
    return UsageError(
        f"[tool.eagle-convert] {key}{wrong.where()[len(key) + 1 :]} must be {spec.get('title', 'valid')}: "
        f"{wrong.reason}",
        path=path,
        hint=f"write it like {key} = {json.dumps(examples[0])}"
        if examples
        else f"see {key} in {docs_url('docs/ci.md')}",
    )


def _has_weights(target: Path) -> bool:
    """A target directory the reference models can read: safetensors shards or their index."""
    return target.is_dir() and any(target.glob("*.safetensors"))


def checkpoint_files(ckpt: Checkpoint) -> list[str]:
    """The files a deployment would ship: config, index, shards (or pickle files)."""
    names = []
    if ckpt.config_path is not None:
        names.append(ckpt.config_path.name)
    if ckpt.index_path is not None:
        names.append(ckpt.index_path.name)
    names += [s.name for s in ckpt.shards] + [p for p in ckpt.pickle_files if (ckpt.root / p).is_file()]
    return names


def _pointer(spec: DraftSpec, ckpt: Checkpoint, f: Finding) -> tuple[str | None, str | None]:
    subject = f.subject
    if subject and subject in ckpt.tensors:
        return ckpt.tensors[subject].shard, subject
    if subject == IDS_KEY and spec.aux.location == "eagle_config":
        return CONFIG, config_pointer(f"eagle_config.{IDS_KEY}")
    if subject and not subject.startswith(("fc", "midlayer", "self_attn")):
        return CONFIG, config_pointer(subject)
    return None, subject


def verify_checkpoint(
    path: str | Path,
    *,
    target: str | Path | None = None,
    engine: str = DEFAULT_ENGINES,
    level: str = "static",
    strict: bool = False,
    fail_level: str = "error",
    select: str | Iterable[str] | None = None,
    ignore: str | Iterable[str] | None = None,
    compute_hashes: bool = True,
    progress: Callable[[int], None] | None = None,
    token: str | None = None,
    token_ids: list[list[int]] | None = None,
    probe_steps: int = 3,
    reference_hidden_states: Path | None = None,
    oracle: str | None = None,
    prompts: Path | None = None,
    probe_text: str = "greedy",
    device: str = "auto",
    dtype: str = "auto",
    probe_progress: Callable[[str, int, int], None] | None = None,
    aux_convention: str | None = None,
    engine_settings: EngineSettings | None = None,
    probe_positions: int | None = None,
    notice: Callable[[str], None] | None = None,
    engine_server: AttachedServer | None = None,
) -> VerifyReport:
    """Run every selected rule up to ``level`` for ``engine``; never raises for findings (only for bad input).

    The forward levels run the reference models on ``device`` (``auto``: CUDA when torch sees it) in ``dtype``
    (``auto``: float32 where it fits and is cheap, else the model's dtype; a run that cannot fit the memory at hand
    stops with a UsageError before anything is loaded, reference/budget.py); ``probe_progress(what, done, total)``
    hears of the tensors read at ``tensors`` and of the target layers run in the probe's long parts. The ``engine``
    level also runs the draft in a real engine (``engine_settings``: which engine environment, how many tokens).
    ``notice`` hears, before a long target level starts, an estimate of its time (a line for people).
    ``engine_server``: the engine level measures the draft on that running server instead of starting an engine;
    the target then needs only its config, and the probe's prediction runs where the target's weights are here and
    fit the memory (real_engine/served.py).
    ``aux_convention`` (``output-of`` or ``input-to``) declares what the aux-layer ids mean, as for ``inspect``."""
    releases = resolve_engines(engine)
    check_choice("level", level, LEVELS)
    if LEVELS.index(level) >= LEVELS.index("tensors"):  # tensor values and forward passes need the reference extra
        require_torch(f"--level {level}")
    if engine_server is not None and target is None:
        raise UsageError("--engine-url needs --target: the target's config.json (its weights are optional)")
    if level in ("target", "engine") and target is None:
        raise UsageError(f"--level {level} runs the target model: pass --target DIR (with its weights)")
    if engine_server is not None and level != "engine":
        raise UsageError(f"--engine-url measures the draft at --level engine, not --level {level}")
    if level == "engine" and engine_server is None:  # fail fast, before the probe runs, when there is no engine
        from eagle_convert.real_engine import engine_python

        engine_python(engine_settings.python if engine_settings else None)
    if level in ("target", "engine") and engine_server is None and not _has_weights(Path(target or "")):
        raise UsageError(
            f"--level {level} runs the target model, but --target has no safetensors weights (config only)",
            path=target,
            hint="pass the target's checkpoint directory with its *.safetensors, or use --level tensors with a "
            "config-only target",
        )
    if prompts is not None and target is None:
        raise UsageError("--prompts needs --target (its tokenizer.json tokenizes them)")
    check_choice("fail level", fail_level, FAIL_LEVELS)
    chosen, ignored = parse_rule_list(select), parse_rule_list(ignore)
    engines = tuple(dict.fromkeys(r.engine for r in releases))
    ckpt = open_source(path, token)
    if ckpt.revision is not None and level != "static":
        raise UsageError(
            f"--level {level} reads tensor values; a Hub repo is verified with --level static",
            hint=f"`eagle-convert pull {path} DIR` first, then `eagle-convert verify DIR --level {level}"
            + (f" --target {target}" if target is not None else "")
            + (f" --engine {engine}" if engine != DEFAULT_ENGINES else "")
            + "`",
        )
    if ckpt.weight_format == "none" and level != LEVELS[0]:  # a bare config is gated on its config rules (static)
        raise NothingToCheckError(
            f"no weight files: --level {level} has nothing to read beyond the config", path=path,
            hint="verify a config alone at --level static (its config rules), or point at the checkpoint with weights",
        )  # fmt: skip
    target_cfg = TargetConfig.from_path(target) if target is not None else None
    if token_ids is not None and target_cfg is not None and target_cfg.vocab_size:
        from eagle_convert.probe.text import check_token_ids

        check_token_ids(token_ids, target_cfg.vocab_size)
    spec = detect(ckpt, target_cfg, aux_convention)
    canonical, unplaced = map_names(ckpt, spec)
    chosen_views = views(spec, releases)
    ctx = Context(ckpt, spec, target_cfg, engines, strict, expected_tensors(spec), canonical, unplaced, chosen_views)
    depth = LEVELS.index(level)

    def enabled(rule_id: str) -> bool:
        rule = RULES[rule_id]
        return (
            _selected(rule_id, chosen, ignored)
            and LEVELS.index(rule.level) <= depth
            and bool(set(rule.engines) & set(engines))
        )

    found: list[Finding] = []
    notes = list(ckpt.notes)
    for f in notes + spec.findings + gate_findings(spec, ckpt.tensors, chosen_views):
        file, pointer = _pointer(spec, ckpt, f)
        found.append(replace(f, file=file, pointer=pointer))
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
        if enabled(rule_id) and (headers or not RULES[rule_id].needs_headers):
            found += check(ctx)
    # One pass: the draft's tensors are read once (kept for the forward levels, streamed and dropped at tensors
    # alone), the draft is loaded once, and one target (config read above, weights, reference model) serves every
    # level; nothing below re-opens a checkpoint or re-detects.
    probe: ProbeReport | None = None
    engine_run: dict[str, Any] | None = None
    if depth >= LEVELS.index("tensors") and ckpt.weight_format == "safetensors":
        from eagle_convert.reference.draft_reader import TensorReader
        from eagle_convert.verify.tensors import content_findings

        forward = depth >= LEVELS.index("forward")
        target_weights = target_weights_of(target_cfg)
        chosen_compute, no_probe = None, None
        if forward:  # sized and decided before a tensor is read
            from eagle_convert.reference import compute

            probed = target_cfg if depth >= LEVELS.index("target") else None
            if engine_server is not None and probed is not None and target_weights is None:
                probed, no_probe = None, "the target's weights are not here (config only)"
            run = reference_run_of(spec, ckpt, probed, target_weights, token_ids, probe_positions, probe_steps)
            try:
                chosen_compute = compute.resolve(device, dtype, run)
            except UsageError as exc:  # against a server, a reference that cannot fit only costs the prediction
                if engine_server is None or probed is None:
                    raise
                probed, no_probe = None, f"the reference target does not fit here: {exc.message}"
                run = reference_run_of(spec, ckpt, None, None, token_ids, probe_positions, probe_steps)
                chosen_compute = compute.resolve(device, dtype, run)
            if notice is not None and probed is not None:
                _time_notice(run, chosen_compute, notice)
        with TensorReader(ckpt, keep=forward) as reader:
            found += content_findings(ctx, enabled, probe_progress, reader, target_weights)
            if chosen_compute is not None:
                more, probe, engine_run = _forward_levels(
                    ckpt, spec, reader, target_cfg, target_weights, depth, enabled, releases, engine_settings,
                    ForwardOptions(token_ids, prompts, probe_text, probe_steps, reference_hidden_states, oracle,
                                   probe_progress, probe_positions, chosen_compute, dtype, engine_server, no_probe),
                )  # fmt: skip
                found += more

    found = [f for f in found if enabled(f.rule_id)]
    if strict:
        found = [replace(f, severity="error") if RULES[f.rule_id].strict_error else f for f in found]
    found.sort(key=lambda f: (SEVERITIES.index(f.severity), f.rule_id, f.pointer or ""))
    failing = {r for r in ("error", "warning")[: FAIL_LEVELS.index(fail_level) + 1]}
    status = "fail" if any(f.severity in failing for f in found) else "pass"
    return VerifyReport(
        str(path),
        level,
        engine,
        fail_level,
        status,
        found,
        _outcomes(found, chosen, ignored, depth, ckpt, has_target=target is not None, engines=engines),
        _manifest(ckpt, compute_hashes, progress),
        revision=ckpt.revision,
        probe=probe,
        engine_run=engine_run,
    )


@dataclass(frozen=True)
class ForwardOptions:
    """verify_checkpoint's options for the forward levels, as given."""

    token_ids: list[list[int]] | None
    prompts: Path | None
    text: str
    steps: int
    reference_hidden_states: Path | None
    oracle: str | None
    progress: Callable[[str, int, int], None] | None
    positions: int | None
    compute: Compute  # where and in what dtype (decided against the memory before anything was loaded)
    dtype: str  # --dtype as asked: "auto" leaves the engine level its own default (float32 on a CPU)
    server: AttachedServer | None = None  # --engine-url: the engine level measures the draft on this running server
    no_probe: str | None = None  # why the probe does not run against a server (the target's weights: absent, too big)


LONG_RUN_FLOP = 1e13  # a probe above this (about 10 s at 1 TFLOP/s) hears its time estimate first


def _time_notice(run: ReferenceRun, chosen: Compute, notice: Callable[[str], None]) -> None:
    """Tell ``notice`` how long the probe should take, when that is long enough to be worth a measured rate."""
    from eagle_convert.reference.budget import available_memory, time_estimate
    from eagle_convert.reference.compute import matmul_rate

    if sum(run.flops()) >= LONG_RUN_FLOP:
        host = available_memory("cpu").bytes  # the page cache the streamed weights are read through
        held = run.estimate(chosen.dtype_name).total if chosen.device.type == "cpu" else 0
        notice(time_estimate(run, matmul_rate(chosen), None if host is None else host - held)[1])


def reference_run_of(
    spec: DraftSpec,
    ckpt: Checkpoint,
    target_cfg: TargetConfig | None,
    target_weights: SafetensorsWeights | None,
    token_ids: list[list[int]] | None,
    positions: int | None,
    steps: int,
) -> ReferenceRun:
    """What the forward levels will hold, sized from the headers and configs already read (the target's part only
    when the target level runs it): what ``compute.resolve`` decides ``--dtype`` against. normalize's
    ``--aux-convention auto`` probes the same pair and can size its run with it too."""
    from eagle_convert.reference.budget import reference_run

    aux = spec.aux.hidden_state_indices or spec.aux.ids or [0, 0, 0]
    target_tensors = None
    if target_cfg is not None and target_weights is not None:
        target_tensors = {n: target_weights.shape(n) or () for n in target_weights.names()}
    return reference_run(
        {name: info.shape for name, info in ckpt.tensors.items()},
        spec.vocab.draft_vocab_size or spec.vocab.vocab_size or 0,
        len(aux),
        target_cfg.raw if target_cfg is not None else None,
        target_tensors,
        token_ids,
        **({"min_positions": positions} if positions is not None else {}),
        steps=steps,
    )


def target_weights_of(target_cfg: TargetConfig | None) -> SafetensorsWeights | None:
    """The target's weights (its shards' names, nothing read), when --target is a directory that has them."""
    if target_cfg is None:
        return None
    directory = Path(target_cfg.source).parent
    if not any(directory.glob("*.safetensors")):
        return None
    from eagle_convert.reference import fp8
    from eagle_convert.reference.weights import SafetensorsWeights

    # The target is the user's input: a broken weight file or quantization block is an input error (exit 2) here,
    # before any tensor is read, never a finding against the draft.
    quant = target_cfg.quantization_config
    block = fp8.block_size(quant) if quant and quant.get("quant_method") == "fp8" else None
    return SafetensorsWeights(directory, block)


def _forward_levels(
    ckpt: Checkpoint,
    spec: DraftSpec,
    reader: TensorReader,
    target_cfg: TargetConfig | None,
    target_weights: SafetensorsWeights | None,
    depth: int,
    enabled: Callable[[str], bool],
    releases: list[Release],
    engine_settings: EngineSettings | None,
    options: ForwardOptions,
) -> tuple[list[Finding], ProbeReport | None, dict[str, Any] | None]:
    """The forward, target and engine levels on the draft loaded once (from the tensors ``reader`` kept) and one
    reference target: (findings, the probe report, the engine run)."""
    from eagle_convert.probe.run import load_draft
    from eagle_convert.probe.target import Target
    from eagle_convert.verify.forward import forward_findings, probe_findings

    chosen_compute = options.compute
    draft: LoadedDraft | EagleConvertError
    try:
        draft = load_draft(ckpt, spec, chosen_compute, reader)
    except EagleConvertError as exc:
        draft = exc
    reader.close()  # the loaded weights hold what they need
    found = forward_findings(draft, enabled, chosen_compute)
    probe: ProbeReport | None = None
    engine_run: dict[str, Any] | None = None
    if options.server is not None and target_cfg is not None:
        more, probe, engine_run = _served(
            ckpt, spec, target_cfg, target_weights, enabled, engine_settings, options, draft
        )
        return found + more, probe, engine_run
    if depth < LEVELS.index("target") or target_cfg is None:
        return found, probe, engine_run
    reference: Target | EagleConvertError
    try:
        reference = Target.of(target_cfg, chosen_compute, target_weights)
    except EagleConvertError as exc:
        reference = exc
    more, probe = probe_findings(draft, reference, enabled, _probe_settings(options))
    found += more
    if depth >= LEVELS.index("engine"):
        from dataclasses import replace

        from eagle_convert.real_engine import EngineSettings, engine_findings

        chosen_engine = replace(
            engine_settings or EngineSettings(),
            engine=engine_level_engine(releases),
            token_ids=options.token_ids,
            prompts=options.prompts,
            steps=options.steps,
            device=chosen_compute.device.type,
            dtype=options.dtype,
        )
        target_dir = Path(target_cfg.source).parent
        more, engine_run = engine_findings(
            ckpt.root, spec, target_dir, enabled, chosen_engine, probe, chosen_compute,
            loaded=draft, reference=reference,
        )  # fmt: skip
        found += more
    return found, probe, engine_run


def _served(
    ckpt: Checkpoint,
    spec: DraftSpec,
    target_cfg: TargetConfig,
    target_weights: SafetensorsWeights | None,
    enabled: Callable[[str], bool],
    engine_settings: EngineSettings | None,
    options: ForwardOptions,
    draft: LoadedDraft | EagleConvertError,
) -> tuple[list[Finding], ProbeReport | None, dict[str, Any]]:
    """The target level where the reference can run here (``options.no_probe`` None), then the engine level on the
    running server: (findings, the probe report, the engine run)."""
    from dataclasses import replace

    from eagle_convert.probe.target import Target
    from eagle_convert.real_engine import EngineSettings
    from eagle_convert.real_engine.served import served_findings
    from eagle_convert.verify.forward import probe_findings

    assert options.server is not None
    found: list[Finding] = []
    probe: ProbeReport | None = None
    reference: Target | EagleConvertError | None = None
    if options.no_probe is None:
        try:
            reference = Target.of(target_cfg, options.compute, target_weights)
        except EagleConvertError as exc:
            reference = exc
        found, probe = probe_findings(draft, reference, enabled, _probe_settings(options))
    settings = replace(
        engine_settings or EngineSettings(), token_ids=options.token_ids, prompts=options.prompts, steps=options.steps
    )
    more, run = served_findings(
        ckpt.root, spec, target_cfg, enabled, settings, options.server, probe,
        loaded=draft if reference is not None else None, reference=reference,
    )  # fmt: skip
    run["probe_not_run"] = options.no_probe
    return found + more, probe, run


def _probe_settings(options: ForwardOptions) -> ProbeSettings:
    from eagle_convert.verify.forward import ProbeSettings

    return ProbeSettings(
        options.token_ids,
        options.prompts,
        options.text,
        options.steps,
        options.compute,
        options.reference_hidden_states,
        options.oracle,
        options.progress,
        **({"min_positions": options.positions} if options.positions is not None else {}),
    )


def _manifest(ckpt: Checkpoint, compute: bool, progress: Callable[[int], None] | None) -> list[FileDigest]:
    names = checkpoint_files(ckpt)
    store = ckpt.store
    if ckpt.revision is not None and isinstance(store, HubStore):  # LFS hashes from the Hub; small files as read
        return [FileDigest(n, store.files[n].size, store.digest(n) if compute else None) for n in names]
    if compute:
        return hash_files(ckpt.root, names, progress)
    return [FileDigest(n, (ckpt.root / n).stat().st_size, None) for n in names]


def _outcomes(
    found: list[Finding],
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    depth: int,
    ckpt: Checkpoint,
    *,
    has_target: bool,
    engines: tuple[str, ...],
) -> list[CheckOutcome]:
    failed = {f.rule_id for f in found}
    out = []
    for rule in RULES.values():
        if not _selected(rule.id, select, ignore):
            out.append(CheckOutcome(rule.id, rule.name, "skipped", "not selected"))
        elif not set(rule.engines) & set(engines):
            out.append(CheckOutcome(rule.id, rule.name, "skipped", f"concerns {', '.join(rule.engines)} only"))
        elif LEVELS.index(rule.level) > depth:
            out.append(CheckOutcome(rule.id, rule.name, "skipped", f"needs --level {rule.level}"))
        elif ckpt.weight_format != "safetensors" and (rule.level == "tensors" or rule.needs_headers):
            bare = ckpt.weight_format == "none"
            why = "needs the weights (a config alone)" if bare else "weights are not safetensors"
            out.append(CheckOutcome(rule.id, rule.name, "skipped", why))
        elif not has_target and rule.needs_target:
            out.append(CheckOutcome(rule.id, rule.name, "skipped", "needs --target"))
        else:
            out.append(CheckOutcome(rule.id, rule.name, "fail" if rule.id in failed else "pass"))
    return out
