"""Hostile files and paths (issue 29): a FIFO, socket or device under a checkpoint's file names never blocks the tool;
a report never lands on what it checks; control characters in names never reach the terminal.

Each case runs the real CLI in a subprocess with a deadline, so a hang fails the test instead of holding CI.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

DRAFT = ROOT / "fixtures" / "smollm2-eagle3"
DEADLINE_S = 120  # the CLI answers these in seconds; a blocked read would run past it


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "eagle_convert", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=DEADLINE_S, check=False)


def _copy(tmp: Path) -> Path:
    out = tmp / "draft"
    shutil.copytree(DRAFT, out)
    return out


def _digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir() if p.is_file()}


def _special(path: Path, kind: str) -> socket.socket | None:
    """Put a FIFO or a listening UNIX socket at ``path``; the socket is returned to be closed after the test."""
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(1)
    return sock


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and UNIX sockets are POSIX")
@pytest.mark.parametrize("kind", ["fifo", "socket"])
@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "model.safetensors.index.json"])
@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_a_special_file_in_a_checkpoint_is_an_input_error_not_a_hang(
    tmp_path: Path, kind: str, name: str, command: str
) -> None:
    draft = _copy(tmp_path)
    if name.endswith(".index.json"):  # an index next to the weights, read before them
        (draft / "model.safetensors").rename(draft / "model-00001-of-00001.safetensors")
    held = _special(draft / name, kind)
    try:
        done = _cli(command, str(draft), "--no-hash") if command == "verify" else _cli(command, str(draft))
    finally:
        if held is not None:
            held.close()
    assert done.returncode == 2, (done.stdout, done.stderr)
    what = "a FIFO (named pipe)" if kind == "fifo" else "a socket"
    assert f"{name}: is {what}, not a regular file" in done.stderr, done.stderr
    assert "Hint:" in done.stderr and "Traceback" not in done.stderr


def test_verify_output_onto_the_checkpoint_is_refused_before_any_work(tmp_path: Path) -> None:
    draft = _copy(tmp_path)
    before = _digests(draft)
    for output in (draft / "model.safetensors", draft / "report.json", draft):
        done = _cli("verify", str(draft), "--no-hash", "--format", "sarif", "--output", str(output))
        assert done.returncode == 2, done.stderr
        assert "the report would overwrite what it checks" in done.stderr and "Hint:" in done.stderr
    assert _digests(draft) == before and not (draft / "report.json").exists()


def test_control_characters_in_a_path_never_reach_the_terminal(tmp_path: Path) -> None:
    """A directory name that carries a newline, a forged Error line, a title-setting OSC and a screen clear: the
    error is still one Error line and one Hint line, every control character escaped."""
    name = "draft\nError: all checks passed\x1b]0;owned\x07\x1b[2J"
    done = _cli("inspect", str(tmp_path / name))
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert [line.split(":")[0] for line in lines] == ["Error", "Hint"], done.stderr
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    assert "\\x0aError: all checks passed\\x1b]0;owned\\x07\\x1b[2J" in lines[0]
