"""What every static check shares: the :class:`Context`, a tensor's finding and the registry of checks by rule id (a
config key's finding, :func:`~eagle_convert.gate.located.cfg_finding`, is the gate's: inspect makes them too).

The checks themselves are in ``static.py`` (architecture, aux layers, flags, tensors) and ``static_config.py``
(vocabulary, config fields); :func:`static_checks` loads both and returns the registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eagle_convert.draft.detect import DraftSpec
from eagle_convert.draft.expected import Expected
from eagle_convert.draft.mapping import map_key
from eagle_convert.errors import InputError
from eagle_convert.read.checkpoint import Checkpoint
from eagle_convert.read.config import TargetConfig
from eagle_convert.releases import EngineView
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import finding


@dataclass
class Context:
    ckpt: Checkpoint
    spec: DraftSpec
    target: TargetConfig | None
    engines: tuple[str, ...]  # engine names of the selected releases
    strict: bool
    expected: dict[str, Expected]
    canonical: dict[str, str] = field(default_factory=dict)  # canonical name -> stored tensor name
    unplaced: list[str] = field(default_factory=list)  # stored names no layout table places
    views: list[EngineView] = field(default_factory=list)  # what each selected release builds from the config

    @property
    def cfg(self) -> dict[str, Any]:
        return self.spec.config.raw

    def shard_of(self, canonical_name: str) -> str | None:
        stored = self.canonical.get(canonical_name)
        return self.ckpt.tensors[stored].shard if stored else None

    def shape(self, canonical_name: str) -> tuple[int, ...] | None:
        stored = self.canonical.get(canonical_name)
        return self.ckpt.tensors[stored].shape if stored else None

    def releases(self, views: list[EngineView] | None = None) -> str:
        """The selected releases (or ``views``), named for a message: 'sglang@0.5.23, vllm@0.33'."""
        return ", ".join(v.release for v in (self.views if views is None else views)) or "the selected releases"


def map_names(ckpt: Checkpoint, spec: DraftSpec) -> tuple[dict[str, str], list[str]]:
    """Canonical name -> stored name for every tensor a layout table can place; the rest are returned apart."""
    canonical: dict[str, str] = {}
    unplaced: list[str] = []
    layout = spec.layer_prefix or "midlayer."
    for name in ckpt.tensors:
        try:
            mapped = map_key(name, layout)
        except InputError:
            unplaced.append(name)
            continue
        if mapped.action != "drop":
            canonical[mapped.target] = name
    return canonical, unplaced


def tensor_finding(
    ctx: Context,
    rule_id: str,
    message: str,
    name: str,
    *,
    expected: Any = None,
    actual: Any = None,
    severity: str | None = None,
) -> Finding:
    stored = ctx.canonical.get(name, name)
    info = ctx.ckpt.tensors.get(stored)
    shard = info.shard if info else None
    return finding(rule_id, message, severity=severity, file=shard, pointer=stored, expected=expected, actual=actual)


Check = Callable[[Context], list[Finding]]
STATIC_CHECKS: dict[str, Check] = {}


def check(rule_id: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        STATIC_CHECKS[rule_id] = fn
        return fn

    return register


def static_checks() -> dict[str, Check]:
    """Every static check, by rule id (importing the check modules registers them)."""
    from eagle_convert.verify import static, static_config  # noqa: F401

    return dict(sorted(STATIC_CHECKS.items()))
