"""A draft of more than one layer through the tool: read, normalized where an engine runs it as trained, verified up to
the target level (the reference draft runs every layer; tests/reference/test_reference_draft_layers.py checks its
arithmetic).

The draft is the speculators trainer's shape (fixtures/multi_layer.py): ``layers.0.*`` the EAGLE3 layer, ``layers.1.*``
a plain decoder layer over H. vLLM runs layers >= 1 like that; SGLang norms their input with ``hidden_norm``
(ENGINES.md E10), so only the vllm and speculators profiles write one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle_convert.errors import NormalizeRefused
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.read.config import IDS_KEY
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS
from fixtures.multi_layer import with_later_layers

IDS = [1, 2, 3]  # speculators ids are input-to: hs[1, 2, 3] of a 4-layer target


def _speculators_draft(tmp: Path, layers: int = 2) -> Path:
    src = write_layout(tmp / "one-layer", LAYOUTS["speculators-mha"])
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    config["eagle_aux_hidden_state_layer_ids"] = IDS
    (src / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return with_later_layers(src, tmp / "draft", layers)


def _rules(findings: list) -> set[str]:  # type: ignore[type-arg]
    return {f.rule_id for f in findings}


def test_inspect_counts_the_layers_where_vllm_reads_them(tmp_path: Path) -> None:
    """vLLM builds a speculators draft from transformer_layer_config (num_hidden_layers 2 there): no EC211 saying it
    builds one layer; EC006 says the draft is not portable."""
    draft = _speculators_draft(tmp_path)
    report = inspect_checkpoint(draft)
    assert "EC006" in _rules(report.findings)
    assert not [f for f in report.findings if f.rule_id == "EC211"], report.findings
    assert not {"EC007", "EC008"} & _rules(report.findings)


@pytest.mark.parametrize("profile", ["portable", "sglang"])
def test_normalize_refuses_a_multi_layer_draft_for_an_engine_that_runs_it_otherwise(
    tmp_path: Path, profile: str
) -> None:
    draft = _speculators_draft(tmp_path)
    before = {p.name: p.read_bytes() for p in draft.iterdir()}
    with pytest.raises(NormalizeRefused, match="hidden_norm") as refused:
        normalize_checkpoint(draft, tmp_path / "out", aux_convention="input-to", profile=profile)
    assert "--profile vllm or speculators" in (refused.value.hint or "")
    assert not (tmp_path / "out").exists()
    assert {p.name: p.read_bytes() for p in draft.iterdir()} == before


def test_normalize_for_vllm_writes_layers_after_the_first(tmp_path: Path) -> None:
    """vllm profile: layer 0 becomes midlayer.*, layer 1 stays layers.1.* (what vLLM loads for it), bytes unchanged."""
    import torch
    from safetensors import safe_open

    draft = _speculators_draft(tmp_path)
    vllm = tmp_path / "vllm"
    normalize_checkpoint(draft, vllm, aux_convention="input-to", profile="vllm")
    config = json.loads((vllm / "config.json").read_text(encoding="utf-8"))
    assert config["num_hidden_layers"] == 2

    def tensors(path: Path) -> dict[str, bytes]:
        with safe_open(str(next(path.glob("*.safetensors"))), "pt") as f:
            return {n: f.get_tensor(n).view(-1).view(torch.uint8).numpy().tobytes() for n in f.keys()}

    written, source = tensors(vllm), tensors(draft)
    assert {n for n in written if n.startswith("layers.")} == {n for n in source if n.startswith("layers.1.")}
    assert all(written[n] == source[n] for n in written if n.startswith("layers.1."))
    assert written["midlayer.self_attn.q_proj.weight"] == source["layers.0.self_attn.q_proj.weight"]


@pytest.mark.slow
def test_a_multi_layer_draft_verifies_at_the_target_level(tmp_path: Path) -> None:
    """verify --level target on the normalized 2-layer draft and a transformers-built target: a probe over every
    layer, EC006 (not portable) and nothing that says the tensors or layers are wrong."""
    pytest.importorskip("transformers")
    from eagle_convert.verify.run import verify_checkpoint
    from fixtures.families import family_model, write_family_target

    target = write_family_target("llama", tmp_path / "target", family_model("llama"))
    draft = tmp_path / "normalized"
    normalize_checkpoint(_speculators_draft(tmp_path), draft, target=target, aux_convention="input-to", profile="vllm")
    report = verify_checkpoint(draft, target=target, level="target", token_ids=[list(range(3, 40))])
    assert report.probe is not None and report.probe.to_dict()["rows"][0]["hidden_states"] == IDS
    rules = _rules(report.findings)
    assert "EC006" in rules and not {"EC007", "EC008", "EC211", "EC702"} & rules, report.findings


def test_a_vllm_normalized_draft_normalizes_back_to_speculators(tmp_path: Path) -> None:
    """vllm profile, then speculators profile: layers.0.* and layers.1.* again with the source's bytes. The
    speculators format carries no provenance block, so the re-read before commit takes the format's own (input-to)
    ids; it used to read them as ambiguous and stop normalize with an internal error."""
    import torch
    from safetensors import safe_open

    draft = _speculators_draft(tmp_path)
    normalize_checkpoint(draft, tmp_path / "vllm", aux_convention="input-to", profile="vllm")
    back = tmp_path / "back"
    normalize_checkpoint(tmp_path / "vllm", back, aux_convention="input-to", profile="speculators")
    config = json.loads((back / "config.json").read_text(encoding="utf-8"))
    assert config["transformer_layer_config"]["num_hidden_layers"] == 2 and config[IDS_KEY] == IDS

    def tensors(path: Path) -> dict[str, bytes]:
        with safe_open(str(next(path.glob("*.safetensors"))), "pt") as f:
            return {n: f.get_tensor(n).view(-1).view(torch.uint8).numpy().tobytes() for n in f.keys()}

    assert tensors(back) == tensors(draft)
