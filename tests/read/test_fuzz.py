"""Property-based fuzzing of every parser that reads stranger's files, and a differential check of the reader.

The only allowed outcomes are success or the project's typed error: never another exception, never a hang, never
memory that grows with a size a file merely claims. The example count is bounded for the normal suite;
EAGLE_CONVERT_FUZZ_EXAMPLES raises it for a long run (docs/security.md records one).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import os
import shutil
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from safetensors import safe_open

from eagle_convert.errors import EXIT_BAD_INPUT, EXIT_NOTHING_TO_CHECK, EagleConvertError
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.read.checkpoint import open_checkpoint
from eagle_convert.read.safetensors_header import DTYPE_BITS, read_header, tensor_nbytes
from eagle_convert.verify.run import verify_checkpoint
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS
from tests.conftest import SCHEMAS as SCHEMA_DIR

EXAMPLES = int(os.environ.get("EAGLE_CONVERT_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=5000,
    derandomize=EXAMPLES <= 60,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["../../etc/passwd", "/abs", "a\x00b", "\u202eevil", "..", "model.safetensors", "F32", "I64"]),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn, doc: Any) -> Any:
    """``doc`` with 1-3 random edits: a value replaced, a key deleted or added, at any depth."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(json_value)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(json_value)
    return doc


def _raw_json_tricks(text: str, trick: str) -> str:
    if trick == "nan":
        return text.replace("0", "NaN", 1)
    if trick == "infinity":
        return text.replace("1", "Infinity", 1)
    if trick == "deep":
        return text[:-1] + ', "deep": ' + "[" * 5000 + "]" * 5000 + "}"
    if trick == "giant":
        return text[:-1] + ', "giant": ' + "9" * 5000 + "}"
    if trick == "duplicate":
        return text[:-1] + ', "x": 1, "x": 2}'
    return text


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz-base")
    write_layout(root / "single", LAYOUTS["specforge-mha-eagle3.1"])
    write_layout(root / "sharded", LAYOUTS["speculators-mha"], shards=3)
    write_layout(root / "mla", LAYOUTS["torchspec-mla"])
    return root


def _fresh(base: Path, tmp: Path, name: str) -> Path:
    out = tmp / "case"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(base / name, out)
    return out


SCHEMAS = {
    name: Draft202012Validator(json.loads((SCHEMA_DIR / f"{name}-report.schema.json").read_text()))
    for name in ("inspect", "verify", "normalize")
}


def _expect_typed(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn``'s result, or None when it raised one of the project's typed errors, which must read as the CLI renders
    it: a one-line message and the exit code of bad input (2) or of nothing to check (3). Any other exception fails."""
    try:
        return fn(*args, **kwargs)
    except EagleConvertError as exc:
        assert exc.message and "\n" not in exc.message, repr(exc.message)
        assert exc.exit_code in (EXIT_BAD_INPUT, EXIT_NOTHING_TO_CHECK), (type(exc).__name__, exc.exit_code)
        assert exc.hint is None or (exc.hint and "\n" not in exc.hint), repr(exc.hint)
        return None


def _hashes(directory: Path) -> dict[str, str]:
    """sha256 of every file under ``directory``: the inputs a run must leave as they were."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@FUZZ
@given(
    data=st.data(),
    which=st.sampled_from(["single", "sharded", "mla"]),
    trick=st.sampled_from(["", "", "", "nan", "infinity", "deep", "giant", "duplicate"]),
)
def test_fuzzed_config_only_gives_success_or_typed_error(
    base: Path, tmp_path: Path, data: st.DataObject, which: str, trick: str
) -> None:
    ckpt = _fresh(base, tmp_path, which)
    config = json.loads((ckpt / "config.json").read_text())
    text = _raw_json_tricks(json.dumps(data.draw(mutated(config))), trick)
    (ckpt / "config.json").write_text(text, encoding="utf-8")
    before = _hashes(ckpt)
    inspected = _expect_typed(inspect_checkpoint, ckpt)
    if inspected is not None:  # a report a --json run can write: valid against its schema
        SCHEMAS["inspect"].validate(inspected.to_dict())
    verified = _expect_typed(verify_checkpoint, ckpt, compute_hashes=False)
    if verified is not None:
        SCHEMAS["verify"].validate(verified.to_dict())
        assert verified.status in ("pass", "fail") and verified.level == "static"
    planned = _expect_typed(normalize_checkpoint, ckpt, tmp_path / "out", target_family="llama", dry_run=True)
    if planned is not None:
        SCHEMAS["normalize"].validate(planned.to_dict())
    assert not (tmp_path / "out").exists()  # a dry run writes nothing
    assert _hashes(ckpt) == before  # inputs are never modified


@FUZZ
@given(data=st.data(), which=st.sampled_from(["single", "sharded"]))
def test_fuzzed_index_gives_success_or_typed_error(base: Path, tmp_path: Path, data: st.DataObject, which: str) -> None:
    ckpt = _fresh(base, tmp_path, which)
    index_path = ckpt / "model.safetensors.index.json"
    if not index_path.exists():
        names = [n for n in read_header(ckpt / "model.safetensors").tensors]
        index_path.write_text(
            json.dumps({"metadata": {"total_size": 0}, "weight_map": {t.name: "model.safetensors" for t in names}})
        )
    index = json.loads(index_path.read_text())
    index_path.write_text(json.dumps(data.draw(mutated(index))))
    before = _hashes(ckpt)
    on_disk = {
        t.name: t for p in sorted(ckpt.glob("*.safetensors")) for t in read_header(p).tensors
    }  # what the shards hold, whatever the index says
    opened = _expect_typed(open_checkpoint, ckpt)
    if opened is not None:  # the index can neither invent, drop nor move a tensor
        assert opened.root == ckpt and {s.name for s in opened.shards} <= {p.name for p in ckpt.iterdir()}
        assert dict(opened.tensors) == on_disk
    verified = _expect_typed(verify_checkpoint, ckpt, compute_hashes=False)
    if verified is not None:
        SCHEMAS["verify"].validate(verified.to_dict())
        assert verified.status in ("pass", "fail")
    assert (opened is None) == (verified is None)  # verify reads the checkpoint as the reader does
    assert _hashes(ckpt) == before


def _mutate_bytes(blob: bytes, data: st.DataObject) -> bytes:
    kind = data.draw(st.sampled_from(["flip", "truncate", "length", "header-json", "extend"]))
    buf = bytearray(blob)
    (n,) = struct.unpack("<Q", blob[:8])
    if kind == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, min(len(buf) - 1, 8 + n + 64)))
            buf[i] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "truncate":
        del buf[data.draw(st.integers(0, len(buf) - 1)) :]
    elif kind == "length":
        claimed = data.draw(st.one_of(st.integers(0, 2**64 - 1), st.integers(0, len(buf) + 64)))
        buf[:8] = struct.pack("<Q", claimed)
    elif kind == "extend":
        buf += bytes(data.draw(st.integers(1, 64)))
    else:
        doc = json.loads(blob[8 : 8 + n])
        raw = json.dumps(data.draw(mutated(doc))).encode()
        buf = bytearray(struct.pack("<Q", len(raw)) + raw + blob[8 + n :])
    return bytes(buf)


@FUZZ
@given(data=st.data())
def test_fuzzed_safetensors_bytes_give_header_error_and_bounded_memory(
    base: Path, tmp_path: Path, data: st.DataObject
) -> None:
    blob = (base / "single" / "model.safetensors").read_bytes()
    mutant = _mutate_bytes(blob, data)
    path = tmp_path / "x.safetensors"
    path.write_bytes(mutant)
    tracemalloc.start()
    try:
        header = _expect_typed(read_header, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * len(mutant) + (1 << 20)  # proportional to the real file, never to a claimed length
    assert path.read_bytes() == mutant
    if header is not None:  # what an accepted header promises: every tensor's bytes inside the file, none shared
        spans = sorted((t.start, t.end) for t in header.tensors)
        assert all(header.data_start <= start <= end <= len(mutant) for start, end in spans), spans
        assert all(t.nbytes == tensor_nbytes(t.dtype, t.shape) for t in header.tensors)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans)), spans
        assert len({t.name for t in header.tensors}) == len(header.tensors)


# ---- differential check against the reference parser ------------------------------------------------------------

# Where this reader is deliberately stricter than safetensors.safe_open (docs/security.md lists the same cases).
STRICTER = ("leading-whitespace", "duplicate-key", "unknown-field", "empty-name")
SURROGATES = ("\ud800", "\udfff", "\udbff", "\ud83d\ude00")  # three lone halves and one valid pair


@st.composite
def header_files(draw: st.DrawFn) -> tuple[bytes, set[str]]:
    """A safetensors file that is valid or broken in chosen ways, with the deliberate-strictness features it has."""
    features: set[str] = set()
    count = draw(st.integers(0, 4))
    names = draw(st.lists(st.text(min_size=0, max_size=6), min_size=count, max_size=count, unique=True))
    # now and then a lone surrogate (written as a \\uXXXX escape, refused by serde_json) or a valid escaped pair
    marked = [n + draw(st.sampled_from(SURROGATES)) if draw(st.integers(0, 9)) == 0 else n for n in names]
    names = marked if len(set(marked)) == len(marked) else names
    entries, offset = [], 0
    for name in names:
        dtype = draw(st.sampled_from([*DTYPE_BITS, "Q8", "f32"]))
        shape = draw(st.lists(st.integers(0, 5), max_size=3))
        bits = DTYPE_BITS.get(dtype, 8)
        size = (bits * _prod(shape) + 7) // 8
        size += draw(st.sampled_from([0, 0, 0, 1, -1])) if size else 0
        if draw(st.integers(0, 9)) == 0:  # a dimension at or past what u64/usize and int64 hold (bytes unchanged)
            shape = [
                *shape,
                draw(st.sampled_from([2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**30])),
            ]
        begin = offset + draw(st.sampled_from([0, 0, 0, 2, -1]))
        entry: dict[str, Any] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [max(begin, 0), max(begin, 0) + max(size, 0)],
        }
        if draw(st.integers(0, 9)) == 0:
            entry["extra"] = 1
            features.add("unknown-field")
        if name == "":
            features.add("empty-name")
        entries.append((name, entry))
        offset = entry["data_offsets"][1]
    body = b"\0" * (offset + draw(st.sampled_from([0, 0, 0, 3])))
    if draw(st.integers(0, 4)) == 0:  # __metadata__ of any JSON shape: only a string -> string map (or null) is valid
        json_values = st.recursive(
            st.none()
            | st.booleans()
            | st.integers(-(2**70), 2**70)
            | st.text(max_size=4)
            | st.sampled_from(SURROGATES),
            lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
            max_leaves=4,
        )
        entries.insert(
            0, ("__metadata__", draw(st.dictionaries(st.text(max_size=4), json_values, max_size=3) | json_values))
        )
    text = "{" + ", ".join(json.dumps(n) + ": " + json.dumps(e) for n, e in entries)
    if entries and draw(st.integers(0, 9)) == 0:
        text += ", " + json.dumps(entries[0][0]) + ": " + json.dumps(entries[0][1])
        features.add("duplicate-key")
    text += "}"
    if draw(st.integers(0, 9)) == 0:
        text = " " + text
        features.add("leading-whitespace")
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw + body, features


def _prod(shape: list[int]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


DIFFERENTIAL = max(EXAMPLES, 400)  # generated headers per run (about 4 ms each); seeded unless raised for a long run


@settings(FUZZ, max_examples=DIFFERENTIAL, derandomize=DIFFERENTIAL <= 400)
@pytest.mark.parametrize("cases", [DIFFERENTIAL], ids=[f"{DIFFERENTIAL}-generated-headers"])
@given(case=header_files())
def test_reader_agrees_with_reference_parser(tmp_path: Path, cases: int, case: tuple[bytes, set[str]]) -> None:
    blob, features = case
    path = tmp_path / "d.safetensors"
    path.write_bytes(blob)
    try:
        with safe_open(str(path), framework="numpy") as f:
            list(f.keys())
        reference = True
    except Exception:  # noqa: BLE001 - any refusal by the reference parser
        reference = False
    try:
        read_header(path)
        ours = True
    except EagleConvertError:
        ours = False
    if ours:
        assert reference, "this reader accepted a file the reference parser refuses"
    elif reference:
        assert features & set(STRICTER), (
            f"refused a file the reference accepts, for no documented reason: {blob[:200]!r}"
        )


def test_regression_non_list_verifier_architectures(base: Path, tmp_path: Path) -> None:
    """Found by the long fuzz run: speculators_config.verifier.architectures = true crashed detection."""
    ckpt = _fresh(base, tmp_path, "sharded")
    config = json.loads((ckpt / "config.json").read_text())
    config["speculators_config"]["verifier"]["architectures"] = True
    config["eagle_convert"] = {"target_family": "not-a-family"}
    (ckpt / "config.json").write_text(json.dumps(config))
    doc = inspect_checkpoint(ckpt).to_dict()
    assert doc["target"]["family"] in (None, "llama", "qwen", "deepseek", "gpt-oss")


@pytest.mark.parametrize(
    "header",
    [
        {"__metadata__": []},  # found by the differential run: a falsy non-map read as "no metadata"
        {"__metadata__": 0},
        {"0": {"dtype": "BOOL", "shape": [0, 2**64], "data_offsets": [0, 0]}},  # found: a dimension past u64
        {"0": {"dtype": "BOOL", "shape": [2**63, 4, 0], "data_offsets": [0, 0]}},  # the loader's product overflows
        {"a\ud800": {"dtype": "BOOL", "shape": [0], "data_offsets": [0, 0]}},  # a lone surrogate: serde_json refuses
        {"__metadata__": {"k": "\udc00"}},
    ],
    ids=[
        "metadata-list",
        "metadata-zero",
        "dim-past-u64",
        "count-overflows-left-to-right",
        "lone-surrogate-name",
        "lone-surrogate-metadata",
    ],
)
def test_headers_the_loader_refuses_are_refused(tmp_path: Path, header: dict[str, Any]) -> None:
    raw = json.dumps(header).encode()
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(Exception):  # noqa: B017 - the reference parser's own refusal, whatever its type
        with safe_open(str(path), framework="numpy") as f:
            list(f.keys())
    with pytest.raises(EagleConvertError):
        read_header(path)
