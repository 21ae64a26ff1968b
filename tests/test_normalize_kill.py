"""kill -9 during a large normalize: OUT is absent or complete, and the source is byte-for-byte unchanged."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eagle_convert.checkpoint import open_checkpoint
from eagle_convert.inspect_api import inspect_checkpoint
from fixtures.big import write_big_checkpoint
from tests.conftest import ROOT


def _digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


@pytest.mark.slow
def test_sigkill_at_random_points_never_leaves_a_partial_output(tmp_path: Path) -> None:
    src = write_big_checkpoint(tmp_path / "src", hidden=1024, inter=4096, vocab=64000, draft_vocab=32000, shards=4)
    before = _digest(src)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "eagle_convert", "normalize", str(src), str(out), "--profile", "vllm", "--force"]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    full = time.perf_counter() - start
    expected = {t.name for t in open_checkpoint(out).tensors.values()}

    rng = random.Random(1234)
    killed_mid_run = 0
    for _ in range(12):
        if out.exists() and rng.random() < 0.5:  # the other half replace an existing OUT (the --force path)
            subprocess.run(["rm", "-rf", str(out)], check=True)
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, full * 1.1))
        os.kill(proc.pid, signal.SIGKILL)
        killed_mid_run += proc.wait() == -signal.SIGKILL
        if out.exists():
            ckpt = open_checkpoint(out)  # raises on any partial or corrupt file
            assert {t.name for t in ckpt.tensors.values()} == expected
            assert inspect_checkpoint(out).to_dict()["format"]["producer"] == "canonical"
    assert killed_mid_run >= 6, killed_mid_run  # the kills did land while normalize was running
    assert _digest(src) == before
    # A later run cleans up whatever the kills left and succeeds.
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    assert open_checkpoint(out).tensors
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]
