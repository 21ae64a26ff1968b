"""Aux-layer ids: where a draft's config keeps them, what they mean, and what each engine will feed the draft.

Two conventions (FORMATS.md section 3), written as HF ``hidden_states`` indices ``hs[j]`` (``hs[j]`` = input of
0-based layer j = output of layer j-1):

- ``output-of``: id X is the output of layer X, ``hs[X+1]`` (SpecForge, ModelOpt, TorchSpec, AngelSlim);
- ``input-to``: id X is the input of layer X, ``hs[X]`` (speculators; the convention of top-level ids).

This module decides what the draft was trained on; what each engine release will select from the same config is
its record's business (``eagle_convert.releases``), and the report gives both.
"""

from __future__ import annotations

from dataclasses import dataclass

# the one default capture and the one SHIFT table live with the ids key (read/config.py); re-exported here
from eagle_convert.read.config import SHIFT as SHIFT
from eagle_convert.read.config import default_hidden_states as default_hidden_states
from eagle_convert.read.config import id_of, state_of

CONVENTIONS = tuple(SHIFT)  # ("output-of", "input-to")

# Producers whose ids always follow one convention, so provenance alone decides it.
PRODUCER_CONVENTION = {
    "speculators": "input-to",
    "specforge": "output-of",
    "modelopt": "output-of",
    "angelslim": "output-of",
}
# Producers known to train with the default capture when their config carries no ids.
TRAINS_WITH_DEFAULTS = frozenset({"eagle", "specforge", "angelslim"})


def to_hidden_states(ids: list[int], convention: str) -> list[int]:
    """HF hidden_states indices that ``ids`` select under ``convention``, in capture (ascending) order."""
    return sorted({state_of(x, convention) for x in ids})


def convert_ids(ids: list[int], source: str, target: str) -> list[int]:
    """Rewrite ids from one convention to the other so they select the same hidden states."""
    return [id_of(state_of(x, source), target) for x in ids]


@dataclass(frozen=True)
class AuxLayers:
    ids: list[int] | None
    location: str  # "top-level", "eagle_config", "both" or "absent"
    top_level_ids: list[int] | None
    eagle_config_ids: list[int] | None
    convention: str  # "output-of", "input-to", "default" or "ambiguous"
    confidence: str
    evidence: list[str]
    hidden_state_indices: list[int] | None  # the hs[] the weights were trained on, ascending; None when unknown
    states_by_convention: dict[str, list[int]]  # what the ids select under each convention (inspect: "readings")

    # The one home of "which states the draft was trained on": every part reads it from here.

    @property
    def trained_order(self) -> list[int] | None:
        """The hs[] the draft was trained on in its fc's order: its ids' order where they name the trained states (a
        release that sorts what it captures cannot feed another order), else ascending; None when unknown."""
        states = self.hidden_state_indices
        if states is None or not self.ids or self.convention not in SHIFT:
            return states
        ordered = [state_of(i, self.convention) for i in self.ids]
        return ordered if sorted(set(ordered)) == states else states

    def trained(self, measured: list[int] | None = None) -> list[int] | None:
        """The hs[] the weights were trained on: the ids under their convention (or the defaults the producer trains
        with); for ambiguous ids, the states a probe ``measured`` best, when one ran; else None."""
        if self.hidden_state_indices is not None:
            return list(self.hidden_state_indices)
        return list(measured) if measured is not None and self.convention == "ambiguous" else None

    def probed(self, num_layers: int) -> tuple[str, list[int]]:
        """(its name, the hs[]) of the reading the probe measures as configured: the trained states where known,
        the ids read as input-to where they are ambiguous, else the engines' default capture for ``num_layers``."""
        if self.hidden_state_indices is not None:
            return "configured", list(self.hidden_state_indices)
        if self.ids:
            return "ids as input-to", to_hidden_states(self.ids, "input-to")
        return "engine defaults", default_hidden_states(num_layers)


@dataclass(frozen=True)
class ConventionInputs:
    ids: list[int] | None
    producer: str
    producer_confidence: str
    aux_convention: str | None = None
    recorded_convention: str | None = None  # from this tool's provenance block
    num_layers: int | None = None
    location: str = "absent"  # "top-level", "eagle_config", "both" or "absent"
    paired: bool = False  # top-level and eagle_config ids name the same states, input-to and output-of
    family: str | None = None  # the target family, when known
    # hs[] another key of the config names unambiguously, with that key's description: the AngelSlim trainer's
    # aux_hidden_states_layer_ids (hs[id+1]) or DFlash's target_layer_ids (output of layer id)
    declared_states: tuple[str, list[int]] | None = None
    # how the ids contradict this tool's provenance record (:func:`record_conflict`), when they do
    record_conflict: str | None = None


@dataclass(frozen=True)
class ConventionCall:
    convention: str  # "output-of", "input-to", "default" or "ambiguous"
    confidence: str
    evidence: list[str]
    conflict: bool = False  # the producer's convention and the id pattern point different ways
    contradicts_record: bool = False  # the ids contradict this tool's provenance record: nothing says which is true


def decide_convention(inp: ConventionInputs) -> ConventionCall:
    """Which convention the ids follow. Never guesses: when no rule decides, the answer is 'ambiguous'."""
    ids = inp.ids
    if inp.aux_convention:
        overridden = [f"the record it overrides: {inp.record_conflict}"] if inp.record_conflict else []
        return ConventionCall(
            inp.aux_convention, "high", [f"set by --aux-convention {inp.aux_convention}", *overridden]
        )
    if inp.record_conflict:  # the record and the ids cannot both be true, and neither says which one was edited
        return ConventionCall("ambiguous", "low", [inp.record_conflict], contradicts_record=True)
    if inp.recorded_convention:
        return ConventionCall(
            inp.recorded_convention, "high", [f"recorded by eagle-convert provenance: {inp.recorded_convention}"]
        )
    if not ids:
        return ConventionCall(
            "default", "high", ["no aux-layer ids in the config: the default capture is hs[2], hs[N//2], hs[N-3]"]
        )

    if inp.declared_states is not None:
        return _by_declared_states(ids, *inp.declared_states)
    if inp.paired:
        return ConventionCall(
            "input-to",
            "high",
            [
                "the top-level ids are the eagle_config ids + 1: the same states written input-to (top level) "
                "and output-of (eagle_config), a portable pair"
            ],
        )
    evidence: list[str] = []
    by_producer = PRODUCER_CONVENTION.get(inp.producer)
    trusted = by_producer is not None and inp.producer_confidence == "high"
    n = inp.num_layers
    if n:
        if to_hidden_states(ids, "output-of") == default_hidden_states(n):
            evidence.append(f"ids equal the output-of defaults [1, N//2-1, N-4] for N={n}")
        if to_hidden_states(ids, "input-to") == default_hidden_states(n):
            evidence.append(f"ids equal the input-to defaults [2, N//2, N-3] for N={n}")

    if n and to_hidden_states(ids, "input-to") == default_hidden_states(n) and inp.location == "top-level":
        evidence.append("top-level ids are where input-to writers put them")
        return ConventionCall("input-to", "high", evidence)
    if n and to_hidden_states(ids, "output-of") == default_hidden_states(n) and by_producer != "input-to":
        return ConventionCall("output-of", "high", evidence)
    if min(ids) == 1:
        evidence.append(
            "first id is 1: read as input-to it would select hs[1], the output of layer 0, "
            "which no trainer's default uses"
        )
        if by_producer == "input-to" and trusted:
            evidence.append(f"but {inp.producer} writes input-to ids")
            return ConventionCall("ambiguous", "low", evidence, conflict=True)
        return ConventionCall("output-of", "high" if by_producer in (None, "output-of") else "medium", evidence)
    if by_producer is not None and trusted:
        evidence.append(f"producer {inp.producer} (detected with high confidence) writes {by_producer} ids")
        return ConventionCall(by_producer, "medium", evidence)
    input_to_defaults = bool(n) and to_hidden_states(ids, "input-to") == default_hidden_states(n or 0)
    # These producers generate their training states through a serving engine whose reading of eagle_config ids
    # is settled for Llama/Qwen targets only (the per-family capture rules are in releases/): only those settle it.
    layout_fits = inp.location == "eagle_config" and by_producer == "output-of" and not input_to_defaults
    if layout_fits and inp.producer_confidence in ("high", "medium") and inp.family in ("llama", "qwen"):
        evidence.append(
            f"ids only in eagle_config, the layout {inp.producer} writes (with output-of ids; producer detected "
            f"with {inp.producer_confidence} confidence)"
        )
        return ConventionCall("output-of", "medium", evidence)
    evidence.append(
        f"first id is {min(ids)}: both readings are plausible"
        + (
            f" and the producer ({inp.producer}, {inp.producer_confidence} confidence) does not settle it"
            if by_producer
            else ""
        )
    )
    return ConventionCall("ambiguous", "low", evidence)


def _by_declared_states(ids: list[int], key: str, states: list[int]) -> ConventionCall:
    """The convention under which ``ids`` select the states another key of the config names (``key`` says which)."""
    matching = [c for c in CONVENTIONS if to_hidden_states(ids, c) == sorted(set(states))]
    if len(matching) == 1:
        return ConventionCall(matching[0], "high", [f"{key} names hs{sorted(set(states))}: the ids read {matching[0]}"])
    readings = ", ".join(f"{c} selects hs{to_hidden_states(ids, c)}" for c in CONVENTIONS)
    return ConventionCall(
        "ambiguous",
        "low",
        [f"{key} names hs{sorted(set(states))}, but the ids {ids} select neither ({readings})"],
        conflict=True,
    )


def record_conflict(
    top: list[int] | None, nested: list[int] | None, conventions: dict[str, str], recorded: list[int] | None
) -> str | None:
    """How the ids contradict this tool's provenance record, or None when they agree with it.

    normalize records the hidden states it wrote (``recorded``) and the convention of each id location
    (``conventions``, by "top-level" and "eagle_config"); read under those, every location must select the recorded
    states. Anything else is an edit made after normalize (of the ids or of the record) that the recorded
    conventions do not explain, and no rule can tell which side is true."""
    readings: list[tuple[str, list[int]]] = []
    if recorded:
        readings.append(("the provenance record's hidden_state_indices name", sorted(set(recorded))))
    for location, ids in (("top-level", top), ("eagle_config", nested)):
        convention = conventions.get(location)
        if ids and convention in CONVENTIONS:
            readings.append(
                (f"the {location} ids {ids}, read {convention} as recorded, select", to_hidden_states(ids, convention))
            )
    if len({tuple(states) for _, states in readings}) <= 1:
        return None
    return (
        "; ".join(f"{what} hs{states}" for what, states in readings)
        + ": the ids or the record were edited after eagle-convert normalize wrote them"
    )


def ids_for(hidden_states: list[int], convention: str) -> list[int]:
    """The ids that select ``hidden_states`` under ``convention`` (the inverse of :func:`to_hidden_states`)."""
    return [id_of(j, convention) for j in sorted(set(hidden_states))]
