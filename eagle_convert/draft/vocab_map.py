"""What a draft's vocabulary map means, read from the values of ``d2t`` and ``t2d`` (no torch: normalize reads them
with the standard library, verify's tensors level from its tensors).

Every engine reads ``d2t`` as offsets: draft token ``i`` is target token ``i + d2t[i]`` (SGLang's ``hot_token_id =
d2t + arange``, vLLM's ``draft_id_to_target_id``, TensorRT-LLM's ``d2t`` parameter). A draft vocabulary is the
target ids it keeps, ascending, so valid offsets never decrease, and they repeat wherever two kept ids are adjacent.
Some trainers wrote the kept target ids themselves instead: verl-SpeCo 0.1.0 defaulted ``d2t`` to ``arange(Vd)``
(its "identity", until its PR #67), which the engines read as draft token ``i`` -> target token ``2i``; with a draft
vocabulary at most half the target's, that passes every range and order check. Target ids are strictly increasing
where offsets are not: :func:`absolute_ids` says when the values can only be target ids, and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

# Strictly increasing values are target ids, not offsets, when a draft vocabulary of n tokens out of V would keep
# about n(n-1)/V adjacent pairs (each repeating an offset) and none repeats: at this many expected, a real
# vocabulary without one is as likely as exp(-20).
MIN_EXPECTED_ADJACENT = 20.0


def absolute_ids(d2t: Sequence[int], t2d: Sequence[int] | None, vocab: int | None) -> str | None:
    """Why ``d2t`` holds target ids rather than offsets (None: it reads as offsets, or cannot be told).

    ``t2d``: its values (any length; None when absent); ``vocab``: the target's vocabulary size. The values must be
    strictly increasing target ids inside the vocabulary, and one of: ``t2d`` marks exactly those ids (as target
    ids), the values are ``arange(n)`` (verl-SpeCo's default), or the vocabulary is large enough that offsets would
    have repeated (MIN_EXPECTED_ADJACENT)."""
    n = len(d2t)
    if vocab is None or n < 2 or not 0 <= d2t[0] or d2t[-1] >= vocab:
        return None
    if any(b <= a for a, b in pairwise(d2t)):
        return None  # offsets repeat (or the values are unordered): not target ids in order
    if t2d is not None and len(t2d) == vocab and sum(1 for m in t2d if m) == n and all(t2d[v] for v in d2t):
        return f"t2d marks exactly its {n} values as target tokens"
    if all(v == i for i, v in enumerate(d2t)):
        return f"it is arange({n}), verl-SpeCo 0.1.0's default"
    expected = n * (n - 1) / vocab
    if expected >= MIN_EXPECTED_ADJACENT:
        return (
            f"its {n} values strictly increase: as offsets no two of the {n} draft tokens would be adjacent target "
            f"tokens, where a {n}-token vocabulary out of {vocab} keeps about {expected:.0f} adjacent pairs"
        )
    return None


def as_offsets(ids: Sequence[int]) -> list[int]:
    """Target ids (ascending) as the offsets every engine reads: ``d2t[i] = id[i] - i``."""
    return [v - i for i, v in enumerate(ids)]


def is_identity(d2t: Sequence[int], t2d: Sequence[int] | None, vocab: int | None) -> bool:
    """``d2t``/``t2d`` map the whole target vocabulary onto itself: as many draft tokens as target tokens, every
    offset zero, and ``t2d`` (when present) marking every token. The engines build no map for such a draft (vLLM
    0.33 refuses a d2t there, EC412), so the pair can be dropped without changing a token."""
    return (
        vocab is not None and len(d2t) == vocab and not any(d2t) and (t2d is None or (len(t2d) == vocab and all(t2d)))
    )
