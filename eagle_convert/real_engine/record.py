"""The report's ``engine_run``: one frozen record per kind of engine run, built once, never changed after.

- :class:`LoadOnlyRun`: the engine built the draft (or refused it) and decoded nothing: SGLang on a CPU, or an
  engine that refused the draft at start-up (``refused``, EC728);
- :class:`InProcessRun`: the engine decoded with the draft in a child process of its own environment;
- :class:`ServedRun`: a server the user runs measured the draft (``--engine-url``).

The first two are built from an :class:`~eagle_convert.real_engine.base.EngineObservation`, the third from an
:class:`~eagle_convert.real_engine.attached.AttachedRun`. ``to_dict()`` is the JSON contract
(eagle_convert/schemas/verify-report.schema.json): the same keys for every kind, null where a kind cannot know.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from eagle_convert.real_engine.attached import AttachedRun
from eagle_convert.real_engine.base import EngineObservation, acceptance

if TYPE_CHECKING:  # the probe's result types; building a record never imports the probe
    from eagle_convert.probe.result import BoundaryMatch

# file tensors no engine loads into a parameter by design: the target-to-draft vocabulary mask (SGLang skips it,
# its draft reads only d2t as hot_token_id)
UNLOADED_BY_DESIGN = ("t2d",)

# what a client of a running server cannot observe (ServedRun's ``not_observed``)
NOT_OBSERVED = (
    "the aux hidden states the server feeds the draft: they are captured inside the engine's own process "
    "(run --level engine without --engine-url on a machine that can hold the target)",
    "the draft module the server built (its flags and where each tensor went): read inside the engine's process",
    "the target alone on the same prompts (lossless): the server runs the target with the draft only",
)


def dropped_tensors(observation: EngineObservation) -> list[str] | None:
    """The draft's file tensors the engine loaded into no parameter (None: placement was not observed)."""
    if observation.tensors is None:
        return None
    return sorted(
        name
        for name, where in observation.tensors.items()
        if where.get("param") is None and name.rsplit(".", 1)[-1] not in UNLOADED_BY_DESIGN
    )


@dataclass(frozen=True)
class _Observed:
    """What both in-process kinds hold: the engine's observation and the target boundaries it fed the draft."""

    observation: EngineObservation
    # hs[j] the engine fed (or configured its target to capture for) the draft; None in it: no boundary fits
    hidden_states: list[int | None] | None = None
    hidden_states_from: str | None = None  # "fed" | "captured" | None (not captured)
    hidden_state_matches: list[BoundaryMatch] = field(default_factory=list)  # each fed state's nearest boundary

    @property
    def engine(self) -> str:
        return self.observation.engine

    @property
    def version(self) -> str:
        return self.observation.version

    @property
    def dropped_tensors(self) -> list[str] | None:
        return dropped_tensors(self.observation)

    def _fields(self, measured: bool) -> dict[str, Any]:
        o = self.observation
        mean, per_position = acceptance(o.drafts, o.accepted_tokens, o.accepted_per_position)
        return {
            "engine": o.engine,
            "version": o.version,
            "runner": o.runner,
            "acceptance_measured": measured,
            "not_measured": o.not_measured,
            "prompts": len(o.outputs),
            "tokens": sum(len(out) for out in o.outputs),
            "drafts": o.drafts if measured else None,
            "draft_tokens": o.draft_tokens if measured else None,
            "accepted_tokens": o.accepted_tokens if measured else None,
            "mean_acceptance_length": round(mean, 4) if measured else None,
            "acceptance_per_position": [round(r, 4) for r in per_position],
            "lossless": None if o.baseline_outputs is None else o.baseline_outputs == o.outputs,
            "requested_layers": o.requested_layers,
            "hidden_states": self.hidden_states,
            "hidden_states_from": self.hidden_states_from,
            "hidden_state_matches": [asdict(m) for m in self.hidden_state_matches],
            "flags": o.flags,
            "target_class": o.target_class,
            "built_draft": o.built,
            "tensors": o.tensors,
            "dropped_tensors": self.dropped_tensors,
            "load_s": o.load_s,
            "generate_s": o.generate_s,
            "peak_rss_mib": o.peak_rss_mib,
            "settings": o.settings,
            "not_observed": list(o.not_observed),
        }


@dataclass(frozen=True)
class LoadOnlyRun(_Observed):
    """The engine loaded the draft and set up its capture without decoding (``observation.not_measured`` says
    why), or refused to load it (``refused``: the engine's own error line)."""

    kind: ClassVar[str] = "load"

    @property
    def refused(self) -> str | None:
        return self.observation.refused

    def to_dict(self) -> dict[str, Any]:
        out = self._fields(measured=False)
        out["probe_acceptance_length"] = out["probe_same_text"] = None
        if self.refused is not None:  # added for EC728; absent otherwise, as before
            out["refused"] = self.refused
        return out


@dataclass(frozen=True)
class InProcessRun(_Observed):
    """The engine decoded greedily with the draft in its own environment, and the probe's prediction on that run."""

    kind: ClassVar[str] = "in_process"
    probe_acceptance_length: float | None = None  # None: the reference forward cannot run this draft
    probe_same_text: bool | None = None  # the reference's greedy text equals the engine's

    @property
    def drafts(self) -> int:
        return self.observation.drafts

    @property
    def mean_acceptance_length(self) -> float:
        o = self.observation
        return round(acceptance(o.drafts, o.accepted_tokens, o.accepted_per_position)[0], 4)

    def to_dict(self) -> dict[str, Any]:
        out = self._fields(measured=True)
        out["probe_acceptance_length"] = self.probe_acceptance_length
        out["probe_same_text"] = self.probe_same_text
        return out


@dataclass(frozen=True)
class ServedRun:
    """A server the user runs (``--engine-url``) measured the draft: the in-process run's fields where a client can
    know them (null where it cannot), and ``server``."""

    kind: ClassVar[str] = "attached"
    measured: AttachedRun
    probe_acceptance_length: float | None = None
    probe_same_text: bool | None = None
    probe_not_run: str | None = None  # why the probe's prediction was not computed here (None: it ran)

    @property
    def engine(self) -> str:
        return self.measured.server.engine

    @property
    def version(self) -> str:
        return self.measured.server.version

    @property
    def not_observed(self) -> tuple[str, ...]:
        return NOT_OBSERVED

    def to_dict(self) -> dict[str, Any]:
        m, info = self.measured, self.measured.server
        return {
            "engine": info.engine,
            "version": info.version,
            "runner": "attached",
            "acceptance_measured": True,
            "not_measured": None,
            "prompts": m.prompts,
            "tokens": sum(len(o) for o in m.outputs),
            "drafts": m.drafts,
            "draft_tokens": m.draft_tokens,
            "accepted_tokens": m.accepted_tokens,
            "mean_acceptance_length": round(m.mean_acceptance_length, 4),
            "acceptance_per_position": [round(r, 4) for r in m.acceptance_per_position],
            "lossless": None,
            "requested_layers": None,
            "hidden_states": None,
            "hidden_states_from": None,
            "hidden_state_matches": [],
            "flags": None,
            "target_class": None,
            "built_draft": None,
            "tensors": None,
            "dropped_tensors": None,
            "load_s": None,
            "generate_s": round(m.wall_s, 3),
            "peak_rss_mib": None,
            "settings": None,
            "not_observed": list(NOT_OBSERVED),
            "server": {
                "url": info.url,
                "model": info.model,
                "model_path": info.model_path,
                "method": info.method,
                "draft_path": info.draft_path,
                "num_speculative_tokens": info.num_speculative_tokens,
                "reported_by": list(info.reported_by),
                "not_reported": info.not_reported,
                "concurrency": m.concurrency,
                "new_tokens": m.new_tokens,
                "measured_from": m.measured_from,
                "accepted_per_position": list(m.accepted_per_position),
                "foreign_traffic": [asdict(move) for move in m.foreign_traffic],
                "draft_identity": m.draft_identity,
                "draft_identity_note": m.draft_identity_note,
            },
            "probe_acceptance_length": self.probe_acceptance_length,
            "probe_same_text": self.probe_same_text,
            "probe_not_run": self.probe_not_run,
        }


EngineRun = LoadOnlyRun | InProcessRun | ServedRun  # the report's engine_run, one record per kind
