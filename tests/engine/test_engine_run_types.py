"""The report's ``engine_run`` and ``error`` as frozen records, and an engine that refuses the draft as a finding.

- each kind of run (load-only, in-process, on a server) is one frozen record whose ``to_dict()`` is the JSON the
  report has always had (the keys and values below are that contract), and validates against the schema;
- the renderer picks the table by the record's type;
- ``error`` is a frozen record with today's ``{"message", "hint", "exit_code"}``;
- an engine that refuses to load the draft while the target alone starts is EC728 (error, exit 1) with the engine's
  own message, and the run's other findings are reported as usual; a failure the target alone repeats, or one of the
  machine, stays the engine failing (exit 2). No real engine: the engine's answers are made up here, as a fake engine
  Python or a stand-in for vLLM's ``LLM``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import stat
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from rich.console import Console

from eagle_convert.errors import EngineRunError, UsageError
from eagle_convert.read.config import TargetConfig
from eagle_convert.real_engine.attached import AttachedRun, CounterMove, ServerInfo
from eagle_convert.real_engine.base import EngineObservation
from eagle_convert.real_engine.record import NOT_OBSERVED, InProcessRun, LoadOnlyRun, ServedRun
from eagle_convert.render.engine_tables import render_engine_run
from eagle_convert.verify.report import ReportError, VerifyReport
from tests.conftest import SCHEMAS

DRAFT = Path("/d/draft")
CAUSE = (
    "ValueError: There is no module or parameter named 'draft_id_to_target_id' in LlamaForCausalLMEagle3. "
    "The available parameters belong to {'model.fc.weight', 'lm_head.weight'}"
)
SCHEMA = json.loads((SCHEMAS / "verify-report.schema.json").read_text(encoding="utf-8"))


def _in_report(run: Any) -> dict[str, Any]:
    """``run`` in a whole report, validated against the report's schema; the report's JSON."""
    doc = VerifyReport("/d/draft", "engine", "vllm", "error", "pass", engine_run=run).to_dict()
    jsonschema.validate(doc, SCHEMA)
    return doc


# ---- one record per kind, today's JSON ------------------------------------------------------------------------------


def _decoded() -> EngineObservation:
    outputs = [[1, 2, 3], [4, 5]]
    return EngineObservation(DRAFT, "vllm", "0.32.0", "v1", [2, 6, 9], [2, 6, 9], {"fc_norm": False}, 100, 300, 59,
                             [48, 9, 2], outputs, outputs, None, 1.25, 2.5, 900.0, settings={"seed": 0},
                             not_observed=["x"])  # fmt: skip


def llama_config(fx: Path) -> TargetConfig:  # the config-only Llama target, read
    return TargetConfig.from_path(fx / "targets" / "target-llama")


def test_an_in_process_run_is_todays_json() -> None:
    from eagle_convert.probe.result import BoundaryMatch

    fed = [BoundaryMatch(i, b, 0.0) for i, b in enumerate((3, 7, 10))]
    matches = [{"state": i, "boundary": b, "relative_error": 0.0} for i, b in enumerate((3, 7, 10))]
    run = InProcessRun(_decoded(), [3, 7, 10], "fed", fed, probe_acceptance_length=1.6, probe_same_text=True)
    assert _in_report(run)["engine_run"] == {
        "engine": "vllm", "version": "0.32.0", "runner": "v1", "acceptance_measured": True, "not_measured": None,
        "prompts": 2, "tokens": 5, "drafts": 100, "draft_tokens": 300, "accepted_tokens": 59,
        "mean_acceptance_length": 1.59, "acceptance_per_position": [0.48, 0.09, 0.02], "lossless": True,
        "requested_layers": [2, 6, 9], "hidden_states": [3, 7, 10], "hidden_states_from": "fed",
        "hidden_state_matches": matches, "flags": {"fc_norm": False}, "target_class": None, "built_draft": None,
        "tensors": None, "dropped_tensors": None, "load_s": 1.25, "generate_s": 2.5, "peak_rss_mib": 900.0,
        "settings": {"seed": 0}, "not_observed": ["x"], "probe_acceptance_length": 1.6, "probe_same_text": True,
    }  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.probe_acceptance_length = 2.0  # type: ignore[misc]


def test_a_load_only_run_is_todays_json() -> None:
    from eagle_convert.real_engine.sglang_runner import observation

    built = {"class": "LlamaForCausalLMEagle3", "num_aux": 3, "fc_shape": [64, 192], "fc_norm": False,
             "input_norm": False, "norm_output": False, "lm_head": "loaded"}  # fmt: skip
    tensors = {"fc.weight": {"param": "fc.weight", "rows": None}, "t2d": {"param": None, "rows": None}}
    raw = {"version": "0.5.23", "mode": "load", "not_measured": "stand-in", "target_class": "LlamaForCausalLM",
           "ids_read": [0, 2, 4], "layers_to_capture": [5, 1, 3], "draft": built, "tensors": tensors}  # fmt: skip
    run = LoadOnlyRun(observation(DRAFT, raw, 3), [1, 3, 5], "captured")
    doc = _in_report(run)["engine_run"]
    assert doc == {
        "engine": "sglang", "version": "0.5.23", "runner": "load", "acceptance_measured": False,
        "not_measured": "stand-in", "prompts": 0, "tokens": 0, "drafts": None, "draft_tokens": None,
        "accepted_tokens": None, "mean_acceptance_length": None, "acceptance_per_position": [], "lossless": None,
        "requested_layers": [0, 2, 4], "hidden_states": [1, 3, 5], "hidden_states_from": "captured",
        "hidden_state_matches": [],
        "flags": {"draft_class": "LlamaForCausalLMEagle3", "fc_norm": False, "norm_output": False,
                  "norm_before_fc": False, "norm_before_residual": None, "num_aux_hidden_states": 3},
        "target_class": "LlamaForCausalLM", "built_draft": built, "tensors": tensors, "dropped_tensors": [],
        "load_s": 0.0, "generate_s": 0.0, "peak_rss_mib": 0.0, "settings": None, "not_observed": [],
        "probe_acceptance_length": None, "probe_same_text": None,
    }  # fmt: skip
    assert "refused" not in doc  # the key is EC728's alone


def _attached() -> AttachedRun:
    info = ServerInfo("http://127.0.0.1:8000", "vllm", "0.32.0", "t", "/t", True, "eagle3", None, 3, ["/metrics"])
    return AttachedRun(
        info, 2, 4, 8, [[1] * 4] * 2, 10, 30, 6, [4, 2, 0], 1.6, [0.4, 0.2, 0.0], "vllm /metrics counters",
        [CounterMove("requests", 2.0, 3.0)], "unknown", "the server does not say", 1.23456,
    )  # fmt: skip


def test_a_run_on_a_server_is_todays_json() -> None:
    run = ServedRun(_attached(), probe_not_run="the target's weights are not here (config only)")
    assert _in_report(run)["engine_run"] == {
        "engine": "vllm", "version": "0.32.0", "runner": "attached", "acceptance_measured": True,
        "not_measured": None, "prompts": 2, "tokens": 8, "drafts": 10, "draft_tokens": 30, "accepted_tokens": 6,
        "mean_acceptance_length": 1.6, "acceptance_per_position": [0.4, 0.2, 0.0], "lossless": None,
        "requested_layers": None, "hidden_states": None, "hidden_states_from": None, "hidden_state_matches": [],
        "flags": None, "target_class": None, "built_draft": None, "tensors": None, "dropped_tensors": None,
        "load_s": None, "generate_s": 1.235, "peak_rss_mib": None, "settings": None,
        "not_observed": list(NOT_OBSERVED),
        "server": {
            "url": "http://127.0.0.1:8000", "model": "t", "model_path": "/t", "method": "eagle3", "draft_path": None,
            "num_speculative_tokens": 3, "reported_by": ["/metrics"], "not_reported": None, "concurrency": 8,
            "new_tokens": 4, "measured_from": "vllm /metrics counters", "accepted_per_position": [4, 2, 0],
            "foreign_traffic": [{"counter": "requests", "expected": 2.0, "observed": 3.0}],
            "draft_identity": "unknown", "draft_identity_note": "the server does not say",
        },
        "probe_acceptance_length": None, "probe_same_text": None,
        "probe_not_run": "the target's weights are not here (config only)",
    }  # fmt: skip


def test_engine_run_picks_the_kind_from_the_observation() -> None:
    pytest.importorskip("torch")
    from eagle_convert.real_engine import engine_run

    assert type(engine_run(DRAFT, _decoded())) is InProcessRun
    refused = dataclasses.replace(_decoded(), outputs=[], baseline_outputs=None, not_measured="no", refused=CAUSE)
    assert type(engine_run(DRAFT, refused)) is LoadOnlyRun


# ---- the renderer dispatches on the type ----------------------------------------------------------------------------


def _rendered(run: Any) -> str:
    out = io.StringIO()
    render_engine_run(run, Console(file=out, width=400, no_color=True))
    return out.getvalue()


def test_the_renderer_picks_the_table_by_the_records_type() -> None:
    from eagle_convert.real_engine.vllm_runner import _observation

    assert "Engine run: vllm 0.32.0 (runner v1), 2 prompts, 5 tokens" in _rendered(InProcessRun(_decoded()))
    assert "Engine run on a server: vllm 0.32.0 at http://127.0.0.1:8000" in _rendered(ServedRun(_attached()))
    sglang = dataclasses.replace(_decoded(), engine="sglang", outputs=[], baseline_outputs=None, not_measured="cpu")
    assert "Engine load: sglang 0.32.0, target ?; acceptance not measured" in _rendered(LoadOnlyRun(sglang))
    raw = {"version": "0.32.0", "runs": []}
    run = {"draft": str(DRAFT), "runner": "v1", "refused": {"error": "ValueError", "message": CAUSE}, "outputs": []}
    text = _rendered(LoadOnlyRun(_observation(raw, run)))
    assert "vllm 0.32.0 refused the draft" in text and "draft_id_to_target_id" in text
    with pytest.raises(AssertionError):  # a dict is no record: nothing reads a run by string key
        _rendered({"engine": "vllm", "acceptance_measured": False})


# ---- the error record -----------------------------------------------------------------------------------------------


def test_the_error_is_a_frozen_record_with_todays_json() -> None:
    error = ReportError.of(UsageError("the file is missing", path="/d/x", hint="pass it"))
    assert error == ReportError("/d/x: the file is missing", "pass it", 2)
    doc = VerifyReport("/d/x", "static", "vllm", "error", "error", error=error).to_dict()
    jsonschema.validate(doc, SCHEMA)
    assert doc["error"] == {"message": "/d/x: the file is missing", "hint": "pass it", "exit_code": 2}
    with pytest.raises(dataclasses.FrozenInstanceError):
        error.exit_code = 1  # type: ignore[misc]


# ---- an engine that refuses the draft is a finding ------------------------------------------------------------------


def test_a_refusal_is_ec728_with_the_engines_message(fx: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import eagle_convert.real_engine as engine_level
    from eagle_convert.draft.detect import detect
    from eagle_convert.read.checkpoint import open_checkpoint
    from eagle_convert.real_engine.vllm_runner import _observation

    draft = fx / "layouts" / "specforge-mha"
    raw = {"version": "0.32.0", "runs": [], "baseline_outputs": [[1]]}
    seen = _observation(raw, {"draft": str(draft), "refused": {"error": "ValueError", "message": CAUSE}, "outputs": []})
    assert seen.refused == CAUSE and seen.not_measured and seen.baseline_outputs is None
    monkeypatch.setattr(engine_level, "observe", lambda *args: [seen])

    def no_prediction(*args: object) -> None:
        raise AssertionError("nothing was decoded: there is nothing to predict")

    monkeypatch.setattr(engine_level, "predict", no_prediction)
    settings = engine_level.EngineSettings(token_ids=[[1, 2, 3]])
    spec = detect(open_checkpoint(draft))
    found, run = engine_level.engine_findings(draft, spec, llama_config(fx), lambda r: True, settings, None)
    (refused,) = found
    assert (refused.rule_id, refused.severity) == ("EC728", "error")
    assert refused.message == f"vllm 0.32.0 refused to load the draft with this target: {CAUSE}"
    assert isinstance(run, LoadOnlyRun) and run.refused == CAUSE
    doc = _in_report(run)["engine_run"]
    assert doc["refused"] == CAUSE and doc["acceptance_measured"] is False and doc["lossless"] is None


class _Engines:
    """vllm_worker's ``_engine`` stood in: the draft's engine raises ``draft``; the target alone raises ``alone``."""

    def __init__(self, draft: Exception, alone: Exception | None = None) -> None:
        self.draft, self.alone, self.calls = draft, alone, 0

    def __call__(self, request: dict[str, Any], with_draft: bool) -> object:
        self.calls += 1
        if with_draft:
            raise self.draft
        if self.alone is not None:
            raise self.alone
        return object()


@pytest.mark.parametrize(
    ("draft", "alone", "refused"),
    [
        (ValueError("There is no module or parameter named 'd2t'"), None, True),  # the target alone starts
        (ValueError("There is no module or parameter named 'd2t'"), RuntimeError("no KV cache"), False),
        (MemoryError("out of memory"), None, False),  # the machine's, never the draft's: not even checked
        (OSError("No space left on device"), None, False),
    ],
)
def test_the_worker_tells_a_refusal_of_the_draft_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, draft: Exception, alone: Exception | None, refused: bool
) -> None:
    from eagle_convert.real_engine import vllm_worker

    engines = _Engines(draft, alone)
    monkeypatch.setattr(vllm_worker, "_engine", engines)
    monkeypatch.setattr(vllm_worker, "_release", lambda: None)
    if refused:
        run = vllm_worker._refusal({"target": "t"}, "/d/draft", draft, 1.5)
        assert run["refused"] == {"error": "ValueError", "message": f"ValueError: {draft}"} and run["outputs"] == []
        return
    with pytest.raises(type(draft)) as raised:
        vllm_worker._refusal({"target": "t"}, "/d/draft", draft, 1.5)
    assert raised.value is draft and raised.value.__cause__ is alone
    assert engines.calls == (1 if alone is not None else 0)


# a fake engine Python: writes what vllm_worker writes for a refused draft, behind vLLM's multiprocessing wrapper
# (the exception the worker caught only points back at the cause, which is in the log), and exits 0
FAKE_WORKER = """#!{python}
import json, sys
request = json.load(open(sys.argv[-1]))  # python -m MODULE REQUEST.json
print({cause!r}, file=sys.stderr)
wrapper = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{}}"
print(wrapper, file=sys.stderr)
run = {{"draft": request["drafts"][0], "runner": "v1", "outputs": [], "load_s": 0.5, "generate_s": 0.0,
        "refused": {{"error": "RuntimeError", "message": wrapper}}}}
json.dump({{"engine": "vllm", "version": "0.32.0", "runs": [run], "peak_rss_mib": 10.0}},
          open(request["result_path"], "w"))
"""


@pytest.fixture
def refusing_engine(tmp_path: Path) -> Path:
    python = tmp_path / "engine-python"
    python.write_text(FAKE_WORKER.format(python=sys.executable, cause=CAUSE), encoding="utf-8")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return python


def test_a_refusal_behind_a_wrapper_carries_the_logged_cause(refusing_engine: Path, fx: Path, tmp_path: Path) -> None:
    from eagle_convert.real_engine import EngineSettings, observe

    settings = EngineSettings(python=refusing_engine)
    (seen,) = observe(fx / "targets" / "target-llama", [fx / "layouts" / "specforge-mha"], [[1, 2]], settings, tmp_path)
    assert seen.refused == CAUSE and seen.outputs == [] and seen.baseline_outputs is None


def test_an_engine_that_crashes_is_still_the_engine_failing(tmp_path: Path) -> None:
    """No result written (the process died): exit 2, as before, never a finding."""
    from eagle_convert.real_engine.base import run_worker

    python = tmp_path / "engine-python"
    python.write_text(f"#!{sys.executable}\nimport sys\nprint('Killed', file=sys.stderr)\nsys.exit(137)\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(EngineRunError) as raised:
        run_worker(python, "eagle_convert.real_engine.vllm_worker", {"drafts": ["/d/draft"]}, {}, work)
    assert raised.value.exit_code == 2 and "Killed" in raised.value.message
    Path(raised.value.hint.removeprefix("the engine's whole log is ").split(";")[0]).unlink()  # type: ignore[union-attr]


@pytest.mark.slow
def test_verify_reports_a_refusal_as_a_finding_with_the_static_findings(
    refusing_engine: Path, fx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole command (the probe on a tiny target first, then the refusing engine): exit 1, EC728 with the
    engine's message among the run's other findings, the load-only run says it refused; no ``Error:`` line."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from eagle_convert.cli.main import main
    from fixtures.layouts import TARGETS

    target = tmp_path / "target"
    raw = {k: v for k, v in TARGETS["target-llama"].items() if k not in ("architectures", "model_type")}
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**raw, tie_word_embeddings=False)).save_pretrained(target)
    draft = fx / "layouts" / "specforge-mha"
    args = ["verify", str(draft), "--level", "engine", "--target", str(target), "--engine-python", str(refusing_engine)]
    args += ["--no-hash", "--probe-positions", "16", "--probe-steps", "1", "--engine-tokens", "4"]
    code = main([*args, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 1, err[-3000:]
    doc = json.loads(out)
    jsonschema.validate(doc, SCHEMA)
    (refused,) = [f for f in doc["findings"] if f["rule_id"] == "EC728"]
    assert refused["severity"] == "error" and refused["message"].endswith(CAUSE)
    assert doc["engine_run"]["refused"] == CAUSE and doc["status"] == "fail" and doc["error"] is None
    others = {f["rule_id"] for f in doc["findings"]} - {"EC728"}
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 1 and "Error:" not in err
    assert "EC728" in out and "refused the draft" in out and all(rule in out for rule in others)
