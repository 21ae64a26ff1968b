"""The TensorRT-LLM records (releases/trtllm.py): the capture is the deployment's ``eagle3_layers_to_capture``, never
the draft's ids. Expectations are worked from the cited lines of ``tensorrt_llm/_torch/speculative/eagle3.py`` at
f933a60: unset, layer outputs {1, N//2 - 1, N - 4} = hs[2, N//2, N-3] (:129-137, ValueError for N <= 5); given, the
set sorted (:138-139), layer i feeding hs[i + 1] (:208-222)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.releases import DEFAULT_ENGINES, RELEASES, default_hidden_states, engine_view, resolve_engines
from fixtures.real import real_config_paths, write_real_checkpoint
from tests.conftest import run_cli
from tests.engine.test_engines_real import target_of

PATHS = real_config_paths()
KEY = "eagle3_layers_to_capture"
TRTLLM = [r for r in RELEASES.values() if r.engine == "trtllm"]
PYTORCH = [r for r in TRTLLM if r.runner is None]  # the PyTorch backend; AutoDeploy: test_trtllm_autodeploy.py


def test_trtllm_resolves_by_name_and_stays_out_of_the_default() -> None:
    assert TRTLLM and [r.name for r in resolve_engines("trtllm")] == [next(r.name for r in TRTLLM if r.newest)]
    for r in TRTLLM:
        assert resolve_engines(r.name) == [r]
        assert re.fullmatch(r"trtllm@(\d+\.\d+|main-[0-9a-f]{7})" + (f"-{r.runner}" if r.runner else ""), r.name)
    assert not any(r.engine == "trtllm" for r in resolve_engines(DEFAULT_ENGINES))
    assert not any(r.engine == "trtllm" for r in resolve_engines("both"))


@pytest.mark.parametrize("release", [r.name for r in PYTORCH])
@pytest.mark.parametrize("n", [1, 4, 5, 6, 32, 61])
def test_unset_feeds_the_defaults_or_refuses(release: str, n: int) -> None:
    ids = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}, "eagle_aux_hidden_state_layer_ids": [0]}
    view = engine_view(release, ids, target_model_type="llama", target_num_layers=n)
    assert view.ids_from == "defaults" and view.ids is None  # the draft's ids are never read
    if n == 1:
        assert view.hidden_state_indices == [1] and view.target_refusal is None
    elif n <= 5:
        assert view.hidden_state_indices is None
        assert view.target_refusal and "Not enough hidden layers" in view.target_refusal
    else:
        assert view.hidden_state_indices == sorted({2, n // 2, n - 3}) == default_hidden_states(n)
        assert view.target_refusal is None and bool(view.problems) == (n == 6)  # N = 6: layers (1, 2, 2)


@pytest.mark.parametrize("release", [r.name for r in PYTORCH])
def test_the_setting_is_layer_outputs_sorted(release: str) -> None:
    view = engine_view(release, {}, target_model_type="llama", target_num_layers=32, deployment={KEY: [28, 1, 15]})
    assert view.ids_from == "deployment" and view.ids == [1, 15, 28]
    assert view.hidden_state_indices == [2, 16, 29] and view.num_aux_hidden_states == 3
    view = engine_view(release, {}, target_model_type="llama", target_num_layers=32, deployment={KEY: [1, 31, 32]})
    assert view.hidden_state_indices == [2, 32, 33] and any("never reached" in p for p in view.problems)
    other = engine_view(release, {}, target_model_type="llama", target_num_layers=32, deployment={"other": 1})
    assert other.ids_from == "defaults" and other.hidden_state_indices == [2, 16, 29]


@pytest.mark.parametrize("path", PATHS, ids=[f"{p.parent.name}/{p.name}" for p in PATHS])
def test_real_configs_unset_and_with_the_advised_setting(tmp_path: Path, path: Path) -> None:
    raw = json.loads(path.read_text())
    mt, n = target_of(path.name)
    aux = inspect_checkpoint(write_real_checkpoint(path, tmp_path / "draft")).to_dict()["aux_layers"]
    trained = aux["hidden_state_indices"]
    if aux["convention"] == "default":
        trained = default_hidden_states(n) if n else None
    elif aux["ids"] and trained is not None and len(set(aux["ids"])) == len(aux["ids"]):
        trained = [i + trained[0] - min(aux["ids"]) for i in aux["ids"]]  # in the fc's (the ids') order
    for release in TRTLLM:
        unset = engine_view(release, raw, target_model_type=mt, target_num_layers=n, trained_states=trained)
        if n is None or 1 < n <= 5:
            assert unset.hidden_state_indices is None
        else:
            assert unset.hidden_state_indices == ([1] if n == 1 else sorted({2, n // 2, n - 3}))
        if trained is None:
            assert unset.capture_setting is None and unset.capture_impossible is None
            continue
        if unset.capture_impossible is not None:
            assert trained != sorted(set(trained)) or min(trained) < 1 or (n is not None and max(trained) > n)
            continue
        deployment = unset.capture_setting or {}
        if not deployment:  # the default already feeds the trained states
            assert unset.hidden_state_indices == trained, (release.name, trained)
        else:
            assert deployment[KEY] == sorted(deployment[KEY]) == [s - 1 for s in trained]
        fed = engine_view(release, raw, target_model_type=mt, target_num_layers=n, deployment=deployment)
        assert fed.hidden_state_indices == trained, (release.name, deployment, trained)
        assert fed.ids_from == ("deployment" if deployment else "defaults")


@pytest.mark.parametrize("release", [r.name for r in TRTLLM])
@pytest.mark.parametrize(
    ("trained", "why"),
    [
        ([29, 2, 16], "sorts"),  # a draft trained on its states in another order
        ([2, 16, 16], "repeats"),
        ([0, 16, 29], "no decoder layer's output"),
        ([2, 16, 40], "past the target's"),
    ],
)
def test_no_setting_can(release: str, trained: list[int], why: str) -> None:
    raw = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [s - 1 for s in trained]}}
    view = engine_view(release, raw, target_model_type="llama", target_num_layers=32, trained_states=trained)
    assert view.capture_setting is None and view.capture_impossible and why in view.capture_impossible


@pytest.mark.parametrize("release", [r.name for r in TRTLLM])
def test_setting_advice(release: str) -> None:
    def advice(trained: list[int], n: int | None) -> dict[str, list[int]] | None:
        view = engine_view(release, {}, target_model_type="llama", target_num_layers=n, trained_states=trained)
        assert view.capture_impossible is None
        return view.capture_setting

    assert advice([2, 16, 29], 32) is None  # the default already feeds them
    assert advice([2, 16, 29], None) == {KEY: [1, 15, 28]}  # N unknown: the setting is the safe advice
    assert advice([1, 16, 32], 32) == {KEY: [0, 15, 31]}  # hs[1] and hs[N] are layer outputs too
    assert advice([2, 3, 4], 5) == {KEY: [1, 2, 3]}  # N <= 5: the default refuses, a setting serves
    assert engine_view(release, {}, target_model_type="llama", target_num_layers=32).capture_setting is None


def test_engines_lists_the_trtllm_records_with_their_sources() -> None:
    listing = run_cli("engines", "--json")
    assert listing.returncode == 0, listing.stderr
    docs = {d["release"]: d for d in json.loads(listing.stdout)}
    for r in PYTORCH:
        assert docs[r.name]["engine"] == "trtllm" and "f933a60" in docs[r.name]["source"]
        assert docs[r.name]["deployed"] is False
        assert any(
            b["cite"].startswith("tensorrt_llm/_torch/speculative/eagle3.py@") for b in docs[r.name]["behaviours"]
        )
    table = run_cli("engines")
    assert table.returncode == 0 and all(r.name in table.stdout for r in TRTLLM)
    one = run_cli("engines", "trtllm")
    assert one.returncode == 0 and "eagle3.py@f933a60" in one.stdout


# ---- trtllm@main-00679c6: the draft class of TensorRT-LLM's main branch -------------------------------------------
# modeling_speculative.py@00679c6: Eagle3ForCausalLM, MLA when kv_lora_rank is non-zero (:897-899); fc_norm from the
# top level (:737), norm_before_fc from eagle_config only (:704), norm_output from eagle_config.return_hidden_post_norm
# or the top level (:712-714); 1.2.0rc2 (b35ac1b) has none of these.

MAIN, RC = "trtllm@main-00679c6", "trtllm@1.2"
KIMI = json.loads(
    (Path(__file__).resolve().parents[2] / "fixtures/real-configs/torchspec__kimi_k3_eagle3_mla.json").read_text()
)


def test_main_builds_mla_for_a_draft_with_kv_lora_rank() -> None:
    main = engine_view(MAIN, KIMI, target_model_type="kimi_k2", target_num_layers=61)
    assert (main.attention, main.mla_built) == ("mla", True) and "kv_lora_rank is 512" in main.citations["draft_class"]
    assert engine_view(RC, KIMI, target_model_type="kimi_k2", target_num_layers=61).attention == "mha"
    mha = engine_view(MAIN, {**KIMI, "kv_lora_rank": 0}, target_model_type="kimi_k2", target_num_layers=61)
    assert mha.attention == "mha" and mha.mla_built is None


@pytest.mark.parametrize(
    ("config", "flags"),
    [
        ({"fc_norm": True}, (True, False, False)),
        ({"eagle_config": {"norm_before_fc": True}}, (False, True, False)),
        ({"norm_before_fc": True}, (False, False, False)),  # the top level is not read
        ({"eagle_config": {"return_hidden_post_norm": True}}, (False, False, True)),
        ({"norm_output": True}, (False, False, True)),
    ],
)
def test_main_reads_the_eagle3_1_flags_where_its_code_does(config: dict[str, object], flags: tuple[bool, ...]) -> None:
    main = engine_view(MAIN, config, target_model_type="llama", target_num_layers=32)
    assert (main.fc_norm, main.norm_before_fc, main.norm_output) == flags
    rc = engine_view(RC, config, target_model_type="llama", target_num_layers=32)
    assert (rc.fc_norm, rc.norm_before_fc, rc.norm_output) == (False, False, False)


def test_main_record_cites_one_commit_for_its_draft_class() -> None:
    keys = {b.key: str(b.cite) for b in RELEASES[MAIN].behaviours}
    draft = {k: c for k, c in keys.items() if k.startswith("Eagle3ForCausalLM:")}
    assert len(draft) >= 15 and all(
        c.startswith("tensorrt_llm/_torch/models/modeling_speculative.py@00679c6:") for c in draft.values()
    )
    assert keys["defaults"].startswith("tensorrt_llm/_torch/speculative/eagle3.py@f933a60:")
