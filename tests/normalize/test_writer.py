"""The streaming checkpoint writer: byte-identical copies, kernel-copy fallbacks, atomic commit, cleanup on failure."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from safetensors import safe_open
from safetensors.torch import load_file

from eagle_convert.errors import DiskFullError, InputError, OutputExistsError, UnsafePathError, UsageError
from eagle_convert.normalize.writer import ShardPlan, TensorSource, WriteResult, write_checkpoint
from eagle_convert.read.checkpoint import INDEX_NAME, open_checkpoint
from eagle_convert.read.output_place import STAGING_MARKER
from eagle_convert.read.safetensors_header import TensorInfo, build_header
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS

ROOT = Path(__file__).resolve().parents[2]
META = {"format": "pt"}


def make_source(tmp_path: Path, shards: int = 1) -> Path:
    return write_layout(tmp_path / "src", LAYOUTS["specforge-mha"], shards=shards)


def in_file_order(src: Path) -> list[TensorInfo]:
    return sorted(open_checkpoint(src).tensors.values(), key=lambda t: (t.shard, t.start))


def from_file(src: Path, t: TensorInfo, name: str | None = None) -> TensorSource:
    return TensorSource(name or t.name, t.dtype, t.shape, src / t.shard, t.start, t.end)


def single_plan(src: Path) -> list[ShardPlan]:
    return [ShardPlan("model.safetensors", tuple(from_file(src, t) for t in in_file_order(src)), META)]


def config(src: Path) -> dict[str, bytes]:
    return {"config.json": (src / "config.json").read_bytes()}


def raw(path: Path, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def hashes(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


def siblings(out: Path) -> list[str]:
    """Hidden leftovers of writes to ``out``."""
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


def assert_same_tensors(src: Path, out: Path) -> None:
    """Every output tensor has the source's bytes, by raw range and by safetensors' own loader."""
    source, written = open_checkpoint(src), open_checkpoint(out)
    assert set(written.tensors) == set(source.tensors)
    for name, t in written.tensors.items():
        s = source.tensors[name]
        assert (t.dtype, t.shape) == (s.dtype, s.shape)
        assert raw(out / t.shard, t.start, t.end) == raw(src / s.shard, s.start, s.end), name
    loaded_src: dict[str, Any] = {}
    for shard in source.shards:
        loaded_src.update(load_file(src / shard.name))
    for shard in written.shards:
        for name, value in load_file(out / shard.name).items():
            assert value.dtype == loaded_src[name].dtype and bool((value == loaded_src[name]).all()), name


# ---- round trips ---------------------------------------------------------------------------------------------------


def test_round_trip_is_byte_identical_and_sources_are_untouched(tmp_path: Path) -> None:
    src = make_source(tmp_path, shards=3)
    before = hashes(src)
    seen: list[int] = []
    result = write_checkpoint(tmp_path / "out", single_plan(src), config(src), progress=seen.append)

    out = tmp_path / "out"
    assert isinstance(result, WriteResult) and result.out == out
    assert result.files == (out / "model.safetensors", out / "config.json")
    assert result.bytes_written == sum(p.stat().st_size for p in out.iterdir())
    assert result.left_behind == ()
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert sum(seen) == open_checkpoint(src).total_bytes
    assert_same_tensors(src, out)
    with safe_open(out / "model.safetensors", framework="pt") as f:
        assert f.metadata() == META
    assert (out / "config.json").read_bytes() == (src / "config.json").read_bytes()
    assert hashes(src) == before
    assert siblings(out) == []


def test_tensors_are_laid_out_in_plan_order_under_new_names(tmp_path: Path) -> None:
    src = make_source(tmp_path)
    tensors = in_file_order(src)[::-1]
    plan = [ShardPlan("model.safetensors", tuple(from_file(src, t, "renamed." + t.name) for t in tensors), {})]
    write_checkpoint(tmp_path / "out", plan, config(src))
    written = open_checkpoint(tmp_path / "out")
    assert list(written.tensors) == ["renamed." + t.name for t in tensors]
    for t in tensors:
        w = written.tensors["renamed." + t.name]
        assert raw(tmp_path / "out" / w.shard, w.start, w.end) == raw(src / t.shard, t.start, t.end)
    assert written.shards[0].metadata == {}


def test_computed_tensors_are_written_once_each(tmp_path: Path) -> None:
    src = make_source(tmp_path)
    tensors = in_file_order(src)
    calls: list[str] = []

    def compute(name: str, data: bytes) -> Callable[[], bytes]:
        def make() -> bytes:
            calls.append(name)
            return data

        return make

    extra = {"made.a": bytes(range(64)), "made.b": bytes(range(100, 116))}
    sources = [
        TensorSource("made.a", "U8", (8, 8), compute=compute("made.a", extra["made.a"])),
        *(from_file(src, t) for t in tensors[:3]),
        TensorSource("made.b", "I32", (4,), compute=compute("made.b", extra["made.b"])),
        *(from_file(src, t) for t in tensors[3:]),
    ]
    write_checkpoint(tmp_path / "out", [ShardPlan("model.safetensors", tuple(sources), META)], config(src))
    assert calls == ["made.a", "made.b"]
    written = open_checkpoint(tmp_path / "out")
    for name, data in extra.items():
        t = written.tensors[name]
        assert raw(tmp_path / "out" / t.shard, t.start, t.end) == data
    assert list(written.tensors) == [s.name for s in sources]


def test_sharded_output_has_an_index_the_reader_accepts(tmp_path: Path) -> None:
    src = make_source(tmp_path)
    tensors = [from_file(src, t) for t in in_file_order(src)]
    names = [f"model-{i:05d}-of-00003.safetensors" for i in (1, 2, 3)]
    plan = [ShardPlan(name, tuple(tensors[i::3]), META) for i, name in enumerate(names)]
    result = write_checkpoint(tmp_path / "out", plan, config(src))

    out = tmp_path / "out"
    assert [p.name for p in result.files] == [*names, INDEX_NAME, "config.json"]
    index = json.loads((out / INDEX_NAME).read_text())
    assert index["metadata"]["total_size"] == open_checkpoint(src).total_bytes
    assert index["weight_map"] == {t.name: names[i % 3] for i, t in enumerate(tensors)}
    written = open_checkpoint(out)
    assert written.index_path == out / INDEX_NAME and len(written.shards) == 3
    assert_same_tensors(src, out)


# ---- how bytes are copied ------------------------------------------------------------------------------------------


def count_calls(monkeypatch: pytest.MonkeyPatch, name: str) -> list[tuple[Any, ...]]:
    """Wrap ``os.<name>`` so each call is recorded and then made for real."""
    calls: list[tuple[Any, ...]] = []
    real = getattr(os, name)

    def wrapper(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(os, name, wrapper)
    return calls


def raise_errno(code: int) -> Callable[..., Any]:
    def fail(*args: Any) -> Any:
        raise OSError(code, os.strerror(code))

    return fail


@pytest.mark.skipif(not hasattr(os, "copy_file_range"), reason="needs os.copy_file_range")
def test_contiguous_ranges_are_coalesced_into_one_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = make_source(tmp_path)
    calls = count_calls(monkeypatch, "copy_file_range")
    write_checkpoint(tmp_path / "out", single_plan(src), config(src))
    tensors = in_file_order(src)
    assert len(calls) == 1
    assert calls[0][2:] == (tensors[-1].end - tensors[0].start, tensors[0].start)
    assert_same_tensors(src, tmp_path / "out")


@pytest.mark.skipif(not hasattr(os, "copy_file_range"), reason="needs os.copy_file_range")
def test_runs_break_at_gaps_and_computed_tensors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = make_source(tmp_path)
    t = in_file_order(src)
    assert len(t) >= 8
    sources = [
        *(from_file(src, x) for x in t[0:3]),  # one run
        TensorSource("made", "U8", (3,), compute=lambda: b"abc"),
        *(from_file(src, x) for x in t[3:5]),  # one run, after a computed tensor
        *(from_file(src, x) for x in t[6:8]),  # one run: t[5] is skipped, so there is a gap
        from_file(src, t[5]),  # one run: it goes backwards
        *(from_file(src, x) for x in t[8:]),  # one run
    ]
    calls = count_calls(monkeypatch, "copy_file_range")
    write_checkpoint(tmp_path / "out", [ShardPlan("model.safetensors", tuple(sources), META)], config(src))
    assert len(calls) == 5
    written = open_checkpoint(tmp_path / "out")
    for x in t:
        w = written.tensors[x.name]
        assert raw(tmp_path / "out" / w.shard, w.start, w.end) == raw(src / x.shard, x.start, x.end)


def test_falls_back_to_sendfile_on_exdev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(os, "sendfile"):
        pytest.skip("needs os.sendfile")
    src = make_source(tmp_path, shards=3)
    monkeypatch.setattr(os, "copy_file_range", raise_errno(errno.EXDEV), raising=False)
    calls = count_calls(monkeypatch, "sendfile")
    write_checkpoint(tmp_path / "out", single_plan(src), config(src))
    assert len(calls) == 3  # one per source shard: each is a contiguous run
    assert_same_tensors(src, tmp_path / "out")


@pytest.mark.parametrize(
    "setup",
    [
        pytest.param({"copy_file_range": errno.EXDEV, "sendfile": None}, id="exdev-and-no-sendfile"),
        pytest.param({"copy_file_range": None, "sendfile": errno.EINVAL}, id="no-copy-file-range-and-sendfile-einval"),
        pytest.param({"copy_file_range": errno.ENOSYS, "sendfile": errno.EOPNOTSUPP}, id="both-unsupported"),
    ],
)
def test_falls_back_to_buffered_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setup: dict[str, int | None]
) -> None:
    src = make_source(tmp_path, shards=3)
    before = hashes(src)
    for name, code in setup.items():
        if code is None:
            monkeypatch.delattr(os, name, raising=False)
        else:
            monkeypatch.setattr(os, name, raise_errno(code), raising=False)
    reads = count_calls(monkeypatch, "pread")
    seen: list[int] = []
    write_checkpoint(tmp_path / "out", single_plan(src), config(src), progress=seen.append)
    assert len(reads) >= 3
    assert sum(seen) == open_checkpoint(src).total_bytes
    assert_same_tensors(src, tmp_path / "out")
    assert hashes(src) == before


@pytest.mark.skipif(not hasattr(os, "copy_file_range"), reason="needs os.copy_file_range")
def test_partial_kernel_copies_are_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = make_source(tmp_path)
    real = os.copy_file_range
    calls: list[int] = []

    def short(src_fd: int, dst_fd: int, count: int, offset_src: int | None = None) -> int:
        calls.append(count)
        return real(src_fd, dst_fd, min(count, 1000), offset_src)

    monkeypatch.setattr(os, "copy_file_range", short)
    write_checkpoint(tmp_path / "out", single_plan(src), config(src))
    assert len(calls) > 1 and calls[0] == open_checkpoint(src).total_bytes
    assert_same_tensors(src, tmp_path / "out")


# ---- what is refused before anything is written --------------------------------------------------------------------


def test_an_existing_output_is_refused_without_force(tmp_path: Path) -> None:
    src = make_source(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("previous")
    with pytest.raises(OutputExistsError) as info:
        write_checkpoint(out, single_plan(src), config(src))
    assert str(out) in str(info.value) and info.value.hint is not None and "--force" in info.value.hint
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert siblings(out) == []


def test_force_replaces_an_existing_output(tmp_path: Path) -> None:
    src = make_source(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.safetensors").write_bytes(b"old")
    (out / "tokenizer.json").write_text("{}")  # a checkpoint's files only: what --force may replace
    result = write_checkpoint(out, single_plan(src), config(src), force=True)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert result.left_behind == ()
    assert siblings(out) == []
    assert_same_tensors(src, out)


@pytest.mark.parametrize("where", ["inside", "equal", "parent"])
def test_an_output_overlapping_the_source_directory_is_refused(tmp_path: Path, where: str) -> None:
    src = make_source(tmp_path)
    before = hashes(src)
    out = {"inside": src / "converted", "equal": src, "parent": tmp_path}[where]
    with pytest.raises(UsageError, match=r"the output (is|is inside|contains) the input"):
        write_checkpoint(out, single_plan(src), config(src), force=True)
    assert hashes(src) == before
    assert not (src / "converted").exists()
    assert siblings(out) == []


@pytest.mark.parametrize(
    "name", ["../model.safetensors", "a/model.safetensors", "/tmp/x.safetensors", "a\\b", "x\0y", ""]
)
def test_names_must_be_plain(tmp_path: Path, name: str) -> None:
    src = make_source(tmp_path)
    shard_plan = [ShardPlan(name, single_plan(src)[0].tensors, META)]
    with pytest.raises(UnsafePathError):
        write_checkpoint(tmp_path / "out", shard_plan, config(src))
    with pytest.raises(UnsafePathError):
        write_checkpoint(tmp_path / "out", single_plan(src), {name: b"{}"})
    assert not (tmp_path / "out").exists() and siblings(tmp_path / "out") == []


def test_bad_plans_are_refused_before_anything_is_created(tmp_path: Path) -> None:
    src = make_source(tmp_path)
    t = in_file_order(src)
    file = src / t[0].shard
    out = tmp_path / "out"

    def plan(*sources: TensorSource) -> list[ShardPlan]:
        return [ShardPlan("model.safetensors", sources, META)]

    bad_plans: list[tuple[list[ShardPlan], type[Exception], str]] = [
        (plan(TensorSource("x", "U8", (1,))), ValueError, "exactly one"),
        (plan(TensorSource("x", "U8", (1,), file, 0, 1, compute=lambda: b"a")), ValueError, "exactly one"),
        (plan(TensorSource(t[0].name, t[0].dtype, t[0].shape, file, t[0].start, t[0].end + 2)), ValueError, "bytes"),
        (plan(TensorSource("x", "Q8", (1,), compute=lambda: b"a")), ValueError, "dtype"),
        (plan(TensorSource("x", "F4", (3,), compute=lambda: b"a")), ValueError, "whole number"),
        (plan(TensorSource("", "U8", (1,), compute=lambda: b"a")), ValueError, "name"),
        (plan(TensorSource("x", "U8", (1,), file, 10**9, 10**9 + 1)), InputError, "bytes but tensors are read"),
        (plan(TensorSource("x", "U8", (1,), src / "missing.safetensors", 0, 1)), InputError, "cannot read"),
        (
            [
                ShardPlan("model-00001-of-00002.safetensors", (from_file(src, t[0]),), META),
                ShardPlan("model-00002-of-00002.safetensors", (from_file(src, t[0]),), META),
            ],
            InputError,
            "written twice",
        ),
        ([ShardPlan("model.bin", (from_file(src, t[0]),), META)], ValueError, ".safetensors"),
    ]
    for shards, error, text in bad_plans:
        with pytest.raises(error, match=text):
            write_checkpoint(out, shards, config(src))
        assert not out.exists() and siblings(out) == []
    with pytest.raises(ValueError, match="planned twice"):
        write_checkpoint(out, single_plan(src), {"model.safetensors": b""})
    two = [ShardPlan(f"model-0000{i}-of-00002.safetensors", (from_file(src, t[i]),), META) for i in (1, 2)]
    with pytest.raises(ValueError, match="planned twice"):
        write_checkpoint(out, two, {INDEX_NAME: b"{}"})
    assert not out.exists() and siblings(out) == []


# ---- failures while writing ----------------------------------------------------------------------------------------


def test_the_partial_directory_is_a_hidden_sibling(tmp_path: Path) -> None:
    src = make_source(tmp_path)
    out = tmp_path / "out"
    during: list[list[str]] = []

    def look() -> bytes:
        during.append(siblings(out) + (["out"] if out.exists() else []))
        return b"\0" * 4

    plan = [ShardPlan("model.safetensors", (TensorSource("x", "F32", (1,), compute=look),), META)]
    write_checkpoint(out, plan, config(src))
    assert len(during) == 1 and len(during[0]) == 1
    assert during[0][0].startswith(".out.partial-") and len(during[0][0]) == len(".out.partial-") + 16


def test_a_failing_compute_leaves_nothing(tmp_path: Path) -> None:
    src = make_source(tmp_path)
    out = tmp_path / "out"

    def boom() -> bytes:
        raise ValueError("boom")

    sources = (*single_plan(src)[0].tensors, TensorSource("x", "U8", (1,), compute=boom))
    with pytest.raises(ValueError, match="boom"):
        write_checkpoint(out, [ShardPlan("model.safetensors", sources, META)], config(src))
    assert not out.exists() and siblings(out) == []


def test_a_compute_of_the_wrong_length_is_a_bug(tmp_path: Path) -> None:
    src = make_source(tmp_path)
    out = tmp_path / "out"
    plan = [ShardPlan("model.safetensors", (TensorSource("short", "F32", (4,), compute=lambda: b"\0" * 15),), META)]
    with pytest.raises(RuntimeError, match="'short' returned 15 bytes, expected 16"):
        write_checkpoint(out, plan, config(src))
    assert not out.exists() and siblings(out) == []


def test_a_failure_keeps_the_previous_output_when_forcing(tmp_path: Path) -> None:
    src = make_source(tmp_path)
    out = tmp_path / "out"
    write_checkpoint(out, single_plan(src), config(src))
    before = hashes(out)
    plan = [ShardPlan("model.safetensors", (TensorSource("x", "U8", (2,), compute=lambda: b"x"),), META)]
    with pytest.raises(RuntimeError):
        write_checkpoint(out, plan, config(src), force=True)
    assert hashes(out) == before and siblings(out) == []


def test_a_failed_commit_puts_the_previous_output_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = make_source(tmp_path)
    out = tmp_path / "out"
    write_checkpoint(out, single_plan(src), config(src))
    before = hashes(out)
    real_rename = os.rename
    renames: list[tuple[str, str]] = []

    def rename(a: Any, b: Any) -> None:
        renames.append((Path(a).name, Path(b).name))
        if Path(a).name.startswith(".out.partial-"):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_rename(a, b)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(InputError):
        write_checkpoint(out, single_plan(src), config(src), force=True)
    assert [(a.split("-")[0], b.split("-")[0]) for a, b in renames] == [
        ("out", ".out.old"),
        (".out.partial", "out"),
        (".out.old", "out"),
    ]
    assert hashes(out) == before and siblings(out) == []


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_is_a_typed_error_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    src = make_source(tmp_path)
    before = hashes(src)
    out = tmp_path / "out"
    real_write = os.write

    def write(fd: int, data: Any) -> int:
        if fd > 2:  # leave the standard streams alone
            raise OSError(code, os.strerror(code))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(DiskFullError) as info:
        write_checkpoint(out, single_plan(src), config(src))
    assert str(out) in str(info.value) and "nothing was written" in str(info.value)
    assert not out.exists() and siblings(out) == []
    monkeypatch.undo()
    assert hashes(src) == before


@pytest.mark.skipif(not hasattr(os, "copy_file_range"), reason="needs os.copy_file_range")
def test_a_full_disk_during_a_kernel_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = make_source(tmp_path)
    out = tmp_path / "out"
    monkeypatch.setattr(os, "copy_file_range", raise_errno(errno.ENOSPC))
    with pytest.raises(DiskFullError):
        write_checkpoint(out, single_plan(src), config(src))
    assert not out.exists() and siblings(out) == []


def test_other_os_errors_become_input_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = make_source(tmp_path)
    out = tmp_path / "out"
    monkeypatch.setattr(os, "fsync", raise_errno(errno.EIO))
    with pytest.raises(InputError) as info:
        write_checkpoint(out, single_plan(src), config(src))
    assert not isinstance(info.value, DiskFullError)
    assert str(out) in str(info.value)
    assert not out.exists() and siblings(out) == []


def test_stale_partial_directories_are_removed(tmp_path: Path) -> None:
    src = make_source(tmp_path)
    out = tmp_path / "out"
    stale = tmp_path / ".out.partial-0123456789abcdef"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    (stale / STAGING_MARKER).write_text("")  # a killed run's: the tool's marker is in it
    kept = [tmp_path / ".out.partial-notours", tmp_path / ".other.partial-0123456789abcdef"]
    for path in kept:
        path.mkdir()
    users = tmp_path / ".out.partial-00000000000000aa"  # named like one, but without the marker: the user's
    users.mkdir()
    (users / "precious.txt").write_text("mine")
    kept.append(users)
    kept_file = tmp_path / ".out.partial-fedcba9876543210"
    kept_file.write_text("a file, not a directory")
    write_checkpoint(out, single_plan(src), config(src))
    assert not stale.exists()
    assert all(p.exists() for p in [*kept, kept_file]) and (users / "precious.txt").read_text() == "mine"
    assert_same_tensors(src, out)


# ---- killed at random moments --------------------------------------------------------------------------------------

KILL_SCRIPT = """
import sys
from pathlib import Path

from eagle_convert.read.checkpoint import open_checkpoint
from eagle_convert.normalize.writer import ShardPlan, TensorSource, write_checkpoint

src, out = Path(sys.argv[1]), Path(sys.argv[2])
tensors = sorted(open_checkpoint(src).tensors.values(), key=lambda t: (t.shard, t.start))
sources = [TensorSource(t.name, t.dtype, t.shape, src / t.shard, t.start, t.end) for t in tensors]
sources.append(TensorSource("made", "U8", (1024,), compute=lambda: bytes(range(256)) * 4))
n = 4
step = -(-len(sources) // n)
plan = [
    ShardPlan(f"model-{i + 1:05d}-of-{n:05d}.safetensors", tuple(sources[i * step : (i + 1) * step]), {"format": "pt"})
    for i in range(n)
]
write_checkpoint(out, plan, {"config.json": (src / "config.json").read_bytes()}, force=True)
"""


def make_large_source(src: Path, shards: int = 20, per_shard: int = 10, rows: int = 256) -> None:
    """``shards`` files of ``per_shard`` F32 [rows, 1024] tensors of seeded random bytes (no sparse holes)."""
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    rng = random.Random(20240601)
    for s in range(shards):
        names = [f"layers.{s}.w{k}" for k in range(per_shard)]
        with open(src / f"part-{s:02d}.safetensors", "wb") as f:
            f.write(build_header([(n, "F32", (rows, 1024)) for n in names], {"format": "pt"}))
            for _ in names:
                f.write(rng.randbytes(rows * 1024 * 4))


@pytest.mark.slow
def test_a_killed_write_leaves_no_output_or_a_complete_one(tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    make_large_source(src)
    sources = hashes(src)
    assert sum((src / name).stat().st_size for name in sources) > 200_000_000

    def start() -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-c", KILL_SCRIPT, str(src), str(out)]
        return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    began = time.monotonic()
    proc = start()
    _, err = proc.communicate(timeout=300)
    duration = time.monotonic() - began
    assert proc.returncode == 0, err.decode()
    complete = hashes(out)
    reference = open_checkpoint(src)
    written = open_checkpoint(out)
    assert set(written.tensors) == {*reference.tensors, "made"}
    for name, t in reference.tensors.items():
        w = written.tensors[name]
        assert raw(out / w.shard, w.start, w.end) == raw(src / t.shard, t.start, t.end), name

    rng = random.Random(7)
    killed = 0
    for _ in range(10):
        if rng.random() < 0.5:  # half the runs replace a previous output, half write a fresh one
            shutil.rmtree(out, ignore_errors=True)
        proc = start()
        time.sleep(rng.uniform(0.0, duration * 1.1))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.communicate(timeout=300)
        if out.exists():
            assert open_checkpoint(out).tensors.keys() == written.tensors.keys()
            assert hashes(out) == complete
        assert hashes(src) == sources
    assert killed >= 1

    proc = start()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()
    assert hashes(out) == complete
    assert not [name for name in siblings(out) if ".partial-" in name]
    assert hashes(src) == sources
