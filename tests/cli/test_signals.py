"""SIGINT and SIGTERM at any moment (issue 38, category 4): no traceback, one line, staging removed, exit 130 / 143.

Real signals to a real `python -m eagle_convert` process, at moments the test observes rather than guesses:

- while the command tree loads: the moment the process shows (``/proc/PID/status``) that it catches SIGTERM, which
  Python never does by itself: the entry's handlers are in, and typer, rich and the commands are being imported;
- while a command works: the run is held at a chosen call (a copy, a hash, the report's write, the commit) by a
  wrapper that creates an event file and waits there; the test signals once the file exists;
- at whatever moment the filesystem shows a staging folder, in a plain run with nothing held.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.big import write_big_checkpoint
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS
from tests import cli_process
from tests.conftest import ROOT

NOTHING = "interrupted: nothing was written\n"
SIGNALS = [signal.SIGINT, signal.SIGTERM]

# Holds the run at OWNER.ATTR (module[:class].attribute): its first call writes EVENT, then sleeps SECONDS before it
# goes on; then runs the CLI exactly as `python -m eagle_convert ARGS...` does.
HOLD = """
import importlib, runpy, sys, time
from pathlib import Path

event, where, seconds = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
module, _, attr = where.rpartition(".")
module, _, cls = module.partition(":")
owner = importlib.import_module(module)
owner = getattr(owner, cls) if cls else owner
original = getattr(owner, attr)

def held(*args, **kwargs):
    if not event.exists():
        event.write_text(where)
        time.sleep(seconds)
    return original(*args, **kwargs)

setattr(owner, attr, held)
sys.argv = ["eagle-convert", *sys.argv[4:]]
runpy.run_module("eagle_convert", run_name="__main__", alter_sys=True)
"""


def _start(args: list[str], *, hold: tuple[Path, str, float] | None = None) -> subprocess.Popen[str]:
    prefix = ["-c", HOLD, str(hold[0]), hold[1], str(hold[2])] if hold else ["-m", "eagle_convert"]
    return subprocess.Popen(
        [sys.executable, *prefix, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )


def _wait_for(proc: subprocess.Popen[str], ready: object) -> None:
    """Until ``ready()`` holds; the test fails if the process ends first."""
    while not ready():  # type: ignore[operator]
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the process ended (exit {proc.returncode}) before the moment came: {err[-2000:]}")
        time.sleep(0.005)


def _ended(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def _catches_sigterm(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def _leftovers(folder: Path, out: str = "out") -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(f".{out}."))


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return write_layout(tmp_path / "src", LAYOUTS["specforge-mha"], shards=2)


# ---- while the command tree loads --------------------------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to see the handlers installed")
@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", ["normalize", "verify", "inspect"])
def test_a_signal_while_the_modules_load_is_one_line(src: Path, tmp_path: Path, sig: int, command: str) -> None:
    """Before: a traceback from deep in an import (SIGINT), or killed without a word (SIGTERM)."""
    args = {
        "normalize": ["normalize", str(src), str(tmp_path / "out"), "--target-family", "llama"],
        "verify": ["verify", str(src), "--output", str(tmp_path / "report.json")],
        "inspect": ["inspect", str(src)],
    }[command]
    proc = _start(args)
    _wait_for(proc, lambda: _catches_sigterm(proc.pid))
    proc.send_signal(sig)
    code, _, err = _ended(proc)
    assert (code, err) == (128 + sig, NOTHING), (code, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


# ---- while a command works -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("replacing", [False, True], ids=["new", "force"])
def test_a_signal_mid_copy_removes_the_staging_folder(src: Path, tmp_path: Path, sig: int, replacing: bool) -> None:
    """Before: SIGTERM left ``.out.partial-*`` behind (and SIGINT printed no such line)."""
    out = tmp_path / "out"
    if replacing:
        first = cli_process.run(
            [sys.executable, "-m", "eagle_convert", "normalize", str(src), str(out), "--target-family", "llama"],
            cwd=ROOT,
            capture_output=True,
        )
        assert first.returncode == 0
    previous = _hashes(out) if replacing else None
    before = _hashes(src)
    event = tmp_path / "event"
    args = ["normalize", str(src), str(out), "--target-family", "llama", *(["--force"] if replacing else [])]
    proc = _start(args, hold=(event, "eagle_convert.normalize.writer:_Copier.copy", 60))
    _wait_for(proc, event.exists)
    assert [name for name in _leftovers(tmp_path) if ".partial-" in name]  # the moment: the staging folder is there
    proc.send_signal(sig)
    code, _, err = _ended(proc)
    assert (code, err) == (128 + sig, NOTHING), (code, err)
    assert _leftovers(tmp_path) == []
    assert (_hashes(out) if out.exists() else None) == previous  # the previous output intact, or none
    assert _hashes(src) == before


@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_two_signals_mid_copy_are_still_one_line(src: Path, tmp_path: Path, sig: int) -> None:
    """A second signal while the first one's clean-up runs is ignored: the clean-up finishes, one line."""
    event = tmp_path / "event"
    args = ["normalize", str(src), str(tmp_path / "out"), "--target-family", "llama"]
    proc = _start(args, hold=(event, "eagle_convert.normalize.writer:_Copier.copy", 60))
    _wait_for(proc, event.exists)
    proc.send_signal(sig)
    proc.send_signal(signal.SIGINT if sig == signal.SIGTERM else signal.SIGTERM)
    code, _, err = _ended(proc)
    assert code in (130, 143) and err == NOTHING, (code, err)
    assert _leftovers(tmp_path) == [] and not (tmp_path / "out").exists()


def test_a_signal_while_a_pickle_draft_converts_removes_both_staging_folders(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    psrc = write_layout(tmp_path / "src", LAYOUTS["eagle-mha"])
    state = load_file(psrc / "model.safetensors")
    (psrc / "model.safetensors").unlink()
    torch.save(state, psrc / "pytorch_model.bin")
    event = tmp_path / "event"
    args = ["normalize", str(psrc), str(tmp_path / "out"), "--allow-pickle", "--target-family", "llama"]
    proc = _start(args, hold=(event, "eagle_convert.normalize.writer:_Copier.copy", 60))
    _wait_for(proc, event.exists)
    assert any(".pickle-" in n for n in _leftovers(tmp_path)) and any(".partial-" in n for n in _leftovers(tmp_path))
    proc.send_signal(signal.SIGTERM)
    code, _, err = _ended(proc)
    assert (code, err) == (143, NOTHING), (code, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["event", "src"]


@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize(
    "where",
    ["eagle_convert.read.source_files:SourceFiles.read", "eagle_convert.normalize.writer._write_bytes"],
    ids=["hashing", "writing-the-report"],
)
def test_verify_output_interrupted_leaves_no_report_and_no_partial_file(
    src: Path, tmp_path: Path, sig: int, where: str
) -> None:
    report = tmp_path / "report.json"
    event = tmp_path / "event"
    proc = _start(["verify", str(src), "--json", "--output", str(report)], hold=(event, where, 60))
    _wait_for(proc, event.exists)
    proc.send_signal(sig)
    code, _, err = _ended(proc)
    assert (code, err) == (128 + sig, NOTHING), (code, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["event", "src"]


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="signals are held back with pthread_sigmask")
@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_the_commit_waits_for_it_and_says_what_was_written(src: Path, tmp_path: Path, sig: int) -> None:
    """The renames of a commit run with the signals held back: the output lands whole (the previous one removed),
    and the line says it was written."""
    out = tmp_path / "out"
    args = ["normalize", str(src), str(out), "--target-family", "llama"]
    assert cli_process.run([sys.executable, "-m", "eagle_convert", *args], cwd=ROOT).returncode == 0
    complete = _hashes(out)
    (out / "config.json").write_text("{}")  # an older output, to be replaced
    event = tmp_path / "event"
    proc = _start([*args, "--force"], hold=(event, "eagle_convert.normalize.writer._commit", 1))
    _wait_for(proc, event.exists)
    proc.send_signal(sig)
    code, _, err = _ended(proc)
    assert (code, err) == (128 + sig, f"interrupted: {out} had been written\n"), (code, err)
    assert _hashes(out) == complete and _leftovers(tmp_path) == []


# ---- at whatever moment the filesystem shows ------------------------------------------------------------------------


def _staged(folder: Path) -> list[Path]:
    return [f for d in folder.glob(".out.partial-*") for f in d.glob("*.safetensors")]


MOMENTS = {
    "handlers in": lambda proc, folder: _catches_sigterm(proc.pid),
    "staging folder made": lambda proc, folder: bool(_leftovers(folder)),
    "a shard in it": lambda proc, folder: bool(_staged(folder)),
}


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to see the handlers installed")
@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_signals_at_the_moments_a_plain_run_shows(tmp_path: Path, sig: int) -> None:
    """No wrapper: the signal goes as soon as the process or the filesystem shows a moment. Either the run finished
    first (exit 0, a complete output) or it ends as promised; never a staging folder left, never a traceback."""
    src = write_big_checkpoint(tmp_path / "src", hidden=512, inter=2048, vocab=32000, draft_vocab=16000, shards=4)
    out = tmp_path / "out"
    args = ["normalize", str(src), str(out), "--profile", "vllm", "--force"]
    outcomes = {}
    for moment, shows in MOMENTS.items():
        proc = _start(args)
        while not shows(proc, tmp_path) and proc.poll() is None:
            time.sleep(0.002)
        proc.send_signal(sig)
        code, _, err = _ended(proc)
        assert "Traceback" not in err and _leftovers(tmp_path) == [], (moment, err)
        if code == 0:
            assert (out / "config.json").is_file()
        else:
            assert code == 128 + sig and err in (NOTHING, f"interrupted: {out} had been written\n"), (moment, code, err)
        outcomes[moment] = code
    assert outcomes["handlers in"] == 128 + sig, outcomes  # the command tree takes far longer to load than a poll
