"""The one reader of tensor values (read/tensor_bytes.py under reference/tensor_file.py): what ``safe_open`` gives, for
every dtype the strict header reader accepts, read at the header's offsets through one checked descriptor a shard;
a shard truncated after its header was read is exit 2 naming it, never a crash."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from eagle_convert.cli.main import main
from eagle_convert.errors import InputError, SourceChangedError
from eagle_convert.read.checkpoint import open_checkpoint
from eagle_convert.read.safetensors_header import DTYPES, build_header, tensor_nbytes
from eagle_convert.reference.tensor_file import TensorFile, torch_dtype
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS

READABLE = [name for name, d in DTYPES.items() if d.torch is not None]
SHAPE = (3, 4)


def _bytes(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and bytes (NaN payloads and float8 included)."""
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))
    )


@pytest.fixture(scope="module")
def every_dtype(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint written by safetensors' own writer: one [3, 4] tensor of each dtype torch reads, random bytes."""
    root = tmp_path_factory.mktemp("dtypes")
    tensors = {}
    for i, name in enumerate(READABLE):
        dtype = torch_dtype(name)
        assert dtype is not None, name
        packed = DTYPES[name].packed
        stored = (SHAPE[0], SHAPE[1] // packed)
        tensors[f"t.{name}"] = _bytes(SHAPE[0] * SHAPE[1] * DTYPES[name].bits // 8, i).view(dtype).view(stored)
    save_file(tensors, str(root / "model.safetensors"), metadata={"format": "pt"})
    (root / "config.json").write_text("{}")
    return root


def test_the_table_names_what_safetensors_writes(every_dtype: Path) -> None:
    """Each torch dtype of the one table is the one safetensors' writer stores under that dtype's name."""
    with safe_open(str(every_dtype / "model.safetensors"), framework="pt") as ref:
        assert {k: ref.get_slice(k).get_dtype() for k in ref.keys()} == {f"t.{n}": n for n in READABLE}


@pytest.mark.parametrize("dtype", READABLE)
def test_every_dtype_reads_as_safe_open_reads_it(every_dtype: Path, dtype: str) -> None:
    name = f"t.{dtype}"
    with TensorFile(open_checkpoint(every_dtype)) as f, safe_open(str(every_dtype / "model.safetensors"), "pt") as ref:
        assert name in f.keys()
        expected = ref.get_tensor(name)
        assert _same(f.get_tensor(name), expected)
        sliced = f.get_slice(name)
        assert sliced.get_dtype() == dtype and sliced.get_shape() == list(SHAPE)
        for index in (slice(1, 3), 2, -1, (slice(None), slice(0, 1)), (Ellipsis, 0), slice(None, None, 2)):
            assert _same(sliced[index], expected[index]), index


def test_a_slice_reads_only_its_rows(every_dtype: Path) -> None:
    with TensorFile(open_checkpoint(every_dtype)) as f:
        f.get_slice("t.F32")[1:3]
        assert f.bytes.bytes_read == 2 * 4 * 4
        f.get_slice("t.BF16")[0]
        assert f.bytes.bytes_read == 2 * 4 * 4 + 4 * 2


def _raw_checkpoint(root: Path, dtype: str, shape: tuple[int, ...]) -> Path:
    root.mkdir()
    n = tensor_nbytes(dtype, shape)
    assert n is not None
    (root / "model.safetensors").write_bytes(build_header([("x", dtype, shape)]) + bytes(range(n)))
    (root / "config.json").write_text("{}")
    return root


@pytest.mark.parametrize(("dtype", "shape"), [("F6_E2M3", (4,)), ("F6_E3M2", (4,)), ("F4", (2, 3))])
def test_what_safe_open_refuses_is_refused_in_one_line(tmp_path: Path, dtype: str, shape: tuple[int, ...]) -> None:
    """F6 (no torch dtype) and F4 with an odd last dimension (its bytes pair values): refused as safe_open refuses
    them, as a typed error naming the file and the tensor."""
    root = _raw_checkpoint(tmp_path / "ckpt", dtype, shape)
    with safe_open(str(root / "model.safetensors"), framework="pt") as ref, pytest.raises(SafetensorError):
        ref.get_tensor("x")
    with TensorFile(open_checkpoint(root)) as f, pytest.raises(InputError) as info:
        f.get_tensor("x")
    assert info.value.path == str(root / "model.safetensors") and "'x'" in info.value.message


def test_a_shard_truncated_while_it_is_read_is_a_typed_error(tmp_path: Path) -> None:
    """Truncated after the reader opened it (a mapping would take SIGBUS here): the next read names the file."""
    src = write_layout(tmp_path / "src", LAYOUTS["specforge-mha"])
    ckpt = open_checkpoint(src)
    last = max(ckpt.tensors.values(), key=lambda t: t.end)
    first = min(ckpt.tensors.values(), key=lambda t: t.start)
    with TensorFile(ckpt) as f:
        f.get_tensor(first.name)
        with open(src / last.shard, "r+b") as raw:
            raw.truncate(last.start + 1)
        with pytest.raises(SourceChangedError) as info:
            f.get_tensor(last.name)
    assert info.value.path == str(src / last.shard) and "changed since its header was read" in info.value.message


def test_verify_on_a_shard_truncated_after_its_header_was_read_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The shard shrinks between the header read and the values read: one Error line naming it, exit 2 (before:
    safetensors' own error escaped as an internal error)."""
    from eagle_convert.reference import draft_reader

    src = write_layout(tmp_path / "src", LAYOUTS["specforge-mha"], shards=2)
    shard = src / "model-00002-of-00002.safetensors"
    size = shard.stat().st_size
    original = draft_reader.TensorReader.__init__

    def truncate_first(self: Any, *args: Any, **kwargs: Any) -> None:
        with open(shard, "r+b") as raw:
            raw.truncate(size - 64)
        original(self, *args, **kwargs)

    monkeypatch.setattr(draft_reader.TensorReader, "__init__", truncate_first)
    capfd.readouterr()
    code = main(["verify", str(src), "--level", "tensors", "--no-hash"])
    err = capfd.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert err.splitlines()[0].startswith(f"Error: {shard}: changed since its header was read"), err
    assert err.splitlines()[1].startswith("Hint: ")


def test_the_header_offsets_are_the_ones_read(tmp_path: Path) -> None:
    """A header padded after it was read moves every tensor: the reader refuses the file, never reading the new
    offsets' bytes as the old tensors."""
    src = write_layout(tmp_path / "src", LAYOUTS["specforge-mha"])
    ckpt = open_checkpoint(src)
    path = src / "model.safetensors"
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    raw = json.dumps(json.loads(data[8 : 8 + n])).encode() + b" " * 4096
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n :])
    with TensorFile(ckpt) as f, pytest.raises(SourceChangedError):
        f.get_tensor(next(iter(ckpt.tensors)))


def test_empty_and_scalar_tensors(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    root.mkdir()
    save_file({"e": torch.empty(0, 4), "s": torch.tensor(3.5, dtype=torch.bfloat16)}, str(root / "model.safetensors"))
    (root / "config.json").write_text("{}")
    with TensorFile(open_checkpoint(root)) as f, safe_open(str(root / "model.safetensors"), "pt") as ref:
        for name in ("e", "s"):
            assert _same(f.get_tensor(name), ref.get_tensor(name))
        assert _same(f.get_slice("e")[0:0], ref.get_tensor("e")[0:0])
