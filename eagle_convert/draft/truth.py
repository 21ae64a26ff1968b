"""The draft's truth: what its weights were trained for, from weights, config and provenance (never an engine rule).

The gate (``gate/findings.py``) compares it with each selected release's view (``releases/``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from eagle_convert.draft.detect import DraftSpec
from eagle_convert.draft.layouts import FC_NORM_RE, LEGACY_FC_NORM_NAMES, split_name


@dataclass(frozen=True)
class DraftTruth:
    """What the draft was trained for, from weights + config + provenance (never from an engine rule)."""

    hidden_states: list[int] | None  # trained hs[] indices; None when the convention is unknown
    convention: str
    num_aux: int  # K from the fc width when the weights say so
    num_aux_source: str
    fc_norm: bool  # per-chunk norms exist in the weights (or, without weights, the config asks for them)
    norm_before_fc: bool  # input_norm exists
    norm_output: bool
    norm_before_residual: bool
    qk_norm_tensors: tuple[str, ...]
    attention: str
    has_weights: bool
    num_layers: int = 1  # draft layers present in the weights
    wrappers: tuple[str, ...] = ()  # outer prefixes the tensor names carry ("model.", ...)
    legacy_norm_names: tuple[str, ...] = ()  # aux_norm_low/mid/high tensors (EAGLE3.1's first naming)
    legacy_norm_flag: bool = False  # the config sets the legacy use_aux_norm flag
    rope: str | None = None  # the rope scaling the config trains with (rope_scaling's type; None: none or default)
    fc_in_width: int | None = None  # fc's in-width: K x target_hidden_size (the draft's hidden_size when unset)


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
        rope=_rope_kind(spec),
        fc_in_width=spec.num_aux_hidden_states * width
        if (width := spec.target_hidden_size or spec.dims.hidden_size)
        else None,
    )


def _rope_kind(spec: DraftSpec) -> str | None:
    scaling = spec.config.rope_scaling or {}
    kind = scaling.get("rope_type") or scaling.get("type")
    return None if kind in (None, "default") else str(kind)
