"""Several token sequences run through a reference target in one pass, packed end to end.

Every op of a decoder layer except attention works token by token, so sequences can share one ``[T, H]`` tensor:
positions restart at 0 for each sequence and attention stays inside each one. A streaming target then reads each
layer's weights once for all the sequences instead of once per sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from eagle_convert.errors import InputError


@dataclass(frozen=True)
class Packed:
    """``ids`` ``[T]`` on the compute device, ``positions`` ``[T]`` (CPU, int64), ``segments`` ``(start, stop)``."""

    ids: torch.Tensor
    positions: torch.Tensor
    segments: tuple[tuple[int, int], ...]


def pack(input_ids: torch.Tensor, lengths: Sequence[int] | None, vocab: int, device: str | torch.device) -> Packed:
    """Check ``input_ids`` (``[T]`` or ``[1, T]``, integers in ``0..vocab-1``) and split it into ``lengths``
    (default: one sequence)."""
    if input_ids.is_floating_point() or input_ids.shape[:-1] not in ((), (1,)):
        raise InputError(f"input_ids must be integer [T] or [1, T], found {input_ids.dtype} {list(input_ids.shape)}")
    ids = input_ids.reshape(-1)  # [1, T] or [T] -> [T]
    if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise InputError(f"input_ids must be non-empty and lie in 0..{vocab - 1}")
    sizes = [ids.numel()] if lengths is None else [int(n) for n in lengths]
    if any(n < 1 for n in sizes) or sum(sizes) != ids.numel():
        raise InputError(f"sequence lengths {sizes} must be positive and add up to the {ids.numel()} tokens")
    positions = torch.cat([torch.arange(n) for n in sizes])  # [T]: 0..n-1 per sequence
    return Packed(ids.to(device), positions, segments(sizes))


def segments(lengths: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """``(start, stop)`` of each sequence packed end to end."""
    out, start = [], 0
    for n in lengths:
        out.append((start, start + n))
        start += n
    return tuple(out)
