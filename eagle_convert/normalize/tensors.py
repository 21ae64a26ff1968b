"""The tensor half of `normalize`: every source tensor mapped, split, permuted or converted, and the output shards.

Renamed tensors stay byte ranges of their source files (the writer copies them with the kernel); only fused splits
(still byte ranges: row blocks of a row-major tensor), fc column permutations and vocabulary-map conversions
compute bytes, one tensor at a time when the writer reaches them. Byte ranges and computed tensors' bytes both come
from read/tensor_bytes.py, the one reader of values, through the writer's descriptors (``sources``).
"""

from __future__ import annotations

import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from eagle_convert.draft.detect import DraftSpec
from eagle_convert.draft.layouts import FC_NORM_RE
from eagle_convert.draft.mapping import map_key, to_layout
from eagle_convert.draft.vocab_map import absolute_ids, as_offsets, is_identity
from eagle_convert.errors import NormalizeRefused
from eagle_convert.normalize.profiles import PROFILE_LAYOUT, Semantics
from eagle_convert.normalize.writer import ShardPlan, TensorSource
from eagle_convert.read.checkpoint import Checkpoint
from eagle_convert.read.config import PROVENANCE_KEY
from eagle_convert.read.safetensors_header import INT_DTYPES, TensorInfo, tensor_nbytes
from eagle_convert.read.source_files import SourceFiles
from eagle_convert.read.tensor_bytes import ByteRange, TensorBytes
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import finding

_INT_FORMATS = {"I8": "b", "U8": "B", "I16": "h", "U16": "H", "I32": "i", "U32": "I", "I64": "q", "U64": "Q"}


@dataclass(frozen=True)
class TensorAction:
    source: str | None
    target: str | None
    action: str  # keep, rename, split, permute, convert, derive, drop
    why: str
    dtype: str
    shape: list[int]


@dataclass
class TensorPlan:
    shards: list[ShardPlan]
    actions: list[TensorAction]
    findings: list[Finding] = field(default_factory=list)  # what the output will still show (verify's rules)


def nbytes(t: TensorSource) -> int:
    return tensor_nbytes(t.dtype, t.shape) or 0


Read = Callable[[TensorInfo], memoryview]  # a source tensor's bytes, through the run's one descriptor of its shard


def _read(values: TensorBytes, t: TensorInfo) -> memoryview:
    return values.read(t.name)


def _row_split(values: TensorBytes, t: TensorInfo, rows: list[int]) -> list[tuple[ByteRange, tuple[int, ...]]]:
    """Byte ranges and shapes of consecutive row blocks of a row-major tensor (the header's offsets, as every reader
    of values computes them)."""
    if not t.shape or sum(rows) != t.shape[0] or t.row_bytes is None:
        raise NormalizeRefused(f"fused tensor {t.name} {list(t.shape)} does not split into rows {rows}")
    out, cursor = [], 0
    for r in rows:
        out.append((values.row_range(t.name, cursor, cursor + r), (r, *t.shape[1:])))
        cursor += r
    return out


def _split_rows(spec: DraftSpec, local: str) -> list[tuple[str, int]]:
    d = spec.dims
    heads, kv, hd = d.num_attention_heads or 0, d.num_key_value_heads or 0, d.head_dim or 0
    if local == "self_attn.qkv_proj.weight":
        return [
            ("self_attn.q_proj.weight", heads * hd),
            ("self_attn.k_proj.weight", kv * hd),
            ("self_attn.v_proj.weight", kv * hd),
        ]
    if local == "mlp.gate_up_proj.weight":
        size = d.intermediate_size or 0
        return [("mlp.gate_proj.weight", size), ("mlp.up_proj.weight", size)]
    q, kv_rank, rope = d.q_lora_rank or 0, d.kv_lora_rank or 0, d.qk_rope_head_dim or 0
    return [("self_attn.q_a_proj.weight", q), ("self_attn.kv_a_proj_with_mqa.weight", kv_rank + rope)]


def _block_order(spec: DraftSpec) -> list[int] | None:
    """fc block permutation that puts the aux states in ascending layer order, or None when already sorted."""
    ids = spec.aux.ids or []
    order = sorted(range(len(ids)), key=lambda i: ids[i])
    return None if order == list(range(len(ids))) else order


def _permute_blocks(data: memoryview, rows: int, blocks: int, order: list[int]) -> bytes:
    """Reorder ``blocks`` equal column blocks in each of ``rows`` rows: new block j = old block order[j]."""
    row = len(data) // rows
    width = row // blocks
    view = memoryview(data)
    out = bytearray()
    for r in range(rows):
        base = r * row
        for j in order:
            out += view[base + j * width : base + (j + 1) * width]
    return bytes(out)


def _ints(data: memoryview, dtype: str) -> array.array[int]:
    values = array.array(_INT_FORMATS[dtype])
    values.frombytes(data)
    return values


# why an identity d2t/t2d pair is dropped (EC412)
IDENTITY_DROP = (
    "d2t/t2d are the identity over the whole target vocabulary (draft_vocab_size equals vocab_size): the engines "
    "build no map for such a draft, and vLLM >= 0.29 refuses a d2t there (EC412)"
)


@dataclass(frozen=True)
class VocabMapPlan:
    """What normalize does with d2t and t2d, decided from their values (draft/vocab_map.py)."""

    offsets: list[int] | None = None  # d2t held target ids (absolute_ids): these offsets are written instead
    why_absolute: str | None = None
    identity: bool = False  # the pair is the identity over the target vocabulary: both are dropped


def _vocab_map_plan(read: Read, ckpt: Checkpoint, layout: str, spec: DraftSpec, src: Path) -> VocabMapPlan:
    """Read d2t (and t2d) once, the few tensors whose name can map to them, and decide."""
    found: dict[str, TensorInfo] = {}
    for t in ckpt.tensors.values():
        if t.name.endswith(("d2t", "t2d")) and t.dtype in (*INT_DTYPES, "BOOL"):
            target = map_key(t.name, layout, str(src)).target
            if target in ("d2t", "t2d"):
                found[target] = t
    d2t_info, t2d_info = found.get("d2t"), found.get("t2d")
    if d2t_info is None or d2t_info.dtype not in INT_DTYPES:
        return VocabMapPlan()
    d2t = list(_ints(read(d2t_info), d2t_info.dtype))
    t2d = None
    if t2d_info is not None:
        data = read(t2d_info)
        t2d = list(data) if t2d_info.dtype == "BOOL" else list(_ints(data, t2d_info.dtype))
    vocab = spec.dims.vocab_size
    why = absolute_ids(d2t, t2d, vocab)
    offsets = as_offsets(d2t) if why is not None else None
    # with the ids written as offsets, a t2d that marked those ids still marks the same tokens
    identity = is_identity(offsets if offsets is not None else d2t, t2d, vocab)
    return VocabMapPlan(offsets, why, identity)


def plan_tensors(
    src: Path,
    ckpt: Checkpoint,
    spec: DraftSpec,
    sem: Semantics,
    profile: str,
    max_shard_size: int | None,
    sources: SourceFiles,
) -> TensorPlan:
    """Every source tensor's action and the output shards; computed tensors read their bytes through ``sources``
    (the writer's, which checks each shard against the fingerprint its header was read with)."""
    layout = spec.layer_prefix or "midlayer."
    out_layout = PROFILE_LAYOUT[profile]
    order = _block_order(spec)
    position = {old: new for new, old in enumerate(order)} if order else {}
    k = sem.num_aux_hidden_states
    values = TensorBytes(ckpt, sources)
    read: Read = partial(_read, values)
    per_shard: dict[str, list[TensorSource]] = {}
    actions: list[TensorAction] = []
    d2t_info: TensorInfo | None = None
    d2t_shard = None
    vocab_map = _vocab_map_plan(read, ckpt, layout, spec, src)
    vocab = spec.dims.vocab_size

    def emit(shard: str, source: TensorSource, src_name: str | None, action: str, why: str) -> None:
        per_shard.setdefault(shard, []).append(source)
        actions.append(TensorAction(src_name, source.name, action, why, source.dtype, list(source.shape)))

    def name_out(canonical: str) -> str:
        return to_layout(canonical, out_layout)

    for t in sorted(ckpt.tensors.values(), key=lambda t: (t.shard, t.start)):
        mapped = map_key(t.name, layout, str(src))
        where = values.byte_range(t.name)
        if mapped.action == "drop":
            actions.append(TensorAction(t.name, None, "drop", mapped.why, t.dtype, list(t.shape)))
            continue
        target = mapped.target
        fc_norm = FC_NORM_RE.fullmatch(target)
        if target in ("d2t", "t2d") and vocab_map.identity:
            actions.append(TensorAction(t.name, None, "drop", IDENTITY_DROP, t.dtype, list(t.shape)))
            continue
        if mapped.action == "split":
            local = target.split(".", 1)[1] if target.startswith("midlayer.") else target
            parts = _split_rows(spec, local)
            for (name, _), (block, shape) in zip(parts, _row_split(values, t, [r for _, r in parts]), strict=True):
                emit(
                    t.shard,
                    TensorSource(name_out("midlayer." + name), t.dtype, shape, block.file, block.start, block.end),
                    t.name,
                    "split",
                    "engine-internal fusion stored split (rows of the fused tensor)",
                )
        elif target == "fc.weight" and order:
            rows = t.shape[0]
            emit(
                t.shard,
                TensorSource(
                    name_out(target),
                    t.dtype,
                    t.shape,
                    compute=partial(_permuted, read, t, rows, k, order),
                ),
                t.name,
                "permute",
                f"fc column blocks reordered to ascending aux-layer order {order}",
            )
        elif target == "input_norm.weight" and order:
            emit(
                t.shard,
                TensorSource(name_out(target), t.dtype, t.shape, compute=partial(_permuted, read, t, 1, k, order)),
                t.name,
                "permute",
                "input_norm segments reordered to ascending aux-layer order",
            )
        elif fc_norm and order:
            new = f"fc_norm.{position[int(fc_norm.group(1))]}.weight"
            emit(
                t.shard,
                TensorSource(name_out(new), t.dtype, t.shape, where.file, where.start, where.end),
                t.name,
                "rename",
                "fc_norm index follows the ascending aux-layer order",
            )
        elif target == "d2t" and vocab_map.offsets is not None:
            emit(
                t.shard,
                TensorSource("d2t", "I64", t.shape, compute=partial(_int64, vocab_map.offsets)),
                t.name,
                "convert",
                f"d2t held target token ids ({vocab_map.why_absolute}): written as the offsets every engine reads, "
                "d2t[i] = id - i (EC414)",
            )
        elif target == "t2d" and vocab_map.offsets is not None and vocab is not None:
            emit(
                t.shard,
                TensorSource("t2d", "BOOL", (vocab,), compute=partial(_mask, vocab_map.offsets, vocab, src)),
                t.name,
                "derive",
                "t2d derived from the converted d2t (t2d[d + d2t[d]] = true)",
            )
        elif target == "d2t" and t.dtype != "I64":
            if t.dtype not in INT_DTYPES:
                raise NormalizeRefused(f"d2t has dtype {t.dtype}; it must hold integer offsets", path=src)
            emit(
                t.shard,
                TensorSource(
                    "d2t",
                    "I64",
                    t.shape,
                    compute=partial(_as_int64, read, t),
                ),
                t.name,
                "convert",
                f"d2t {t.dtype} -> I64, the dtype both engines expect",
            )
        elif target == "t2d" and t.dtype != "BOOL":
            emit(
                t.shard,
                TensorSource("t2d", "BOOL", t.shape, compute=partial(_as_bool, read, t)),
                t.name,
                "convert",
                f"t2d {t.dtype} -> BOOL",
            )
        else:
            out_name = name_out(target)
            relaid = mapped.action == "keep" and out_name != t.name  # the profile's layout renames it
            emit(
                t.shard,
                TensorSource(out_name, t.dtype, t.shape, where.file, where.start, where.end),
                t.name,
                "rename" if relaid else mapped.action,
                f"{profile} profile stores the layer as {out_layout}" if relaid else mapped.why,
            )
        if target == "d2t":
            d2t_info, d2t_shard = t, t.shard

    if d2t_info is not None and not spec.vocab.has_t2d:
        if vocab is None:
            raise NormalizeRefused("t2d is missing and vocab_size is unknown, so it cannot be derived", path=src)
        info = d2t_info
        derive = (
            partial(_mask, vocab_map.offsets, vocab, src)
            if vocab_map.offsets is not None
            else partial(_derive_t2d, read, info, vocab, src)
        )
        emit(
            d2t_shard or info.shard,
            TensorSource("t2d", "BOOL", (vocab,), compute=derive),
            None,
            "derive",
            "t2d derived from d2t (t2d[d + d2t[d]] = true)",
        )
    return TensorPlan(_shards(ckpt, per_shard, max_shard_size), actions, _vocab_map_findings(vocab_map, vocab))


def _vocab_map_findings(plan: VocabMapPlan, vocab: int | None) -> list[Finding]:
    """What verify will still say about the converted d2t: target ids 0..n-1 (verl-SpeCo's default arange) are, as
    offsets, all zero: the draft vocabulary is the first n target tokens (EC409), whatever the trainer meant."""
    offsets = plan.offsets
    if offsets is None or vocab is None or any(offsets) or len(offsets) >= vocab:
        return []
    return [
        finding(
            "EC409",
            f"d2t held the target ids 0..{len(offsets) - 1}, written as offsets all zero: the draft vocabulary is the "
            f"first {len(offsets)} of the target's {vocab} tokens, a default the trainer never replaced with its "
            "vocabulary mapping",
            subject="d2t",
        )
    ]


def _permuted(read: Read, t: TensorInfo, rows: int, blocks: int, order: list[int]) -> bytes:
    return _permute_blocks(read(t), rows, blocks, order)


def _as_int64(read: Read, t: TensorInfo) -> bytes:
    return array.array("q", _ints(read(t), t.dtype)).tobytes()


def _as_bool(read: Read, t: TensorInfo) -> bytes:
    values = _ints(read(t), t.dtype) if t.dtype in INT_DTYPES else None
    if values is None or any(v not in (0, 1) for v in values):
        raise NormalizeRefused(f"t2d ({t.dtype}) holds values other than 0 and 1")
    return bytes(values)


def _int64(values: list[int]) -> bytes:
    return array.array("q", values).tobytes()


def _derive_t2d(read: Read, t: TensorInfo, vocab: int, src: Path) -> bytes:
    return _mask(_ints(read(t), t.dtype), vocab, src)


def _mask(offsets: Iterable[int], vocab: int, src: Path) -> bytes:
    """t2d from offsets: t2d[d + d2t[d]] = true."""
    mask = bytearray(vocab)
    for d, off in enumerate(offsets):
        target = d + off
        if not 0 <= target < vocab:
            raise NormalizeRefused(
                f"d2t maps draft token {d} to {target}, outside the {vocab}-token vocabulary", path=src
            )
        mask[target] = 1
    return bytes(mask)


def _shards(ckpt: Checkpoint, per_shard: dict[str, list[TensorSource]], max_size: int | None) -> list[ShardPlan]:
    metadata = {s.name: {k: v for k, v in s.metadata.items() if k != PROVENANCE_KEY} for s in ckpt.shards}
    if max_size is None:
        if len(per_shard) == 1:
            ((name, tensors),) = per_shard.items()
            return [ShardPlan("model.safetensors", tuple(tensors), metadata.get(name, {"format": "pt"}))]
        return [
            ShardPlan(name, tuple(per_shard[name]), metadata.get(name, {"format": "pt"})) for name in sorted(per_shard)
        ]
    groups: list[list[TensorSource]] = [[]]
    size = 0
    for tensors in (per_shard[n] for n in sorted(per_shard)):
        for t in tensors:
            if groups[-1] and size + nbytes(t) > max_size:
                groups.append([])
                size = 0
            groups[-1].append(t)
            size += nbytes(t)
    base = {"format": "pt"}
    if len(groups) == 1:
        return [ShardPlan("model.safetensors", tuple(groups[0]), base)]
    n = len(groups)
    return [ShardPlan(f"model-{i:05d}-of-{n:05d}.safetensors", tuple(g), base) for i, g in enumerate(groups, 1)]
