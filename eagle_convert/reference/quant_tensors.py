"""What a target's weight format stores beside each quantized tensor, checked from the safetensors headers before any
tensor is read (no torch here).

Every quantized weight must come with the scales its format declares, in the shape the format gives them: a scale
that is missing, or whose grid does not fit its weight, would otherwise be read as an unscaled weight (a wrong target
that still runs) or fail inside a layer's load. :func:`check` refuses such a target with one error naming the shard
and the tensor (exit 2), before the reference builds anything; the reference reads a target only after it passed.

The layouts, per ``quant_method`` (reference/formats.py dequantizes them):

- ``fp8`` (block FP8): an FP8 ``W`` with ``W_scale_inv`` ``[ceil(out / bo), ceil(in / bi)]`` for
  ``weight_block_size`` ``[bo, bi]`` (one element without a block). transformers reads ``M.scale`` and
  ``M.qscale_weight`` as ``M.weight_scale_inv`` too. transformers 5.24's own ``save_pretrained`` of a MoE quantized
  with ``FineGrainedFP8Config`` writes the experts' weights one by one (``experts.E.gate_proj.weight``) beside the
  fused scales of its in-memory experts (``experts.gate_up_proj_scale_inv`` ``[E, ceil(2I / bo), ceil(H / bi)]``,
  gate rows then up rows; ``experts.down_proj_scale_inv``): :func:`expert_scales` names each expert's share of those
  (:data:`FUSED_EXPERT_SCALES`). The same save writes a ``W_scale_inv`` of uninitialized memory beside each weight it
  left unquantized (not FP8): such a weight is read as stored, its scale ignored.
- ``compressed-tensors``: an FP8 ``M.weight`` with ``M.weight_scale`` (per tensor, per output channel, per group or
  per block, as a config group declares); a packed ``M.weight_packed`` with ``M.weight_scale``, and
  ``M.weight_global_scale`` (format ``nvfp4-pack-quantized``) or ``M.weight_shape`` (``pack-quantized``, INT).
- ``modelopt``: a uint8 (NVFP4) ``M.weight`` with ``M.weight_scale`` and ``M.weight_scale_2``; an FP8 one with
  ``M.weight_scale`` (one, or one per output row).
- ``mxfp4``: ``X_blocks`` with ``X_scales`` ``blocks.shape[:-1]``.

An FP8 tensor in a target that declares no quantization is refused too: nothing says how to scale it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle_convert.errors import InputError
from eagle_convert.read.safetensors_header import TensorInfo

FP8 = frozenset({"F8_E4M3", "F8_E5M2"})
FP8_SCALE_NAMES = ("weight_scale_inv", "scale", "qscale_weight")  # M.<name> beside M.weight (transformers' renamings)
# A fused expert scale (transformers' in-memory FP8 experts) -> the per-expert weights whose rows it covers, in order,
# under each family's names (gate and up fused as [gate; up] rows, as transformers' MoE converters concatenate them).
FUSED_EXPERT_SCALES: Mapping[str, tuple[tuple[str, ...], ...]] = {
    "gate_up_proj_scale_inv": (("gate_proj", "up_proj"), ("w1", "w3")),
    "down_proj_scale_inv": (("down_proj",), ("w2",)),
}
_HINT = (
    "the target's weights do not carry the scales its quantization_config declares: re-export it with its "
    "quantizer, or point --target at its unquantized original"
)
_EXPERT = re.compile(r"^(?P<stem>.+\.experts)\.(?P<expert>\d+)\.(?P<proj>[A-Za-z0-9_]+)\.weight$")


@dataclass(frozen=True)
class ExpertScale:
    """One expert's share of a fused expert scale: rows ``rows`` of ``source[expert]`` (one scale row a weight row
    where the fused blocks straddle two projections, ``row_block`` 1; else the projection's own block rows)."""

    source: str
    expert: int
    rows: tuple[int, ...]
    shape: tuple[int, ...]


def grid_extent(size: int, count: int, block: int | None) -> int | None:
    """The elements of a dimension of ``size`` one of ``count`` scales covers: the declared ``block`` where
    ``count`` is its grid (the last block ragged), else ``size / count`` when it divides; None when neither."""
    if block is not None and count == -(-size // block):
        return block
    if count > 0 and size % count == 0:
        return size // count
    return None


def check(quant: Mapping[str, Any] | None, tensors: Mapping[str, TensorInfo], directory: Path) -> None:
    """Refuse (InputError, exit 2) a target whose tensors lack what ``quant``'s format needs, naming the shard and
    the tensor; ``quant`` is the declared quantization config (None: unquantized)."""
    method = quant.get("quant_method") if quant is not None else None
    if method is None:
        for name, info in tensors.items():
            if info.dtype in FP8:
                raise _error(
                    info, directory, f"tensor {name!r} is FP8 ({info.dtype}), but the target's config declares no "
                    "quantization_config that says how to scale it",
                )  # fmt: skip
        return
    assert quant is not None
    if method == "fp8":
        _check_fp8(quant, tensors, directory)
    elif method == "compressed-tensors":
        _check_compressed_tensors(quant, tensors, directory)
    elif method == "modelopt":
        _check_modelopt(tensors, directory)
    elif method == "mxfp4":
        for name, info in tensors.items():
            if name.endswith("_blocks"):
                scale = _needs(tensors, name, name.removesuffix("_blocks") + "_scales", directory, "MXFP4")
                if scale.shape != info.shape[:-1]:
                    raise _misfit(scale, info, list(info.shape[:-1]), directory)


def block_of(quant: Mapping[str, Any]) -> tuple[int, int] | None:
    """``fp8``'s ``weight_block_size`` as a pair; None for per-tensor scales."""
    block = quant.get("weight_block_size")
    if block is None:
        return None
    if (
        isinstance(block, list | tuple)
        and len(block) == 2
        and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
    ):
        return int(block[0]), int(block[1])
    from eagle_convert.errors import ConfigError

    raise ConfigError(
        f"the target's quantization_config has weight_block_size {block!r}, not two positive integers",
        path=Path("config.json"),
        hint=_HINT,
    )


def expert_scales(quant: Mapping[str, Any] | None, tensors: Mapping[str, TensorInfo]) -> dict[str, ExpertScale]:
    """Each FP8 expert weight's own scale, named ``experts.E.P.weight_scale_inv``, where the checkpoint keeps only
    the fused ``experts.<fused>_scale_inv`` (:data:`FUSED_EXPERT_SCALES`); empty when there are none."""
    if quant is None or quant.get("quant_method") != "fp8":
        return {}
    block = block_of(quant)
    out: dict[str, ExpertScale] = {}
    for name, info in tensors.items():
        if info.dtype not in FP8 or _own_scale(tensors, name) is not None:
            continue
        found = _EXPERT.match(name)
        if found is None:
            continue
        share = _fused_share(tensors, found, block)
        if share is not None:
            out[name.removesuffix("weight") + "weight_scale_inv"] = share
    return out


# ---- the formats -----------------------------------------------------------------------------------------------------


def _check_fp8(quant: Mapping[str, Any], tensors: Mapping[str, TensorInfo], directory: Path) -> None:
    block = block_of(quant)
    for name, info in tensors.items():
        if info.dtype not in FP8:
            continue
        scale = _own_scale(tensors, name)
        if scale is None:
            found = _EXPERT.match(name)
            if found is not None and _fused_share(tensors, found, block, directory) is not None:
                continue
            wanted = (
                name.removesuffix("weight") + "weight_scale_inv" if name.endswith("weight") else name + "_scale_inv"
            )
            raise _error(
                info, directory, f"FP8 tensor {name!r} has no scale: {wanted!r} is not in the checkpoint "
                "(quant_method fp8 reads an FP8 weight only with its weight_scale_inv)",
            )  # fmt: skip
        expected = _grid(info.shape, block)
        if tuple(scale.shape) != tuple(expected) and not (block is None and math.prod(scale.shape) == 1):
            raise _misfit(scale, info, expected, directory, f"for weight_block_size {list(block) if block else None}")


def _check_compressed_tensors(quant: Mapping[str, Any], tensors: Mapping[str, TensorInfo], directory: Path) -> None:
    groups = quant.get("config_groups")
    weights = [g.get("weights") for g in groups.values() if isinstance(g, dict)] if isinstance(groups, dict) else []
    fp8_args = [w for w in weights if isinstance(w, dict) and w.get("type") == "float" and w.get("num_bits") == 8]
    fmt = str(quant.get("format") or "")
    for name, info in tensors.items():
        if name.endswith(".weight") and info.dtype in FP8:
            scale = _needs(tensors, name, name + "_scale", directory, "compressed-tensors FP8")
            shapes = [_ct_fp8_scale(info.shape, args) for args in fp8_args] or [_grid(info.shape, None)]
            if not any(_fits(scale.shape, s) for s in shapes):
                raise _misfit(scale, info, shapes[0], directory, "for the config's FP8 scheme")
        elif name.endswith(".weight_packed"):
            stem = name.removesuffix("weight_packed")
            scale = _needs(tensors, name, stem + "weight_scale", directory, "compressed-tensors")
            companion = {"nvfp4-pack-quantized": "weight_global_scale", "pack-quantized": "weight_shape"}.get(fmt)
            if companion is not None:  # (a mixed-precision config names each group's format: its scale suffices)
                _needs(tensors, name, stem + companion, directory, f"compressed-tensors {fmt}")
            if scale.shape[:-1] != info.shape[:-1]:
                raise _misfit(scale, info, [*info.shape[:-1], "groups"], directory)


def _ct_fp8_scale(shape: tuple[int, ...], args: Mapping[str, Any]) -> list[int]:
    """The scale shape a compressed-tensors FP8 scheme gives a weight of ``shape``."""
    rows, cols = shape[-2:] if len(shape) >= 2 else (1, shape[-1] if shape else 1)
    strategy = args.get("strategy")
    if strategy == "block" and isinstance(args.get("block_structure"), list):
        bo, bi = args["block_structure"]
        return [-(-rows // int(bo)), -(-cols // int(bi))]
    if strategy == "channel":
        return [rows, 1]
    if strategy in ("group", "tensor_group") and isinstance(args.get("group_size"), int):
        return [rows, -(-cols // int(args["group_size"]))]
    return [1]


def _check_modelopt(tensors: Mapping[str, TensorInfo], directory: Path) -> None:
    for name, info in tensors.items():
        if not name.endswith(".weight") or info.dtype not in FP8 | {"U8"}:
            continue
        stem = name.removesuffix("weight")
        scale = _needs(tensors, name, stem + "weight_scale", directory, "ModelOpt")
        if info.dtype == "U8":
            _needs(tensors, name, stem + "weight_scale_2", directory, "ModelOpt NVFP4")
            if scale.shape[:-1] != info.shape[:-1]:
                raise _misfit(scale, info, [*info.shape[:-1], "groups"], directory)
        elif math.prod(scale.shape) not in (1, info.shape[0] if info.shape else 1):
            raise _misfit(scale, info, [info.shape[0] if info.shape else 1], directory, "(per tensor or per row)")


# ---- helpers ---------------------------------------------------------------------------------------------------------


def _own_scale(tensors: Mapping[str, TensorInfo], name: str) -> TensorInfo | None:
    """The scale stored beside FP8 tensor ``name`` under any name transformers reads as its ``weight_scale_inv``."""
    if not name.endswith("weight"):
        return tensors.get(name + "_scale_inv")
    stem = name.removesuffix("weight")
    return next((tensors[stem + s] for s in FP8_SCALE_NAMES if stem + s in tensors), None)


def _fused_share(
    tensors: Mapping[str, TensorInfo],
    found: re.Match[str],
    block: tuple[int, int] | None,
    directory: Path | None = None,
) -> ExpertScale | None:
    """Expert ``found``'s share of the fused scale its projection belongs to; None when there is no such scale
    (``directory`` given: a fused scale that does not fit its experts' weights is refused)."""
    stem, expert, proj = found["stem"], int(found["expert"]), found["proj"]
    if block is None:  # per-tensor scales: one an expert's fused projection, not one a projection
        return None
    for fused, families in FUSED_EXPERT_SCALES.items():
        names = next((f for f in families if proj in f), None)
        source = tensors.get(f"{stem}.{fused}")
        if names is None or source is None:
            continue
        parts = [tensors.get(f"{stem}.{expert}.{p}.weight") for p in names]
        if any(p is None or len(p.shape) != 2 for p in parts):
            continue
        sizes = [p.shape[0] for p in parts if p is not None]
        cols = parts[0].shape[1] if parts[0] is not None else 0
        grid = _grid((sum(sizes), cols), block)
        if len(source.shape) != 3 or source.shape[0] <= expert or list(source.shape[1:]) != grid:
            if directory is None:
                return None
            weight = tensors[found.string]
            raise _misfit(source, weight, ["E", *grid], directory, f"(the fused scale of {'+'.join(names)})")
        start = sum(sizes[: names.index(proj)])
        size = sizes[names.index(proj)]
        bo = block[0]
        if start % bo == 0 and (size % bo == 0 or start + size == sum(sizes)):  # the projection's own block rows
            rows = tuple(range(start // bo, -(-(start + size) // bo)))
        else:  # blocks straddle two projections: one scale row a weight row
            rows = tuple((start + r) // bo for r in range(size))
        return ExpertScale(f"{stem}.{fused}", expert, rows, (len(rows), source.shape[2]))
    return None


def _grid(shape: tuple[int, ...], block: tuple[int, int] | None) -> list[int]:
    """The scale grid of a weight ``[..., out, in]`` for ``block`` (one element without a block)."""
    if block is None or len(shape) < 2:
        return [1]
    return [*shape[:-2], -(-shape[-2] // block[0]), -(-shape[-1] // block[1])]


def _fits(got: tuple[int, ...], want: list[int]) -> bool:
    return list(got) == want or (math.prod(got) == 1 and math.prod(want) == 1)


def _needs(tensors: Mapping[str, TensorInfo], name: str, wanted: str, directory: Path, what: str) -> TensorInfo:
    found = tensors.get(wanted)
    if found is None:
        raise _error(tensors[name], directory, f"{what} tensor {name!r} has no {wanted!r} beside it, which its "
                     "format needs")  # fmt: skip
    return found


def _misfit(scale: TensorInfo, weight: TensorInfo, expected: list[Any], directory: Path, why: str = "") -> InputError:
    return _error(
        scale, directory, f"scale {scale.name!r} {list(scale.shape)} does not fit its weight {weight.name!r} "
        f"{list(weight.shape)}: expected {expected}{' ' + why if why else ''}",
    )  # fmt: skip


def _error(info: TensorInfo, directory: Path, message: str) -> InputError:
    return InputError(message, path=directory / info.shard, hint=_HINT)
