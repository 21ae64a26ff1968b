"""The two aux-layer id conventions and how each engine reads them (FORMATS.md section 3)."""

from __future__ import annotations

import pytest

from eagle_convert.draft.aux_layers import (
    AuxLayers,
    ConventionInputs,
    convert_ids,
    decide_convention,
    default_hidden_states,
    to_hidden_states,
)


def test_readings() -> None:
    assert to_hidden_states([1, 15, 28], "output-of") == [2, 16, 29]
    assert to_hidden_states([28, 1, 15, 15], "input-to") == [1, 15, 28]
    assert default_hidden_states(32) == [2, 16, 29]
    assert convert_ids([1, 15, 28], "output-of", "input-to") == [2, 16, 29]
    assert convert_ids([2, 16, 29], "input-to", "output-of") == [1, 15, 28]


def test_both_conventions_defaults_select_the_same_states() -> None:
    for n in (12, 32, 61, 94):
        out_of = [1, n // 2 - 1, n - 4]
        in_to = [2, n // 2, n - 3]
        assert to_hidden_states(out_of, "output-of") == to_hidden_states(in_to, "input-to") == default_hidden_states(n)


@pytest.mark.parametrize(
    ("inputs", "convention"),
    [
        (ConventionInputs([1, 15, 28], "specforge", "low"), "output-of"),
        (ConventionInputs([1, 15, 28], "unknown", "low"), "output-of"),
        (ConventionInputs([2, 30, 58], "specforge", "medium", num_layers=61), "ambiguous"),
        (ConventionInputs([4, 20, 40], "specforge", "medium"), "ambiguous"),
        (ConventionInputs([2, 16, 29], "speculators", "high"), "input-to"),
        (ConventionInputs([3, 17, 30], "modelopt", "high"), "output-of"),
        (ConventionInputs([1, 15, 28], "speculators", "high"), "ambiguous"),
        (ConventionInputs(None, "modelopt", "high"), "default"),
        (ConventionInputs([4, 20, 40], "unknown", "low", aux_convention="input-to"), "input-to"),
        (ConventionInputs([2, 30, 58], "canonical", "high", recorded_convention="input-to"), "input-to"),
    ],
)
def test_decide_convention(inputs: ConventionInputs, convention: str) -> None:
    call = decide_convention(inputs)
    assert call.convention == convention
    assert call.evidence  # every call states why


def test_kimi_first_id_two_names_both_default_patterns() -> None:
    call = decide_convention(ConventionInputs([2, 30, 58], "specforge", "medium", num_layers=61))
    assert any("input-to defaults" in e for e in call.evidence)


def test_conflict_is_flagged() -> None:
    assert decide_convention(ConventionInputs([1, 15, 28], "speculators", "high")).conflict


def _aux(ids: list[int] | None, convention: str, n: int = 32) -> AuxLayers:
    known = convention in ("output-of", "input-to") and ids
    states = (
        to_hidden_states(ids, convention)
        if known and ids
        else default_hidden_states(n)
        if convention == "default"
        else None
    )
    return AuxLayers(ids, "top-level", ids, None, convention, "high", [], states, {})


def test_the_trained_states_have_one_home_on_the_aux_layers() -> None:
    """What the weights were trained on is read from AuxLayers by the gate (in fc order), the probe (the reading it
    measures as configured) and the engine level (with the probe's measurement for ambiguous ids)."""
    known = _aux([28, 1, 15], "output-of")
    assert known.trained_order == [29, 2, 16] and known.trained([5, 6, 7]) == [2, 16, 29]
    assert known.probed(32) == ("configured", [2, 16, 29])
    ambiguous = _aux([2, 16, 29], "ambiguous")
    assert ambiguous.trained_order is None and ambiguous.trained() is None
    assert ambiguous.trained([3, 17, 30]) == [3, 17, 30]  # what the probe measured best
    assert ambiguous.probed(32) == ("ids as input-to", [2, 16, 29])
    default = _aux(None, "default", 12)
    assert default.trained() == default_hidden_states(12) and default.probed(12) == ("configured", [2, 6, 9])
    unknown = _aux(None, "ambiguous")
    assert unknown.trained([1, 2, 3]) == [1, 2, 3] and unknown.probed(12) == ("engine defaults", [2, 6, 9])
