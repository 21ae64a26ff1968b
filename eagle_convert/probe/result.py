"""What the acceptance probe reports, typed (torch-free): each reading's row, the probe's result, and what the
target level adds to it (saved hidden states matched, the transformers oracle). JSON only in :meth:`ProbeReport.to_dict`
(the ``probe`` object of eagle_convert/schemas/verify-report.schema.json)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from eagle_convert.reference.budget import MIN_POSITIONS as MIN_POSITIONS  # the default probe's scored positions

ALPHA = 0.01  # a difference is decisive at this level of the two-sided sign test (probe/stats.py)
TOP1_FLOOR = 0.01  # the smallest top-1 difference worth a finding
ACCEPT_FLOOR = 0.02  # ... or accepted draft tokens per position
P_FLOOR = 1e-300  # a sign test's p below this prints as "<1e-300" (a float underflows to 0 not far below)


@dataclass(frozen=True)
class ProbeRow:
    reading: str
    hidden_states: list[int]
    norm_output: bool
    top1: float  # first draft token == the target's greedy next token, over every position
    acceptance_length: float  # engine definition: 1 + accepted draft tokens per draft/verify cycle
    wins: int = 0  # positions where this reading does better than the configured one (accepted, then first token)
    losses: int = 0  # ... and worse
    p_value: float = 1.0  # two-sided exact sign test of wins against losses
    top1_ci: list[float] = field(default_factory=lambda: [0.0, 1.0])  # 95% Wilson interval
    acceptance_length_ci: list[float] = field(default_factory=lambda: [1.0, 1.0])  # 95%
    acceptance_rates: list[float] = field(default_factory=list)  # per draft position: share of cycles accepting it
    cycles: int = 0
    delta_top1: float = 0.0  # this reading minus the configured one, paired over the same positions
    delta_top1_ci: list[float] = field(default_factory=lambda: [0.0, 0.0])
    delta_accepted: float = 0.0  # accepted draft tokens per position, this reading minus the configured one
    delta_accepted_ci: list[float] = field(default_factory=lambda: [0.0, 0.0])
    verdict: str = "configured"  # configured | better | worse | no better | inconclusive
    positions_needed: int | None = None  # when inconclusive: about how many positions would settle it
    head_norm: bool = True
    diagnostic: bool = False

    @property
    def p_text(self) -> str:
        """``p_value`` as people read it: one significant digit (0.04, 3e-05), and ``<1e-300`` where the float
        underflowed (to 0), never ``0e+00``."""
        if self.p_value < P_FLOOR:
            return f"<{P_FLOOR:.0e}"
        return f"{self.p_value:.1g}" if self.p_value >= 1e-3 else f"{self.p_value:.0e}"


@dataclass(frozen=True)
class ProbeResult:
    sequences: int
    positions: int
    steps: int
    configured: str
    best: str  # a reading that decisively beats the configured one, else the configured one
    rows: list[ProbeRow]
    device: str = "cpu"
    dtype: str = "float32"
    text: str = "given"  # "given" (--token-ids), or the target's own "greedy" or "sampled" continuations
    decided: bool = True  # every comparison that can raise a finding is decided (none inconclusive)
    min_positions: int = MIN_POSITIONS
    alpha: float = ALPHA  # what a verdict needs: sign test p below alpha, and a difference past a floor
    top1_floor: float = TOP1_FLOOR
    accept_floor: float = ACCEPT_FLOOR
    dtype_reason: str = ""  # why this dtype (--dtype auto's decision against the memory, or as asked)

    def row(self, name: str) -> ProbeRow:
        return next(r for r in self.rows if r.reading == name)

    @property
    def best_states(self) -> list[int] | None:
        """The hs[] of the best reading (what ambiguous ids were trained on, as measured)."""
        best = next((r for r in self.rows if r.reading == self.best), None)
        return list(best.hidden_states) if best is not None else None


@dataclass(frozen=True)
class BoundaryMatch:
    """One saved (or engine-fed) hidden state and the target boundary ``hs[boundary]`` it is closest to."""

    state: int
    boundary: int | None  # None: no boundary has its shape
    relative_error: float | None


@dataclass(frozen=True)
class SavedStates:
    """``--reference-hidden-states``: which target boundary each saved state is."""

    file: str
    matches: list[BoundaryMatch]


@dataclass(frozen=True)
class OracleCheck:
    """``--oracle transformers``: the reference target against transformers on the same tokens."""

    oracle: str
    tokens: int
    max_relative_error: float


@dataclass(frozen=True)
class ProbeReport:
    """The target level's result: the probe, and what the saved states and the oracle said (when asked)."""

    result: ProbeResult
    saved_states: SavedStates | None = None
    oracle: OracleCheck | None = None

    def to_dict(self) -> dict[str, Any]:
        """The report's ``probe`` object (eagle_convert/schemas/verify-report.schema.json)."""
        table = asdict(self.result)
        if self.saved_states is not None:
            table["saved_states"] = asdict(self.saved_states)
        if self.oracle is not None:
            table["oracle"] = asdict(self.oracle)
        return table
