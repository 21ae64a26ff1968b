"""The nulls of a draft's config joined with what each selected release reads them as (EC508), and the typed fields
a null of which typed config classes refuse (EC502): inspect, verify and normalize report them alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eagle_convert.gate.located import cfg_finding
from eagle_convert.read.config import IDS_KEY
from eagle_convert.read.config_types import DRAFT_FLAGS
from eagle_convert.releases import EngineView
from eagle_convert.rules.finding import Finding

# Config fields whose null value strict config classes reject (FORMATS.md section 8, item 15).
TYPED_FIELDS = (
    "use_cache",
    "tie_word_embeddings",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_hidden_layers",
    "rms_norm_eps",
    "vocab_size",
    "max_position_embeddings",
    "hidden_act",
)


def null_typed_fields(cfg: dict[str, Any]) -> list[str]:
    """The typed config fields present with a null value (a template config, a botched export)."""
    return [key for key in TYPED_FIELDS if key in cfg and cfg[key] is None]


def _flag(name: str) -> Callable[[EngineView], str]:
    return lambda v: f"reads {name} as {str(getattr(v, name)).lower()}"


def _ids_read(v: EngineView) -> str:
    states = f"hs{v.hidden_state_indices}" if v.hidden_state_indices is not None else "states that depend on the target"
    read = "its default ids" if v.ids is None else f"{v.ids_from} ids {v.ids}"
    return f"reads {read} and captures {states}"


# What each release does with a null flag or null ids, asked of its view (read as false, as absent: releases/).
_NULL_READINGS: dict[str, Callable[[EngineView], str]] = {
    IDS_KEY: _ids_read,
    f"eagle_config.{IDS_KEY}": _ids_read,
    "fc_norm": _flag("fc_norm"),
    "use_aux_norm": _flag("fc_norm"),
    "norm_output": _flag("norm_output"),
    "norm_before_fc": _flag("norm_before_fc"),
    "eagle_config.norm_before_fc": _flag("norm_before_fc"),
    "norm_before_residual": _flag("norm_before_residual"),
    "eagle_config.use_aux_hidden_state": _flag("use_aux_hidden_state"),
    "bias": lambda v: f"builds no {v.bias_is or 'fc'} bias",
    "num_aux_hidden_states": lambda v: f"builds fc for K={v.num_aux_hidden_states} ({v.num_aux_from})",
}


def _false(_view: EngineView) -> str:
    return "reads it as false"


def _null(cfg: dict[str, Any], key: str) -> bool:
    parent, _, leaf = key.rpartition(".")
    holder = cfg.get(parent) if parent else cfg
    return isinstance(holder, dict) and leaf in holder and holder[leaf] is None


def null_findings(cfg: dict[str, Any], views: list[EngineView]) -> list[Finding]:
    """EC508: each null flag or null ids of ``cfg`` with what each of ``views`` reads it as (inspect, verify and
    normalize report them; EC502 has the nulls typed config classes refuse)."""
    out = []
    for key in dict.fromkeys([*_NULL_READINGS, *DRAFT_FLAGS]):
        if key in TYPED_FIELDS or not _null(cfg, key):
            continue
        reading = _NULL_READINGS.get(key, _false)
        said = "; ".join(f"{v.release} {reading(v)}" for v in views) or "the releases read it as absent"
        out.append(cfg_finding("EC508", f"{key} is null: {said}", key, actual=None))
    return out
