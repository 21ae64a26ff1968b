"""The command line as users' CI runs it: exit codes, one-line errors, JSON on stdout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from fixtures.generate import MALFORMED
from tests.conftest import ROOT, SCHEMAS, run_cli, run_cli_without_torch

VALIDATOR = Draft202012Validator(json.loads((SCHEMAS / "inspect-report.schema.json").read_text()))
ERROR_VALIDATOR = Draft202012Validator(json.loads((SCHEMAS / "error.schema.json").read_text()))


def test_inspect_json_is_one_object_valid_against_the_schema(fx: Path) -> None:
    result = run_cli("inspect", str(fx / "layouts-sharded" / "speculators-mha"), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    VALIDATOR.validate(doc)
    assert doc["format"]["producer"] == "speculators" and doc["format"]["sharded"] is True
    assert result.stderr == ""


def test_inspect_human_output_names_what_matters(fx: Path) -> None:
    result = run_cli("inspect", str(fx / "layouts" / "specforge-mha"), "--target", str(fx / "targets" / "target-llama"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for words in ("specforge", "output-of", "hs[2, 6, 9]", "fc", "midlayer.self_attn", "vllm", "sglang"):
        assert words in out, words


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_input_exits_2_with_one_line(fx: Path, name: str) -> None:
    path = fx / "malformed" / name
    before = sorted((p.name, p.stat().st_size) for p in path.iterdir())
    result = run_cli("inspect", str(path), "--json")
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert lines[0].startswith("Error: ") and str(path) in lines[0] and MALFORMED[name][2] in lines[0]
    assert len(lines) == 2 and lines[1].startswith("Hint: ")
    assert "Traceback" not in result.stderr
    error = json.loads(result.stdout)  # --json: one error object on stdout, as verify --format json writes
    ERROR_VALIDATOR.validate(error)
    assert error["error"]["message"] == lines[0].removeprefix("Error: ") and error["error"]["exit_code"] == 2
    assert sorted((p.name, p.stat().st_size) for p in path.iterdir()) == before


def test_debug_variable_shows_the_traceback(fx: Path) -> None:
    result = run_cli("inspect", str(fx / "malformed" / "hole"), env={"EAGLE_CONVERT_DEBUG": "1"})
    assert result.returncode != 0 and "Traceback" in result.stderr and "HeaderError" in result.stderr


def test_nothing_to_check_exits_3(tmp_path: Path) -> None:
    result = run_cli("inspect", str(tmp_path))
    assert result.returncode == 3 and result.stderr.startswith("Error: ")


def test_missing_path_and_usage_errors_exit_2(tmp_path: Path) -> None:
    assert run_cli("inspect", str(tmp_path / "nope")).returncode == 2
    assert run_cli("inspect").returncode == 2
    assert run_cli("inspect", str(tmp_path), "--aux-convention", "sideways").returncode == 2


def test_pickle_draft_is_reported_and_never_unpickled(fx: Path) -> None:
    marker = fx / "pickle" / "UNPICKLED"
    result = run_cli("inspect", str(fx / "pickle" / "eagle-official-bin"), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["format"]["weight_format"] == "pickle" and doc["format"]["pickle_files"] == ["pytorch_model.bin"]
    assert any(f["rule_id"] == "EC003" for f in doc["findings"])
    assert not marker.exists()


def test_the_pickle_payload_would_run_if_unpickled(tmp_path: Path) -> None:
    """Proves the test above can fail: unpickling the fixture's payload does create the marker."""
    from fixtures.generate import write_pickle_draft

    marker = tmp_path / "MARKER"
    draft = write_pickle_draft(tmp_path / "d", marker)
    code = f"import pickle; pickle.loads(open({str(draft / 'pytorch_model.bin')!r}, 'rb').read())"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    assert marker.exists()


def test_inspect_runs_without_torch(fx: Path) -> None:
    for args in (
        ["inspect", str(fx / "layouts-sharded" / "torchspec-mla"), "--json"],
        ["inspect", str(fx / "layouts" / "specforge-mha-eagle3.1"), "--target", str(fx / "targets" / "target-llama")],
    ):
        result = run_cli_without_torch(*args)
        assert result.returncode == 0, result.stderr
        assert "specforge" in result.stdout or "torchspec" in result.stdout


def test_normalize_dry_run_never_imports_torch(fx: Path, tmp_path: Path) -> None:
    """A dry run reads config and headers only; the probe's text options must not pull torch in."""
    args = ["normalize", str(fx / "layouts" / "specforge-mha"), str(tmp_path / "out"), "--dry-run"]
    result = run_cli_without_torch(*args, "--target-family", "llama")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "out").exists()


def test_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.startswith("eagle-convert ")
