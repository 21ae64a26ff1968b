"""Tensor-content checks (verify --level tensors): values read one tensor at a time, in bounded chunks.

Peak memory is about one tensor plus one float32 chunk, whatever the checkpoint size. torch is imported here
only; each tensor is read at the offsets the strict header reader validated, through the shard's one checked
descriptor (reference/tensor_file.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eagle_convert.draft.vocab_map import absolute_ids
from eagle_convert.reference.draft_reader import TensorReader
from eagle_convert.rules.finding import Finding
from eagle_convert.verify.context import Context, tensor_finding
from eagle_convert.verify.report import TENSOR_VALUES

if TYPE_CHECKING:
    from eagle_convert.reference.weights import SafetensorsWeights

CHUNK_ELEMENTS = 1 << 22  # statistics are computed over 4M-element float32 chunks (16 MiB)
INIT_CHECKED = ("embed_tokens.weight", "lm_head.weight", "fc.weight")


@dataclass
class Stats:
    """Streaming moments and flags of one tensor."""

    count: int = 0
    total: float = 0.0
    total_sq: float = 0.0
    total_4: float = 0.0
    finite: bool = True
    any_nonzero: bool = False

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    @property
    def std(self) -> float:
        var = self.total_sq / self.count - self.mean**2 if self.count else 0.0
        return float(max(var, 0.0) ** 0.5)

    @property
    def kurtosis(self) -> float:
        """Excess kurtosis about zero (a normal init gives about 0; trained weights are heavier-tailed)."""
        second = self.total_sq / self.count if self.count else 0.0
        return (self.total_4 / self.count) / second**2 - 3.0 if second else 0.0


def _chunks(t: Any) -> Iterator[Any]:
    flat = t.reshape(-1)
    for start in range(0, flat.numel(), CHUNK_ELEMENTS):
        yield flat[start : start + CHUNK_ELEMENTS]


def tensor_stats(t: Any, moments: bool = True) -> Stats:
    """Finiteness and non-zero flags of ``t``, plus its moments when ``moments`` (chunked, float64 sums)."""
    import torch

    stats = Stats()
    for chunk in _chunks(t):
        if chunk.is_floating_point() and chunk.element_size() == 1:  # float8: torch has no isfinite for it
            chunk = chunk.to(torch.float32)
        finite = torch.isfinite(chunk)
        clean = chunk if bool(finite.all()) else torch.where(finite, chunk, torch.zeros_like(chunk))
        stats.finite = stats.finite and clean is chunk
        stats.any_nonzero = stats.any_nonzero or bool(clean.any())
        stats.count += clean.numel()
        if moments:
            x = clean.to(torch.float32)
            sq = x * x
            stats.total += float(x.sum(dtype=torch.float64))
            stats.total_sq += float(sq.sum(dtype=torch.float64))
            stats.total_4 += float((sq * sq).sum(dtype=torch.float64))
    return stats


def _rows_identical(t: Any) -> bool:
    if t.dim() != 2 or t.shape[0] < 2:
        return False
    if t.is_floating_point() and t.element_size() == 1:  # float8: compared by its bytes (no == for it)
        import torch

        t = t.view(torch.uint8)
    first = t[0]
    step = max(1, CHUNK_ELEMENTS // max(1, t.shape[1]))
    return all(bool((t[i : i + step] == first).all()) for i in range(0, t.shape[0], step))


def content_findings(
    ctx: Context,
    enabled: Callable[[str], bool],
    progress: Callable[[str, int, int], None] | None = None,
    tensors: TensorReader | None = None,
    target_weights: SafetensorsWeights | None = None,
) -> list[Finding]:
    """Every tensor-level rule, one tensor in memory at a time; ``progress("reading tensor values", done, total)``
    hears of each tensor read. ``tensors``: the verify's reader (it keeps what it read when a forward level
    follows); ``target_weights``: the target's, for EC605 (None: no comparison)."""
    if tensors is None:
        with TensorReader(ctx.ckpt) as reader:
            return content_findings(ctx, enabled, progress, reader, target_weights)
    out: list[Finding] = []
    total = len(ctx.canonical)
    if progress is not None:
        progress(TENSOR_VALUES, 0, total)
    init_range = ctx.cfg.get("initializer_range")
    init_std = float(init_range) if isinstance(init_range, int | float) and init_range > 0 else 0.02
    d2t = t2d = None
    for done, (name, stored) in enumerate(ctx.canonical.items()):
        if progress is not None and done:
            progress(TENSOR_VALUES, done, total)
        t = tensors.get(stored)
        if name == "d2t":
            d2t = t
            continue
        if name == "t2d":
            t2d = t
            continue
        if not t.is_floating_point():
            continue
        stats = tensor_stats(t, moments=name in INIT_CHECKED)
        role = ctx.expected[name].role if name in ctx.expected else "weight"
        if enabled("EC601") and not stats.finite:
            out.append(tensor_finding(ctx, "EC601", f"{name} holds NaN or Inf values", name))
        if enabled("EC602") and role == "norm" and not stats.any_nonzero:
            out.append(tensor_finding(ctx, "EC602", f"norm {name} is all zero: it zeroes its input", name))
        if enabled("EC604") and role == "weight" and t.dim() == 2 and not stats.any_nonzero:
            out.append(tensor_finding(ctx, "EC604", f"{name} is all zero", name))
        if enabled("EC603") and name in INIT_CHECKED and stats.any_nonzero and _init_like(stats, init_std):
            out.append(
                tensor_finding(
                    ctx,
                    "EC603",
                    f"{name} looks freshly initialised (std {stats.std:.4f} vs initializer_range "
                    f"{init_std}, excess kurtosis {stats.kurtosis:.2f}, mean {stats.mean:.2e}): was it trained?",
                    name,
                    expected="trained weights",
                    actual={"std": round(stats.std, 5), "kurtosis": round(stats.kurtosis, 3)},
                )
            )
        if enabled("EC410") and name == "lm_head.weight" and _rows_identical(t):
            out.append(tensor_finding(ctx, "EC410", "every lm_head row is identical: the head predicts nothing", name))
        if enabled("EC605") and name == "embed_tokens.weight":
            out += _embed_vs_target(ctx, t, target_weights)
        del t
    if progress is not None:
        progress(TENSOR_VALUES, total, total)
    out += _vocab_map(ctx, d2t, t2d, enabled)
    return out


def _init_like(stats: Stats, init_std: float) -> bool:
    """Normal(0, initializer_range) statistics: std within 15 % of it, near-zero mean, no heavy tails."""
    return (
        abs(stats.std - init_std) <= 0.15 * init_std
        and abs(stats.mean) <= 0.1 * stats.std
        and abs(stats.kurtosis) < 0.25
    )


def _vocab_map(ctx: Context, d2t: Any, t2d: Any, enabled: Callable[[str], bool]) -> list[Finding]:
    import torch

    out: list[Finding] = []
    vocab = ctx.spec.dims.vocab_size
    if d2t is None or d2t.is_floating_point() or vocab is None:
        return out
    offsets = d2t.to(torch.int64).reshape(-1)
    targets = torch.arange(offsets.numel()) + offsets
    bad = ((targets < 0) | (targets >= vocab)).nonzero().reshape(-1)
    if enabled("EC406") and bad.numel():
        first = int(bad[0])
        out.append(
            tensor_finding(
                ctx,
                "EC406",
                f"d2t maps {bad.numel()} draft token(s) outside [0, {vocab}), e.g. "
                f"draft {first} -> {int(targets[first])}",
                "d2t",
                expected=f"0..{vocab - 1}",
                actual=int(targets[first]),
            )
        )
    if enabled("EC407") and targets.numel() > 1 and not bool((targets[1:] > targets[:-1]).all()):
        unique = int(torch.unique(targets).numel())
        out.append(
            tensor_finding(
                ctx,
                "EC407",
                f"d2t targets are not strictly increasing ({targets.numel() - unique} duplicate(s))",
                "d2t",
                expected="strictly increasing",
                actual=unique,
            )
        )
    if enabled("EC409") and offsets.numel() < vocab and not bool(offsets.any()):
        out.append(
            tensor_finding(
                ctx,
                "EC409",
                f"d2t is all zero but the draft vocabulary ({offsets.numel()}) is smaller than the target's ({vocab})",
                "d2t",
            )
        )
    if enabled("EC414"):
        marks = t2d.reshape(-1).to(torch.int64).tolist() if t2d is not None else None
        why = absolute_ids(offsets.tolist(), marks, vocab)
        if why is not None:
            out.append(
                tensor_finding(
                    ctx,
                    "EC414",
                    f"d2t holds target token ids, not the offsets the engines read (draft i -> target i + d2t[i]: "
                    f"draft {offsets.numel() - 1} -> {int(targets[-1])}): {why}",
                    "d2t",
                    expected="offsets (target - draft)",
                    actual="target ids",
                )
            )
    if enabled("EC408") and t2d is not None and not bad.numel():
        mask = t2d.reshape(-1).to(torch.bool)
        count = int(mask.sum())
        unmarked = int((~mask[targets]).sum()) if mask.numel() == vocab else offsets.numel()
        if count != offsets.numel() or unmarked:
            out.append(
                tensor_finding(
                    ctx,
                    "EC408",
                    f"t2d marks {count} tokens for a {offsets.numel()}-token draft "
                    f"vocabulary; {unmarked} d2t target(s) unmarked",
                    "t2d",
                    expected=offsets.numel(),
                    actual=count,
                )
            )
    return out


def _embed_vs_target(ctx: Context, embed: Any, weights: SafetensorsWeights | None) -> list[Finding]:
    """Compare the draft's embed_tokens with the target's, when --target has weights."""
    if ctx.target is None or weights is None:
        return []
    names = [n for n in weights.names() if n.endswith("embed_tokens.weight")]
    if not names or weights.shape(names[0]) != tuple(embed.shape):
        return []
    theirs = weights.get(names[0])
    if bool((theirs.to(embed.dtype) == embed).all()):
        return []
    return [
        tensor_finding(
            ctx,
            "EC605",
            "embed_tokens differs from the target's: "
            + "; ".join(f"{v.release}: {v.embed_tokens}" for v in ctx.views)
            + (", so the releases run different drafts" if len({v.embed_tokens for v in ctx.views}) > 1 else ""),
            "embed_tokens.weight",
        )
    ]
