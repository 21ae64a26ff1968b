"""A source that changes under a run is never copied silently (issue 38, category 2).

Each shard is fingerprinted (device, inode, size, times) when its header is read and read through one descriptor that
must carry that fingerprint; before the output is committed every source is checked again. Another process replacing,
rewriting, growing or truncating a shard between the header read and the commit ends the run with
``SourceChangedError`` (exit 2, "changed while it was read; nothing was written") and no output. The changes below
are made at exact moments through the library's own progress callbacks, so nothing depends on timing.
"""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from eagle_convert.cli.main import main
from eagle_convert.errors import SourceChangedError
from eagle_convert.normalize import writer
from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.read import digest
from eagle_convert.read.checkpoint import open_checkpoint
from eagle_convert.verify.run import verify_checkpoint
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS

SHARD_1 = "model-00001-of-00002.safetensors"
SHARD_2 = "model-00002-of-00002.safetensors"


def _source(tmp_path: Path, layout: str = "specforge-mha") -> Path:
    """A two-shard draft whose files were last written an hour ago, as a real source's were (a change made during
    the run then always shows in the modification time, whatever the clock's granularity)."""
    src = write_layout(tmp_path / "src", LAYOUTS[layout], shards=2)
    past = time.time_ns() - 3600 * 10**9
    for path in src.iterdir():
        os.utime(path, ns=(past, past))
    return src


def _split(path: Path) -> tuple[dict[str, object], bytes]:
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def _longer_header(path: Path) -> bytes:
    """The same tensors behind a header 4 KiB longer (padding, as writers align): a file a reader takes for the same
    checkpoint, whose tensors all sit 4096 bytes further on."""
    doc, body = _split(path)
    raw = json.dumps(doc).encode() + b" " * 4096
    return struct.pack("<Q", len(raw)) + raw + body


def _flipped(path: Path) -> bytes:
    """The same header, every tensor byte changed."""
    data = path.read_bytes()
    n = 8 + struct.unpack("<Q", data[:8])[0]
    return data[:n] + bytes(b ^ 0x5A for b in data[n:])


def _replace(path: Path, data: bytes) -> None:
    """Another process writes a new file beside ``path`` and renames it over (a new inode)."""
    path.with_name(path.name + ".new").write_bytes(data)
    os.replace(path.with_name(path.name + ".new"), path)


def _overwrite(path: Path, data: bytes) -> None:
    """Another process rewrites ``path`` in place (the same inode)."""
    with open(path, "r+b") as f:
        f.write(data)
        f.truncate()


CHANGES: dict[str, Callable[[Path], None]] = {
    "replaced by a 4 KiB longer header": lambda p: _replace(p, _longer_header(p)),  # the measured case
    "overwritten with a 4 KiB longer header": lambda p: _overwrite(p, _longer_header(p)),
    "tensor bytes rewritten in place": lambda p: _overwrite(p, _flipped(p)),
    "grown": lambda p: _overwrite(p, p.read_bytes() + b"\0" * 1024),
    "replaced by an identical copy": lambda p: _replace(p, p.read_bytes()),
}


def _assert_nothing_written(tmp_path: Path) -> None:
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no OUT, no staging folder


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_shard_changed_after_its_header_was_read_stops_the_write(tmp_path: Path, change: str) -> None:
    src = _source(tmp_path)

    def before_the_write(_total: int) -> None:  # called after the plan is made, before any byte is copied
        CHANGES[change](src / SHARD_2)

    with pytest.raises(SourceChangedError, match="changed while it was read; nothing was written") as info:
        normalize_checkpoint(src, tmp_path / "out", target_family="llama", progress_total=before_the_write)
    assert info.value.path == str(src / SHARD_2) and info.value.exit_code == 2
    _assert_nothing_written(tmp_path)


@pytest.mark.parametrize("which", [SHARD_1, SHARD_2])
def test_a_shard_overwritten_mid_copy_never_gives_a_half_old_half_new_tensor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    """The measured case: a shard overwritten while it is copied. Copies go 64 bytes at a time here, and the first
    64 bytes copied trigger the rewrite: before, the tensor was half old and half new, and the run exited 0."""
    src = _source(tmp_path)
    monkeypatch.setattr(writer, "KERNEL_CHUNK_BYTES", 64)
    monkeypatch.setattr(writer, "COPY_BUFFER_BYTES", 64)
    copied: list[int] = []

    def progress(n: int) -> None:
        if not copied:
            _overwrite(src / which, _flipped(src / which))
        copied.append(n)

    with pytest.raises(SourceChangedError, match="changed while it was read"):
        normalize_checkpoint(src, tmp_path / "out", target_family="llama", progress=progress)
    assert len(copied) > 1  # the copy went on past the rewrite: the check before the commit caught it
    _assert_nothing_written(tmp_path)


def test_a_computed_tensor_reads_the_version_whose_header_was_read(tmp_path: Path) -> None:
    """d2t stored as I32 is converted to I64 (computed from the source bytes): its shard rewritten before the
    conversion reads it is caught too."""
    src = _source(tmp_path, "modelopt-mha-int32-d2t")
    d2t = open_checkpoint(src).tensors["d2t"]

    def before_the_write(_total: int) -> None:  # other offsets, as valid: zeros (every draft token maps to itself)
        with open(src / d2t.shard, "r+b") as f:
            f.seek(d2t.start)
            f.write(bytes(d2t.nbytes))

    with pytest.raises(SourceChangedError, match="changed while it was read"):
        normalize_checkpoint(src, tmp_path / "out", target_family="llama", progress_total=before_the_write)
    _assert_nothing_written(tmp_path)


def test_the_cli_says_so_in_one_line_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from eagle_convert.normalize import plan

    src = _source(tmp_path)
    real_write = plan.write_checkpoint

    def write_after_a_change(*args: object, **kwargs: object) -> object:
        CHANGES["replaced by a 4 KiB longer header"](src / SHARD_2)
        return real_write(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(plan, "write_checkpoint", write_after_a_change)
    capfd.readouterr()
    code = main(["normalize", str(src), str(tmp_path / "out"), "--target-family", "llama"])
    err = capfd.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert err.splitlines()[0] == f"Error: {src / SHARD_2}: changed while it was read; nothing was written", err
    assert err.splitlines()[1].startswith("Hint: ")
    _assert_nothing_written(tmp_path)


# ---- hashing: the manifest's sha256 is of the version whose header was read ----------------------------------------


def test_verify_never_hashes_another_version_than_it_checked(tmp_path: Path) -> None:
    src = _source(tmp_path)
    changed: list[bool] = []

    def progress(_n: int) -> None:  # bytes hashed: after the first chunk, the last shard is replaced
        if not changed:
            CHANGES["replaced by a 4 KiB longer header"](src / SHARD_2)
            changed.append(True)

    with pytest.raises(SourceChangedError, match="changed while it was read"):
        verify_checkpoint(src, progress=progress)


@pytest.mark.parametrize("change", ["tensor bytes rewritten in place", "grown"])
def test_a_file_changed_while_it_is_hashed_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    src = _source(tmp_path)
    monkeypatch.setattr(digest, "HASH_CHUNK", 64)
    hashed: list[int] = []

    def progress(n: int) -> None:
        if not hashed:
            CHANGES[change](src / SHARD_1)
        hashed.append(n)

    with pytest.raises(SourceChangedError, match="changed while it was read"):
        digest.hash_files(src, [SHARD_1], progress)
    assert len(hashed) > 1
