"""Config values are read with their types (issue 38, item 5).

A draft's key of the wrong type is an EC507 error at inspect and verify, naming the key and the value, and normalize
refuses the draft with nothing written (exit 2); a target's is the user's input error (exit 2) naming the key and
the value. A null the engines read in a defined way (a flag: false; the aux-layer ids: absent) is an EC508 warning
that says what each selected release does. Before: every case below passed verify and normalize (exit 0), and a
draft whose ``hidden_size`` was a string stopped verify with exit 2 instead of a finding.

The cases name keys and values independently of the tool's own type table: each key is one the tool reads (the
draft's sizes and flags, its EAGLE3 keys, the transformers keys engines read), each value one a hand-edited or
templated config really carries (a quoted boolean or number, an empty name, a list for an object).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from eagle_convert.errors import ConfigError, NormalizeRefused
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.verify.run import verify_checkpoint
from fixtures.generate import write_layout, write_targets
from fixtures.layouts import LAYOUTS, TARGETS
from tests.conftest import run_cli

# (dotted key, a value of the wrong type): the draft keys the tool reads, at the top level or nested
DRAFT_CASES: list[tuple[str, Any]] = [
    ("tie_word_embeddings", "true"),
    ("tie_word_embeddings", "false"),
    ("torch_dtype", "bfloat17"),
    ("torch_dtype", "auto"),
    ("torch_dtype", 16),
    ("dtype", "fp16"),
    ("quantization_config", [1, 2]),
    ("quantization_config", "fp8"),
    ("model_type", ""),
    ("model_type", 7),
    ("hidden_act", ["silu"]),
    ("fc_norm", "false"),
    ("norm_output", 1),
    ("norm_before_fc", "no"),
    ("norm_before_residual", [True]),
    ("use_aux_norm", "yes"),
    ("bias", "false"),
    ("attention_bias", 0),
    ("mlp_bias", "false"),
    ("use_cache", "true"),
    ("hidden_size", "64"),
    ("intermediate_size", 128.0),
    ("num_attention_heads", True),
    ("num_key_value_heads", "2"),
    ("head_dim", [16]),
    ("num_hidden_layers", "1"),
    ("vocab_size", "256"),
    ("draft_vocab_size", "128"),
    ("target_hidden_size", {"value": 64}),
    ("max_position_embeddings", "4k"),
    ("num_aux_hidden_states", "3"),
    ("rms_norm_eps", "1e-6"),
    ("rope_theta", "10000"),
    ("rope_scaling", "linear"),
    ("rope_parameters", ["default"]),
    ("architectures", "LlamaForCausalLMEagle3"),
    ("architectures", [3]),
    ("eagle_aux_hidden_state_layer_ids", "2,6,9"),
    ("eagle_aux_hidden_state_layer_ids", [2, "6", 9]),
    ("eagle_config", ["eagle_aux_hidden_state_layer_ids"]),
    ("eagle_config.eagle_aux_hidden_state_layer_ids", {"ids": [1, 5, 8]}),
    ("eagle_config.use_aux_hidden_state", "true"),
    ("eagle_config.norm_before_fc", "false"),
    ("quantization_config.quant_method", 8),
    ("initializer_range", "0.02"),
    ("sliding_window", "4096"),
    ("layer_types", "full_attention"),
]
# (dotted key, a value of the wrong type): the target keys the tool reads
TARGET_CASES: list[tuple[str, Any]] = [
    ("model_type", 7),
    ("model_type", ""),
    ("architectures", "LlamaForCausalLM"),
    ("quantization_config", [1, 2]),
    ("torch_dtype", "bfloat17"),
    ("tie_word_embeddings", "false"),
    ("num_attention_heads", "4"),
    ("rms_norm_eps", "1e-6"),
    ("rope_theta", "500000"),
    ("rope_scaling", "llama3"),
    ("max_position_embeddings", "4096"),
    ("vocab_size", 256.0),
    ("eos_token_id", "2"),
    ("_name_or_path", 3),
]


def _set(config: dict[str, Any], key: str, value: Any) -> None:
    head, _, leaf = key.rpartition(".")
    holder = config.setdefault(head, {}) if head else config
    holder[leaf] = value


def _draft(tmp: Path, key: str | None = None, value: Any = None, layout: str = "canonical-mha") -> Path:
    draft = write_layout(tmp / "draft", LAYOUTS[layout])
    if key is not None:
        config = json.loads((draft / "config.json").read_text(encoding="utf-8"))
        _set(config, key, value)
        (draft / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return draft


def _target(tmp: Path, key: str | None = None, value: Any = None) -> Path:
    write_targets(tmp / "targets")
    target = tmp / "targets" / "target-llama"
    if key is not None:
        config = dict(TARGETS["target-llama"])
        _set(config, key, value)
        (target / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return target


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_the_unchanged_draft_and_target_pass_with_no_type_finding(tmp_path: Path) -> None:
    report = verify_checkpoint(_draft(tmp_path), target=str(_target(tmp_path)), compute_hashes=False)
    assert report.status == "pass" and not report.findings, report.findings


@pytest.mark.parametrize(("key", "value"), DRAFT_CASES, ids=[f"{k}={v!r}" for k, v in DRAFT_CASES])
def test_a_draft_value_of_the_wrong_type_is_ec507_and_normalize_refuses(tmp_path: Path, key: str, value: Any) -> None:
    draft, target = _draft(tmp_path, key, value), _target(tmp_path)
    before = _files(draft)
    shown = repr(value)[:40]
    named = [f for f in inspect_checkpoint(draft, target=target).findings if f.rule_id == "EC507"]
    assert [f for f in named if key in f.message and shown in f.message], (key, value, named)
    report = verify_checkpoint(draft, target=str(target), compute_hashes=False)
    ec507 = [f for f in report.findings if f.rule_id == "EC507"]
    assert report.status == "fail" and ec507 and all(f.severity == "error" for f in ec507), report.findings
    assert any(key in f.message and shown in f.message for f in ec507), ec507
    with pytest.raises(NormalizeRefused) as refused:
        normalize_checkpoint(draft, tmp_path / "out", target=str(target))
    assert key in refused.value.message and shown in refused.value.message, refused.value.message
    assert not (tmp_path / "out").exists()
    assert _files(draft) == before


@pytest.mark.parametrize(
    ("key", "value"),
    [("transformer_layer_config.hidden_size", "64"), ("transformer_layer_config.tie_word_embeddings", "false")],
)
def test_a_speculators_layer_key_of_the_wrong_type_is_named_with_its_object(
    tmp_path: Path, key: str, value: Any
) -> None:
    draft = _draft(tmp_path, key, value, layout="speculators-mha")
    ec507 = [f for f in verify_checkpoint(draft, compute_hashes=False).findings if f.rule_id == "EC507"]
    assert [f for f in ec507 if f.message.startswith(f"{key} is {value!r}")], ec507
    with pytest.raises(NormalizeRefused):
        normalize_checkpoint(draft, tmp_path / "out", target=str(_target(tmp_path)))


@pytest.mark.parametrize(("key", "value"), TARGET_CASES, ids=[f"{k}={v!r}" for k, v in TARGET_CASES])
def test_a_target_value_of_the_wrong_type_is_the_users_input_error(tmp_path: Path, key: str, value: Any) -> None:
    draft, target = _draft(tmp_path), _target(tmp_path, key, value)
    for run in (
        lambda: inspect_checkpoint(draft, target=target),
        lambda: verify_checkpoint(draft, target=str(target), compute_hashes=False),
        lambda: normalize_checkpoint(draft, tmp_path / "out", target=str(target)),
    ):
        with pytest.raises(ConfigError) as wrong:
            run()
        assert f"{key} is {value!r}" in wrong.value.message and "config.json" in wrong.value.message
    assert not (tmp_path / "out").exists()


def test_a_nested_target_text_config_value_is_named_with_its_object(tmp_path: Path) -> None:
    write_targets(tmp_path / "targets")
    target = tmp_path / "targets" / "target-kimi"
    config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    config["text_config"]["model_type"] = ["kimi_k2"]
    (target / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"text_config\.model_type is \['kimi_k2'\]"):
        inspect_checkpoint(_draft(tmp_path), target=target)


@pytest.mark.parametrize(
    "case",
    [
        "tie_word_embeddings='true'",
        "torch_dtype='bfloat17'",
        "quantization_config=[1]",
        "model_type=''",
        "target model_type=7",
    ],
)
def test_the_measured_examples_fail_verify_and_normalize_exits_2(tmp_path: Path, case: str) -> None:
    """Issue 38's examples through the CLI: verify exits 1 with the EC507 error (a target's value: exit 2), normalize
    exits 2 with one Error line naming the key and the value, and writes nothing."""
    where, _, assignment = case.rpartition(" ")
    key, _, literal = assignment.partition("=")
    value = {"'true'": "true", "'bfloat17'": "bfloat17", "[1]": [1], "''": "", "7": 7}[literal]
    on_target = where == "target"
    draft = _draft(tmp_path, None if on_target else key, value)
    target = _target(tmp_path, key if on_target else None, value)
    verified = run_cli("verify", str(draft), "--target", str(target), "--no-hash", "--format", "concise")
    normalized = run_cli("normalize", str(draft), str(tmp_path / "out"), "--target", str(target))
    named = f"{key} is {value!r}"
    if on_target:
        assert verified.returncode == 2 and named in verified.stderr, verified.stderr
    else:
        assert verified.returncode == 1, verified.stdout + verified.stderr
        assert [line for line in verified.stdout.splitlines() if "EC507 error" in line and named in line]
    errors = [line for line in normalized.stderr.splitlines() if line.startswith("Error: ")]
    assert normalized.returncode == 2 and len(errors) == 1 and named in errors[0], normalized.stderr
    assert "Traceback" not in normalized.stderr and not (tmp_path / "out").exists()


# ---- nulls the engines read in a defined way: EC508 warnings naming what each release does --------------------------


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("bias", "builds no"),
        ("fc_norm", "reads fc_norm as false"),
        ("norm_before_residual", "reads norm_before_residual as false"),
        ("eagle_config.use_aux_hidden_state", "reads use_aux_hidden_state as"),
        ("eagle_aux_hidden_state_layer_ids", "captures hs["),
        ("eagle_config.eagle_aux_hidden_state_layer_ids", "captures hs["),
    ],
)
def test_a_null_the_engines_read_as_a_default_is_an_ec508_warning_per_release(
    tmp_path: Path, key: str, said: str
) -> None:
    draft, target = _draft(tmp_path, key, None), _target(tmp_path)
    report = verify_checkpoint(draft, target=str(target), compute_hashes=False, engine="vllm@0.33-v1,sglang@0.5.23")
    (ec508,) = [f for f in report.findings if f.rule_id == "EC508"]
    assert ec508.severity == "warning" and ec508.message.startswith(f"{key} is null: "), ec508
    per_release = dict(part.split(" ", 1) for part in ec508.message.split(": ", 1)[1].split("; "))
    assert set(per_release) == {"vllm@0.33-v1", "sglang@0.5.23"}, ec508.message
    assert all(said in reading for reading in per_release.values()), ec508.message
    assert not [f for f in report.findings if f.rule_id == "EC507"]


def test_null_ids_say_which_ids_each_release_falls_back_to(tmp_path: Path) -> None:
    """Top-level ids null beside eagle_config ids: a release that reads the top level first falls back to the nested
    ids, one that reads only eagle_config never saw the null; each is named with the states it captures."""
    draft, target = _draft(tmp_path, "eagle_aux_hidden_state_layer_ids", None), _target(tmp_path)
    report = verify_checkpoint(draft, target=str(target), compute_hashes=False, engine="all")
    (ec508,) = [f for f in report.findings if f.rule_id == "EC508"]
    for view in ("vllm@0.33-v1 reads eagle_config ids [1, 5, 8]", "sglang@0.5.23 reads eagle_config ids [1, 5, 8]"):
        assert view in ec508.message, ec508.message


def test_a_typed_field_null_stays_ec502_not_ec508(tmp_path: Path) -> None:
    report = verify_checkpoint(_draft(tmp_path, "tie_word_embeddings", None), compute_hashes=False)
    assert {"EC502"} <= {f.rule_id for f in report.findings} and "EC508" not in {f.rule_id for f in report.findings}


def test_no_real_config_has_a_value_of_the_wrong_type() -> None:
    """Every trainer's config in fixtures/real-configs reads without an EC507 (the types are the trainers' own)."""
    from eagle_convert.read.config import DraftConfig

    checked = 0
    for path in sorted((Path(__file__).resolve().parents[2] / "fixtures" / "real-configs").rglob("*.json")):
        config = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(config, dict):
            assert DraftConfig.from_dict(config, path).type_problems == (), path
            checked += 1
    assert checked >= 40


def test_a_copy_of_the_draft_keeps_the_wrong_value_as_written(tmp_path: Path) -> None:
    """The typed view reads a wrong value as absent, but the config as written is what the report and the engines'
    views see: nothing rewrites the user's value behind their back."""
    from eagle_convert.read.config import DraftConfig

    raw = json.loads((_draft(tmp_path) / "config.json").read_text(encoding="utf-8"))
    raw["fc_norm"] = "false"
    cfg = DraftConfig.from_dict(raw)
    assert cfg.fc_norm is None and cfg.raw["fc_norm"] == "false" and raw["fc_norm"] == "false"
    assert [p.key for p in cfg.type_problems] == ["fc_norm"]
    shutil.rmtree(tmp_path / "draft")


def test_inspect_and_normalize_say_what_the_releases_read_a_null_as(tmp_path: Path) -> None:
    """inspect shows the EC508 warning as verify does; normalize (which writes the flag out as false) reports what
    each release of its profile read the null as, beside the change it made."""
    draft, target = _draft(tmp_path, "bias", None), _target(tmp_path)
    shown = [f for f in inspect_checkpoint(draft, target=target).findings if f.rule_id == "EC508"]
    assert len(shown) == 1 and shown[0].message.startswith("bias is null: "), shown
    report = normalize_checkpoint(draft, tmp_path / "out", target=str(target), profile="vllm")
    (warned,) = [f for f in report.findings if f.rule_id == "EC508"]
    assert "vllm@0.33-v1 builds no o_proj bias" in warned.message and "sglang" not in warned.message, warned
    assert json.loads((tmp_path / "out" / "config.json").read_text(encoding="utf-8"))["bias"] is False
