"""Hostile files and paths (issue 29): a FIFO, socket or device under a checkpoint's file names never blocks the tool;
a report never lands on what it checks, on a special file or under a file; control characters in names never reach
the terminal; configs in other encodings, oversized or with numbers no float holds are input errors; an impossible
target config or unreadable target weights are the user's input error (exit 2), never a finding against the draft.

Each case runs the real CLI in a subprocess with a deadline, so a hang fails the test instead of holding CI.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import stat
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fixtures.smollm2 import TARGET_CONFIG
from tests import cli_process
from tests.conftest import ROOT, one_error

DRAFT = ROOT / "fixtures" / "smollm2-eagle3"
DEADLINE_S = 120  # the CLI answers these in seconds; a blocked read would run past it


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "eagle_convert", *args]
    return cli_process.run(command, capture_output=True, text=True, cwd=ROOT, timeout=DEADLINE_S, check=False)


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
    here = os.getcwd()
    os.chdir(path.parent)  # bound by its name: a socket's path is at most 107 bytes, and tmp_path may be longer
    try:
        sock.bind(path.name)
    finally:
        os.chdir(here)
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
        assert "writing it would overwrite what is read" in done.stderr and "Hint:" in done.stderr
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


CONFIG_BYTES = {  # how config.json is written -> what the Error line must say
    "utf-8-bom": (lambda text: b"\xef\xbb\xbf" + text.encode(), "UTF-8 with a byte-order mark"),
    "utf-16": (lambda text: text.encode("utf-16"), "UTF-16"),
    "utf-16-no-bom": (lambda text: text.encode("utf-16-le"), "NUL bytes"),
    "utf-32": (lambda text: text.encode("utf-32"), "UTF-32"),
    "latin-1": (lambda text: text.replace('"llama"', '"llam\u00e9"').encode("latin-1"), "not valid UTF-8"),
    "1e400": (lambda text: text.replace("{", '{"x": 1e400, ', 1).encode(), "too large for a 64-bit float"),
    "-1e400": (lambda text: text.replace("{", '{"x": [-1e400], ', 1).encode(), "too large for a 64-bit float"),
    "nan": (lambda text: text.replace("{", '{"x": {"y": NaN}, ', 1).encode(), "NaN"),
    "duplicate-deep": (lambda text: text.replace("{", '{"x": {"y": [{"z": 1, "z": 2}]}, ', 1).encode(), "'z'"),
    "lone-surrogate": (lambda text: text.replace("{", '{"x": "\\udc00", ', 1).encode(), "lone surrogate"),
}


@pytest.mark.parametrize("case", sorted(CONFIG_BYTES))
def test_a_config_in_another_encoding_or_with_impossible_literals_is_an_input_error(tmp_path: Path, case: str) -> None:
    """transformers reads config.json as UTF-8 through ``json.loads`` (a byte-order mark refused); the tool names
    what it found instead, for inspect, verify and normalize alike, and writes nothing."""
    draft = _copy(tmp_path)
    encode, needle = CONFIG_BYTES[case]
    (draft / "config.json").write_bytes(encode((DRAFT / "config.json").read_text()))
    before = _digests(draft)
    for args in (("inspect", str(draft)), ("verify", str(draft), "--no-hash"),
                 ("normalize", str(draft), str(tmp_path / "out"), "--profile", "vllm")):  # fmt: skip
        one_error(_cli(*args), "config.json", needle)
    assert _digests(draft) == before and not (tmp_path / "out").exists()


def test_transformers_refuses_the_encodings_the_tool_refuses(tmp_path: Path) -> None:
    """The refusals above are the engines' own: transformers' config loader (which vLLM and SGLang call) fails on
    each encoding too, so the tool refuses nothing a deployment would read."""
    import transformers

    for case in ("utf-8-bom", "utf-16", "utf-16-no-bom", "utf-32", "latin-1"):
        folder = tmp_path / case
        shutil.copytree(DRAFT, folder)
        (folder / "config.json").write_bytes(CONFIG_BYTES[case][0]((DRAFT / "config.json").read_text()))
        with pytest.raises(OSError, match="not a valid JSON file"):
            transformers.AutoConfig.from_pretrained(str(folder))


def test_a_config_past_the_size_limit_is_refused_unread_and_a_50_mb_one_is_read(tmp_path: Path) -> None:
    from eagle_convert.read.regular import MAX_SMALL_FILE

    draft = _copy(tmp_path)
    with open(draft / "config.json", "r+b") as f:  # a sparse file: its size is all the refusal may look at
        f.truncate(MAX_SMALL_FILE + 1)
    one_error(_cli("inspect", str(draft)), "config.json", f"is {MAX_SMALL_FILE + 1} bytes, over the 64 MiB limit")
    big = json.loads((DRAFT / "config.json").read_text())
    big["padding"] = ["x" * 100] * 500_000  # 51 MB of valid JSON under a key no reader uses
    (draft / "config.json").write_text(json.dumps(big))
    assert (draft / "config.json").stat().st_size > 50_000_000
    done = _cli("inspect", str(draft), "--json")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout) < 100_000  # the padding is not echoed into the report


TARGET = TARGET_CONFIG  # the committed draft's target


def _target(tmp: Path, **changes: Any) -> Path:
    folder = tmp / "target"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**TARGET, **changes}))
    return folder


def test_the_target_config_as_written_passes(tmp_path: Path) -> None:
    done = _cli("verify", str(DRAFT), "--no-hash", "--target", str(_target(tmp_path)), "--format", "concise")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num_hidden_layers", 2**40),
        ("num_hidden_layers", -3),
        ("num_hidden_layers", 0),
        ("hidden_size", 0),
        ("hidden_size", -576),
        ("hidden_size", 2**40),
        ("vocab_size", -1),
        ("num_attention_heads", 0),
        ("num_key_value_heads", 10**30),
        ("head_dim", 0),
        ("intermediate_size", [1536, -1]),
        ("max_position_embeddings", -5),
        ("rms_norm_eps", -1),
        ("rms_norm_eps", 0),
        ("rope_theta", -1.0),
    ],
)
def test_an_impossible_target_config_is_the_users_input_error(tmp_path: Path, key: str, value: Any) -> None:
    """The target is what the user passed: a size no model has is exit 2 naming the key and the value, before any
    work, never a finding against the draft (before: several passed, others became EC105/EC303 errors)."""
    target = _target(tmp_path, **{key: value})
    shown = str(value[-1] if isinstance(value, list) else value)
    for command in ("inspect", "verify"):
        args = (command, str(DRAFT), "--target", str(target), *(("--no-hash",) if command == "verify" else ()))
        one_error(_cli(*args), "config.json", f"{key} is {shown}")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
@pytest.mark.parametrize("given", ["directory", "file"])
def test_a_fifo_as_the_target_config_is_named_not_missing(tmp_path: Path, given: str) -> None:
    folder = tmp_path / "target"
    folder.mkdir()
    os.mkfifo(folder / "config.json")
    target = folder if given == "directory" else folder / "config.json"
    one_error(_cli("verify", str(DRAFT), "--no-hash", "--target", str(target)), "is a FIFO (named pipe)")


def test_unreadable_target_weights_are_an_input_error_not_a_finding(tmp_path: Path) -> None:
    """A target shard whose header is broken: exit 2 naming the shard before any tensor is read (before: an EC702
    error against the draft at --level target, and a silent skip of EC605 at --level tensors)."""
    target = _target(tmp_path)
    (target / "model.safetensors").write_bytes(struct.pack("<Q", 2**32 - 1) + b'{"a": 1}')
    done = _cli("verify", str(DRAFT), "--no-hash", "--target", str(target), "--level", "tensors")
    one_error(done, "model.safetensors", "header length")


def test_a_lone_surrogate_in_a_tensor_name_is_refused_as_the_loader_refuses_it(tmp_path: Path) -> None:
    draft = _copy(tmp_path)
    raw = b'{"a\\ud800": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    (draft / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(4))
    for command in ("inspect", "verify"):
        one_error(_cli(command, str(draft)), "model.safetensors", "lone surrogate \\ud800")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and UNIX sockets are POSIX")
def test_outputs_that_cannot_be_written_are_refused_before_any_work(tmp_path: Path) -> None:
    """A report or an output directory under a regular file, onto a FIFO or socket (an atomic rename would replace
    the special file: before, `verify --output /dev/full` as root replaced the device with the report), or onto a
    directory (a report): one Error line and a Hint, nothing written, the special file still what it was."""
    plain = tmp_path / "plain-file"
    plain.write_text("keep")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    held = _special(tmp_path / "sock", "socket")
    try:
        cases = [
            (plain / "report.json", "is a file, not a directory"),
            (plain / "deeper" / "report.json", "is a file, not a directory"),
            (fifo, "is a FIFO"),
            (tmp_path / "sock", "is a socket"),
            (tmp_path, "is a directory"),
        ]
        for output, needle in cases:
            one_error(_cli("verify", str(DRAFT), "--no-hash", "--json", "--output", str(output)), needle)
        for out, needle in cases[:4]:
            one_error(_cli("normalize", str(DRAFT), str(out), "--profile", "vllm", "--force"), needle)
    finally:
        if held is not None:
            held.close()
    assert plain.read_text() == "keep" and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert stat.S_ISSOCK(os.lstat(tmp_path / "sock").st_mode)


def _read_only_mount(tmp: Path) -> Path | None:
    """A read-only tmpfs where this test may mount one (root on Linux), else a folder without write permission
    where the permission is enforced (not root); None where neither holds."""
    folder = tmp / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return folder
    done = cli_process.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)], capture_output=True)
    return folder if done.returncode == 0 else None


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions and mounts")
def test_an_output_on_a_read_only_place_is_refused_before_any_work(tmp_path: Path) -> None:
    folder = _read_only_mount(tmp_path)
    if folder is None:
        pytest.skip("no read-only filesystem can be made here (root without mount rights)")
    try:
        one_error(
            _cli("verify", str(DRAFT), "--no-hash", "--json", "--output", str(folder / "r.json")), "cannot write into"
        )
        one_error(_cli("normalize", str(DRAFT), str(folder / "out"), "--profile", "vllm"), "cannot write into")
    finally:
        if os.geteuid() == 0:
            cli_process.run(["umount", str(folder)], check=False)
        else:
            folder.chmod(0o755)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="procfs (Linux)")
def test_a_regular_file_that_states_size_0_is_read_whole_up_to_the_cap() -> None:
    """procfs states 0 bytes for files that hold more: the reader goes on past the stated size, to the cap."""
    from eagle_convert.read.regular import read_regular

    assert Path("/proc/self/status").stat().st_size == 0
    assert read_regular("/proc/self/status").startswith(b"Name:") and b"\nPid:" in read_regular("/proc/self/status")
