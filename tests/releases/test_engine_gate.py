"""The gate as truth vs view, on drafts a new user would bring (issue cases). Target: the 12-layer Llama fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle_convert.errors import NormalizeRefused
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.verify.run import verify_checkpoint
from fixtures.broken import (
    CANONICAL,
    CANONICAL_31,
    LAYOUTS,
    Broken,
    _add,
    _delete,
    _layer,
    _unprovenanced,
    write_broken,
)
from fixtures.layouts import HEAD_DIM
from fixtures.tensors import Spec

IDS = "eagle_aux_hidden_state_layer_ids"


def _write(tmp_path: Path, case: Broken) -> tuple[Path, Path]:
    draft = write_broken(tmp_path / case.name, case)
    return draft, tmp_path / "targets" / "target-llama"


def test_portable_pair_is_high_confidence_and_passes_every_release(tmp_path: Path) -> None:
    # top level [3, 7, 10] (vLLM reads as-is: hs[3, 7, 10]); eagle_config [2, 6, 9] (SGLang Llama +1: hs[3, 7, 10])
    case = Broken("pair", "", CANONICAL, config=_unprovenanced(**{IDS: [3, 7, 10]}, eagle_config={IDS: [2, 6, 9]}))
    draft, target = _write(tmp_path, case)
    doc = inspect_checkpoint(draft, target=target).to_dict()
    aux = doc["aux_layers"]
    assert (aux["convention"], aux["confidence"], aux["hidden_state_indices"]) == ("input-to", "high", [3, 7, 10])
    for engine in ("sglang@0.5.23", "sglang@0.5.16", "vllm@0.33", "vllm@0.33-v1", "vllm@0.28"):
        assert aux["engines"][engine]["hidden_state_indices"] == [3, 7, 10], engine
    report = verify_checkpoint(draft, target=target, engine="all", compute_hashes=False)
    assert not {"EC101", "EC103", "EC104"} & {f.rule_id for f in report.findings}, report.findings


def test_top_level_ids_equal_to_input_to_defaults_are_not_ambiguous(tmp_path: Path) -> None:
    case = Broken("top-defaults", "", CANONICAL, config=_unprovenanced(**{IDS: [2, 6, 9]}, eagle_config={}))
    draft, target = _write(tmp_path, case)
    aux = inspect_checkpoint(draft, target=target).to_dict()["aux_layers"]
    assert (aux["convention"], aux["confidence"]) == ("input-to", "high")
    # SGLang ignores the top level and captures its defaults, which are these same states: nothing to report
    report = verify_checkpoint(draft, target=target, engine="all", compute_hashes=False)
    assert not {"EC101", "EC104", "EC109"} & {f.rule_id for f in report.findings}


def test_specforge_layout_with_non_default_ids_is_output_of(tmp_path: Path) -> None:
    base = LAYOUTS["specforge-mha"]
    case = Broken("sf-3-6-9", "", base, config=lambda cfg: cfg.update(eagle_config={IDS: [3, 6, 9]}))
    draft, target = _write(tmp_path, case)
    aux = inspect_checkpoint(draft, target=target).to_dict()["aux_layers"]
    assert aux["convention"] == "output-of" and aux["hidden_state_indices"] == [4, 7, 10]
    # V2 ignores eagle_config and captures [2, 6, 9]; V1 reads [3, 6, 9] as-is; SGLang +1 gives [4, 7, 10]
    v2 = verify_checkpoint(draft, target=target, engine="vllm@0.33", compute_hashes=False)
    v1 = verify_checkpoint(draft, target=target, engine="vllm@0.33-v1", compute_hashes=False)
    sg = verify_checkpoint(draft, target=target, engine="sglang", compute_hashes=False)
    assert [f.actual for f in v2.findings if f.rule_id == "EC104"] == [[2, 6, 9]]
    assert [f.actual for f in v1.findings if f.rule_id == "EC104"] == [[3, 6, 9]]
    assert not [f for f in sg.findings if f.rule_id == "EC104"]


def test_fc_norm_weights_without_the_key_fail_both_engines(tmp_path: Path) -> None:
    draft, target = _write(tmp_path, Broken("fcn", "", CANONICAL_31, config=_delete("fc_norm")))
    report = verify_checkpoint(draft, target=target, engine="both", compute_hashes=False)
    misreads = [f for f in report.findings if f.rule_id == "EC211" and "fc_norm" in f.message]
    assert len(misreads) == 2 and report.status == "fail"  # vllm@0.33 refuses them, sglang@0.5.23 drops them
    assert any("refused" in f.message for f in misreads) and any("dropped" in f.message for f in misreads)


def test_trained_second_layer_the_config_never_builds_is_an_error(tmp_path: Path) -> None:
    draft, target = _write(tmp_path, Broken("two", "", CANONICAL, tensors=_layer(1)))
    report = verify_checkpoint(draft, target=target, engine="both", compute_hashes=False)
    unbuilt = [f for f in report.findings if f.rule_id == "EC211" and f.pointer and "num_hidden_layers" in f.pointer]
    assert unbuilt and all(f.severity == "error" for f in unbuilt) and report.status == "fail"


def test_normalized_torchspec_reinspects_as_canonical_and_keeps_provenance(fx: Path, tmp_path: Path) -> None:
    src = fx / "layouts" / "torchspec-mha"
    once, twice = tmp_path / "once", tmp_path / "twice"
    normalize_checkpoint(src, once, target_family="llama")
    doc = inspect_checkpoint(once).to_dict()
    assert doc["format"]["producer"] == "canonical"
    normalize_checkpoint(once, twice, target_family="llama")
    first = json.loads((once / "config.json").read_text())["eagle_convert"]
    second = json.loads((twice / "config.json").read_text())["eagle_convert"]
    for key in ("source_producer", "source_layout", "source_convention", "source_ids"):
        assert second[key] == first[key], key
    assert second["source_producer"] == "torchspec"


def test_qk_norm_weights_route_to_the_qwen3_class(tmp_path: Path) -> None:
    """vLLM's llama_eagle3 has no q/k norm and refuses the tensors; only qwen3_eagle3 loads them (registry.py:705).
    SGLang's draft classes have none and drop them. normalize writes Eagle3Qwen3ForCausalLM for vLLM and refuses a
    portable output it cannot make right."""
    extra = [Spec(f"midlayer.self_attn.{n}.weight", "BF16", (HEAD_DIM,)) for n in ("q_norm", "k_norm")]
    draft, target = _write(tmp_path, Broken("qk", "", CANONICAL, tensors=_add(*extra)))
    before = verify_checkpoint(draft, target=target, engine="vllm", compute_hashes=False)
    refused = [f for f in before.findings if f.rule_id == "EC302" and "q/k norm" in f.message]
    assert refused and refused[0].severity == "error" and before.status == "fail"
    with pytest.raises(NormalizeRefused, match="q/k norm"):
        normalize_checkpoint(draft, tmp_path / "portable", target=target)
    normalize_checkpoint(draft, tmp_path / "vllm", target=target, profile="vllm")
    written = json.loads((tmp_path / "vllm" / "config.json").read_text())
    assert written["architectures"] == ["Eagle3Qwen3ForCausalLM"]
    after = verify_checkpoint(tmp_path / "vllm", target=target, engine="vllm", compute_hashes=False)
    assert not [f for f in after.findings if f.rule_id in ("EC302", "EC012")], after.findings


def test_engine_sglang_alone_never_reports_a_cross_engine_disagreement(tmp_path: Path) -> None:
    ids = {IDS: [3, 6, 9], "eagle_config": {IDS: [3, 6, 9]}}  # ambiguous ids, the same list in both places
    draft, target = _write(tmp_path, Broken("differ", "", CANONICAL, config=_unprovenanced(**ids)))
    both = verify_checkpoint(draft, target=target, engine="both", compute_hashes=False)
    alone = verify_checkpoint(draft, target=target, engine="sglang", compute_hashes=False)
    assert "EC103" in {f.rule_id for f in both.findings}
    assert "EC103" not in {f.rule_id for f in alone.findings}


def test_speculators_verifier_names_the_targets_hub_id_and_architectures(fx: Path, tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    cfg = json.loads((fx / "targets" / "target-llama" / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**cfg, "_name_or_path": "meta-llama/Llama-3.1-8B-Instruct"}))
    normalize_checkpoint(fx / "layouts" / "specforge-mha", tmp_path / "spec", target=target, profile="speculators")
    verifier = json.loads((tmp_path / "spec" / "config.json").read_text())["speculators_config"]["verifier"]
    assert verifier == {"name_or_path": "meta-llama/Llama-3.1-8B-Instruct", "architectures": cfg["architectures"]}
    # a target read from a local directory with no Hub id: never its local path
    normalize_checkpoint(
        fx / "layouts" / "specforge-mha",
        tmp_path / "spec2",
        target=fx / "targets" / "target-llama",
        profile="speculators",
    )
    verifier = json.loads((tmp_path / "spec2" / "config.json").read_text())["speculators_config"]["verifier"]
    assert verifier["name_or_path"] is None and verifier["architectures"] == cfg["architectures"]


def test_cli_engine_release_selection_changes_the_verdict(fx: Path) -> None:
    from tests.conftest import run_cli

    draft, target = fx / "layouts" / "specforge-mha", fx / "targets" / "target-llama"
    v2 = run_cli("verify", str(draft), "--target", str(target), "--engine", "vllm@0.33", "--json", "--no-hash")
    v1 = run_cli("verify", str(draft), "--target", str(target), "--engine", "vllm@0.33-v1", "--json", "--no-hash")
    assert v2.returncode == 0, v2.stdout
    assert v1.returncode == 1 and '"EC104"' in v1.stdout and "vllm@0.33-v1" in v1.stdout
    listing = run_cli("engines", "--json")
    assert listing.returncode == 0
    names = [r["release"] for r in json.loads(listing.stdout)]
    assert {"sglang@0.5.23", "sglang@0.5.16", "vllm@0.33", "vllm@0.33-v1", "vllm@0.28"} <= set(names)
    bad = run_cli("verify", str(draft), "--engine", "tgi")
    assert bad.returncode == 2 and bad.stderr.startswith("Error: ") and "Traceback" not in bad.stderr


def test_normalize_names_the_release_it_cannot_satisfy(fx: Path, tmp_path: Path) -> None:
    # SGLang 0.5.16's Llama-style draft has no input_norm (0.5.16 llama_eagle3.py:143-173): a norm_before_fc draft
    # cannot run as trained there; every other modelled release reads the written config as trained.
    report = normalize_checkpoint(
        fx / "layouts" / "speculators-mha-norm-before-fc", tmp_path / "out", target=fx / "targets" / "target-llama"
    )
    unmet = [f for f in report.findings if f.engine is not None]
    assert [f.engine for f in unmet] == ["sglang@0.5.16"], unmet
    assert "norm_before_fc" in unmet[0].message and unmet[0].severity == "warning"
