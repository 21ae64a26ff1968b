"""verify: the broken corpus is caught rule by rule, clean drafts pass, and the CI contract holds."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from jsonschema import Draft4Validator, Draft202012Validator

from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.releases import DEFAULT_ENGINES, resolve_engines
from eagle_convert.rules.registry import RULES
from eagle_convert.verify.run import verify_checkpoint
from fixtures.broken import CORPUS, write_broken
from fixtures.layouts import LAYOUTS
from tests import cli_process
from tests.conftest import ROOT, SCHEMAS, run_cli, run_cli_without_torch

REPORT = Draft202012Validator(json.loads((SCHEMAS / "verify-report.schema.json").read_text()))
SARIF = Draft4Validator(json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text()))
# Rules no broken checkpoint can show: EC004 (no weights) is inspect's note, and EC005 is an info note.
# The forward and target levels are covered by tests/probe/test_probe.py and tests/reference/test_trained_pair.py
# instead.
NOT_IN_CORPUS = {"EC004", "EC005", "EC701", "EC702", "EC711", "EC712", "EC713", "EC714", "EC715", "EC716"}
NOT_IN_CORPUS |= {"EC721", "EC722", "EC723"}  # need an engine: tests/engine/test_engine_level.py
NOT_IN_CORPUS |= {"EC724", "EC725"}  # read off the module an engine built: tests/engine/test_sglang_load.py
NOT_IN_CORPUS |= {"EC726", "EC727"}  # need a running server: tests/engine/test_engine_url.py
NOT_IN_CORPUS |= {"EC728"}  # an engine that refuses the draft: tests/engine/test_engine_run_types.py


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for case in CORPUS:
        write_broken(root / case.name, case)
    return root


def test_corpus_is_large_and_covers_every_rule() -> None:
    assert len(CORPUS) >= 40
    assert len({c.name for c in CORPUS}) == len(CORPUS)
    covered = {c.rule for c in CORPUS}
    assert set(RULES) - covered == NOT_IN_CORPUS
    modes = {c.failure_mode for c in CORPUS if c.failure_mode}
    assert modes >= {str(i) for i in range(1, 16)} | {"17"}  # FORMATS.md section 8 (16 needs a forward pass)


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_broken_checkpoint_is_caught_by_its_rule(corpus: Path, case: object) -> None:
    from fixtures.broken import Broken

    assert isinstance(case, Broken)
    target = corpus / "targets" / case.target if case.target else None
    report = verify_checkpoint(corpus / case.name, target=target, level=case.level, engine=case.engine)
    REPORT.validate(report.to_dict())
    caught = [f for f in report.findings if f.rule_id == case.rule]
    assert caught, [f.rule_id for f in report.findings]
    if RULES[case.rule].severity == "error":
        assert report.status == "fail"


CLEAN = sorted(
    n
    for n, lay in LAYOUTS.items()
    if lay.expect.producer != "eagle1" and not lay.expect.moe and lay.expect.convention != "ambiguous"
)


@pytest.mark.parametrize("name", CLEAN)
def test_every_layout_after_normalize_passes_with_zero_errors(fx: Path, tmp_path: Path, name: str) -> None:
    target = fx / "targets" / ("target-kimi" if LAYOUTS[name].attention == "mla" else "target-llama")
    normalize_checkpoint(fx / "layouts-sharded" / name, tmp_path / "out", target=target)
    report = verify_checkpoint(tmp_path / "out", target=target, level="tensors")
    assert report.summary()["errors"] == 0, [(f.rule_id, f.message) for f in report.findings]
    assert report.status == "pass"
    ran = {c.rule_id for c in report.checks if c.outcome != "skipped"}
    engines = {r.engine for r in resolve_engines(DEFAULT_ENGINES)}  # the default selection: trtllm is not in it
    # all rules at this level that concern a selected engine
    assert ran == {
        r for r, rule in RULES.items() if rule.level in ("static", "tensors") and set(rule.engines) & engines
    }


def test_hash_manifest_matches_the_files(fx: Path) -> None:
    path = fx / "layouts-sharded" / "specforge-mha"
    report = verify_checkpoint(path)
    names = {f.name: f.sha256 for f in report.files}
    assert set(names) == {"config.json", "model.safetensors.index.json", *(p.name for p in path.glob("*.safetensors"))}
    for name, digest in names.items():
        assert digest == hashlib.sha256((path / name).read_bytes()).hexdigest()
    assert all(f.sha256 is None for f in verify_checkpoint(path, compute_hashes=False).files)


def test_cli_exit_codes_and_report_contract(fx: Path, corpus: Path, tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    normalize_checkpoint(fx / "layouts" / "specforge-mha", clean, target_family="llama")
    ok = run_cli("verify", str(clean), "--json")
    assert ok.returncode == 0, ok.stderr
    REPORT.validate(json.loads(ok.stdout))
    bad = run_cli("verify", str(corpus / "no-lm-head"), "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["status"] == "fail"
    assert run_cli("verify", str(corpus / "no-lm-head"), "--exit-zero").returncode == 0
    assert run_cli("verify", str(corpus / "no-lm-head"), "--ignore", "EC401").returncode == 0
    assert run_cli("verify", str(corpus / "no-lm-head"), "--select", "EC3").returncode == 0
    warn = run_cli("verify", str(corpus / "stray-weight-file"))
    assert warn.returncode == 0
    assert run_cli("verify", str(corpus / "stray-weight-file"), "--fail-level", "warning").returncode == 1
    ambiguous = run_cli("verify", str(corpus / "ambiguous-ids"), "--select", "EC101")
    assert ambiguous.returncode == 0
    assert run_cli("verify", str(corpus / "ambiguous-ids"), "--select", "EC101", "--strict").returncode == 1
    broken = run_cli("verify", str(fx / "malformed" / "hole"), "--json")
    assert broken.returncode == 2 and broken.stderr.startswith("Error: ")
    doc = json.loads(broken.stdout)
    REPORT.validate(doc)
    assert doc["status"] == "error" and doc["error"]["exit_code"] == 2
    (tmp_path / "config-only").mkdir()  # a file stands for its directory: a directory without weights
    shutil.copy(fx / "layouts" / "specforge-mha" / "config.json", tmp_path / "config-only" / "config.json")
    config_only = run_cli("verify", str(tmp_path / "config-only" / "config.json"), "--json")
    assert config_only.returncode == 1, config_only.stderr  # gated on its config rules: SpecForge's ids, EC104
    doc = json.loads(config_only.stdout)
    assert [f["rule_id"] for f in doc["findings"]] == ["EC104"]
    assert {c["rule_id"]: c.get("reason") for c in doc["checks"]}["EC303"] == "needs the weights (a config alone)"
    nothing = run_cli("verify", str(tmp_path / "config-only" / "config.json"), "--level", "tensors")
    assert nothing.returncode == 3 and "--level tensors has nothing to read beyond the config" in nothing.stderr
    assert run_cli("verify", str(clean), "--select", "EC999").returncode == 2


def test_sarif_and_junit_outputs(corpus: Path, tmp_path: Path) -> None:
    sarif = run_cli(
        "verify", str(corpus / "specforge-ids-read-by-vllm"), "--format", "sarif", "--engine", "vllm@0.33-v1"
    )
    assert sarif.returncode == 1
    log = json.loads(sarif.stdout)
    SARIF.validate(log)
    assert [r["ruleId"] for r in log["runs"][0]["results"]] == ["EC104"]
    out = tmp_path / "report.xml"
    junit = run_cli("verify", str(corpus / "no-lm-head"), "--format", "junit", "--output", str(out))
    assert junit.returncode == 1 and junit.stdout == ""
    suite = ET.parse(out).getroot()
    assert int(suite.get("failures", "0")) >= 1


def test_github_actions_annotations_and_step_summary(corpus: Path, tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    result = run_cli(
        "verify", str(corpus / "no-lm-head"), env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    )
    assert result.returncode == 1
    assert any(line.startswith("::error ") and "EC401" in line for line in result.stdout.splitlines())
    assert "EC401" in summary.read_text()


def test_pyproject_settings_apply(corpus: Path, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.eagle-convert]\nignore = ["EC401"]\nengine = "sglang"\n')
    result = cli_process.run(
        [sys.executable, "-m", "eagle_convert", "verify", str(corpus / "no-lm-head"), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    doc = json.loads(result.stdout)
    assert result.returncode == 0 and doc["engine"] == "sglang"
    assert {c["rule_id"]: c["outcome"] for c in doc["checks"]}["EC401"] == "skipped"


def test_static_verify_runs_without_torch(corpus: Path) -> None:
    result = run_cli_without_torch("verify", str(corpus / "no-lm-head"), "--json")
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["summary"]["errors"] >= 1


def test_rules_command_lists_the_registry() -> None:
    listed = run_cli("rules", "--json")
    assert listed.returncode == 0
    rows = json.loads(listed.stdout)
    assert [r["id"] for r in rows] == list(RULES)
    assert {"id", "name", "severity", "level", "summary"} <= set(rows[0])
    human = run_cli("rules")
    assert human.returncode == 0 and "EC104" in human.stdout and "aux-engine-misreads" in human.stdout


def test_a_float8_tensor_is_checked_at_the_tensors_level(tmp_path: Path) -> None:
    """A draft holding a float8 tensor (no quantization_config): the tensor statistics read it as float32 (torch has no
    isfinite for float8: an internal error before), and the finding is the dtype's EC305, not a crash."""
    case = next(c for c in CORPUS if c.name == "fp8-without-quant-config")
    report = verify_checkpoint(write_broken(tmp_path / "d", case), level="tensors", compute_hashes=False)
    assert report.status == "fail" and {f.rule_id for f in report.findings} == {"EC305"}
