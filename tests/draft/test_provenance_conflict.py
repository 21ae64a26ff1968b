"""A hand edit against the tool's own provenance record is an error nobody can fix by guessing (issue 30, EC113).

normalize records the hidden states it wrote (``eagle_convert.hidden_state_indices``) and the convention of each id
location. Top-level ids edited one layer early then contradict the record and ``eagle_config``: no finding may
believe the edit, blame the engine that reads the draft right, or promise that normalize fixes it, and normalize
refuses the draft until ``--aux-convention`` says which reading is true.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from eagle_convert.draft.aux_layers import record_conflict
from eagle_convert.normalize.plan import normalize_checkpoint
from fixtures.generate import write_layout, write_targets
from fixtures.layouts import LAYOUTS
from tests.conftest import run_cli

READING_RULES = {"EC103", "EC104", "EC109"}  # the findings that depend on which hidden states were trained


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a draft `normalize` wrote from SpecForge's output-of ids [1, 5, 8], the target it was written for)."""
    root = tmp_path_factory.mktemp("provenance")
    write_targets(root / "targets")
    target = root / "targets" / "target-llama"
    write_layout(root / "specforge", LAYOUTS["specforge-mha"])
    normalize_checkpoint(root / "specforge", root / "normalized", target=target)
    return root / "normalized", target


def _variant(src: Path, dst: Path, edit: Any) -> Path:
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    edit(config)
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    return dst


def _top_one_layer_early(config: dict[str, Any]) -> None:
    config["eagle_aux_hidden_state_layer_ids"] = [j - 1 for j in config["eagle_aux_hidden_state_layer_ids"]]


def _nested_one_layer_early(config: dict[str, Any]) -> None:
    nested = config["eagle_config"]
    nested["eagle_aux_hidden_state_layer_ids"] = [j - 1 for j in nested["eagle_aux_hidden_state_layer_ids"]]


def _digests(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def _verify_json(draft: Path, target: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    done = run_cli("verify", str(draft), "--target", str(target), "--no-hash", "--json", *extra)
    return done.returncode, json.loads(done.stdout)


def test_the_written_draft_is_consistent_with_its_record(made: tuple[Path, Path]) -> None:
    draft, target = made
    config = json.loads((draft / "config.json").read_text())
    assert config["eagle_aux_hidden_state_layer_ids"] == [2, 6, 9]
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 5, 8]
    assert config["eagle_convert"]["hidden_state_indices"] == [2, 6, 9]
    code, doc = _verify_json(draft, target)
    assert code == 0 and doc["findings"] == [], doc["findings"]  # no false positive on the tool's own output
    inspected = json.loads(run_cli("inspect", str(draft), "--target", str(target), "--json").stdout)
    assert inspected["aux_layers"]["hidden_state_indices"] == [2, 6, 9]
    assert "EC113" not in {f["rule_id"] for f in inspected["findings"]}


def test_inspect_does_not_believe_the_edit(made: tuple[Path, Path], tmp_path: Path) -> None:
    draft, target = made
    edited = _variant(draft, tmp_path / "edited", _top_one_layer_early)
    done = run_cli("inspect", str(edited), "--target", str(target), "--json")
    doc = json.loads(done.stdout)
    assert doc["aux_layers"]["convention"] == "ambiguous" and doc["aux_layers"]["hidden_state_indices"] is None
    (conflict,) = [f for f in doc["findings"] if f["rule_id"] == "EC113"]
    assert conflict["severity"] == "error" and conflict["fixable"] is False
    # the finding names which ids select which hidden states under each reading, and the option that decides
    message = conflict["message"]
    assert "--aux-convention output-of|input-to" in message and "top-level ids [1, 5, 8]" in message
    assert "output-of selects hs[2, 6, 9]" in message and "input-to selects hs[1, 5, 8]" in message
    assert "hidden_state_indices name hs[2, 6, 9]" in message
    assert "EC101" not in {f["rule_id"] for f in doc["findings"]}  # said once, by EC113
    assert "--aux-convention" in conflict["fix"]
    human = run_cli("inspect", str(edited), "--target", str(target)).stdout
    assert "EC113" in human and "[*]" not in human


def test_verify_fails_without_blaming_the_engine_or_promising_a_fix(made: tuple[Path, Path], tmp_path: Path) -> None:
    draft, target = made
    edited = _variant(draft, tmp_path / "edited", _top_one_layer_early)
    code, doc = _verify_json(edited, target)
    assert code == 1
    rules = {f["rule_id"] for f in doc["findings"]}
    assert "EC113" in rules and "EC104" not in rules, doc["findings"]
    for f in doc["findings"]:
        if f["rule_id"] in READING_RULES | {"EC113"}:
            assert f["fixable"] is False and "normalize` fixes it" not in f["message"], f
            assert "--aux-convention" in f["fix"], f
    done = run_cli("verify", str(edited), "--target", str(target), "--no-hash")
    human = done.stdout + done.stderr
    assert done.returncode == 1 and "EC113" in human
    assert "EC104 [*]" not in human and "EC103 [*]" not in human and "normalize` fixes it" not in human


def test_normalize_refuses_until_the_reading_is_given(made: tuple[Path, Path], tmp_path: Path) -> None:
    draft, target = made
    edited = _variant(draft, tmp_path / "edited", _top_one_layer_early)
    before = _digests(edited)
    out = tmp_path / "out"
    done = run_cli("normalize", str(edited), str(out), "--target", str(target))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "EC113" in done.stderr and "--aux-convention output-of|input-to" in done.stderr
    assert not out.exists() and _digests(edited) == before  # input untouched, nothing left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edited"]


@pytest.mark.parametrize(
    ("reading", "top", "nested", "states"),
    [("output-of", [2, 6, 9], [1, 5, 8], [2, 6, 9]), ("input-to", [1, 5, 8], [0, 4, 7], [1, 5, 8])],
)
def test_normalize_with_the_reading_writes_a_consistent_draft(
    made: tuple[Path, Path], tmp_path: Path, reading: str, top: list[int], nested: list[int], states: list[int]
) -> None:
    """output-of: the record was right and the edit wrong; input-to: the edit was right. Either way, every id
    location and the record then name the same hidden states, and the result verifies clean."""
    draft, target = made
    edited = _variant(draft, tmp_path / "edited", _top_one_layer_early)
    out = tmp_path / "out"
    done = run_cli("normalize", str(edited), str(out), "--target", str(target), "--aux-convention", reading)
    assert done.returncode == 0, done.stdout + done.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["eagle_aux_hidden_state_layer_ids"] == top
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == nested
    assert config["eagle_convert"]["hidden_state_indices"] == states
    code, doc = _verify_json(out, target)
    assert code == 0 and doc["findings"] == [], doc["findings"]


def test_the_reading_given_to_verify_overrides_the_record(made: tuple[Path, Path], tmp_path: Path) -> None:
    draft, target = made
    edited = _variant(draft, tmp_path / "edited", _top_one_layer_early)
    doc = json.loads(
        run_cli("inspect", str(edited), "--target", str(target), "--json", "--aux-convention", "input-to").stdout
    )
    assert doc["aux_layers"]["hidden_state_indices"] == [1, 5, 8]
    assert "EC113" not in {f["rule_id"] for f in doc["findings"]}
    assert any("the record it overrides" in e for e in doc["aux_layers"]["evidence"])


def test_the_two_id_locations_disagree_beyond_the_recorded_conventions(made: tuple[Path, Path], tmp_path: Path) -> None:
    """eagle_config edited one layer early: SGLang would now read hs[1, 5, 8], vLLM still hs[2, 6, 9]."""
    draft, target = made
    edited = _variant(draft, tmp_path / "edited", _nested_one_layer_early)
    code, doc = _verify_json(edited, target)
    assert code == 1
    (conflict,) = [f for f in doc["findings"] if f["rule_id"] == "EC113"]
    assert conflict["fixable"] is False and "eagle_config ids [0, 4, 7]" in conflict["message"]
    assert not [f for f in doc["findings"] if f["fixable"] and f["rule_id"] in READING_RULES]
    # the record's hidden states gone as well: the two locations alone still contradict each other
    bare = _variant(edited, tmp_path / "bare", lambda config: config["eagle_convert"].pop("hidden_state_indices"))
    code, doc = _verify_json(bare, target)
    assert code == 1 and "EC113" in {f["rule_id"] for f in doc["findings"]}
    assert run_cli("normalize", str(bare), str(tmp_path / "out"), "--target", str(target)).returncode == 2
    assert not (tmp_path / "out").exists()


def test_record_conflict_reads_each_location_under_its_recorded_convention() -> None:
    conventions = {"top-level": "input-to", "eagle_config": "output-of"}
    assert record_conflict([2, 6, 9], [1, 5, 8], conventions, [2, 6, 9]) is None
    assert record_conflict([2, 6, 9], None, conventions, [2, 6, 9]) is None  # one location written (vllm profile)
    assert record_conflict([2, 6, 9], [1, 5, 8], {}, None) is None  # nothing on record: nothing to contradict
    assert record_conflict([1, 5, 8], [1, 5, 8], conventions, [2, 6, 9]) is not None
    assert record_conflict([2, 6, 9], [0, 4, 7], conventions, None) is not None
    assert record_conflict([1, 5, 8], None, conventions, [2, 6, 9]) is not None


@pytest.mark.slow
def test_on_the_trained_pair_the_probe_sides_with_the_record(tmp_path: Path) -> None:
    """The same edit against weights trained on hs[1, 3, 5]: no EC104 believing the edit beside a probe that
    measures the other way; the probe measures the record's reading best."""
    from safetensors.torch import load_file

    from eagle_convert.rules.registry import fixable
    from eagle_convert.verify.run import verify_checkpoint
    from fixtures.trained_pair import trained_pair

    pair = trained_pair()
    draft = _variant(pair.draft_dir, tmp_path / "draft", _top_one_layer_early)
    ids = load_file(pair.token_ids_path)["token_ids"][:4, :64].tolist()
    report = verify_checkpoint(draft, target=pair.target_dir, level="target", token_ids=ids, compute_hashes=False)
    rules = {f.rule_id for f in report.findings}
    assert "EC113" in rules and "EC104" not in rules, report.findings
    assert not [f for f in report.findings if f.rule_id in READING_RULES and fixable(f.rule_id, report.findings)]
    measured = [f for f in report.findings if f.rule_id in ("EC711", "EC713")]
    assert measured and measured[0].expected["hidden_states"] == [1, 3, 5], report.findings
