"""The tensor-name tables of eagle_convert/draft/mapping.py: every layout maps every name its producers write, the
tables are injective, the inverse round-trips, and an unknown name is a typed error naming the key and the layout."""

from __future__ import annotations

import re

import pytest

from eagle_convert.draft.layouts import CANONICAL_LAYER_PREFIX
from eagle_convert.draft.mapping import (
    ALIASES,
    LAYOUTS,
    LOCAL_RENAMES,
    OUTPUT_LAYOUTS,
    inverse,
    map_key,
    to_layout,
)
from eagle_convert.errors import InputError, UnmappedTensorError
from fixtures.layouts import LAYOUTS as FIXTURES

OUTSIDE_WRAPPER = ("lm_head.weight", "d2t", "t2d")  # where wrapped exports (NeMo, trainer state) keep them


def _rewrap(name: str, layer_prefix: str) -> str:
    """A canonical (``midlayer.``) fixture name as a checkpoint with decoder-layer prefix ``layer_prefix`` writes it."""
    if name.startswith(CANONICAL_LAYER_PREFIX):
        return layer_prefix + name[len(CANONICAL_LAYER_PREFIX) :]
    outer = next((o for o in ("model.", "eagle_module.", "draft_model.") if layer_prefix.startswith(o)), "")
    return name if name in OUTSIDE_WRAPPER else outer + name


def _names(layer_prefix: str) -> dict[str, list[str]]:
    """fixture name -> the tensor names it has in layout ``layer_prefix``: the fixtures written with that prefix, or
    (for layouts no fixture writes) every canonical fixture rewrapped. MoE drafts have no canonical layout (below)."""
    dense = {n: lay for n, lay in FIXTURES.items() if not lay.expect.moe}
    own = {n: [s.name for s in lay.tensors()] for n, lay in dense.items() if lay.prefix == layer_prefix}
    if own:
        return own
    return {
        n: [_rewrap(s.name, layer_prefix) for s in lay.tensors()]
        for n, lay in dense.items()
        if lay.prefix == CANONICAL_LAYER_PREFIX
    }


def test_every_fixture_layout_has_a_table() -> None:
    assert {lay.prefix for lay in FIXTURES.values()} <= set(LAYOUTS)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_name_a_layout_produces_maps_to_one_canonical_name(layout: str) -> None:
    for fixture, names in _names(layout).items():
        mapped = [map_key(name, layout) for name in names]
        kept = [m for m in mapped if m.action != "drop"]
        assert all(m.source == name for m, name in zip(mapped, names, strict=True))
        assert all(m.target.startswith(CANONICAL_LAYER_PREFIX) == m.source.startswith(layout) for m in kept), fixture
        targets = [m.target for m in kept]
        assert len(set(targets)) == len(targets), (fixture, targets)  # two source tensors never land on one name
        assert all(m.action == "drop" for m in mapped if m.source.endswith("rotary_emb.inv_freq"))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_table_is_injective_and_aliases_only_add_readings(layout: str) -> None:
    table = LAYOUTS[layout]
    assert len(set(table.values())) == len(table), table
    assert CANONICAL_LAYER_PREFIX in table.values() and "" in table.values()
    aliases = ALIASES.get(layout, {})
    assert not set(aliases) & set(table)
    assert set(aliases.values()) <= set(table.values())  # many-to-one onto what the table already produces


def test_inverse_is_offered_exactly_for_layouts_without_aliases() -> None:
    assert set(OUTPUT_LAYOUTS) == set(LAYOUTS) - set(ALIASES)
    assert {"midlayer.", "layers.0."} <= set(OUTPUT_LAYOUTS)  # what normalize's profiles write
    for layout in OUTPUT_LAYOUTS:
        assert inverse(layout) == {v: k for k, v in LAYOUTS[layout].items()}
    for layout in ALIASES:
        with pytest.raises(UnmappedTensorError, match=re.escape(repr(layout))):
            inverse(layout)
        with pytest.raises(UnmappedTensorError):
            to_layout("midlayer.mlp.up_proj.weight", layout)


@pytest.mark.parametrize("layout", OUTPUT_LAYOUTS)
def test_round_trip_through_the_inverse(layout: str) -> None:
    for fixture, names in _names(layout).items():
        for name in names:
            m = map_key(name, layout)
            if m.action == "drop":
                continue
            back = to_layout(m.target, layout)
            if name.removeprefix(layout) in LOCAL_RENAMES:  # a legacy local name comes back under its canonical name
                assert map_key(back, layout).target == m.target and back != name, (fixture, name)
            else:
                assert back == name, (fixture, name, m.target)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_round_trip_into_every_output_layout(layout: str) -> None:
    names = next(iter(_names(layout).values()))
    targets = [m.target for m in (map_key(n, layout) for n in names) if m.action != "drop"]
    for out in OUTPUT_LAYOUTS:
        assert [map_key(to_layout(t, out), out).target for t in targets] == targets


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("local", ["mystery_gate.weight", "self_attn.q_proj.weight.extra"])
def test_an_unknown_name_is_a_typed_error_naming_the_key_and_the_layout(layout: str, local: str) -> None:
    for name in (layout + local, _rewrap(local, layout)):
        with pytest.raises(UnmappedTensorError) as caught:
            map_key(name, layout, "/ckpt")
        assert isinstance(caught.value, InputError)
        assert repr(name) in caught.value.message and repr(layout) in caught.value.message
        assert caught.value.message.startswith("/ckpt: ") and caught.value.hint


def test_an_unknown_layout_is_a_typed_error_listing_the_known_ones() -> None:
    with pytest.raises(UnmappedTensorError, match=re.escape("'transformer.h.0.'")) as caught:
        map_key("transformer.h.0.mlp.c_fc.weight", "transformer.h.0.")
    assert caught.value.hint and all(layout in caught.value.hint for layout in LAYOUTS)


def test_moe_drafts_are_refused_by_name() -> None:
    """normalize refuses MoE drafts (tests/normalize/test_normalize.py): their router and experts have no canonical
    name."""
    moe = [lay for lay in FIXTURES.values() if lay.expect.moe]
    assert moe
    for lay in moe:
        unplaced = []
        for spec in lay.tensors():
            try:
                map_key(spec.name, lay.prefix)
            except UnmappedTensorError as exc:
                assert repr(spec.name) in exc.message and repr(lay.prefix) in exc.message
                unplaced.append(spec.name)
        assert unplaced and all(".mlp." in name for name in unplaced), unplaced


def test_map_key_keeps_its_actions() -> None:
    assert map_key("midlayer.self_attn.q_proj.weight", "midlayer.").action == "keep"
    assert map_key("layers.0.self_attn.q_proj.weight", "layers.0.").target == "midlayer.self_attn.q_proj.weight"
    assert map_key("model.fc.weight", "model.layers.0.").target == "fc.weight"
    assert map_key("lm_head.weight", "model.layers.0.").action == "keep"  # read through the alias ""
    assert map_key("aux_norm_mid.weight", "midlayer.").target == "fc_norm.1.weight"
    assert map_key("midlayer.self_attn.qkv_proj.weight", "midlayer.").action == "split"
    assert map_key("midlayer.self_attn.rotary_emb.inv_freq", "midlayer.").action == "drop"
    assert map_key("eagle_module.midlayer.mlp.up_proj.weight", "eagle_module.layers.0.").action == "rename"
