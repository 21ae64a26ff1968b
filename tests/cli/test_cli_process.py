"""The tests' CLI processes (tests/cli_process.py) are what a fresh `python -m eagle_convert` is: the same exit code,
the same bytes on stdout and stderr, for a report, a usage error, an input error and a run under another working
directory and environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import cli_process
from tests.conftest import ROOT

DRAFT = "{fx}/layouts/specforge-mha"
CASES = {
    "inspect json": ["inspect", DRAFT, "--json"],
    "verify human": ["verify", DRAFT, "--no-hash"],
    "verify tensors": ["verify", DRAFT, "--no-hash", "--level", "tensors", "--format", "github"],
    "usage error": ["verify", DRAFT, "--level", "nope"],
    "input error": ["inspect", "no/such/draft"],
    "help": ["verify", "--help"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_forked_run_is_a_fresh_run(case: str, fx: Path) -> None:
    command = [sys.executable, "-m", "eagle_convert", *(a.format(fx=fx) for a in CASES[case])]
    env = {**os.environ, "COLUMNS": "111", "NO_COLOR": "1"}
    fresh = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False)
    forked = cli_process.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert fresh.stdout or fresh.stderr


def test_the_child_takes_the_working_directory_environment_and_exit_code_it_is_given(fx: Path, tmp_path: Path) -> None:
    """A relative path resolves against ``cwd``; the environment is the one given, whole (``FORCE_COLOR`` set here
    for this process only does not colour the child); a failing run's code comes back, and ``check=True`` raises as
    subprocess.run does."""
    (tmp_path / "draft").symlink_to(fx / "layouts" / "specforge-mha")
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "COLUMNS")} | {"COLUMNS": "90"}
    command = [sys.executable, "-m", "eagle_convert", "inspect", "draft"]
    os.environ["FORCE_COLOR"] = "1"
    try:
        done = cli_process.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    finally:
        del os.environ["FORCE_COLOR"]
    fresh = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, check=False)
    assert done.returncode == 0 and "\x1b[" not in done.stdout and done.stdout == fresh.stdout, done.stderr
    with pytest.raises(subprocess.CalledProcessError) as failed:
        cli_process.run([*command[:4], "missing"], capture_output=True, cwd=tmp_path, env=env, timeout=120, check=True)
    assert failed.value.returncode == 2 and b"missing" in failed.value.stderr
