"""Aux-layer ids: where a draft's config keeps them, what they mean, and what each engine will feed the draft.

Two conventions (FORMATS.md section 3), written as HF ``hidden_states`` indices ``hs[j]`` (``hs[j]`` = input of
0-based layer j = output of layer j-1):

- ``output-of``: id X is the output of layer X, ``hs[X+1]`` (SpecForge, ModelOpt, TorchSpec, AngelSlim);
- ``input-to``: id X is the input of layer X, ``hs[X]`` (vLLM, speculators).

The engines read the same config differently, so the report gives both what the draft was trained on (when the
convention is known) and what vLLM and SGLang will select.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

CONVENTIONS = ("output-of", "input-to")

# Producers whose ids always follow one convention, so provenance alone decides it.
PRODUCER_CONVENTION = {
    "speculators": "input-to",
    "specforge": "output-of",
    "modelopt": "output-of",
    "angelslim": "output-of",
}
# Producers known to train with the default capture when their config carries no ids.
TRAINS_WITH_DEFAULTS = frozenset({"eagle", "specforge", "angelslim"})

SHIFT: dict[str, Callable[[int], int]] = {"output-of": lambda x: x + 1, "input-to": lambda x: x}


def to_hidden_states(ids: list[int], convention: str) -> list[int]:
    """HF hidden_states indices that ``ids`` select under ``convention``, in capture (ascending) order."""
    return sorted({SHIFT[convention](x) for x in ids})


def default_hidden_states(num_layers: int) -> list[int]:
    """What the engines (and the original EAGLE code) capture when a draft has no ids."""
    return sorted({2, num_layers // 2, num_layers - 3})


def convert_ids(ids: list[int], source: str, target: str) -> list[int]:
    """Rewrite ids from one convention to the other so they select the same hidden states."""
    return [x + 1 if (source, target) == ("output-of", "input-to") else x - 1 if source != target else x for x in ids]


@dataclass(frozen=True)
class EngineRead:
    """What one engine does with the config: where it reads ids, how it maps them, what it selects."""

    engine: str
    ids_from: str  # "top-level", "eagle_config" or "defaults"
    ids: list[int] | None
    rule: str
    hidden_state_indices: list[int] | None  # None when the target's N or family is needed and unknown


@dataclass(frozen=True)
class AuxLayers:
    ids: list[int] | None
    location: str  # "top-level", "eagle_config", "both" or "absent"
    top_level_ids: list[int] | None
    eagle_config_ids: list[int] | None
    convention: str  # "output-of", "input-to", "default" or "ambiguous"
    confidence: str
    evidence: list[str]
    hidden_state_indices: list[int] | None
    readings: dict[str, list[int]]
    engines: dict[str, EngineRead] = field(default_factory=dict)


def sglang_rule(family: str | None) -> str | None:
    """SGLang's reading of eagle_config ids, which depends on the target model class."""
    return {"llama": "+1", "qwen": "+1", "deepseek": "+1 if first id is 1", "gpt-oss": "as-is"}.get(family or "")


def _sglang_indices(ids: list[int], rule: str) -> list[int]:
    shift = rule == "+1" or (rule == "+1 if first id is 1" and ids[0] == 1)
    return sorted({x + 1 if shift else x for x in ids})


def engine_reads(
    top: list[int] | None, nested: list[int] | None, family: str | None, num_layers: int | None
) -> dict[str, EngineRead]:
    defaults = default_hidden_states(num_layers) if num_layers else None
    if top:
        vllm = EngineRead("vllm", "top-level", top, "hs[L]", sorted(set(top)))
    elif nested:
        vllm = EngineRead("vllm", "eagle_config", nested, "hs[L]", sorted(set(nested)))
    else:
        vllm = EngineRead("vllm", "defaults", None, "hs[2], hs[N//2], hs[N-3]", defaults)
    rule = sglang_rule(family)
    if not nested:
        sglang = EngineRead("sglang", "defaults", None, "hs[2], hs[N//2], hs[N-3]", defaults)
    elif rule is None:
        sglang = EngineRead("sglang", "eagle_config", nested, "depends on the target family (unknown)", None)
    else:
        sglang = EngineRead(
            "sglang", "eagle_config", nested, f"hs[L{rule}]" if rule == "+1" else rule, _sglang_indices(nested, rule)
        )
    return {"vllm": vllm, "sglang": sglang}


@dataclass(frozen=True)
class ConventionInputs:
    ids: list[int] | None
    producer: str
    producer_confidence: str
    user_convention: str | None = None
    recorded_convention: str | None = None  # from this tool's provenance block
    num_layers: int | None = None


@dataclass(frozen=True)
class ConventionCall:
    convention: str  # "output-of", "input-to", "default" or "ambiguous"
    confidence: str
    evidence: list[str]
    conflict: bool = False  # the producer's convention and the id pattern point different ways


def decide_convention(inp: ConventionInputs) -> ConventionCall:
    """Which convention the ids follow. Never guesses: when no rule decides, the answer is 'ambiguous'."""
    ids = inp.ids
    if inp.user_convention:
        return ConventionCall(inp.user_convention, "high", [f"set by --aux-convention {inp.user_convention}"])
    if inp.recorded_convention:
        return ConventionCall(
            inp.recorded_convention, "high", [f"recorded by eagle-convert provenance: {inp.recorded_convention}"]
        )
    if not ids:
        return ConventionCall(
            "default", "high", ["no aux-layer ids in the config: the engines capture hs[2], hs[N//2], hs[N-3]"]
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
    evidence.append(
        f"first id is {min(ids)}: both readings are plausible"
        + (
            f" and the producer ({inp.producer}, {inp.producer_confidence} confidence) does not settle it"
            if by_producer
            else ""
        )
    )
    return ConventionCall("ambiguous", "low", evidence)


def ids_for(hidden_states: list[int], convention: str) -> list[int]:
    """The ids that select ``hidden_states`` under ``convention`` (the inverse of :func:`to_hidden_states`)."""
    return [j - 1 if convention == "output-of" else j for j in sorted(set(hidden_states))]


def sglang_ids_for(hidden_states: list[int], family: str) -> tuple[list[int], str] | None:
    """Ids for ``eagle_config`` that make SGLang select ``hidden_states`` for a target of ``family``.

    Returns (ids, the convention they follow), checked against :func:`engine_reads` itself, or None when SGLang's
    rule for that family cannot express the selection (e.g. hs[1] for DeepSeek/Kimi targets).
    """
    wanted = sorted(set(hidden_states))
    for convention in CONVENTIONS:
        ids = ids_for(wanted, convention)
        if min(ids) < 0:
            continue
        if engine_reads(None, ids, family, None)["sglang"].hidden_state_indices == wanted:
            return ids, convention
    return None
