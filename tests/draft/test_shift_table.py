"""One SHIFT table (read/config.py) derives every +-1 between aux-layer ids and hidden_states indices: the draft's
reading, the engine records' capture rules, the ids normalize writes and the probe's readings all follow it (a
table patched to another offset moves every one of them), and each convention function round-trips through it."""

from __future__ import annotations

import pytest

from eagle_convert.draft.aux_layers import CONVENTIONS, AuxLayers, convert_ids, ids_for, to_hidden_states
from eagle_convert.read.config import SHIFT, id_of, state_of
from eagle_convert.releases import eagle_config_ids_for
from eagle_convert.releases.model import Capture, Cite, apply_capture
from eagle_convert.releases.vllm import read_ids_v2

IDS = [1, 6, 9]


def test_the_table_names_both_conventions() -> None:
    assert tuple(SHIFT) == CONVENTIONS == ("output-of", "input-to")
    assert SHIFT == {"output-of": 1, "input-to": 0}  # id X = output of layer X = hs[X+1]; input to layer X = hs[X]


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_every_convention_function_round_trips_through_the_table(convention: str) -> None:
    states = [x + SHIFT[convention] for x in IDS]
    assert [state_of(x, convention) for x in IDS] == states
    assert [id_of(j, convention) for j in states] == IDS
    assert to_hidden_states(IDS, convention) == states
    assert ids_for(to_hidden_states(IDS, convention), convention) == IDS
    for other in CONVENTIONS:
        converted = convert_ids(IDS, convention, other)
        assert to_hidden_states(converted, other) == states
        assert convert_ids(converted, other, convention) == IDS


def test_a_patched_table_moves_every_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing adds or subtracts 1 for a convention on its own: with output-of patched to +3, the draft's reading,
    the engine records' "+1" capture rule, vLLM's target_layer_ids reading and the ids written for an engine move."""
    monkeypatch.setitem(SHIFT, "output-of", 3)
    assert to_hidden_states(IDS, "output-of") == [4, 9, 12]
    assert ids_for([4, 9, 12], "output-of") == IDS
    assert convert_ids(IDS, "output-of", "input-to") == [4, 9, 12]
    cite = Cite("x.py", "1")
    assert apply_capture(Capture("+1", True, cite), IDS, 32) == [4, 9, 12]
    assert apply_capture(Capture("as-is", True, cite), IDS, 32) == IDS
    assert read_ids_v2({"target_layer_ids": IDS}, None)[1] == [4, 9, 12]
    found = eagle_config_ids_for("sglang@0.5.23", [4, 9, 12], "llama", 32)
    assert found == (IDS, "output-of")


def test_the_probes_readings_follow_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's "ids as output-of" reading of ambiguous ids is the table's output-of reading."""
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from eagle_convert.probe.run import readings

    monkeypatch.setitem(SHIFT, "output-of", 3)
    aux = AuxLayers(IDS, "top-level", IDS, None, "ambiguous", "low", [], None, {})
    flags = SimpleNamespace(norm_output=SimpleNamespace(value=False))
    spec = SimpleNamespace(aux=aux, flags=flags, config=SimpleNamespace(raw={}))
    name, out = readings(spec, 32)  # type: ignore[arg-type]
    by_name = {r.name: list(r.hidden_states) for r in out}
    assert name == "ids as input-to" and by_name[name] == IDS
    assert by_name["ids as output-of"] == to_hidden_states(IDS, "output-of") == [4, 9, 12]
