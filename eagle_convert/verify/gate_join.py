"""The draft's truth (from detection) set against the selected engine releases' views (from ``engines/``).

Detection says what the draft was trained for; ``engines`` says what each release will build from the config. This
module only joins the two: it knows no engine rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from eagle_convert.draft.detect import DraftSpec
from eagle_convert.draft.layouts import FC_NORM_RE, LEGACY_FC_NORM_NAMES, split_name
from eagle_convert.engines import ENGINES, EngineView, Release, engine_view, newest, resolve_engines
from eagle_convert.read.config import FAMILY_MODEL_TYPE
from eagle_convert.rules.finding import Finding
from eagle_convert.verify.gate import DraftTruth, disagreement, naming_findings, release_findings


def draft_truth(spec: DraftSpec, tensor_names: Iterable[str]) -> DraftTruth:
    names = [split_name(n) for n in tensor_names]
    locals_ = {n.local for n in names}
    has_weights = bool(names)
    fc_norm_weights = any(
        n.layer is None and (FC_NORM_RE.fullmatch(n.local) or n.local in LEGACY_FC_NORM_NAMES) for n in names
    )
    qk = tuple(
        sorted(n.name for n in names if n.local.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight")))
    )
    return DraftTruth(
        hidden_states=spec.aux.hidden_state_indices,
        convention=spec.aux.convention,
        num_aux=spec.num_aux_hidden_states,
        num_aux_source=spec.num_aux_source,
        fc_norm=fc_norm_weights if has_weights else spec.flags.fc_norm.value,
        norm_before_fc="input_norm.weight" in locals_ if has_weights else spec.flags.norm_before_fc.value,
        norm_output=spec.flags.norm_output.value,
        norm_before_residual=spec.flags.norm_before_residual.value,
        qk_norm_tensors=qk,
        attention=spec.attention,
        has_weights=has_weights,
        num_layers=len({n.layer for n in names if n.layer is not None}) or 1,
        wrappers=tuple(sorted({n.outer for n in names if n.outer})),
        legacy_norm_names=tuple(sorted(n.name for n in names if n.layer is None and n.local in LEGACY_FC_NORM_NAMES)),
        legacy_norm_flag=spec.config.use_aux_norm is not None,
    )


def target_model_type(spec: DraftSpec) -> str | None:
    return spec.target.model_type or FAMILY_MODEL_TYPE.get(spec.target.family or "")


def views(spec: DraftSpec, releases: Iterable[Release]) -> list[EngineView]:
    mt, n = target_model_type(spec), spec.target.num_hidden_layers
    return [engine_view(r, spec.config.raw, target_model_type=mt, target_num_layers=n) for r in releases]


def gate_findings(spec: DraftSpec, tensor_names: Iterable[str], chosen: list[EngineView]) -> list[Finding]:
    """One finding per difference between the truth and a selected release's view."""
    truth = draft_truth(spec, tensor_names)
    out = naming_findings(truth, chosen)
    out += [f for view in chosen for f in release_findings(truth, view)]
    if truth.hidden_states is None:
        clash = disagreement(chosen)
        if clash is not None:
            out.append(clash)
    return out


def engines_json(spec: DraftSpec, releases: Iterable[Release] | None = None) -> dict[str, Any]:
    """``aux_layers.engines``: one entry per engine name (its newest release), then one per release."""
    chosen = list(releases) if releases is not None else resolve_engines("all")
    out: dict[str, Any] = {}
    for view in views(spec, [newest(e) for e in ENGINES]):
        out[view.engine] = _entry(view)
    for view in views(spec, chosen):
        out[view.release] = _entry(view)
    return out


def _entry(view: EngineView) -> dict[str, Any]:
    doc = asdict(view)
    doc.pop("citations")
    doc["citations"] = dict(view.citations)
    return doc
