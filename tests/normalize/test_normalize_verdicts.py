"""normalize ends with what verify will say, per release; its output records its engines, and verify without
--engine checks a normalized draft against them and says so (issue 39, item 4)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from eagle_convert.normalize import normalize_checkpoint
from eagle_convert.releases import RELEASES
from eagle_convert.verify.run import verify_checkpoint
from tests import cli_process
from tests.conftest import ROOT, run_cli
from tests.read.test_config_shapes import draft, target_dir

SOURCE = "specforge-mha-eagle3.1"  # EAGLE3.1 flags, nested and top-level ids: every profile writes it differently


def deployed_of(engine: str) -> list[str]:
    return [r.name for r in RELEASES.values() if r.engine == engine and r.deployed]


@pytest.mark.parametrize("profile", ["sglang", "vllm"])
def test_a_profiles_output_is_verified_against_its_own_engines(fx: Path, tmp_path: Path, profile: str) -> None:
    out = tmp_path / "out"
    done = run_cli(
        "normalize", str(fx / "layouts" / SOURCE), str(out), "--profile", profile, "--target-family", "qwen", "--json"
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["config"]["eagle_convert"]["engines"] == [profile]  # the profile's output records its engines
    assert json.loads((out / "config.json").read_text())["eagle_convert"]["engines"] == [profile]
    releases = deployed_of(profile)
    assert [v["release"] for v in doc["verify"]["releases"]] == releases
    assert doc["verify"]["status"] == "pass" and doc["verify"]["command"] == f"eagle-convert verify {out}"

    checked = run_cli("verify", str(out), "--json")
    assert checked.returncode == 0, checked.stdout
    report = json.loads(checked.stdout)
    assert report["engine_source"] == "draft" and report["engine"] == ",".join(releases)
    human = run_cli("verify", str(out), "--no-hash")
    assert human.returncode == 0
    assert "the engines this draft was normalized for" in human.stdout

    # the same draft against every deployed release: --engine wins over the record
    everywhere = json.loads(run_cli("verify", str(out), "--engine", "deployed", "--json").stdout)
    assert everywhere["engine_source"] == "given" and everywhere["engine"] == "deployed"
    if profile == "sglang":  # vLLM reads top-level ids, which the sglang profile does not write
        assert everywhere["status"] == "fail" and "EC104" in {f["rule_id"] for f in everywhere["findings"]}


def test_what_normalize_cannot_fix_is_in_its_verdict(tmp_path: Path) -> None:
    """A K=4 draft without ids: no engine's default capture feeds 4 states, and normalize has no ids to write. Its
    report said 'No findings'; now every release's verdict says FAIL with the rule."""
    src, target = draft(tmp_path, num_aux_hidden_states=4), target_dir(tmp_path)
    report = normalize_checkpoint(src, tmp_path / "out", target=target)
    assert report.verify is not None and report.verify.status == "fail"
    assert all(v.status == "fail" and v.errors for v in report.verify.releases)
    again = verify_checkpoint(tmp_path / "out", target=target, compute_hashes=False)
    assert again.status == "fail"
    assert {f.rule_id for f in again.findings if f.severity == "error"} == set(report.verify.releases[0].errors)
    human = run_cli("normalize", str(src), str(tmp_path / "again"), "--target", str(target))
    assert human.returncode == 0
    assert "0 of 5 release(s) pass" in " ".join(human.stdout.split())


def test_a_dry_run_has_no_verdict(fx: Path, tmp_path: Path) -> None:
    report = normalize_checkpoint(fx / "layouts" / SOURCE, tmp_path / "out", dry_run=True, target_family="qwen")
    assert report.verify is None and report.to_dict()["verify"] is None


@pytest.mark.parametrize("record", ["vllm", ["nope"], [1], {"vllm": 1}, None])
def test_a_record_that_names_no_engine_is_no_record(fx: Path, tmp_path: Path, record: object) -> None:
    """The config is untrusted input: anything but a list of modelled engine names leaves the default."""
    normalize_checkpoint(fx / "layouts" / SOURCE, tmp_path / "out", profile="vllm", target_family="qwen")
    path = tmp_path / "out" / "config.json"
    config = json.loads(path.read_text())
    config["eagle_convert"]["engines"] = record
    path.write_text(json.dumps(config))
    report = verify_checkpoint(tmp_path / "out", compute_hashes=False)
    assert report.engine_source == "default" and report.engine == "deployed"


def test_an_engine_given_or_set_wins_over_the_record(fx: Path, tmp_path: Path) -> None:
    normalize_checkpoint(fx / "layouts" / SOURCE, tmp_path / "out", profile="sglang", target_family="qwen")
    given = verify_checkpoint(tmp_path / "out", engine="vllm", compute_hashes=False)
    assert given.engine_source == "given" and given.engine == "vllm"
    # the project's settings ([tool.eagle-convert] engine, read from the working directory) are a choice too
    (tmp_path / "pyproject.toml").write_text('[tool.eagle-convert]\nengine = "vllm@0.28"\n')
    done = cli_process.run(
        [sys.executable, "-m", "eagle_convert", "verify", "out", "--json", "--no-hash"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    report = json.loads(done.stdout)
    assert report["engine_source"] == "given" and report["engine"] == "vllm@0.28"


def test_a_format_without_a_record_is_judged_as_verify_judges_it(fx: Path, tmp_path: Path) -> None:
    """The speculators format has no place for the record: `verify OUT` checks the deployed releases, and normalize's
    verdict is over the same ones (it was over none, an empty pass); SGLang reads no speculators config."""
    report = normalize_checkpoint(
        fx / "layouts" / "specforge-mha", tmp_path / "out", profile="speculators", target_family="llama"
    )
    assert report.verify is not None
    deployed = [r.name for r in RELEASES.values() if r.deployed and r.engine in ("vllm", "sglang")]
    assert sorted(v.release for v in report.verify.releases) == sorted(deployed)
    verified = verify_checkpoint(tmp_path / "out", compute_hashes=False)
    assert verified.engine_source == "default" and report.verify.status == verified.status == "fail"
    assert {v.release for v in report.verify.releases if v.status == "pass"} == set(deployed_of("vllm"))
    done = run_cli("normalize", str(fx / "layouts" / "specforge-mha"), str(tmp_path / "again"), "-q",
                   "--profile", "speculators", "--target-family", "llama")  # fmt: skip
    assert (
        done.returncode == 0
        and f"verify: FAIL ({len(deployed_of('vllm'))} of {len(deployed)} release(s) pass)" in done.stdout
    )
