"""Header-only safetensors parsing with strict validation (no torch, no tensor bytes read).

Layout: 8-byte little-endian header length ``n``, ``n`` bytes of UTF-8 JSON, then the data buffer. The JSON maps
tensor names to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the buffer) plus an
optional ``__metadata__`` string->string map. This reader checks everything the reference Rust parser checks and
more: duplicate keys, unknown entry fields, holes and trailing bytes, and sub-byte dtypes whose size is not whole.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from eagle_convert.errors import HeaderError
from eagle_convert.read.jsonstrict import JsonSyntaxError, decode_utf8, loads_strict
from eagle_convert.read.lfs import FIRST_BYTES as LFS_FIRST_BYTES
from eagle_convert.read.lfs import MAX_POINTER_BYTES, pointer_error
from eagle_convert.read.regular import open_regular
from eagle_convert.read.source_files import Fingerprint
from eagle_convert.version import docs_url

PAGE = 4096
# The reference parser's cap; a larger claimed header is refused before anything is allocated.
MAX_HEADER_BYTES = 100_000_000
# The longest tensor name read (the reference parser has no cap; real names are under 200 characters). Every name is
# printed, compared and written again: a 10 MB name made each of those cost megabytes.
MAX_TENSOR_NAME = 4096
# The most tensors one checkpoint (or one shard) may hold, whatever the number of shards: the largest real
# checkpoints (DeepSeek-V3, Kimi K2 in FP8 with their scales) hold under 200,000.
MAX_TENSORS = 1 << 20
# the hint of every size limit of what is read: no real checkpoint comes near one
LIMIT_HINT = f"no real checkpoint comes near this limit ({docs_url('docs/security.md', 'limits')}): check the file"


@dataclass(frozen=True)
class Dtype:
    """One dtype of the format: bits an element, and the torch dtype ``safe_open(framework="pt")`` gives its values
    (named, so that headers need no torch: an attribute of ``torch``, absent from older releases; None where
    safetensors itself refuses the dtype). ``packed`` elements share one torch element: F4's two 4-bit values a byte
    are one ``float4_e2m1fn_x2``, so the last dimension halves."""

    bits: int
    torch: str | None
    packed: int = 1


# Every dtype the format defines: the one table the header reader, the value readers and the target's streaming read.
DTYPES: Mapping[str, Dtype] = {
    "BOOL": Dtype(8, "bool"),
    "U8": Dtype(8, "uint8"),
    "I8": Dtype(8, "int8"),
    "F8_E4M3": Dtype(8, "float8_e4m3fn"),
    "F8_E5M2": Dtype(8, "float8_e5m2"),
    "F8_E8M0": Dtype(8, "float8_e8m0fnu"),
    "F8_E4M3FNUZ": Dtype(8, "float8_e4m3fnuz"),
    "F8_E5M2FNUZ": Dtype(8, "float8_e5m2fnuz"),
    "U16": Dtype(16, "uint16"),
    "I16": Dtype(16, "int16"),
    "F16": Dtype(16, "float16"),
    "BF16": Dtype(16, "bfloat16"),
    "U32": Dtype(32, "uint32"),
    "I32": Dtype(32, "int32"),
    "F32": Dtype(32, "float32"),
    "U64": Dtype(64, "uint64"),
    "I64": Dtype(64, "int64"),
    "F64": Dtype(64, "float64"),
    "C64": Dtype(64, "complex64"),
    "F4": Dtype(4, "float4_e2m1fn_x2", packed=2),
    "F6_E2M3": Dtype(6, None),  # safetensors 0.8: "Dtype not understood"
    "F6_E3M2": Dtype(6, None),
}
DTYPE_BITS: Mapping[str, int] = {name: d.bits for name, d in DTYPES.items()}
FLOAT_DTYPES = frozenset(d for d in DTYPE_BITS if d.startswith(("F", "BF")))
INT_DTYPES = frozenset({"U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64"})
_ENTRY_FIELDS = frozenset({"dtype", "shape", "data_offsets"})


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as the header describes it. ``start``/``end`` are absolute byte offsets in ``shard``."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int
    shard: str

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def row_bytes(self) -> int | None:
        """Bytes of one row along the first dimension (a scalar is one row); None when a row is not a whole number
        of bytes (a 4-bit vector)."""
        return tensor_nbytes(self.dtype, self.shape[1:])

    def rows(self, start: int, stop: int) -> tuple[int, int]:
        """Absolute byte offsets of rows ``start:stop`` along the first dimension: a row-major tensor's rows lie
        back to back, so any run of them is one byte range (a fused tensor's split, an expert of ``[E, ...]``)."""
        size, count = self.row_bytes, self.shape[0] if self.shape else 1
        if size is None or not 0 <= start <= stop <= count:
            raise ValueError(f"{self.name}: rows {start}:{stop} of {self.dtype} x {list(self.shape)}")
        return self.start + start * size, self.start + stop * size


@dataclass(frozen=True)
class SafetensorsHeader:
    path: Path
    file_size: int
    data_start: int
    metadata: dict[str, str]
    tensors: tuple[TensorInfo, ...]
    # the file as its header was read (fstat of that descriptor); None for a header read from elsewhere (the Hub)
    fingerprint: Fingerprint | None = None


def tensor_nbytes(dtype: str, shape: Iterable[int]) -> int | None:
    """Bytes for ``shape`` elements of ``dtype``; None when the bit count is not a whole number of bytes."""
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    return bits // 8 if bits % 8 == 0 else None


def header_length(prefix: bytes, file_size: int, source: str) -> int:
    """Validate the 8-byte length prefix against the cap and the file size; return the JSON length."""
    if file_size < 8 or len(prefix) < 8:
        raise HeaderError(f"file is {file_size} bytes, too short for the 8-byte header length", path=source)
    if prefix[:8] == LFS_FIRST_BYTES and file_size < MAX_POINTER_BYTES:  # no safetensors length reads "version "
        raise pointer_error(b"", source)
    n = int(struct.unpack("<Q", prefix[:8])[0])
    if n > MAX_HEADER_BYTES:
        raise HeaderError(f"header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit", path=source)
    if n > file_size - 8:
        raise HeaderError(f"header length {n} is larger than the file ({file_size} bytes)", path=source)
    if n < 2:
        raise HeaderError(f"header length {n} is too small for a JSON object", path=source)
    return n


def parse_header(raw: bytes, file_size: int, source: str, shard: str) -> SafetensorsHeader:
    """Validate the JSON header ``raw`` (without its length prefix) of a file of ``file_size`` bytes."""
    try:
        text = decode_utf8(raw)
    except JsonSyntaxError as exc:
        raise HeaderError(f"header: {exc}", path=source) from None
    if not text.startswith("{"):
        raise HeaderError("header is not a JSON object (it does not start with '{')", path=source)
    try:
        doc = loads_strict(text.rstrip(" "))  # writers pad the header with trailing spaces to align the buffer
    except JsonSyntaxError as exc:
        raise HeaderError(f"header: {exc}", path=source) from None
    if not isinstance(doc, dict):
        raise HeaderError("header is not a JSON object", path=source)

    data_start = 8 + len(raw)
    buffer_size = file_size - data_start
    given = doc.pop("__metadata__", None)
    metadata = _metadata(
        {} if given is None else given, source
    )  # null is "no metadata", as in the reference; [] is not
    if len(doc) > MAX_TENSORS:
        raise HeaderError(
            f"header lists {len(doc):,} tensors, over the {MAX_TENSORS:,} limit", path=source, hint=LIMIT_HINT
        )
    tensors = [_entry(name, value, data_start, source, shard) for name, value in doc.items()]
    _check_coverage(tensors, data_start, buffer_size, source)
    return SafetensorsHeader(Path(source), file_size, data_start, metadata, tuple(tensors))


def read_header(path: Path, shard: str | None = None) -> SafetensorsHeader:
    """Read and validate the header of the safetensors file at ``path`` (tensor bytes are never read)."""
    source = str(path)
    try:
        with open_regular(path) as f:
            fingerprint = Fingerprint.of(os.fstat(f.fileno()))
            file_size = fingerprint.size
            n = header_length(f.read(8), file_size, source)
            raw = f.read(n)
    except OSError as exc:
        raise HeaderError(f"cannot read file: {exc.strerror or exc}", path=source) from None
    if len(raw) != n:
        raise HeaderError(f"file ended inside the {n}-byte header", path=source)
    header = parse_header(raw, file_size, source, shard if shard is not None else path.name)
    return replace(header, fingerprint=fingerprint)


def _metadata(value: object, source: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise HeaderError("__metadata__ must be an object of strings", path=source)
    for key, item in value.items():
        if not isinstance(item, str):
            raise HeaderError(f"__metadata__[{key!r}] is {type(item).__name__}, must be a string", path=source)
    return dict(value)


def _entry(name: str, value: object, data_start: int, source: str, shard: str) -> TensorInfo:
    if not name:
        raise HeaderError("a tensor has an empty name", path=source)
    if len(name) > MAX_TENSOR_NAME:
        raise HeaderError(
            f"tensor {name[:60]!r}... has a name of {len(name):,} characters, over the {MAX_TENSOR_NAME:,} limit",
            path=source,
            hint=LIMIT_HINT,
        )
    if not isinstance(value, dict):
        raise HeaderError(f"tensor {name!r}: entry is not an object", path=source)
    missing = _ENTRY_FIELDS - value.keys()
    extra = value.keys() - _ENTRY_FIELDS
    if missing or extra:
        what = f"missing {sorted(missing)}" if missing else f"unknown fields {sorted(extra)}"
        raise HeaderError(f"tensor {name!r}: entry has {what}", path=source)
    dtype, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise HeaderError(f"tensor {name!r}: unknown dtype {dtype!r}", path=source)
    if not _counts(shape):
        raise HeaderError(f"tensor {name!r}: shape {shape!r} is not a list of non-negative integers", path=source)
    if not _counts(offsets) or len(offsets) != 2:
        raise HeaderError(f"tensor {name!r}: data_offsets {offsets!r} is not [begin, end]", path=source)
    if any(v > _U64_MAX for v in (*shape, *offsets)) or _overflows(shape):
        raise HeaderError(
            f"tensor {name!r}: shape {shape!r} or data_offsets {offsets!r} overflow 64 bits (the safetensors loader "
            "refuses them)",
            path=source,
        )
    begin, end = offsets
    if begin > end:
        raise HeaderError(f"tensor {name!r}: data_offsets begin {begin} > end {end}", path=source)
    expected = tensor_nbytes(dtype, shape)
    if expected is None:
        raise HeaderError(f"tensor {name!r}: {dtype} x {shape} is not a whole number of bytes", path=source)
    if end - begin != expected:
        raise HeaderError(
            f"tensor {name!r}: {dtype} x {shape} needs {expected} bytes but data_offsets span {end - begin}",
            path=source,
        )
    return TensorInfo(name, dtype, tuple(shape), data_start + begin, data_start + end, shard)


_U64_MAX = 2**64 - 1  # the safetensors loader reads dimensions and offsets as u64/usize, multiplied with checks


def _overflows(shape: list[int]) -> bool:
    """Whether the element count overflows 64 bits as the loader computes it: a running product, left to right."""
    count = 1
    for d in shape:
        count *= d
        if count > _U64_MAX:
            return True
    return False


def _counts(values: object) -> bool:
    """A JSON list of non-negative integers (``type is int`` also excludes booleans)."""
    return type(values) is list and all(type(v) is int and v >= 0 for v in values)


def _check_coverage(tensors: list[TensorInfo], data_start: int, buffer_size: int, source: str) -> None:
    """Tensors must tile the buffer exactly: no overlap, no hole, nothing past the end, no trailing bytes."""
    cursor = data_start
    last = ""
    for t in sorted(tensors, key=lambda t: (t.start, t.end)):
        if t.start < cursor:
            raise HeaderError(f"tensors {last!r} and {t.name!r} overlap", path=source)
        if t.start > cursor:
            raise HeaderError(
                f"hole of {t.start - cursor} bytes before tensor {t.name!r} (buffer offset {cursor - data_start})",
                path=source,
            )
        cursor, last = t.end, t.name
    end = data_start + buffer_size
    if cursor > end:
        raise HeaderError(
            f"tensor {last!r} ends at buffer offset {cursor - data_start}, past the end of the file "
            f"(buffer is {buffer_size} bytes)",
            path=source,
        )
    if cursor < end:
        raise HeaderError(f"{end - cursor} trailing bytes after the last tensor", path=source)


def build_header(
    entries: Iterable[tuple[str, str, tuple[int, ...]]],
    metadata: Mapping[str, str] | None = None,
    *,
    data_start_mod: int | None = None,
) -> bytes:
    """The length prefix and JSON header for tensors laid out back to back in the given order.

    Used by writers that then stream each tensor's bytes in the same order. The JSON is padded with spaces so
    the data buffer starts on an 8-byte boundary, as the reference writer does.
    """
    doc: dict[str, object] = {}
    if metadata:
        doc["__metadata__"] = dict(metadata)
    offset = 0
    for name, dtype, shape in entries:
        size = tensor_nbytes(dtype, shape)
        if size is None:
            raise ValueError(f"{name}: {dtype} x {list(shape)} is not a whole number of bytes")
        doc[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-(8 + len(raw)) % 8)
    if data_start_mod is not None:  # match a source's page offset, so kernel copies stay page-congruent
        raw += b" " * ((data_start_mod - (8 + len(raw))) % PAGE)
    return struct.pack("<Q", len(raw)) + raw
