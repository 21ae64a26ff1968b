"""verify --level engine with SGLang's load mode, through the CLI, against a stand-in engine Python.

The real SGLang runs in tests/engine/test_sglang_conformance.py (its engine environment, `scripts/engine-env
--sglang`).
Here the engine Python is a small script that answers the worker's request with a load result of the shape the
SGLang worker writes, so what eagle-convert makes of it (the report, the schema, EC721/EC724/EC725, the exit code)
is tested on every machine. The script places the draft's own tensors (read from its safetensors header), drops the
names and captures the layers each test asks for: nothing in it is computed by eagle-convert's engine model.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from eagle_convert.read.config import TargetConfig
from tests.conftest import SCHEMAS, run_cli

FAKE_WORKER = r"""
import json, struct, sys
from pathlib import Path

request = json.loads(Path(sys.argv[-1]).read_text())
asked = json.loads(Path(__file__).with_name("answer.json").read_text())
draft = Path(request["drafts"][0])
names = []
for shard in sorted(draft.glob("*.safetensors")):
    with open(shard, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        names += [n for n in json.loads(f.read(size)) if n != "__metadata__"]
tensors = {n: {"param": None if n in asked["drop"] else n, "rows": None} for n in names}
result = {
    "version": "0.5.23", "mode": request["mode"], "not_measured": "acceptance not measured: stand-in engine",
    "target_class": "LlamaForCausalLM", "ids_read": asked["ids_read"], "layers_to_capture": asked["layers"],
    "draft": {"class": "LlamaForCausalLMEagle3", "num_aux": asked["num_aux"], "fc_shape": [64, 64 * asked["num_aux"]],
              "fc_norm": asked["fc_norm"], "input_norm": False, "norm_output": False, "norm_before_residual": False,
              "lm_head": "loaded", "hot_token_id": 128, "num_layers": 1},
    "tensors": tensors, "standin_calls": [], "load_s": 0.5, "peak_rss_mib": 100.0,
}
Path(request["result_path"]).write_text(json.dumps(result))
"""


ANSWER = {"ids_read": [0, 2, 4], "layers": [1, 3, 5], "drop": [], "num_aux": 3, "fc_norm": False}  # as trained


def _engine(tmp_path: Path, **answer: Any) -> Path:
    """An engine Python that answers SGLang load requests with ``answer``."""
    (tmp_path / "worker.py").write_text(FAKE_WORKER, encoding="utf-8")
    (tmp_path / "answer.json").write_text(json.dumps({**ANSWER, **answer}), encoding="utf-8")
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{tmp_path / "worker.py"}" "$@"\n', encoding="utf-8")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return python


@pytest.fixture(scope="module")
def pair() -> tuple[Path, Path]:
    """The tiny trained pair (fixtures/trained_pair.py): trained on hs[1, 3, 5], eagle_config ids [0, 2, 4]."""
    from fixtures.trained_pair import trained_pair

    built = trained_pair()
    return built.draft_dir, built.target_dir


def _verify(pair: tuple[Path, Path], python: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    draft, target = pair
    args = ["verify", str(draft), "--target", str(target), "--level", "engine", "--engine", "sglang@0.5.23"]
    proc = run_cli(*args, "--engine-python", str(python), "--json", *extra)
    assert proc.stdout, proc.stderr
    report = json.loads(proc.stdout)
    schema = json.loads((SCHEMAS / "verify-report.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(report, schema)
    return proc.returncode, report


def _ids(report: dict[str, Any]) -> list[str]:
    return [f["rule_id"] for f in report["findings"] if f["rule_id"].startswith("EC72")]


@pytest.mark.slow
def test_a_load_as_trained_reports_what_sglang_built_and_no_acceptance(pair: tuple[Path, Path], tmp_path: Path) -> None:
    code, report = _verify(pair, _engine(tmp_path))
    run = report["engine_run"]
    assert run["engine"] == "sglang" and run["runner"] == "load" and run["acceptance_measured"] is False
    assert run["not_measured"] and run["mean_acceptance_length"] is None and run["drafts"] is None
    assert run["hidden_states"] == [1, 3, 5] and run["hidden_states_from"] == "captured"
    assert run["requested_layers"] == [0, 2, 4]
    assert run["built_draft"]["class"] == "LlamaForCausalLMEagle3" and run["dropped_tensors"] == []
    assert run["probe_acceptance_length"] is None
    assert _ids(report) == []
    assert code == 0, report["findings"]


def _findings(pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, **answer: Any) -> list[Any]:
    """engine_findings on the observation the SGLang runner makes of a load result (the engine call stood in)."""
    import eagle_convert.real_engine as engine_level
    from eagle_convert.draft.detect import detect
    from eagle_convert.read.checkpoint import open_checkpoint
    from eagle_convert.read.safetensors_header import read_header
    from eagle_convert.real_engine.sglang_runner import observation

    draft, target = pair
    names = [t.name for f in sorted(draft.glob("*.safetensors")) for t in read_header(f).tensors]
    asked = {**ANSWER, **answer}
    raw = {
        "version": "0.5.23", "mode": "load", "not_measured": "stand-in", "target_class": "LlamaForCausalLM",
        "ids_read": asked["ids_read"], "layers_to_capture": asked["layers"],
        "draft": {"class": "LlamaForCausalLMEagle3", "num_aux": asked["num_aux"], "fc_shape": [64, 192],
                  "fc_norm": asked["fc_norm"], "input_norm": False, "norm_output": False, "lm_head": "loaded"},
        "tensors": {n: {"param": None if n in asked["drop"] else n, "rows": None} for n in names},
    }  # fmt: skip
    seen = observation(draft, raw, 3)
    monkeypatch.setattr(engine_level, "observe", lambda *args: [seen])
    settings = engine_level.EngineSettings(engine="sglang", token_ids=[[1, 2, 3]])
    spec = detect(open_checkpoint(draft))
    found, record = engine_level.engine_findings(
        draft, spec, TargetConfig.from_path(target), lambda r: True, settings, None
    )
    run = record.to_dict()
    assert run["acceptance_measured"] is False and run["probe_acceptance_length"] is None
    return found


@pytest.mark.slow  # the trained pair: built once (about 2 minutes on a fresh clone), then cached
def test_other_captured_states_are_ec721(pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    (ec721,) = _findings(pair, monkeypatch, layers=[0, 2, 4])
    assert ec721.rule_id == "EC721" and ec721.expected == [1, 3, 5] and ec721.actual == [0, 2, 4]
    assert "captures for the draft the target's hs[0, 2, 4]" in ec721.message


@pytest.mark.slow  # the trained pair: built once (about 2 minutes on a fresh clone), then cached
def test_a_dropped_trained_tensor_is_ec724_and_t2d_is_not(
    pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    (ec724,) = _findings(pair, monkeypatch, drop=["midlayer.mlp.down_proj.weight", "t2d"])
    assert ec724.rule_id == "EC724" and ec724.actual == ["midlayer.mlp.down_proj.weight"]
    assert "midlayer.mlp.down_proj.weight" in ec724.message


@pytest.mark.slow  # the trained pair: built once (about 2 minutes on a fresh clone), then cached
def test_a_switch_built_otherwise_than_trained_is_ec725(
    pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    found = {f.subject: f for f in _findings(pair, monkeypatch, fc_norm=True, num_aux=4)}
    assert {f.rule_id for f in found.values()} == {"EC725"} and set(found) == {"fc_norm", "num_aux_hidden_states"}
    assert found["fc_norm"].expected is False and found["fc_norm"].actual is True
    assert found["num_aux_hidden_states"].expected == 3 and found["num_aux_hidden_states"].actual == 4


@pytest.mark.slow
def test_the_human_report_says_what_was_built_and_why_nothing_was_measured(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    draft, target = pair
    python = _engine(tmp_path)
    proc = run_cli("verify", str(draft), "--target", str(target), "--level", "engine", "--engine", "sglang@0.5.23",
                   "--engine-python", str(python))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "Engine load: sglang 0.5.23" in out and "acceptance not measured" in out
    assert "hs[1, 3, 5]" in out and "LlamaForCausalLMEagle3" in out


def test_no_sglang_environment_names_the_sglang_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from eagle_convert.errors import EngineNotInstalledError
    from eagle_convert.real_engine.base import engine_python

    monkeypatch.delenv("EAGLE_CONVERT_ENGINE_PYTHON", raising=False)
    monkeypatch.setattr("eagle_convert.real_engine.base.PACKAGE_ROOT", tmp_path)
    with pytest.raises(EngineNotInstalledError) as err:
        engine_python(start=tmp_path, engine="sglang")
    assert ".venv-sglang" in str(err.value) and "--sglang" in (err.value.hint or "")
    venv = tmp_path / ".venv-sglang" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("", encoding="utf-8")
    os.chmod(venv / "python", 0o755)
    assert engine_python(start=tmp_path, engine="sglang") == venv / "python"
