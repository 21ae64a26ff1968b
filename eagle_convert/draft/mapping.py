"""Tensor-name mappings as data: one ``_FROM_<LAYOUT>`` table per source layout (STYLE.md rule 1).

Each table maps a source prefix to the canonical prefix (the longest matching prefix wins). What is left after the
prefix, the local name, must be a name the canonical layout knows; legacy local names are renamed by one shared
table. A name no table can place is an error that names the key and the layout: a converter that drops what it does
not understand is how random weights reach production. Output layouts other than canonical are the inverse of a
source table, derived here; the tables are injective (tests/draft/test_mapping.py), and the many-to-one part of reading
(wrapped exports' other prefixes) is an explicit alias list that no inverse uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle_convert.draft.layouts import (
    CANONICAL_LAYER_PREFIX,
    FC_NORM_RE,
    LATER_LAYER_PREFIX,
    LAYER_NAMES,
    LEGACY_FC_NORM_NAMES,
    PREFUSED_NAMES,
    QUANT_SUFFIXES,
    TOP_LEVEL_NAMES,
    split_name,
)
from eagle_convert.errors import UnmappedTensorError

# Source prefix -> canonical prefix, one table per source layout (the longest matching prefix wins). Every table is
# injective: its inverse, derived below, is the name that layout gives each canonical tensor.
_FROM_MIDLAYER = {"midlayer.": "midlayer.", "": ""}  # EAGLE, SpecForge, AngelSlim, TorchSpec, ModelOpt < 0.43
_FROM_MIDLAYER_0 = {"midlayer.0.": "midlayer.", "": ""}  # old ModelOpt multi-layer naming, one layer
_FROM_LAYERS_0 = {"layers.0.": "midlayer.", "": ""}  # speculators, ModelOpt >= 0.43, TorchSpec --vllm
_FROM_NEMO = {"model.layers.0.": "midlayer.", "model.": ""}
_FROM_NEMO_MIDLAYER = {"model.midlayer.": "midlayer.", "model.": ""}
_FROM_MODELOPT_STATE = {"eagle_module.layers.0.": "midlayer.", "eagle_module.": ""}
_FROM_MODELOPT_STATE_MIDLAYER = {"eagle_module.midlayer.": "midlayer.", "eagle_module.": ""}
_FROM_SPECFORGE_STATE = {"draft_model.midlayer.": "midlayer.", "draft_model.": ""}
_FROM_SPECFORGE_STATE_LAYERS = {"draft_model.layers.0.": "midlayer.", "draft_model.": ""}

# Source layout, named by its decoder-layer prefix as `inspect` reports it -> its table.
LAYOUTS: dict[str, dict[str, str]] = {
    "midlayer.": _FROM_MIDLAYER,
    "midlayer.0.": _FROM_MIDLAYER_0,
    "layers.0.": _FROM_LAYERS_0,
    "model.layers.0.": _FROM_NEMO,
    "model.midlayer.": _FROM_NEMO_MIDLAYER,
    "eagle_module.layers.0.": _FROM_MODELOPT_STATE,
    "eagle_module.midlayer.": _FROM_MODELOPT_STATE_MIDLAYER,
    "draft_model.midlayer.": _FROM_SPECFORGE_STATE,
    "draft_model.layers.0.": _FROM_SPECFORGE_STATE_LAYERS,
}
# The many-to-one part, kept apart from the tables: more source prefixes a layout is read with, mapped onto a
# canonical prefix its table already produces. Read, never written, so a layout with aliases has no inverse.
_WRAPPED_TOP_LEVEL = {"": ""}  # wrapped exports keep lm_head, d2t and t2d outside the wrapper
ALIASES: dict[str, dict[str, str]] = {
    "model.layers.0.": {"model.midlayer.": "midlayer.", **_WRAPPED_TOP_LEVEL},
    "model.midlayer.": {"model.layers.0.": "midlayer.", **_WRAPPED_TOP_LEVEL},
    "eagle_module.layers.0.": {"eagle_module.midlayer.": "midlayer.", **_WRAPPED_TOP_LEVEL},
    "eagle_module.midlayer.": {"eagle_module.layers.0.": "midlayer.", **_WRAPPED_TOP_LEVEL},
    "draft_model.midlayer.": {"draft_model.layers.0.": "midlayer.", **_WRAPPED_TOP_LEVEL},
    "draft_model.layers.0.": {"draft_model.midlayer.": "midlayer.", **_WRAPPED_TOP_LEVEL},
}
# Legacy local names -> canonical local names (SpecForge's first EAGLE3.1 naming).
LOCAL_RENAMES = {name: f"fc_norm.{k}.weight" for k, name in enumerate(LEGACY_FC_NORM_NAMES)}
# Buffers that carry no weights; the engines skip them, so they are dropped (and reported).
DROPPED = {"self_attn.rotary_emb.inv_freq": "rotary frequencies are recomputed from the rope settings"}


@dataclass(frozen=True)
class Mapped:
    source: str
    target: str  # canonical name ("" when dropped)
    action: str  # "keep", "rename", "split" or "drop"
    why: str


def _invert(table: dict[str, str]) -> dict[str, str]:
    """canonical prefix -> source prefix; raises if ``table`` is not injective."""
    out: dict[str, str] = {}
    for src, dst in table.items():
        if dst in out:
            raise ValueError(f"mapping is not injective: {out[dst]!r} and {src!r} both map to {dst!r}")
        out[dst] = src
    return out


# Output layouts: those read without aliases, each written by the inverse of its table.
_INVERSES = {layout: _invert(table) for layout, table in LAYOUTS.items() if layout not in ALIASES}
OUTPUT_LAYOUTS = tuple(_INVERSES)


def inverse(layout: str) -> dict[str, str]:
    """canonical prefix -> ``layout``'s prefix: how an output layout names canonical tensors."""
    if layout not in _INVERSES:
        raise UnmappedTensorError(
            f"layout {layout!r} is read, never written: it has no inverse mapping",
            hint=f"write one of the layouts {', '.join(OUTPUT_LAYOUTS)}",
        )
    return dict(_INVERSES[layout])


def _canonical_local(local: str, in_layer: bool) -> bool:
    base = local
    for suffix in QUANT_SUFFIXES:
        if local.endswith(suffix):
            base = local[: -len(suffix)] + ".weight"
    if in_layer:
        return base in LAYER_NAMES
    return base in TOP_LEVEL_NAMES or bool(FC_NORM_RE.fullmatch(base))


def _later_layer(name: str, layout: str, source: str | None) -> Mapped | None:
    """A tensor of draft layer i >= 1 (``layers.i.`` or ModelOpt's ``midlayer.i.``, under the layout's outer prefix)
    goes to ``layers.i.`` in the canonical layout: the name both engines load for layer i (SGLang renames only
    ``midlayer`` to ``layers.0``, vLLM maps only ``midlayer.``; ENGINES.md B1, B4). None for any other tensor."""
    n = split_name(name)
    if n.layer is None or n.layer == 0:
        return None
    if n.outer != split_name(layout + "norm.weight").outer:
        raise UnmappedTensorError(
            f"tensor {name!r} of draft layer {n.layer} is not under layer 0's outer prefix (layout {layout!r})",
            path=source,
        )
    target = f"{LATER_LAYER_PREFIX}{n.layer}.{n.local}"
    if n.local in DROPPED:
        return Mapped(name, "", "drop", DROPPED[n.local])
    if not _canonical_local(n.local, True) or n.local in PREFUSED_NAMES:
        raise UnmappedTensorError(
            f"tensor {name!r} has no place in draft layer {n.layer} of the canonical layout (source layout {layout!r})",
            path=source,
            hint="layers after the first are read split (q/k/v, gate/up), by their canonical local names",
        )
    return Mapped(name, target, "keep" if target == name else "rename", "" if target == name else "later layer")


def map_key(name: str, layout: str, source: str | None = None) -> Mapped:
    """Where tensor ``name`` of a ``layout`` checkpoint (at ``source``, for errors) goes in the canonical layout."""
    if layout not in LAYOUTS:
        raise UnmappedTensorError(
            f"no mapping table for the layout with layer prefix {layout!r}",
            path=source,
            hint=f"known layouts: {', '.join(LAYOUTS)}",
        )
    later = _later_layer(name, layout, source)
    if later is not None:
        return later
    table = {**ALIASES.get(layout, {}), **LAYOUTS[layout]}
    prefix = max((p for p in table if name.startswith(p)), key=len, default=None)
    if prefix is None:
        raise UnmappedTensorError(f"tensor {name!r} has no known prefix in source layout {layout!r}", path=source)
    target_prefix, local = table[prefix], name[len(prefix) :]
    in_layer = target_prefix == CANONICAL_LAYER_PREFIX
    if in_layer and local in DROPPED:
        return Mapped(name, "", "drop", DROPPED[local])
    if not in_layer and local in LOCAL_RENAMES:
        return Mapped(name, LOCAL_RENAMES[local], "rename", "legacy EAGLE3.1 name")
    if not _canonical_local(local, in_layer):
        raise UnmappedTensorError(
            f"tensor {name!r} has no place in the canonical layout (source layout {layout!r})", path=source
        )
    target = target_prefix + local
    if in_layer and local in PREFUSED_NAMES:
        return Mapped(name, target, "split", "engine-internal fusion; stored split")
    return Mapped(
        name,
        target,
        "keep" if target == name else "rename",
        "" if target == name else f"{prefix or '(none)'} -> {target_prefix or '(none)'}",
    )


def to_layout(canonical_name: str, layout: str) -> str:
    """The name of a canonical tensor in an output ``layout`` (the inverse of that layout's table); layer i >= 1
    keeps ``layers.i.`` (``midlayer.i.`` in a ``midlayer.0.`` layout) under the layout's outer prefix."""
    back = inverse(layout)
    n = split_name(canonical_name)
    if n.layer is not None and n.layer > 0:
        zero = split_name(back[CANONICAL_LAYER_PREFIX] + n.local)
        later = f"midlayer.{n.layer}." if zero.layer_prefix == "midlayer.0." else f"{LATER_LAYER_PREFIX}{n.layer}."
        return zero.outer + later + n.local
    if canonical_name.startswith(CANONICAL_LAYER_PREFIX):
        return back[CANONICAL_LAYER_PREFIX] + canonical_name[len(CANONICAL_LAYER_PREFIX) :]
    return back[""] + canonical_name
