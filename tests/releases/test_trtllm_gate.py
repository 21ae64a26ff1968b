"""TensorRT-LLM at the gate: it reads no aux-layer ids from the draft, only the deployment's eagle3_layers_to_capture,
which inspect and verify take as --engine-arg / --engine-config at every level (issue 31). Target: the 12-layer
Llama fixture, whose TensorRT-LLM default is layers {1, 5, 8} = hs[2, 6, 9]."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from eagle_convert.cli.main import main
from eagle_convert.hub.model_card import trtllm_launch
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.releases import resolve_engines
from eagle_convert.verify.run import verify_checkpoint
from fixtures.generate import write_layout, write_targets
from fixtures.layouts import LAYOUTS
from tests.conftest import SCHEMAS

TRTLLM = resolve_engines("trtllm")[0].name  # the newest modelled release, e.g. trtllm@1.2
KEY = "eagle3_layers_to_capture"
INSPECT = Draft202012Validator(json.loads((SCHEMAS / "inspect-report.schema.json").read_text()))
VERIFY = Draft202012Validator(json.loads((SCHEMAS / "verify-report.schema.json").read_text()))


@pytest.fixture(scope="module")
def drafts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``default``: SpecForge ids [1, 5, 8] (output-of: hs[2, 6, 9], TensorRT-LLM's default on 12 layers);
    ``other``: ids [3, 6, 9] (hs[4, 7, 10]), which TensorRT-LLM feeds only with eagle3_layers_to_capture [3, 6, 9]."""
    root = tmp_path_factory.mktemp("trtllm")
    base = LAYOUTS["specforge-mha"]
    write_layout(root / "default", base)
    other = write_layout(root / "other", base)
    config = json.loads((other / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [3, 6, 9]
    (other / "config.json").write_text(json.dumps(config))
    write_targets(root / "targets")
    return root


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _verify(drafts: Path, name: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, Any, str]:
    code, out, err = cli(
        capsys, "verify", str(drafts / name), "--target", str(drafts / "targets" / "target-llama"),
        "--engine", TRTLLM, "--json", "--no-hash", *extra,
    )  # fmt: skip
    return code, json.loads(out) if out.strip() else None, err


def _ids(doc: dict[str, Any], rule: str) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if f["rule_id"] == rule]


def test_default_layers_pass_with_the_setting_unset(drafts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = _verify(drafts, "default", capsys)
    VERIFY.validate(doc)
    assert code == 0 and doc["status"] == "pass", doc["findings"]
    assert doc["capture_settings"] == {TRTLLM: None} and doc["deployment"] == {}


def test_other_layers_fail_with_the_exact_setting(drafts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = _verify(drafts, "other", capsys)
    VERIFY.validate(doc)
    assert code == 1 and doc["status"] == "fail"
    (found,) = _ids(doc, "EC114")
    assert found["engine"] == TRTLLM and found["expected"] == [3, 6, 9] and found["fixable"] is False
    assert f"{KEY}: [3, 6, 9]" in found["message"] and "speculative_config: {" in found["message"]
    assert "hs[2, 6, 9]" in found["message"] and "hs[4, 7, 10]" in found["message"]
    assert doc["capture_settings"] == {TRTLLM: {KEY: [3, 6, 9]}}
    # the setting lives in the deployment, not in a file of the draft: no config.json pointer
    assert (found["file"], found["pointer"], found["subject"]) == (None, None, KEY)


def test_the_human_reports_say_where_the_setting_lives_and_what_it_should_be(
    drafts: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    target = str(drafts / "targets" / "target-llama")
    code, out, _ = cli(capsys, "verify", str(drafts / "other"), "--target", target, "--engine", TRTLLM, "--no-hash")
    assert code == 1 and f"deployment: {KEY}" in out and "config.json /eagle3" not in out
    code, out, _ = cli(capsys, "inspect", str(drafts / "other"), "--target", target, "--engine", TRTLLM)
    (row,) = [line for line in out.splitlines() if line.startswith(TRTLLM)]
    assert "-> hs[2, 6, 9]; set eagle3_layers_to_capture: [3, 6, 9]" in row
    _, out, _ = cli(capsys, "inspect", str(drafts / "default"), "--target", target, "--engine", TRTLLM)
    (row,) = [line for line in out.splitlines() if line.startswith(TRTLLM)]
    assert row.rstrip().endswith("-> hs[2, 6, 9]")  # the default is right: nothing to set


def test_the_advised_setting_passes(drafts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = _verify(drafts, "other", capsys, "--engine-arg", f"{KEY}=[3,6,9]")
    VERIFY.validate(doc)
    assert code == 0 and doc["status"] == "pass", doc["findings"]
    assert doc["deployment"] == {KEY: [3, 6, 9]}


def test_a_wrong_setting_fails_naming_both(drafts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = _verify(drafts, "other", capsys, "--engine-arg", f"{KEY}=[1,5,9]")
    assert code == 1
    (found,) = _ids(doc, "EC114")
    assert (
        f"given {KEY}: [1, 5, 9]" in found["message"] and f"the right setting is {KEY}: [3, 6, 9]" in found["message"]
    )
    assert found["actual"] == [1, 5, 9] and found["expected"] == [3, 6, 9]


def test_the_setting_from_an_engine_config_file(
    drafts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "extra.yaml"
    config.write_text(f"{KEY}: [3, 6, 9]\n")
    code, doc, _ = _verify(drafts, "other", capsys, "--engine-config", str(config))
    assert code == 0 and doc["deployment"] == {KEY: [3, 6, 9]}, doc["findings"]


def test_the_setting_without_a_trtllm_release_below_the_engine_level_is_a_usage_error(
    drafts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(
        capsys, "verify", str(drafts / "other"), "--engine", "vllm", "--engine-arg", f"{KEY}=[3,6,9]", "--no-hash"
    )
    assert code == 2 and "--level engine only" in err and "trtllm" in err
    # any other engine setting stays an engine-level setting, trtllm selected or not
    code, _, err = cli(
        capsys, "verify", str(drafts / "other"), "--engine", TRTLLM, "--engine-arg", "tensor_parallel_size=2"
    )
    assert code == 2 and "--level engine only" in err


@pytest.mark.parametrize("value", ["3", "[3,-1]", "[true]", "[]", "'[3,6,9]'", "[3.0]"])
def test_a_setting_that_is_not_a_list_of_layer_ids_is_a_usage_error(
    drafts: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    code, _, err = cli(capsys, "verify", str(drafts / "other"), "--engine", TRTLLM, "--engine-arg", f"{KEY}={value}")
    assert code == 2 and "list of non-negative layer ids" in err and "Hint:" in err


def test_inspect_reads_the_setting_and_its_json_carries_capture_setting(
    drafts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = str(drafts / "targets" / "target-llama")
    code, out, _ = cli(capsys, "inspect", str(drafts / "other"), "--target", target, "--engine", TRTLLM, "--json")
    assert code == 0
    doc = json.loads(out)
    INSPECT.validate(doc)
    view = doc["aux_layers"]["engines"][TRTLLM]
    assert view["hidden_state_indices"] == [2, 6, 9] and view["ids_from"] == "defaults"
    assert view["capture_setting"] == {KEY: [3, 6, 9]}
    assert [f["rule_id"] for f in doc["findings"] if f["engine"] == TRTLLM] == ["EC114"]
    assert doc["aux_layers"]["engines"]["vllm"]["capture_setting"] is None  # the same fields on every view

    _, out, _ = cli(
        capsys, "inspect", str(drafts / "other"), "--target", target, "--engine", TRTLLM, "--json",
        "--engine-arg", f"{KEY}=[3,6,9]",
    )  # fmt: skip
    doc = json.loads(out)
    INSPECT.validate(doc)
    view = doc["aux_layers"]["engines"][TRTLLM]
    assert (view["ids_from"], view["hidden_state_indices"]) == ("deployment", [4, 7, 10])
    assert not [f for f in doc["findings"] if f["engine"] == TRTLLM] and doc["deployment"] == {KEY: [3, 6, 9]}


def test_inspect_refuses_a_setting_no_selected_release_reads(drafts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "inspect", str(drafts / "other"), "--engine", "vllm", "--engine-arg", f"{KEY}=[3,6,9]")
    assert code == 2 and "trtllm" in err
    code, _, err = cli(capsys, "inspect", str(drafts / "other"), "--engine-arg", "tensor_parallel_size=2")
    assert code == 2 and "not a deployment setting" in err
    with pytest.raises(Exception, match="non-negative"):
        inspect_checkpoint(drafts / "other", engine=TRTLLM, deployment={KEY: "3,6,9"})


def test_the_library_takes_the_setting_as_the_cli_does(drafts: Path) -> None:
    target = drafts / "targets" / "target-llama"
    report = verify_checkpoint(
        drafts / "other", target=target, engine=TRTLLM, compute_hashes=False, deployment={KEY: [3, 6, 9]}
    )
    assert report.status == "pass", report.findings


def test_the_model_card_gives_the_trtllm_launch_lines(drafts: Path) -> None:
    report = inspect_checkpoint(drafts / "other", target=drafts / "targets" / "target-llama", engine=TRTLLM)
    lines = trtllm_launch(report.spec, resolve_engines(TRTLLM), "org/target", "org/draft")
    text = "\n".join(lines)
    assert f"  {KEY}: [3, 6, 9]" in text and "speculative_config:" in text and "decoding_type: Eagle3" in text
    assert "trtllm-serve org/target --extra_llm_api_options extra_llm_api_options.yaml" in text
    plain = inspect_checkpoint(drafts / "default", target=drafts / "targets" / "target-llama", engine=TRTLLM)
    text = "\n".join(trtllm_launch(plain.spec, resolve_engines(TRTLLM), "org/target", "org/draft"))
    assert KEY + ":" not in text.split("```yaml")[1] and "trtllm-serve" in text  # the default is right: no setting
    assert trtllm_launch(plain.spec, resolve_engines("vllm"), "t", "d") == []


def test_a_trained_order_no_setting_feeds_is_ec115_and_normalize_fixes_it(drafts: Path, tmp_path: Path) -> None:
    from eagle_convert.normalize.plan import normalize_checkpoint

    target = drafts / "targets" / "target-llama"
    unsorted = write_layout(tmp_path / "unsorted", LAYOUTS["specforge-mha"])
    config = json.loads((unsorted / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [8, 1, 5]  # fc takes hs[9, 2, 6] in that order
    (unsorted / "config.json").write_text(json.dumps(config))
    report = verify_checkpoint(unsorted, target=target, engine=TRTLLM, compute_hashes=False)
    (found,) = [f for f in report.findings if f.engine == TRTLLM]
    assert found.rule_id == "EC115" and found.expected == [9, 2, 6] and "sorts" in found.message
    normalize_checkpoint(unsorted, tmp_path / "sorted", target=target)
    assert verify_checkpoint(tmp_path / "sorted", target=target, engine=TRTLLM, compute_hashes=False).status == "pass"


def test_vllm_deployment_settings_are_read_at_every_level(drafts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM 0.33's target support depends on the deployment's platform and pipeline_parallel_size: read at every level
    target = str(drafts / "targets" / "target-llama")
    code, out, _ = cli(
        capsys, "verify", str(drafts / "default"), "--target", target, "--engine", "vllm", "--json", "--no-hash",
        "--engine-arg", "pipeline_parallel_size=2", "--engine-arg", "platform=rocm",
    )  # fmt: skip
    doc = json.loads(out)
    VERIFY.validate(doc)
    assert code in (0, 1) and doc["deployment"] == {"pipeline_parallel_size": 2, "platform": "rocm"}
    code, _, err = cli(capsys, "verify", str(drafts / "default"), "--engine", "vllm", "--engine-arg", "platform=[]")
    assert code == 2 and "platform must be" in err
    code, _, err = cli(
        capsys, "verify", str(drafts / "default"), "--engine", "vllm", "--engine-arg", "pipeline_parallel_size=0"
    )
    assert code == 2 and "positive integer" in err


def test_pipeline_parallel_size_reaches_the_engine_level_too() -> None:
    from eagle_convert.gate.deployment import split_settings

    deployment, engine = split_settings(
        {"pipeline_parallel_size": 2, "platform": "cuda", "max_num_seqs": 4}, resolve_engines("vllm")
    )
    assert deployment == {"pipeline_parallel_size": 2, "platform": "cuda"}
    assert engine == {"pipeline_parallel_size": 2, "max_num_seqs": 4}  # platform is the deployment's, not vLLM's


def test_an_mla_draft_on_a_release_without_mla_is_ec116(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """1.2.0rc2 builds Llama attention for every EAGLE3 draft (modeling_speculative.py@b35ac1b:479-484, no MLA class);
    main at 00679c6 builds MLA for a draft with kv_lora_rank (:897-899)."""
    draft = write_layout(tmp_path / "mla", LAYOUTS["specforge-mla"])
    write_targets(tmp_path / "targets")
    target = str(tmp_path / "targets" / "target-kimi")
    for release, rules in (("trtllm@1.2", ["EC116"]), ("trtllm@main-00679c6", [])):
        code, out, _ = cli(capsys, "verify", str(draft), "--target", target, "--engine", release, "--json", "--no-hash")
        doc = json.loads(out)
        VERIFY.validate(doc)
        assert [f["rule_id"] for f in doc["findings"]] == rules and code == (1 if rules else 0), doc["findings"]
    code, out, _ = cli(capsys, "rule", "EC116")
    assert code == 0 and "attention-kind-not-built" in out


def test_a_norm_output_the_release_never_reads_is_ec211(tmp_path: Path) -> None:
    """An EAGLE3.1 draft (norm_output true: trained on the final norm's output as the carried state) on 1.2.0rc2,
    whose Eagle3ForCausalLM has no norm_output branch (modeling_speculative.py@b35ac1b:97-140): the pre-norm state is
    carried, a silent loss the gate names (it named fc_norm only); main at 00679c6 reads it (:712-714)."""
    draft = write_layout(tmp_path / "eagle3.1", LAYOUTS["specforge-mha-eagle3.1"])
    write_targets(tmp_path / "targets")
    target = tmp_path / "targets" / "target-llama"
    for release, subjects in (("trtllm@1.2", ["fc_norm", "norm_output"]), ("trtllm@main-00679c6", [])):
        report = verify_checkpoint(draft, target=target, engine=release, compute_hashes=False)
        found = sorted(f.subject or "" for f in report.findings if f.rule_id == "EC211" and f.engine == release)
        assert found == subjects, report.findings
    (loss,) = [
        f
        for f in verify_checkpoint(draft, target=target, engine="trtllm@1.2", compute_hashes=False).findings
        if f.subject == "norm_output" and f.rule_id == "EC211"
    ]
    assert (loss.expected, loss.actual) == (True, False) and "pre-norm state" in loss.message
