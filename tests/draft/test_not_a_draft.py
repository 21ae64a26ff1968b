"""Tried as a new user would (issue 38, item 7): a model passed where the draft belongs.

A full causal LM (several decoder layers, no fc, no draft keys) is one EC021 finding at inspect and verify, never a
pile of "normalize fixes it" findings, and normalize refuses it (exit 2, ``TARGET is a model, not an EAGLE3 draft``)
instead of writing a bogus draft (before: `verify TARGET --target TARGET` gave EC011/EC012/EC301/EC303 findings
marked fixable, and `normalize TARGET out --profile vllm` exited 0).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.verify.run import verify_checkpoint
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS
from tests.conftest import one_error, run_cli

MODEL_FAMILIES = ("llama", "qwen3_moe", "gemma3", "deepseek_v3")  # dense, MoE, multimodal (nested trunk), MLA


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny models of several families, written by transformers itself (fixtures/families.py)."""
    from fixtures.families import write_family_target

    out = tmp_path_factory.mktemp("models")
    return {name: write_family_target(name, out / name) for name in MODEL_FAMILIES}


# ---- a model, not a draft ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", MODEL_FAMILIES)
def test_a_model_as_the_draft_is_one_ec021_finding(models: dict[str, Path], family: str) -> None:
    model = models[family]
    report = verify_checkpoint(model, target=str(model), compute_hashes=False)
    assert report.status == "fail" and [f.rule_id for f in report.findings] == ["EC021"], report.findings
    (found,) = report.findings
    assert found.message.startswith("a model, not an EAGLE3 draft") and "--target" in found.message, found.message
    ran = [c.rule_id for c in report.checks if c.outcome != "skipped"]
    assert ran == ["EC021"], ran
    assert [f.rule_id for f in inspect_checkpoint(model).findings] == ["EC021"]


def test_verify_target_as_target_prints_one_finding_and_no_normalize_fix(models: dict[str, Path]) -> None:
    """The measured example: `verify TARGET --target TARGET` (before: EC011/EC012/EC301/EC303... marked fixable)."""
    model = str(models["llama"])
    done = run_cli("verify", model, "--target", model, "--no-hash", "--format", "concise")
    assert done.returncode == 1, done.stdout + done.stderr
    findings = [line for line in done.stdout.splitlines() if " EC" in line]
    assert len(findings) == 1 and "EC021 error a model, not an EAGLE3 draft" in findings[0], done.stdout
    assert "normalize` fixes it" not in done.stdout and "[*]" not in done.stdout


@pytest.mark.parametrize("profile", ["vllm", "portable", "speculators"])
def test_normalize_refuses_a_model_and_writes_nothing(models: dict[str, Path], tmp_path: Path, profile: str) -> None:
    """The measured example: `normalize TARGET out --profile vllm` (before: exit 0 and a bogus draft)."""
    model = str(models["llama"])
    before = {p.name: p.read_bytes() for p in Path(model).iterdir()}
    done = run_cli("normalize", model, str(tmp_path / "out"), "--profile", profile)
    one_error(done, f"Error: {model} is a model, not an EAGLE3 draft")
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []
    assert {p.name: p.read_bytes() for p in Path(model).iterdir()} == before


def test_normalize_refuses_a_model_given_as_draft_and_target(models: dict[str, Path], tmp_path: Path) -> None:
    model = str(models["gemma3"])
    done = run_cli("normalize", model, str(tmp_path / "out"), "--target", model)
    one_error(done, f"{model} is a model, not an EAGLE3 draft")


def test_no_draft_layout_is_taken_for_a_model(fx: Path, tmp_path: Path) -> None:
    """Every fixture draft, single file and sharded, and a four-layer draft (fc present), reads as a draft."""
    from fixtures.multi_layer import with_later_layers

    drafts = sorted((fx / "layouts").iterdir()) + sorted((fx / "layouts-sharded").iterdir())
    drafts.append(with_later_layers(fx / "layouts" / "specforge-mha", tmp_path / "four-layers", 4))
    for draft in drafts:
        assert "EC021" not in {f.rule_id for f in inspect_checkpoint(draft).findings}, draft


def test_a_one_layer_draft_that_lost_its_fc_is_still_a_draft(tmp_path: Path) -> None:
    """No fc and one decoder layer: a broken draft (EC301 names the missing fc), not a model."""
    from safetensors.torch import load_file, save_file

    draft = write_layout(tmp_path / "draft", LAYOUTS["canonical-mha"])
    tensors = {k: v for k, v in load_file(draft / "model.safetensors").items() if k != "fc.weight"}
    save_file(tensors, draft / "model.safetensors")
    rules = {f.rule_id for f in verify_checkpoint(draft, compute_hashes=False).findings}
    assert "EC021" not in rules and "EC301" in rules, rules
