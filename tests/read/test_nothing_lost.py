"""Nothing lost, nothing altered: kill -9 at 50 random points, a full disk, and paths that try to leave home."""

from __future__ import annotations

import hashlib
import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eagle_convert.errors import DiskFullError
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.read.checkpoint import open_checkpoint
from fixtures.big import write_big_checkpoint
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS
from tests import cli_process
from tests.conftest import ROOT, run_cli


def _digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


@pytest.mark.slow
def test_fifty_random_sigkills_never_leave_a_partial_output(tmp_path: Path) -> None:
    src = write_big_checkpoint(tmp_path / "src", hidden=512, inter=2048, vocab=32000, draft_vocab=16000, shards=4)
    before = _digest(src)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "eagle_convert", "normalize", str(src), str(out), "--profile", "vllm", "--force"]
    start = time.perf_counter()
    cli_process.run(cmd, check=True, capture_output=True, cwd=ROOT)
    full = time.perf_counter() - start
    expected = {t.name for t in open_checkpoint(out).tensors.values()}
    rng = random.Random(50)
    killed_mid_run = 0
    for _ in range(50):
        if out.exists() and rng.random() < 0.5:  # half the runs replace an existing OUT (the --force path)
            cli_process.run(["rm", "-rf", str(out)], check=True)
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, full * 1.1))
        os.kill(proc.pid, signal.SIGKILL)
        killed_mid_run += proc.wait() == -signal.SIGKILL
        if out.exists():  # complete and valid, or absent: never partial
            assert {t.name for t in open_checkpoint(out).tensors.values()} == expected
            assert inspect_checkpoint(out).to_dict()["format"]["producer"] == "canonical"
    assert killed_mid_run >= 25, killed_mid_run
    assert _digest(src) == before


def _limited(limit: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of a signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_file_size_limit_gives_a_clear_error_and_no_output(fx: Path, tmp_path: Path) -> None:
    src = fx / "layouts" / "specforge-mha"
    before = _digest(src)
    out = tmp_path / "out"
    result = cli_process.run(
        [sys.executable, "-m", "eagle_convert", "normalize", str(src), str(out), "--target-family", "llama"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        preexec_fn=lambda: _limited(32 * 1024),
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("Error: ") and "nothing was written" in result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []
    assert _digest(src) == before


def test_full_tmpfs_gives_disk_full_and_no_output(fx: Path, tmp_path: Path) -> None:
    mount = tmp_path / "small"
    mount.mkdir()
    if (
        cli_process.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True).returncode
        != 0
    ):
        pytest.skip("cannot mount a tmpfs here (the file-size-limit test covers the same path)")
    try:
        with pytest.raises(DiskFullError, match="nothing was written"):
            normalize_checkpoint(fx / "layouts" / "specforge-mha", mount / "out", target_family="llama")
        assert list(mount.iterdir()) == []
    finally:
        cli_process.run(["umount", str(mount)], check=False)


def test_every_layout_reread_tensor_by_tensor(fx: Path, tmp_path: Path) -> None:
    """normalize output, re-read from disk, holds every source tensor (bytes compared after documented changes)."""
    import torch
    from safetensors.torch import load_file

    for name in ("specforge-mha", "nemo-mha-eagle3.1", "modelopt-mla", "speculators-mha-norm-before-fc"):
        src = fx / "layouts-sharded" / name
        out = tmp_path / name
        report = normalize_checkpoint(src, out, target_family="llama").to_dict()
        original = {k: v for p in src.glob("*.safetensors") for k, v in load_file(p).items()}
        written = {k: v for p in out.glob("*.safetensors") for k, v in load_file(p).items()}
        for action in report["tensors"]:
            if action["action"] in ("keep", "rename"):
                assert torch.equal(written[action["target"]], original[action["source"]]), action
        assert len(written) >= len(original)


def test_verify_output_never_writes_through_a_symlink(fx: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    report = tmp_path / "report.json"
    report.symlink_to(victim)
    result = run_cli("verify", str(fx / "layouts" / "canonical-mha"), "--output", str(report))
    assert result.returncode == 0, result.stderr
    assert victim.read_text() == "keep me"
    assert not report.is_symlink() and report.read_text().startswith("{")


def test_normalize_out_symlink_is_refused_not_followed(fx: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("keep me")
    link = tmp_path / "out"
    link.symlink_to(elsewhere)
    result = run_cli("normalize", str(fx / "layouts" / "specforge-mha"), str(link), "--target-family", "llama")
    assert result.returncode == 2 and "--force" in result.stderr
    assert (elsewhere / "precious").read_text() == "keep me"


def test_malicious_pickle_never_runs_even_with_allow_pickle(tmp_path: Path) -> None:
    from fixtures.generate import write_pickle_draft

    marker = tmp_path / "PAYLOAD-RAN"
    draft = write_pickle_draft(tmp_path / "draft", marker)
    for extra in ([], ["--allow-pickle"]):
        result = run_cli("normalize", str(draft), str(tmp_path / "out"), "--target-family", "llama", *extra)
        assert result.returncode == 2, result.stderr
        assert not marker.exists(), "the pickle payload executed"
    inspect = run_cli("inspect", str(draft), "--json")
    verify = run_cli("verify", str(draft), "--json")
    assert inspect.returncode == 0 and verify.returncode in (0, 1)
    assert not marker.exists()


def test_shard_layout_stays_inside_checkpoint(tmp_path: Path) -> None:
    """A sharded checkpoint's index cannot point the reader at a file outside the directory, even via symlink."""
    src = write_layout(tmp_path / "c", LAYOUTS["specforge-mha"], shards=3)
    secret = tmp_path / "secret.safetensors"
    (src / "model-00002-of-00003.safetensors").rename(secret)
    (src / "model-00002-of-00003.safetensors").symlink_to(Path("..") / "secret.safetensors")
    result = run_cli("inspect", str(src))
    assert result.returncode == 2 and "outside the checkpoint directory" in result.stderr
