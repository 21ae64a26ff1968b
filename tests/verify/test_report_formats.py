"""The machine formats of `verify`: SARIF validated against the official schema, JUnit counts, GitHub escaping."""

from __future__ import annotations

import hashlib
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from eagle_convert.read.digest import FileDigest
from eagle_convert.render.formats import github_annotations, markdown_summary, to_json, to_junit, to_sarif
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import RULES
from eagle_convert.verify.report import CheckOutcome, ReportError, VerifyReport

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "eagle_convert" / "schemas"
SARIF_SCHEMA = json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
SHA = hashlib.sha256(b"config").hexdigest()


def _rule(severity: str, *, skip: tuple[str, ...] = ()) -> str:
    """A registered rule id of that default severity (read from the live registry, never hard-coded)."""
    return next(r.id for r in RULES.values() if r.severity == severity and r.id not in skip)


ERR, ERR2 = _rule("error"), _rule("error", skip=(_rule("error"),))
WARN, INFO = _rule("warning"), _rule("info")


def _check(rule_id: str, outcome: str, reason: str = "") -> CheckOutcome:
    return CheckOutcome(rule_id, RULES[rule_id].name, outcome, reason)


@pytest.fixture
def report(tmp_path: Path) -> VerifyReport:
    return VerifyReport(
        path=str(tmp_path / "draft"),
        level="tensors",
        engine="both",
        fail_level="error",
        status="fail",
        findings=[
            Finding(ERR, "error", "fc width 12288 != 3 * 4096 | mismatch", "config.json", "/hidden_size", 1, 2),
            Finding(ERR, "warning", "a second, lesser finding of the same rule", "model.safetensors"),
            Finding(WARN, "warning", "100% odd: tensor\nnot recognised", "model.safetensors", "layers.0.x"),
            Finding(INFO, "info", "ids unsorted", "config.json", "/eagle_config/eagle_aux_hidden_state_layer_ids"),
            Finding(ERR2, "error", "no file at all"),
        ],
        checks=[
            _check(ERR, "fail"),
            _check(WARN, "fail"),  # warnings only: the testcase passes
            _check(INFO, "fail"),
            _check(ERR2, "fail"),
            _check(_rule("warning", skip=(WARN,)), "pass"),
            _check(_rule("info", skip=(INFO,)), "skipped", "needs --level tensors"),
        ],
        files=[FileDigest("config.json", 812, SHA), FileDigest("model.safetensors", 4096, None)],
    )


@pytest.fixture
def error_report(tmp_path: Path) -> VerifyReport:
    return VerifyReport(
        path=str(tmp_path / "missing"),
        level="static",
        engine="vllm",
        fail_level="warning",
        status="error",
        error=ReportError("No config.json in the directory.", "Pass the draft directory.", 2),
    )


def _validate_sarif(log: dict[str, Any]) -> None:
    validator = jsonschema.Draft4Validator(SARIF_SCHEMA, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(log), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_json_is_the_report_contract(report: VerifyReport) -> None:
    text = to_json(report)
    assert text.endswith("}\n")
    assert json.loads(text) == json.loads(json.dumps(report.to_dict()))


def test_sarif_validates_against_the_official_schema(report: VerifyReport, error_report: VerifyReport) -> None:
    for r in (report, error_report):
        log = to_sarif(r)
        _validate_sarif(log)
        _validate_sarif(json.loads(json.dumps(log)))  # and survives serialization unchanged
    assert to_sarif(error_report)["runs"][0]["invocations"] == [
        {
            "executionSuccessful": False,
            "toolExecutionNotifications": [
                {
                    "level": "error",
                    "message": {"text": "No config.json in the directory. Hint: Pass the draft directory."},
                }
            ],
            "exitCode": 2,
        }
    ]
    assert to_sarif(report)["runs"][0]["invocations"][0]["executionSuccessful"] is True


def test_sarif_rules_come_from_the_registry(report: VerifyReport) -> None:
    run = to_sarif(report)["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "eagle-convert" and driver["version"] == report.to_dict()["version"]
    descriptors = driver["rules"]
    assert [d["id"] for d in descriptors] == list(RULES)
    levels = {"error": "error", "warning": "warning", "info": "note"}
    for d in descriptors:
        rule = RULES[d["id"]]
        assert d["name"] == rule.name and d["shortDescription"]["text"] == rule.summary
        assert d["defaultConfiguration"]["level"] == levels[rule.severity]
        assert d["helpUri"].endswith(f"docs/rules.md#{rule.id.lower()}")
    results = run["results"]
    assert [r["ruleId"] for r in results] == [f.rule_id for f in report.findings]
    for result, finding in zip(results, report.findings, strict=True):
        assert result["ruleId"] in RULES
        assert descriptors[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] == levels[finding.severity]
        assert result["message"]["text"] == finding.message


def test_sarif_locations_are_relative_to_the_checkpoint(report: VerifyReport) -> None:
    run = to_sarif(report)["runs"][0]
    base = run["originalUriBaseIds"]["CHECKPOINT"]["uri"]
    assert base.startswith("file://") and base.endswith("/draft/")
    first, _, third, _, no_file = run["results"]
    location = first["locations"][0]
    assert location["physicalLocation"]["artifactLocation"] == {
        "uri": "config.json",
        "uriBaseId": "CHECKPOINT",
        "index": 0,
    }
    assert location["logicalLocations"] == [{"name": "/hidden_size", "kind": "member"}]
    assert first["properties"] == {"expected": 1, "actual": 2}
    assert third["locations"][0]["logicalLocations"] == [{"name": "layers.0.x", "kind": "member"}]
    assert "locations" not in no_file
    assert run["artifacts"] == [
        {"location": {"uri": "config.json", "uriBaseId": "CHECKPOINT"}, "length": 812, "hashes": {"sha-256": SHA}},
        {"location": {"uri": "model.safetensors", "uriBaseId": "CHECKPOINT"}, "length": 4096},
    ]


def test_sarif_uris_are_escaped_relative_references(tmp_path: Path) -> None:
    finding = Finding(WARN, "warning", "m", "sub\\a:b, c.safetensors")
    r = VerifyReport(str(tmp_path), "static", "both", "error", "pass", findings=[finding])
    log = to_sarif(r)
    _validate_sarif(log)
    uri = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "sub/a%3Ab%2C%20c.safetensors"


def test_partial_fingerprints_are_deterministic_and_distinct(report: VerifyReport) -> None:
    def prints(r: VerifyReport) -> list[str]:
        return [res["partialFingerprints"]["eagleConvert/v1"] for res in to_sarif(r)["runs"][0]["results"]]

    first = prints(report)
    assert first == prints(report)
    assert len(set(first)) == len(first)
    assert all(len(p) == 64 and int(p, 16) >= 0 for p in first)
    f = report.findings[0]
    expected = hashlib.sha256("\x00".join([f.rule_id, f.file or "", f.pointer or "", f.message]).encode()).hexdigest()
    assert first[0] == expected
    # Severity, expected/actual and the checkpoint location do not move a finding's identity.
    moved = VerifyReport(
        "/elsewhere",
        "tensors",
        "both",
        "error",
        "fail",
        findings=[Finding(ERR, "warning", f.message, f.file, f.pointer)],
    )
    assert prints(moved) == [expected]


def _junit(text: str) -> ET.Element:
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    return ET.fromstring(text.encode("utf-8"))


def test_junit_fails_only_rules_with_error_findings(report: VerifyReport) -> None:
    root = _junit(to_junit(report))
    assert root.tag == "testsuites" and root.get("name") == "eagle-convert verify"
    assert {k: root.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "6",
        "failures": "2",
        "errors": "0",
        "skipped": "1",
    }
    (suite,) = root
    assert suite.get("name") == report.path and suite.get("tests") == "6" and suite.get("failures") == "2"
    cases = {c.get("classname"): c for c in suite.iter("testcase")}
    assert cases[f"eagle-convert.{ERR}"].get("name") == f"{ERR} {RULES[ERR].name}"
    failure = cases[f"eagle-convert.{ERR}"].find("failure")
    assert failure is not None and failure.get("type") == "error"
    assert (failure.text or "").splitlines() == [
        "error /hidden_size: fc width 12288 != 3 * 4096 | mismatch",
        "warning model.safetensors: a second, lesser finding of the same rule",
    ]
    no_file = cases[f"eagle-convert.{ERR2}"].find("failure")
    assert no_file is not None and no_file.text == "error: no file at all"
    warned = cases[f"eagle-convert.{WARN}"]
    assert warned.find("failure") is None
    assert (warned.findtext("system-out") or "").startswith("warning layers.0.x: 100% odd")
    assert cases[f"eagle-convert.{INFO}"].find("failure") is None
    skipped = [c.find("skipped") for c in suite.iter("testcase") if c.find("skipped") is not None]
    assert [s.get("message") for s in skipped if s is not None] == ["needs --level tensors"]


def test_junit_input_error(error_report: VerifyReport) -> None:
    root = _junit(to_junit(error_report))
    assert (root.get("tests"), root.get("errors"), root.get("failures")) == ("1", "1", "0")
    case = root.find("testsuite/testcase")
    assert case is not None and case.get("name") == "input"
    error = case.find("error")
    assert error is not None and error.get("message") == "No config.json in the directory."


def test_junit_survives_control_characters(tmp_path: Path) -> None:
    finding = Finding(ERR, "error", "bad \x00 byte & <tag>", "config.json")
    r = VerifyReport(str(tmp_path), "static", "both", "error", "fail", [finding], [_check(ERR, "fail")])
    failure = _junit(to_junit(r)).find("testsuite/testcase/failure")
    assert failure is not None and failure.get("message") == "bad \ufffd byte & <tag>"


def test_github_annotations_escape_data_and_properties(tmp_path: Path) -> None:
    findings = [
        Finding(ERR, "error", "100% wrong\r\nsecond line: a, b", "we:ird,name.json"),
        Finding(WARN, "warning", "w", "model.safetensors", "t"),
        Finding(INFO, "info", "i"),
    ]
    r = VerifyReport(str(tmp_path / "ckpt"), "static", "both", "error", "fail", findings)
    lines = github_annotations(r, cwd=str(tmp_path)).splitlines()
    title = f"{ERR} {RULES[ERR].name}".replace(",", "%2C").replace(":", "%3A")
    assert lines == [
        f"::error file=ckpt/we%3Aird%2Cname.json,title={title}::100%25 wrong%0D%0Asecond line: a, b",
        f"::warning file=ckpt/model.safetensors,title={WARN} {RULES[WARN].name}::w",
        f"::notice title={INFO} {RULES[INFO].name}::i",
    ]


def test_github_annotations_default_to_the_current_directory(
    report: VerifyReport, error_report: VerifyReport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(report.path).parent)
    first = github_annotations(report).splitlines()[0]
    assert first.startswith(f"::error file=draft/config.json,title={ERR} ")
    assert len(github_annotations(report).splitlines()) == len(report.findings)
    assert github_annotations(error_report).splitlines() == [
        "::error title=eagle-convert verify::No config.json in the directory."
    ]


def test_markdown_summary(report: VerifyReport, error_report: VerifyReport) -> None:
    md = markdown_summary(report)
    assert md.startswith("## eagle-convert verify ❌ failed")
    assert "**2 errors**, 2 warnings, 1 info" in md
    table = [line for line in md.splitlines() if line.startswith(f"| {ERR} ")]
    cells = f"| {ERR} {RULES[ERR].name} | error | `config.json` | `/hidden_size` |"
    assert table[0] == f"{cells} fc width 12288 != 3 \\* 4096 \\| mismatch |"  # Markdown's * escaped
    assert all(line.count("|") - line.count("\\|") == 6 for line in md.splitlines() if line.startswith("| EC"))
    assert "100% odd: tensor<br>not recognised" in md
    assert "<details>" in md and "</details>" in md and "needs --level tensors" in md
    assert f"| `config.json` | 812 | `{SHA}` |" in md
    assert "| `model.safetensors` | 4096 | not computed |" in md
    err = markdown_summary(error_report)
    assert "could not verify" in err and "No config.json in the directory." in err and "Pass the draft" in err
    assert "No findings." in err and "No files." in err
