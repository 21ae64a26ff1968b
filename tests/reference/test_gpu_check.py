"""The prepared GPU check (bench/gpu_check.py, issue 37 item 5) runs here on the CPU at toy sizes: each of its three
runs reaches the target level's verdict, the probe scores positions, and the JSON a lent device returns is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_the_gpu_check_runs_on_the_cpu_at_toy_sizes(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    command = [sys.executable, "bench/gpu_check.py", "--device", "cpu", "--small", "--dir", str(tmp_path / "work")]
    done = subprocess.run([*command, "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["machine"]["device"] == "cpu" and result["small"] is True
    assert set(result["runs"]) == {"8b-teacher-forced", "8b-generation", "kimi-k2"}
    for name, run in result["runs"].items():
        assert run["exit"] in (0, 1) and run["status"] in ("pass", "fail"), (name, run)
        assert run["positions"] and run["positions"] > 0 and run["peak_rss_bytes"] > 0, (name, run)
        assert run["peak_gpu_bytes"] is None  # no CUDA here: nothing is claimed
