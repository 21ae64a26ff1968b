"""The suite's own progress lines reach the terminal when it runs on pytest-xdist's workers (scripts/test): a test
still running says so every HEARTBEAT_S, and says how long it took (the workers' own output is never shown)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

SLEEPY = """
import time

def test_sleepy():
    time.sleep(2.5)
"""


def test_a_long_test_on_a_worker_says_it_is_still_running(tmp_path: Path) -> None:
    # a run of its own: not a worker of this one (whose PYTEST_XDIST_WORKER would make the child think it is one)
    own_run = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    folder = ROOT / "tests" / f"_progress_{os.getpid()}"  # under tests/: the suite's conftest.py applies
    folder.mkdir()
    try:
        (folder / "test_sleepy.py").write_text(SLEEPY)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", str(folder), "-n", "1", "-p", "no:cacheprovider"],
            capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
            env={**own_run, "EAGLE_CONVERT_TEST_HEARTBEAT_S": "1"},
        )  # fmt: skip
    finally:
        for path in sorted(folder.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        folder.rmdir()
    assert done.returncode == 0, done.stdout[-2000:]
    assert "test_sleepy.py::test_sleepy still running (0:01)" in done.stdout
    assert re.search(r"test_sleepy\.py::test_sleepy took [2-9] s", done.stdout)
