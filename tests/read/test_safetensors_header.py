"""The strict header reader: agreement with the reference parser on valid files, typed errors on everything else."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from safetensors import safe_open

from eagle_convert.errors import HeaderError
from eagle_convert.read.safetensors_header import DTYPE_BITS, build_header, read_header, tensor_nbytes
from fixtures.generate import MALFORMED
from fixtures.layouts import LAYOUTS


def _raw_file(path: Path, header: dict[str, object] | str | bytes, body: bytes = b"") -> Path:
    raw = header if isinstance(header, bytes) else (header if isinstance(header, str) else json.dumps(header)).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)
    return path


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_reader_agrees_with_reference_parser(fx: Path, layout: str) -> None:
    path = fx / "layouts" / layout / "model.safetensors"
    header = read_header(path)
    with safe_open(path, framework="numpy") as ref:
        assert sorted(t.name for t in header.tensors) == sorted(ref.keys())
        assert header.metadata == (ref.metadata() or {})
        data = path.read_bytes()
        for t in header.tensors:
            sl = ref.get_slice(t.name)
            assert list(t.shape) == sl.get_shape()
            assert t.dtype == sl.get_dtype()
            assert t.nbytes == tensor_nbytes(t.dtype, t.shape)
            if t.dtype == "F32" or t.dtype == "I64":  # byte range points at the tensor's own bytes
                assert data[t.start : t.end] == ref.get_tensor(t.name).tobytes()


def test_byte_ranges_match_reference_for_every_dtype_in_fixtures(fx: Path) -> None:
    import torch
    from safetensors.torch import load_file

    path = fx / "layouts" / "speculators-mha" / "model.safetensors"
    tensors = load_file(path)
    data = path.read_bytes()
    for t in read_header(path).tensors:
        ref = tensors[t.name].contiguous().view(torch.uint8).reshape(-1)
        assert data[t.start : t.end] == bytes(ref.tolist())


@pytest.mark.parametrize(
    "name", [n for n, (sharded, _, _) in MALFORMED.items() if not sharded and not n.startswith("config")]
)
def test_malformed_single_files_raise_header_error(tmp_path: Path, name: str) -> None:
    from fixtures.generate import write_malformed

    _, _, words = MALFORMED[name]
    d = write_malformed(tmp_path / name, name)
    with pytest.raises(HeaderError) as info:
        read_header(d / "model.safetensors")
    assert words in info.value.message
    assert str(d / "model.safetensors") in info.value.message
    assert "\n" not in info.value.message


def test_empty_header_and_buffer_is_valid(tmp_path: Path) -> None:
    header = read_header(_raw_file(tmp_path / "e.safetensors", "{}"))
    assert header.tensors == () and header.metadata == {}


def test_trailing_space_padding_is_accepted(tmp_path: Path) -> None:
    blob = build_header([("a", "F32", (3,))], {"k": "v"}) + b"\0" * 12
    path = tmp_path / "p.safetensors"
    path.write_bytes(blob)
    header = read_header(path)
    assert header.data_start % 8 == 0
    assert [t.name for t in header.tensors] == ["a"] and header.metadata == {"k": "v"}


def test_zero_sized_tensors_tile_the_buffer(tmp_path: Path) -> None:
    doc = {
        "z": {"dtype": "F32", "shape": [0, 4], "data_offsets": [0, 0]},
        "a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]},
    }
    header = read_header(_raw_file(tmp_path / "z.safetensors", doc, b"\0" * 4))
    assert {t.name: t.nbytes for t in header.tensors} == {"z": 0, "a": 4}


@pytest.mark.parametrize(
    ("doc", "body", "words"),
    [
        (' {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4, "not a JSON object"),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": 1}}, b"\0" * 4, "unknown fields"),
        ({"a": {"dtype": "F32", "shape": [1]}}, b"\0" * 4, "missing"),
        ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4, "non-negative"),
        ({"a": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}}, b"\0" * 4, "non-negative"),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, b"\0" * 4, "begin 4 > end 0"),
        (
            {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "__metadata__": {"k": 1}},
            b"\0" * 4,
            "must be a string",
        ),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, "past the end of the file"),
        ({"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, b"\0" * 2, "whole number of bytes"),
        ({"": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "empty name"),
        ('{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, NaN]}}', b"\0" * 4, "NaN"),
        ({"a": {"dtype": "f32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "unknown dtype"),
    ],
)
def test_header_validation(tmp_path: Path, doc: object, body: bytes, words: str) -> None:
    path = _raw_file(tmp_path / "x.safetensors", doc, body)  # type: ignore[arg-type]
    with pytest.raises(HeaderError, match=words):
        read_header(path)


def test_deeply_nested_header_is_refused_without_recursion_error(tmp_path: Path) -> None:
    path = _raw_file(tmp_path / "deep.safetensors", '{"__metadata__": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(HeaderError, match="nesting"):
        read_header(path)


def test_sub_byte_dtypes_are_sized_in_bits() -> None:
    assert tensor_nbytes("F4", (4, 2)) == 4
    assert tensor_nbytes("F6_E2M3", (4,)) == 3
    assert tensor_nbytes("F6_E2M3", (3,)) is None
    assert set(DTYPE_BITS) >= {"BOOL", "BF16", "F8_E4M3", "F8_E8M0", "C64", "F4", "F6_E3M2"}


def test_build_header_round_trips_through_reference_parser(tmp_path: Path) -> None:
    path = tmp_path / "b.safetensors"
    path.write_bytes(build_header([("x", "BF16", (2, 3)), ("y", "I64", (1,))], {"m": "1"}) + b"\1" * 20)
    with safe_open(path, framework="numpy") as ref:
        assert sorted(ref.keys()) == ["x", "y"]
    assert [(t.name, t.start - read_header(path).data_start) for t in read_header(path).tensors] == [
        ("x", 0),
        ("y", 12),
    ]
