"""The user's path without surprises (issue 40, item 4): an optional dependency missing or too old is exit 2 naming
it and the install command, before any work; a dead server is exit 2 before the checkpoint is read or the probe
runs; several drafts with a stray folder among them are a usage error; every command's --help lists its exit codes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from eagle_convert.errors import AttachError, ExtraMissing, package_problem, require_packages
from tests.conftest import run_cli, run_cli_without


def _target_with_weights(fx: Path, out: Path) -> Path:
    """A target folder as verify's request sees it: its config and a safetensors file (which nothing may read when
    the run stops before any work)."""
    out.mkdir()
    shutil.copy(fx / "targets" / "target-llama" / "config.json", out / "config.json")
    (out / "model.safetensors").write_bytes(b"\xff" * 64)  # no valid header: reading it would be another error
    return out


@pytest.mark.parametrize("missing", ["accelerate", "transformers"])
def test_a_missing_reference_package_is_exit_2_naming_it_before_any_work(
    fx: Path, tmp_path: Path, missing: str
) -> None:
    """torch installed by hand without accelerate (or transformers): ``verify --level target`` was an internal
    error at 0421174; now one Error line naming the package and the install line, exit 2, nothing read."""
    target = _target_with_weights(fx, tmp_path / "target")
    draft = fx / "layouts" / "specforge-mha"
    r = run_cli_without({missing}, "verify", str(draft), "--target", str(target), "--level", "target", "--no-hash")
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert r.returncode == 2 and "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert len(errors) == 1 and f"{missing}, which is not installed" in errors[0], r.stderr
    assert "pip install 'eagle-convert[reference]'" in errors[0]


def test_a_reference_package_older_than_the_extra_asks_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The version range is the one this package's metadata declares for the reference extra (pyproject.toml)."""
    from importlib import metadata

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "4.40.0" if name == "transformers" else real(name))
    problem = package_problem("transformers")
    assert problem is not None and problem.startswith("transformers") and "but 4.40.0 is installed" in problem
    with pytest.raises(ExtraMissing, match=r"4\.40\.0 is installed"):
        require_packages("--level target", ("torch", "transformers"))
    assert package_problem("accelerate") is None and package_problem("torch") is None


def test_a_dead_server_is_an_error_before_the_checkpoint_is_read(
    fx: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--engine-url`` at a port nothing listens on: AttachError (exit 2) before the checkpoint is opened, so
    before any level or the probe runs (at 0421174 the whole probe ran first, then the run failed)."""
    from eagle_convert.real_engine.attached import AttachedServer
    from eagle_convert.verify import run as verify_run
    from eagle_convert.verify.request import VerifyRequest
    from tests.vllm_server import free_port

    opened: list[str] = []
    real_open = verify_run.Run.open
    monkeypatch.setattr(verify_run.Run, "open", lambda *a, **k: opened.append("open") or real_open(*a, **k))
    target = fx / "targets" / "target-llama"
    server = AttachedServer(f"http://127.0.0.1:{free_port()}", timeout=5.0)
    request = VerifyRequest(target=target, engine_run=server)
    with pytest.raises(AttachError) as down:
        verify_run.verify_checkpoint(fx / "layouts" / "specforge-mha", request)
    assert "127.0.0.1" in down.value.message and opened == []


def test_a_stray_folder_among_several_drafts_is_a_usage_error(fx: Path, tmp_path: Path) -> None:
    """``verify drafts/*`` where one entry holds no checkpoint: exit 2 naming it before any draft is verified (at
    0421174 its exit 3 hid behind the others' 1); one path alone still answers 3, nothing to check."""
    stray = tmp_path / "notes"
    stray.mkdir()
    (stray / "README.md").write_text("not a checkpoint\n")
    drafts = [str(fx / "layouts" / "specforge-mha"), str(stray), str(fx / "layouts" / "speculators-mha")]
    r = run_cli("verify", *drafts, "--no-hash", "--json")
    assert r.returncode == 2 and str(stray) in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.stdout == ""  # no report: nothing was verified
    alone = run_cli("verify", str(stray), "--no-hash")
    assert alone.returncode == 3, alone.stderr


@pytest.mark.parametrize(("command", "codes"), [("verify", [0, 1, 2, 3, 130, 143]), ("inspect", [0, 2, 3])])
def test_every_commands_help_lists_its_exit_codes(command: str, codes: list[int]) -> None:
    from eagle_convert.errors import EXIT_MEANINGS

    r = run_cli(command, "--help")
    assert r.returncode == 0
    help_text = r.stdout[r.stdout.index("Exit codes:") :]
    for code in codes:
        assert f"{code:>5}  {EXIT_MEANINGS[code]}" in help_text
    if 1 not in codes:
        assert f"    1  {EXIT_MEANINGS[1]}" not in help_text


def test_a_usage_error_writes_no_report(fx: Path) -> None:
    """An engine option below the engine level is refused before any work: stdout stays empty (no half report)."""
    r = run_cli("verify", str(fx / "layouts" / "specforge-mha"), "--engine-tokens", "8", "--json")
    assert r.returncode == 2 and r.stdout == "" and "--engine-tokens" in r.stderr, r.stderr
