"""The probe's statistics: acceptance counted as the engines count it, and paired decisions between readings.

Acceptance (what the engines report as the mean acceptance length and the per-position acceptance rates): speculative
decoding along the target's greedy text. A cycle drafts ``k`` tokens from the current position, the target accepts
the longest prefix that matches its own greedy tokens (and adds one token of its own), and the next cycle starts
after it. Mean acceptance length = 1 + accepted / cycles; the acceptance rate at position s = the share of cycles
that accepted at least s + 1 draft tokens.

Comparisons are paired, position by position over the same text: top-1 agreement (the first draft token against
the target's greedy token, every position) and the draft tokens a chain from that position would get accepted.
A reading *beats* another when an exact sign test over the positions where they differ gives p < ALPHA and the
effect is at least a small floor (TOP1_FLOOR of top-1, or ACCEPT_FLOOR accepted tokens per position); it is *not
better* when the 99% interval of the difference lies below the floor; otherwise the comparison is *inconclusive*,
with an estimate of the positions that would settle it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from eagle_convert.probe.result import ACCEPT_FLOOR, ALPHA, TOP1_FLOOR

Z_DECIDE = 2.576  # the normal quantile of ALPHA (two-sided): intervals are 99%
Z_CI = 1.96  # reported confidence intervals are 95%


@dataclass(frozen=True)
class Cycles:
    """A speculative-decoding run along the text: ``accepted[c]`` draft tokens accepted in cycle c."""

    accepted: torch.Tensor  # [cycles] int64
    steps: int

    @property
    def acceptance_length(self) -> float:
        return 1.0 + float(self.accepted.float().mean()) if self.accepted.numel() else 1.0

    def interval(self) -> tuple[float, float]:
        """95% interval of the mean acceptance length (cycles treated as independent)."""
        n = self.accepted.numel()
        if n < 2:
            return (1.0, 1.0 + self.steps)
        half = Z_CI * float(self.accepted.float().std()) / math.sqrt(n)
        return (self.acceptance_length - half, self.acceptance_length + half)

    def rates(self) -> list[float]:
        """Per draft position s: the share of cycles with at least s + 1 tokens accepted."""
        n = max(self.accepted.numel(), 1)
        return [round(float((self.accepted > s).sum()) / n, 4) for s in range(self.steps)]


def simulate(accepted: torch.Tensor, start: int, stop: int) -> list[int]:
    """Cycles along one sequence: ``accepted[t]`` is what a chain drafted at row t gets accepted; the first cycle
    starts at row ``start``, each next one after the accepted tokens and the target's own; rows from ``stop`` on are
    not drafted (too close to the end to verify a whole chain). Returns the accepted count of every cycle."""
    out, t = [], start
    while t < stop:
        a = int(accepted[t])
        out.append(a)
        t += a + 1
    return out


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test: the chance of a split at least this uneven if neither reading were better. Below
    about 1e-308 a float holds 0 (the table prints ``<1e-300``, see ProbeRow.p_text in result.py)."""
    n, k = wins + losses, min(wins, losses)
    if n == 0:
        return 1.0
    log_half = n * math.log(0.5)
    tail = sum(
        math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half) for i in range(k + 1)
    )
    return min(1.0, 2 * tail)


def wilson(hits: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a proportion."""
    if n == 0:
        return (0.0, 1.0)
    p, z2 = hits / n, Z_CI**2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z_CI * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4))


@dataclass(frozen=True)
class Paired:
    """One reading against the configured one over the same positions (differences: reading minus configured)."""

    delta_top1: float
    delta_top1_ci: tuple[float, float]  # 95%
    delta_accepted: float  # accepted draft tokens per position
    delta_accepted_ci: tuple[float, float]
    wins: int  # positions where the reading does better (more tokens accepted, then first token)
    losses: int
    p_value: float
    verdict: str  # "better", "worse", "no better", "inconclusive"
    positions_needed: int | None  # when inconclusive: about how many positions would settle it


def _mean_ci(d: torch.Tensor, z: float) -> tuple[float, float, float]:
    n = d.numel()
    mean = float(d.float().mean()) if n else 0.0
    half = z * float(d.float().std()) / math.sqrt(n) if n > 1 else float("inf")
    return mean, mean - half, mean + half


def compare(top1: torch.Tensor, accepted: torch.Tensor, base_top1: torch.Tensor, base_accepted: torch.Tensor) -> Paired:
    """Paired comparison of a reading (per-position ``top1`` bool and ``accepted`` counts) with the configured one."""
    d_top1 = top1.float() - base_top1.float()
    d_acc = (accepted - base_accepted).float()
    better = (accepted > base_accepted) | ((accepted == base_accepted) & top1 & ~base_top1)
    worse = (accepted < base_accepted) | ((accepted == base_accepted) & ~top1 & base_top1)
    wins, losses = int(better.sum()), int(worse.sum())
    p = sign_test(wins, losses)
    t_mean, t_lo, t_hi = _mean_ci(d_top1, Z_CI)
    a_mean, a_lo, a_hi = _mean_ci(d_acc, Z_CI)
    t_hi99 = _mean_ci(d_top1, Z_DECIDE)[2]
    a_hi99 = _mean_ci(d_acc, Z_DECIDE)[2]
    big = t_mean >= TOP1_FLOOR or a_mean >= ACCEPT_FLOOR
    small = -t_mean >= TOP1_FLOOR or -a_mean >= ACCEPT_FLOOR
    needed = None
    if p < ALPHA and wins > losses and big:
        verdict = "better"
    elif p < ALPHA and losses > wins and small:
        verdict = "worse"
    elif t_hi99 < TOP1_FLOOR and a_hi99 < ACCEPT_FLOOR:
        verdict = "no better"
    else:
        verdict = "inconclusive"
        needed = positions_needed(wins, losses, top1.numel())
    return Paired(
        round(t_mean, 4),
        (round(t_lo, 4), round(t_hi, 4)),
        round(a_mean, 4),
        (round(a_lo, 4), round(a_hi, 4)),
        wins,
        losses,
        p,
        verdict,
        needed,
    )


def positions_needed(wins: int, losses: int, n: int) -> int:
    """Positions at which a sign test with this share of differing positions and this split would reach p < ALPHA
    (normal approximation: ``z = |2w - 1| * sqrt(n * d)``); the effect floor is used when the split is even."""
    discordant = max(wins + losses, 1) / max(n, 1)
    share = wins / (wins + losses) if wins + losses else 0.5
    lean = max(abs(2 * share - 1), TOP1_FLOOR / max(discordant, TOP1_FLOOR))
    return math.ceil((Z_DECIDE / lean) ** 2 / discordant)
