"""normalize: every layout to canonical with the same semantics and the same tensor values, nothing lost."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from jsonschema import Draft202012Validator
from safetensors.torch import load_file

from eagle_convert.errors import InputError
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.normalize.plan import NormalizeRefused, normalize_checkpoint
from eagle_convert.read.checkpoint import open_checkpoint
from eagle_convert.releases import FAMILY_MODEL_TYPE, RELEASES, engine_view
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS
from tests.conftest import SCHEMAS, run_cli

VALIDATOR = Draft202012Validator(json.loads((SCHEMAS / "normalize-report.schema.json").read_text()))
CONVERTIBLE = sorted(
    n
    for n, lay in LAYOUTS.items()
    if lay.expect.producer not in ("eagle1",) and not lay.expect.moe and lay.expect.convention != "ambiguous"
)


def _target(fx: Path, name: str) -> Path:
    return fx / "targets" / ("target-kimi" if LAYOUTS[name].attention == "mla" else "target-llama")


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for shard in sorted(path.glob("*.safetensors")):
        out.update(load_file(shard))
    return out


def _digests(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir()) if p.is_file()}


def _semantics(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "attention": doc["attention"],
        "eagle_version": doc["eagle_version"],
        "flags": doc["flags"],
        "hidden_state_indices": doc["aux_layers"]["hidden_state_indices"],
        "K": doc["num_aux_hidden_states"],
        "vocab": {k: doc["vocab"][k] for k in ("vocab_size", "draft_vocab_size", "has_d2t")},
        "dims": {k: v for k, v in doc["dims"].items() if k not in ("draft_vocab_size_key", "target_hidden_size")},
    }


def _check_values(
    src: dict[str, torch.Tensor], out: dict[str, torch.Tensor], report: dict[str, Any], ids: list[int] | None
) -> None:
    """Every output tensor equals its source after undoing the documented split or permutation."""
    by_source: dict[str, list[dict[str, Any]]] = {}
    for action in report["tensors"]:
        by_source.setdefault(action["source"], []).append(action)
    for source, actions in by_source.items():
        kinds = {a["action"] for a in actions}
        if kinds == {"drop"}:
            assert all(a["target"] is None for a in actions)
            continue
        if source is None:  # derived t2d
            (derived,) = actions
            t2d, d2t = out[derived["target"]], out["d2t"]
            assert t2d.dtype == torch.bool and int(t2d.sum()) == d2t.numel()
            assert bool(t2d[torch.arange(d2t.numel()) + d2t].all())
            continue
        original = src[source]
        if kinds == {"split"}:
            pieces = torch.cat([out[a["target"]] for a in actions], dim=0)
            assert torch.equal(pieces, original), source
        elif kinds == {"permute"}:
            (a,) = actions
            order = sorted(range(len(ids or [])), key=lambda i: (ids or [])[i])
            k = len(order)
            blocks = original.reshape(original.shape[0] if original.dim() == 2 else 1, k, -1)
            expected = blocks[:, order, :].reshape(original.shape)
            assert torch.equal(out[a["target"]], expected), source
        elif kinds == {"convert"}:
            (a,) = actions
            assert torch.equal(out[a["target"]].to(torch.int64), original.to(torch.int64)), source
        else:
            (a,) = actions
            assert torch.equal(out[a["target"]], original), source
            assert out[a["target"]].dtype == original.dtype


@pytest.mark.parametrize("kind", ["layouts", "layouts-sharded"])
@pytest.mark.parametrize("name", CONVERTIBLE)
def test_normalize_to_portable(fx: Path, tmp_path: Path, name: str, kind: str) -> None:
    src = fx / kind / name
    target = _target(fx, name)
    before = _digests(src)
    report = normalize_checkpoint(src, tmp_path / "out", target=target).to_dict()
    VALIDATOR.validate(report)
    assert report["written"] and _digests(src) == before
    out = tmp_path / "out"
    doc_src = inspect_checkpoint(src, target=target).to_dict()
    doc_out = inspect_checkpoint(out, target=target).to_dict()
    assert doc_out["format"]["producer"] == "canonical"
    assert doc_out["format"]["layer_prefix"] == "midlayer."
    assert _semantics(doc_out) == _semantics(doc_src)
    assert not any(f["severity"] == "error" for f in doc_out["findings"]), doc_out["findings"]
    assert doc_out["vocab"]["has_t2d"] == doc_src["vocab"]["has_d2t"]
    assert (len(list(out.glob("*.safetensors"))) > 1) == (kind == "layouts-sharded")
    _check_values(_tensors(src), _tensors(out), report, doc_src["aux_layers"]["ids"])


@pytest.mark.parametrize("family", ["llama", "qwen", "deepseek", "gpt-oss"])
@pytest.mark.parametrize("name", ["specforge-mha", "speculators-mha", "modelopt-mla"])
def test_written_ids_select_the_trained_states_in_both_engines(
    fx: Path, tmp_path: Path, name: str, family: str
) -> None:
    report = normalize_checkpoint(fx / "layouts" / name, tmp_path / "out", target_family=family).to_dict()
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    trained = report["semantics"]["hidden_states"]
    assert trained == [2, 6, 9]
    for release in RELEASES:  # every modelled release reads the written config as trained
        view = engine_view(release, config, target_model_type=FAMILY_MODEL_TYPE[family], target_num_layers=12)
        if not view.target_eagle3 and view.hidden_state_indices is None:  # no config feeds it: the target class
            assert view.problems, release  # captures nothing (tokenspeed's Qwen3), said as a problem, not a reading
            continue
        assert view.hidden_state_indices == trained, release


def test_speculators_round_trip(fx: Path, tmp_path: Path) -> None:
    src = fx / "layouts-sharded" / "speculators-mha-eagle3.1"
    normalize_checkpoint(src, tmp_path / "portable", target_family="llama")
    normalize_checkpoint(tmp_path / "portable", tmp_path / "back", profile="speculators")
    a, b = inspect_checkpoint(src).to_dict(), inspect_checkpoint(tmp_path / "back").to_dict()
    assert b["format"]["producer"] == "speculators"
    assert _semantics(a) == _semantics(b)
    assert b["aux_layers"]["location"] == "top-level" and b["aux_layers"]["ids"] == a["aux_layers"]["ids"]
    src_cfg = json.loads((src / "config.json").read_text())
    back_cfg = json.loads((tmp_path / "back" / "config.json").read_text())
    for key in ("speculators_config", "speculators_model_type", "draft_vocab_size", "target_hidden_size"):
        assert back_cfg[key] == src_cfg[key], key
    assert back_cfg["transformer_layer_config"]["hidden_size"] == src_cfg["transformer_layer_config"]["hidden_size"]
    src_t, back_t = _tensors(src), _tensors(tmp_path / "back")
    assert set(src_t) == set(back_t)
    for name, tensor in src_t.items():
        assert torch.equal(back_t[name], tensor) and back_t[name].dtype == tensor.dtype, name


def test_ambiguous_ids_are_refused_with_both_readings(fx: Path, tmp_path: Path) -> None:
    src = fx / "layouts" / "torchspec-mla-eagle3.1-vllm"
    with pytest.raises(NormalizeRefused) as info:
        normalize_checkpoint(src, tmp_path / "out", target_family="deepseek")
    assert (
        "output-of selects hs[3, 7, 10]" in info.value.message and "input-to selects hs[2, 6, 9]" in info.value.message
    )
    assert "--aux-convention" in (info.value.hint or "")
    assert not (tmp_path / "out").exists()
    report = normalize_checkpoint(src, tmp_path / "out", target_family="deepseek", aux_convention="input-to")
    assert report.semantics["hidden_states"] == [2, 6, 9]


def test_ids_without_target_family_are_refused(fx: Path, tmp_path: Path) -> None:
    with pytest.raises(NormalizeRefused, match="family is unknown"):
        normalize_checkpoint(fx / "layouts" / "specforge-mha", tmp_path / "out")
    report = normalize_checkpoint(fx / "layouts" / "specforge-mha", tmp_path / "out", profile="vllm")
    assert report.config["eagle_aux_hidden_state_layer_ids"] == [2, 6, 9] and "eagle_config" in report.config


@pytest.mark.parametrize("name", ["eagle1-mha", "specforge-moe"])
def test_eagle1_and_moe_are_refused(fx: Path, tmp_path: Path, name: str) -> None:
    with pytest.raises(NormalizeRefused):
        normalize_checkpoint(fx / "layouts" / name, tmp_path / "out", target_family="llama")
    assert not (tmp_path / "out").exists()


def test_unknown_tensor_is_an_error_naming_key_and_layout(tmp_path: Path) -> None:
    from fixtures.tensors import Spec, write_safetensors

    src = write_layout(tmp_path / "src", LAYOUTS["specforge-mha"])
    specs = [*LAYOUTS["specforge-mha"].tensors(), Spec("midlayer.mystery_gate.weight", "BF16", (4,))]
    write_safetensors(src / "model.safetensors", specs, vocab=256, draft_vocab=128)
    with pytest.raises(InputError) as info:
        normalize_checkpoint(src, tmp_path / "out", target_family="llama")
    assert "midlayer.mystery_gate.weight" in info.value.message and "midlayer." in info.value.message
    assert not (tmp_path / "out").exists()


def test_dry_run_writes_nothing_and_lists_every_change(fx: Path, tmp_path: Path) -> None:
    report = normalize_checkpoint(
        fx / "layouts" / "modelopt-mha-int32-d2t", tmp_path / "out", target_family="llama", dry_run=True
    ).to_dict()
    VALIDATOR.validate(report)
    assert not (tmp_path / "out").exists() and not report["written"]
    actions = {a["action"] for a in report["tensors"]}
    assert {"rename", "convert", "derive", "drop"} <= actions
    assert [d["source"] for d in report["dropped"]] == ["layers.0.self_attn.rotary_emb.inv_freq"]
    keys = {c["key"]: c for c in report["config_changes"]}
    assert keys["eagle_aux_hidden_state_layer_ids"]["change"] == "added"
    assert "eagle_config.eagle_aux_hidden_state_layer_ids" not in keys  # [1, 5, 8] is already SGLang's reading
    assert report["config"]["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 5, 8]
    assert all(c["why"] for c in report["config_changes"]), [c for c in report["config_changes"] if not c["why"]]


def test_existing_out_needs_force(fx: Path, tmp_path: Path) -> None:
    src = fx / "layouts" / "specforge-mha"
    normalize_checkpoint(src, tmp_path / "out", target_family="llama")
    with pytest.raises(InputError, match="exists"):
        normalize_checkpoint(src, tmp_path / "out", target_family="llama")
    normalize_checkpoint(src, tmp_path / "out", target_family="qwen", force=True)
    assert json.loads((tmp_path / "out" / "config.json").read_text())["eagle_convert"]["target_family"] == "qwen"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_max_shard_size_resplits(fx: Path, tmp_path: Path) -> None:
    normalize_checkpoint(
        fx / "layouts" / "specforge-mha", tmp_path / "out", target_family="llama", max_shard_size=40_000
    )
    ckpt = open_checkpoint(tmp_path / "out")
    assert len(ckpt.shards) > 2 and all(s.size < 40_000 + 4096 for s in ckpt.shards)


def test_pickle_needs_allow_pickle_and_malicious_payload_never_runs(fx: Path, tmp_path: Path) -> None:
    src = fx / "pickle" / "eagle-official-bin"
    marker = fx / "pickle" / "UNPICKLED"
    with pytest.raises(NormalizeRefused, match="pickle"):
        normalize_checkpoint(src, tmp_path / "out", target_family="llama")
    with pytest.raises(InputError, match="weights-only loader refused"):
        normalize_checkpoint(src, tmp_path / "out", target_family="llama", allow_pickle=True)
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_benign_pickle_is_converted(tmp_path: Path) -> None:
    src = write_layout(tmp_path / "src", LAYOUTS["eagle-mha"])
    state = load_file(src / "model.safetensors")
    (src / "model.safetensors").unlink()
    torch.save(state, src / "pytorch_model.bin")
    report = normalize_checkpoint(src, tmp_path / "out", target=None, target_family="llama", allow_pickle=True)
    assert report.written and any(f.rule_id == "EC003" for f in report.findings)
    out = _tensors(tmp_path / "out")
    for name, tensor in state.items():
        assert torch.equal(out[name], tensor)


def test_cli_normalize_json_and_errors(fx: Path, tmp_path: Path) -> None:
    src = fx / "layouts-sharded" / "nemo-mha-eagle3.1"
    result = run_cli("normalize", str(src), str(tmp_path / "out"), "--json", "--target-family", "llama")
    assert result.returncode == 0, result.stderr
    VALIDATOR.validate(json.loads(result.stdout))
    again = run_cli("normalize", str(src), str(tmp_path / "out"))
    assert again.returncode == 2 and again.stderr.startswith("Error: ") and "--force" in again.stderr
    ambiguous = run_cli(
        "normalize",
        str(fx / "layouts" / "torchspec-mla-eagle3.1-vllm"),
        str(tmp_path / "x"),
        "--target-family",
        "deepseek",
    )
    assert ambiguous.returncode == 2 and "ambiguous" in ambiguous.stderr.splitlines()[0]
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("profile", "top", "nested"), [("sglang", False, True), ("vllm", True, False), ("portable", True, True)]
)
def test_single_engine_profiles_write_only_what_that_engine_reads(
    fx: Path, tmp_path: Path, profile: str, top: bool, nested: bool
) -> None:
    report = normalize_checkpoint(
        fx / "layouts" / "specforge-mha-eagle3.1", tmp_path / "out", profile=profile, target_family="qwen"
    )
    config = report.config
    assert ("eagle_aux_hidden_state_layer_ids" in config) == top
    assert ("eagle_aux_hidden_state_layer_ids" in config.get("eagle_config", {})) == nested
    doc = inspect_checkpoint(tmp_path / "out").to_dict()
    assert doc["aux_layers"]["hidden_state_indices"] == [2, 6, 9]
    assert doc["flags"]["fc_norm"] and doc["flags"]["norm_output"]


def test_output_that_reads_differently_is_never_committed(
    fx: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pre-commit re-read catches a config that would select other hidden states (here: ids off by one)."""
    from eagle_convert.normalize import profiles

    original = profiles.PROFILES["portable"]

    def off_by_one(cfg: dict[str, Any], sem: Any, reasons: dict[str, str]) -> dict[str, Any]:
        out = original(cfg, sem, reasons)
        out["eagle_aux_hidden_state_layer_ids"] = [i + 1 for i in out["eagle_aux_hidden_state_layer_ids"]]
        return out

    monkeypatch.setitem(profiles.PROFILES, "portable", off_by_one)
    with pytest.raises(RuntimeError, match="reads differently"):
        normalize_checkpoint(fx / "layouts" / "specforge-mha", tmp_path / "out", target_family="llama")
    assert list(tmp_path.iterdir()) == []


def test_unknown_config_keys_survive_and_provenance_is_recorded(tmp_path: Path) -> None:
    lay = LAYOUTS["angelslim-mha"]
    custom = type(lay)(**{**lay.__dict__, "config": {**lay.config, "my_team_note": {"trained_on": "chat-v3"}}})
    src = write_layout(tmp_path / "src", custom)
    normalize_checkpoint(src, tmp_path / "out", target=None, target_family="qwen")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["my_team_note"] == {"trained_on": "chat-v3"}
    assert config["target_model_type"] == "qwen3" and config["rms_norm_eps"] == lay.config["rms_norm_eps"]
    assert config["eagle_convert"]["source_producer"] == "angelslim"
    metadata = open_checkpoint(tmp_path / "out").shards[0].metadata
    assert json.loads(metadata["eagle_convert"])["source_producer"] == "angelslim"
    assert "eagle_aux_hidden_state_layer_ids" not in config  # no target N: the defaults stay implicit


def test_config_only_is_nothing_to_normalize(fx: Path, tmp_path: Path) -> None:
    result = run_cli("normalize", str(fx / "layouts" / "specforge-mha" / "config.json"), str(tmp_path / "out"))
    assert result.returncode == 3 and not (tmp_path / "out").exists()


def test_profiles_whose_releases_build_no_fc_bias_refuse_fc_bias_naming_them(tmp_path: Path) -> None:
    lay = LAYOUTS["specforge-mha"]
    src = write_layout(
        tmp_path / "src", type(lay)(**{**lay.__dict__, "fc_bias": True, "config": {**lay.config, "bias": True}})
    )
    lacking = [r for r in RELEASES.values() if engine_view(r, {**lay.config, "bias": True}, target_model_type=None,
                                                            target_num_layers=None).bias_is != "fc"]  # fmt: skip
    assert lacking, "the records say every release builds an fc bias: this test has nothing to refuse"
    for profile in ("vllm", "portable"):
        with pytest.raises(NormalizeRefused) as info:
            normalize_checkpoint(src, tmp_path / profile, target_family="llama", profile=profile)
        assert all(r.name in info.value.message for r in lacking if r.engine in ("vllm",)), info.value.message
        assert info.value.hint == "use --profile sglang"
        assert not (tmp_path / profile).exists()
    report = normalize_checkpoint(src, tmp_path / "out", target_family="llama", profile="sglang", dry_run=True)
    assert report.profile == "sglang"
