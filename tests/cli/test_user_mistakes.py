"""A user's own mistake is exit 2 with one Error line and a Hint, before any work, never a finding against the draft
(issue 30): contradicting flags, probe options at a level that runs no probe, a missing or empty prompts file, token
ids from another tokenizer, a draft given as the target, an engine URL without a scheme.

Each case runs the real CLI in a subprocess, as a user's CI would.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.smollm2 import TARGET_CONFIG
from tests import cli_process
from tests.conftest import ROOT

DRAFT = ROOT / "fixtures" / "smollm2-eagle3"
TARGET = TARGET_CONFIG  # the committed draft's target


def _cli(*args: str, importtime: bool = False) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "eagle_convert", *args]
    return cli_process.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)


def _usage_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "\nHint: " in done.stderr and "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


@pytest.fixture()
def target(tmp_path: Path) -> Path:
    """SmolLM2's config beside one tiny safetensors file: a target with weights, as far as any check before the
    work looks (the weights themselves are never read by these cases)."""
    folder = tmp_path / "target"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TARGET))
    raw = b'{"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(4))
    return folder


@pytest.mark.parametrize("command", ["inspect", "verify"])
@pytest.mark.parametrize("flags", [("-q", "-v"), ("-v", "--quiet")])
def test_quiet_and_verbose_together_contradict(command: str, flags: tuple[str, str]) -> None:
    _usage_error(_cli(command, str(DRAFT), *flags), "contradict")


def test_json_and_another_format_contradict() -> None:
    _usage_error(_cli("verify", str(DRAFT), "--json", "--format", "sarif"), "--json and --format sarif")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--token-ids", "ids.json"),
        ("--prompts", "prompts.txt"),
        ("--reference-hidden-states", "states.safetensors"),
        ("--probe-steps", "5"),
        ("--probe-positions", "64"),
        ("--probe-text", "sampled"),
        ("--oracle", "transformers"),
    ],
)
@pytest.mark.parametrize("level", ["static", "tensors", "forward"])
def test_probe_options_at_a_level_without_the_probe_are_refused(
    tmp_path: Path, target: Path, option: str, value: str, level: str
) -> None:
    """Before: silently ignored, so a user who forgot --level target read a PASS as a probe's verdict."""
    given = str(tmp_path / value) if not value.isdigit() and value not in ("sampled", "transformers") else value
    done = _cli("verify", str(DRAFT), "--target", str(target), "--level", level, option, given)
    _usage_error(done, option, f"--level {level} does not run")


def test_a_missing_or_empty_prompts_file_is_exit_2_not_a_failed_draft(tmp_path: Path, target: Path) -> None:
    """Before: EC702 "the probe cannot run", exit 1, the draft reported as failing."""
    missing = tmp_path / "prompts.txt"
    args = ("verify", str(DRAFT), "--target", str(target), "--level", "target", "--no-hash")
    _usage_error(_cli(*args, "--prompts", str(missing)), "prompts.txt", "cannot read prompts")
    missing.write_text("\n  \n")
    _usage_error(_cli(*args, "--prompts", str(missing)), "no prompts")


def test_token_ids_past_the_targets_vocabulary_are_exit_2(tmp_path: Path, target: Path) -> None:
    """Before: EC702 against the draft, exit 1."""
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps([[1, 2, 3], [4, 60_000, 6]]))
    done = _cli("verify", str(DRAFT), "--target", str(target), "--level", "target", "--token-ids", str(ids))
    _usage_error(done, "id 60000 (in list 1) is past the target's vocabulary of 49152 ids")


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_a_draft_given_as_the_target_is_exit_2(command: str) -> None:
    """Before: verify failed the draft with six EC105 errors (the draft's one layer read as the target's depth)."""
    _usage_error(_cli(command, str(DRAFT), "--target", str(DRAFT)), "a speculative draft's config", "draft_vocab_size")


def test_an_engine_url_without_a_scheme_is_refused_before_torch_is_imported(target: Path) -> None:
    done = _cli("verify", str(DRAFT), "--target", str(target), "--engine-url", "10.0.0.5:8000", importtime=True)
    _usage_error(done, "is not an http(s)://HOST:PORT address")
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in lines}
    assert "eagle_convert" in imported and "torch" not in imported


def test_a_config_alone_is_gated_on_its_config_rules(tmp_path: Path, target: Path) -> None:
    """A pull request that edits only config.json is gated (issue 30): verify on the config alone runs the config
    rules at --level static, exit 0 or 1, and says which rules needed the weights; before, it exited 3 ("nothing to
    verify") while inspect found errors in the same file."""
    folder = tmp_path / "edited"
    folder.mkdir()
    config = json.loads((DRAFT / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config))
    good = _cli("verify", str(folder / "config.json"), "--target", str(target), "--format", "concise")
    assert good.returncode == 0, good.stdout + good.stderr
    config["eagle_aux_hidden_state_layer_ids"] = [4, 13, 40]  # past the target's 30 layers
    (folder / "config.json").write_text(json.dumps(config))
    bad = _cli("verify", str(folder / "config.json"), "--target", str(target), "--format", "concise")
    assert bad.returncode == 1 and "eagle_aux_hidden_state_layer_ids" in bad.stdout, bad.stdout + bad.stderr
