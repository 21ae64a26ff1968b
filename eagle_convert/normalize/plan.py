"""``normalize_checkpoint()``: rewrite any supported draft into one canonical form, streaming and atomically.

Plan first, then write: the plan resolves the draft's semantics (flags, K, vocabulary, and the hidden states its
aux-layer ids select, never assumed), maps every tensor through the layout's table, and records every config change
and tensor action with its reason. Renamed tensors keep their bytes (copied by the kernel); only fused splits,
fc column permutations and vocabulary-map conversions compute bytes, one tensor at a time. No torch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from eagle_convert.draft.detect import DraftSpec, detect, with_measured_convention
from eagle_convert.errors import (
    EagleConvertError,
    NormalizeRefused,
    NothingToCheckError,
    UsageError,
    require_torch,
)
from eagle_convert.gate.nulls import null_findings
from eagle_convert.normalize.profiles import PROFILE_ENGINES, PROFILES, Semantics, profile_releases
from eagle_convert.normalize.request import NormalizeRequest
from eagle_convert.normalize.semantics import resolve_semantics
from eagle_convert.normalize.tensors import TensorAction, nbytes, plan_tensors
from eagle_convert.normalize.verdicts import Verdicts, verdicts
from eagle_convert.normalize.writer import ShardPlan, write_checkpoint
from eagle_convert.read.checkpoint import Checkpoint, open_checkpoint
from eagle_convert.read.config import PROVENANCE_KEY, TargetConfig, flatten_source
from eagle_convert.read.hub_store import parse_repo_ref
from eagle_convert.read.output_place import (
    check_output_place,
    check_replace,
    drop_staging,
    make_parents,
    make_staging,
    remove_made,
    write_error,
)
from eagle_convert.read.source_files import SourceFiles
from eagle_convert.releases import (
    FAMILY_MODEL_TYPE,
    RELEASES,
    engine_view,
    resolve_engines,
)
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import finding
from eagle_convert.version import SCHEMA_VERSION, TOOL, __version__


@dataclass(frozen=True)
class ConfigChange:
    key: str
    change: str  # "added", "removed" or "changed"
    old: Any
    new: Any
    why: str


@dataclass
class NormalizeReport:
    source: str
    out: str
    profile: str
    dry_run: bool
    producer: str
    layout: str | None
    semantics: dict[str, Any]
    config_changes: list[ConfigChange]
    tensors: list[TensorAction]
    files: list[str]
    total_bytes: int
    findings: list[Finding]
    written: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    verify: Verdicts | None = None  # verify's verdict per release on what was written (None: a dry run)

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract, validated by eagle_convert/schemas/normalize-report.schema.json."""
        return {
            "schema_version": SCHEMA_VERSION,
            "tool_version": __version__,
            "tool": TOOL,  # as inspect's and verify's
            "version": __version__,
            "source": self.source,
            "out": self.out,
            "profile": self.profile,
            "dry_run": self.dry_run,
            "written": self.written,
            "producer": self.producer,
            "layout": self.layout,
            "semantics": self.semantics,
            "config_changes": [asdict(c) for c in self.config_changes],
            "tensors": [asdict(t) for t in self.tensors],
            "dropped": [asdict(t) for t in self.tensors if t.action == "drop"],
            "files": self.files,
            "total_bytes": self.total_bytes,
            "config": self.config,
            "findings": [asdict(f) for f in self.findings],
            "verify": self.verify.to_dict() if self.verify is not None else None,
        }


def normalize_checkpoint(
    src: str | Path,
    out: str | Path,
    request: NormalizeRequest | None = None,
    *,
    progress: Callable[[int], None] | None = None,
    progress_total: Callable[[int], None] | None = None,
    **options: Any,
) -> NormalizeReport:
    """Plan the conversion of ``src`` into ``request.profile``; write it to ``out`` unless ``request.dry_run``.

    ``request`` is validated whole before anything is opened; without one, ``options`` are its fields, flat
    (``normalize_checkpoint(src, out, profile="vllm", target=t)``). ``progress(n)`` is called as tensor bytes are
    written, after ``progress_total(total)`` with the bytes there are to write."""
    if request is not None and options:
        raise UsageError(f"pass a NormalizeRequest or its fields, not both ({', '.join(sorted(options))})")
    req = (request if request is not None else NormalizeRequest.build(**options)).validate()
    if req.measures:
        require_torch("--aux-convention auto")
    if not req.dry_run:
        _check_out(Path(src), Path(out), req)
    if parse_repo_ref(str(src)) is not None:
        return _normalize_remote(str(src), Path(out), req, progress, progress_total)
    src, out = Path(src), Path(out)
    ckpt = open_checkpoint(src)
    if ckpt.weight_format == "pickle":
        from eagle_convert.read.pickle_source import pickle_as_safetensors

        if not req.allow_pickle:
            raise NormalizeRefused(
                f"weights are pickle ({', '.join(ckpt.pickle_files)}), which can run code when loaded",
                path=src,
                hint="pass --allow-pickle to load them with torch's weights-only loader",
            )
        return _normalize_pickle(src, out, ckpt, pickle_as_safetensors, req, progress, progress_total)
    if ckpt.weight_format == "none":
        raise NothingToCheckError("no weight files to normalize (config only)", path=src)
    target_cfg = TargetConfig.from_path(req.target) if req.target is not None else None
    # one detection, with what the user declared (auto declares nothing until it is measured, below)
    spec = detect(ckpt, target_cfg, req.declared_convention)
    measured = None
    if req.measures and target_cfg is not None:
        spec, measured = _measure_convention(ckpt, spec, target_cfg, req)
    profile, dry_run = req.profile, req.dry_run
    family = target_cfg.family if target_cfg else req.target_family
    sem, findings = resolve_semantics(src, ckpt, spec, target_cfg, family, profile)
    if measured is not None:
        sem.provenance["convention_measured"] = measured
    raw_out, reasons = _build_config(ckpt.config or {}, sem, profile)
    n_target = target_cfg.num_hidden_layers if target_cfg else None
    mt = target_cfg.text_model_type if target_cfg else FAMILY_MODEL_TYPE.get(family or "")
    findings += _unsatisfied_releases(raw_out, sem, PROFILE_ENGINES[profile], mt, n_target)
    source_views = [
        engine_view(r, ckpt.config or {}, target_model_type=mt, target_num_layers=n_target)
        for r in profile_releases(profile)
    ]
    findings += null_findings(ckpt.config or {}, source_views)  # what the nulls normalize writes out meant (EC508)
    # every shard read through one descriptor, as it was when its header was read (read/source_files.py)
    sources = SourceFiles({ckpt.root / s.name: s.fingerprint for s in ckpt.shards})  # opened when read
    plan = plan_tensors(src, ckpt, spec, sem, profile, req.max_shard_size, sources)
    findings += plan.findings
    metadata_note = json.dumps(sem.provenance, sort_keys=True)
    shards = [ShardPlan(s.name, s.tensors, {**s.metadata, PROVENANCE_KEY: metadata_note}) for s in plan.shards]
    report = NormalizeReport(
        source=str(src),
        out=str(out),
        profile=profile,
        dry_run=dry_run,
        producer=spec.producer,
        layout=spec.layer_prefix,
        semantics=_semantics_dict(sem),
        config_changes=_diff(ckpt.config or {}, raw_out, reasons),
        tensors=plan.actions,
        files=["config.json", *(s.name for s in shards)]
        + (["model.safetensors.index.json"] if len(shards) > 1 else []),
        total_bytes=sum(nbytes(t) for s in shards for t in s.tensors),
        findings=findings,
        config=raw_out,
    )
    if not dry_run:
        files = {"config.json": (json.dumps(raw_out, indent=2, ensure_ascii=False) + "\n").encode("utf-8")}
        n = target_cfg.num_hidden_layers if target_cfg else None
        check = partial(_check_output, sem, family, PROFILE_ENGINES[profile], n, PROFILE_CONVENTION.get(profile))
        if progress_total is not None:
            progress_total(report.total_bytes)
        with sources:
            write_checkpoint(out, shards, files, force=req.force, progress=progress, check=check, sources=sources)
        report.written = True
        report.verify = verdicts(out, raw_out, req.target)
    return report


def _check_out(src: Path, out: Path, req: NormalizeRequest) -> None:
    """OUT against every input of the run, before anything is read: the draft (a weights file stands for its
    folder, where its config.json must be), the target (a folder, or the config.json given) and the files read into
    the request (``--token-ids``, ``--prompts``), by identity; then whether an existing OUT may be replaced
    (``--force``, and only a checkpoint). UsageError or OutputExistsError: exit 2."""
    draft = [src, src.parent] if os.path.isfile(src) else [src]  # a Hub id is no path here: skipped
    check_output_place(out, [*draft, *([req.target] if req.target else []), *req.read_files], directory=True)
    check_replace(out, req.force)


def _measure_convention(
    ckpt: Checkpoint, spec: DraftSpec, target_cfg: TargetConfig, req: NormalizeRequest
) -> tuple[DraftSpec, str]:
    """``--aux-convention auto``: the draft already opened and detected, loaded once with the target read once, and
    the convention the probe measures on them (the spec derived with it, and the evidence)."""
    from eagle_convert.probe.run import measure_convention_on
    from eagle_convert.probe.session import Session

    token_ids = [list(s) for s in req.token_ids] if req.token_ids is not None else None
    session = Session(  # on the draft and the target this run already read
        ckpt, spec, target_cfg, device=req.device, dtype=req.dtype, token_ids=token_ids,
        positions=req.probe_positions, steps=req.probe_steps,
    )  # fmt: skip
    session.plan_compute()
    draft, target = session.load_draft(), session.reference
    if isinstance(draft, EagleConvertError):
        raise draft
    if isinstance(target, EagleConvertError):
        raise target
    convention, evidence = measure_convention_on(
        draft,
        target,
        steps=req.probe_steps,
        token_ids=token_ids,
        prompts=list(req.prompts) if req.prompts is not None else None,
        min_positions=req.probe_positions,
    )
    return with_measured_convention(spec, convention, evidence), evidence


# Profiles whose format fixes what its ids mean (and which carry no provenance block to say so): the re-read takes
# their convention, as every reader of that format does.
PROFILE_CONVENTION = {"speculators": "input-to"}


def _check_output(
    sem: Semantics,
    family: str | None,
    engines: tuple[str, ...],
    num_layers: int | None,
    convention: str | None,
    tmp: Path,
) -> None:
    """Re-read the written draft before it is committed: it must mean exactly what the plan resolved."""
    spec = detect(open_checkpoint(tmp), aux_convention=convention)
    got = {
        "attention": spec.attention,
        "num_aux_hidden_states": spec.num_aux_hidden_states,
        "fc_norm": spec.flags.fc_norm.value,
        "norm_output": spec.flags.norm_output.value,
        "norm_before_fc": spec.flags.norm_before_fc.value,
        "norm_before_residual": spec.flags.norm_before_residual.value,
        "hidden_states": spec.aux.hidden_state_indices if sem.hidden_states is not None else None,
    }
    want = {key: getattr(sem, key) for key in got}
    if got != want:
        diff = {k: (want[k], got[k]) for k in got if got[k] != want[k]}
        raise RuntimeError(f"normalize wrote a draft that reads differently from the plan {diff}; nothing was kept")
    if sem.hidden_states is not None and family is not None:
        for release in resolve_engines(",".join(engines)):
            n = num_layers or max(sem.hidden_states) + 1  # the least N that holds every trained state
            view = engine_view(
                release, spec.config.raw, target_model_type=FAMILY_MODEL_TYPE.get(family), target_num_layers=n
            )
            if view.ids is None or view.hidden_state_indices != sem.hidden_states:
                raise RuntimeError(
                    f"{release.name} would select hs{view.hidden_state_indices} from the written config, "
                    f"not hs{sem.hidden_states}; nothing was kept"
                )


def _unsatisfied_releases(
    raw_out: dict[str, Any], sem: Semantics, engines: tuple[str, ...], model_type: str | None, n: int | None
) -> list[Finding]:
    """Every modelled release of the profile's engines that reads the written config other than as trained."""
    out: list[Finding] = []
    releases = [r for r in RELEASES.values() if r.engine in engines]
    for release in releases:
        view = engine_view(release, raw_out, target_model_type=model_type, target_num_layers=n)
        wrong: dict[str, tuple[object, object]] = {
            key: (want, got)
            for key, want, got in (
                ("hidden states", sem.hidden_states, view.hidden_state_indices),
                ("fc_norm", sem.fc_norm, view.fc_norm),
                ("norm_before_fc", sem.norm_before_fc, view.norm_before_fc),
                ("K", sem.num_aux_hidden_states, view.num_aux_hidden_states),
            )
            if want is not None and got is not None and want != got
        }
        if view.draft_class is None:
            wrong["draft class"] = ("an EAGLE3 class", None)
        if wrong:
            what = "; ".join(f"{k}: needs {w}, builds {g}" for k, (w, g) in wrong.items())
            out.append(
                Finding(
                    "EC104" if "hidden states" in wrong else "EC211",
                    "warning",
                    f"{release.name} cannot read the written config as trained ({what}); deploy to another release",
                    subject="config.json",
                    engine=release.name,
                )
            )
    return out


def _normalize_remote(
    ref: str,
    out: Path,
    req: NormalizeRequest,
    progress: Callable[[int], None] | None,
    progress_total: Callable[[int], None] | None,
) -> NormalizeReport:
    """Pull a Hub repo into a staging directory next to ``out``, normalize that, and remove it (OUT was checked
    before the download, as the writer checks it after)."""
    from eagle_convert.read.hub_pull import pull_checkpoint

    try:
        made = make_parents(out)  # removed again after a failure
        staging = make_staging(out, "source")
    except OSError as exc:
        raise write_error(exc, out) from None
    try:
        pulled = pull_checkpoint(ref, staging / "draft", allow_pickle=req.allow_pickle)
        report = normalize_checkpoint(staging / "draft", out, req, progress=progress, progress_total=progress_total)
    except BaseException:
        drop_staging(staging)
        remove_made(made)
        raise
    drop_staging(staging)
    report.source = f"{ref} ({pulled.revision})"
    return report


def _normalize_pickle(
    src: Path,
    out: Path,
    ckpt: Checkpoint,
    convert: Callable[..., Path],
    req: NormalizeRequest,
    progress: Callable[[int], None] | None,
    progress_total: Callable[[int], None] | None,
) -> NormalizeReport:
    """Load pickle weights with the weights-only loader into a temporary safetensors file, then normalize that."""
    try:
        made = make_parents(out)  # removed again after a failure
        staging = make_staging(out, "pickle")
    except OSError as exc:
        raise write_error(exc, out) from None
    try:
        convert(ckpt, staging)
        report = normalize_checkpoint(staging, out, req, progress=progress, progress_total=progress_total)
    except BaseException:
        drop_staging(staging)
        remove_made(made)
        raise
    drop_staging(staging)
    report.source = str(src)
    report.findings.append(
        finding(
            "EC003",
            f"pickle weights {list(ckpt.pickle_files)} were loaded with "
            "torch's weights-only loader and written as safetensors",
            severity="info",
        )
    )
    return report


def _build_config(raw: dict[str, Any], sem: Semantics, profile: str) -> tuple[dict[str, Any], dict[str, str]]:
    flat, _ = flatten_source(raw)
    reasons: dict[str, str] = {}
    return PROFILES[profile](flat, sem, reasons), reasons


def _semantics_dict(sem: Semantics) -> dict[str, Any]:
    doc = asdict(sem)
    doc.pop("speculators_stash")
    doc.pop("provenance")
    return doc


def _diff(old: dict[str, Any], new: dict[str, Any], reasons: dict[str, str], prefix: str = "") -> list[ConfigChange]:
    changes: list[ConfigChange] = []
    for key in list(old) + [k for k in new if k not in old]:
        dotted = prefix + key
        a, b = old.get(key), new.get(key)
        if key in old and key in new and isinstance(a, dict) and isinstance(b, dict):
            changes += _diff(a, b, reasons, dotted + ".")
        elif key not in new:
            changes.append(ConfigChange(dotted, "removed", a, None, reasons.get(dotted, "not part of this profile")))
        elif key not in old or a != b:
            why = reasons.get(dotted, reasons.get(prefix.rstrip("."), ""))
            changes.append(ConfigChange(dotted, "added" if key not in old else "changed", a, b, why))
    return changes
