"""``inspect_checkpoint()``: what a draft checkpoint is, from headers and config only (never imports torch)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eagle_convert.draft.detect import DraftSpec, detect
from eagle_convert.draft.layouts import split_name
from eagle_convert.draft.model_check import NOT_A_DRAFT
from eagle_convert.gate.deployment import check_deployment
from eagle_convert.gate.findings import engines_json, gate_findings, views
from eagle_convert.gate.located import located
from eagle_convert.gate.nulls import null_findings, null_typed_fields
from eagle_convert.read.checkpoint import Checkpoint
from eagle_convert.read.config import TargetConfig
from eagle_convert.read.hub_store import open_source
from eagle_convert.releases import DEFAULT_ENGINES, resolve_engines
from eagle_convert.rules.finding import SEVERITIES, Finding
from eagle_convert.rules.registry import Fixes, finding
from eagle_convert.version import SCHEMA_VERSION, TOOL, __version__


@dataclass(frozen=True)
class TensorGroup:
    group: str
    count: int
    bytes: int
    dtypes: list[str]


@dataclass(frozen=True)
class InspectReport:
    path: str
    checkpoint: Checkpoint
    spec: DraftSpec
    groups: list[TensorGroup]
    findings: list[Finding]
    engines: tuple[str, ...] = ()  # the releases the gate findings were checked against (--engine), in order
    deployment: Mapping[str, Any] = field(default_factory=dict)  # the deployment settings every view read

    def summary(self) -> dict[str, int]:
        """Findings by severity, as verify's summary counts them."""
        counts = {s: sum(f.severity == s for f in self.findings) for s in SEVERITIES}
        return {"errors": counts["error"], "warnings": counts["warning"], "infos": counts["info"]}

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract, validated by eagle_convert/schemas/inspect-report.schema.json."""
        spec, ckpt = self.spec, self.checkpoint
        aux, fixes = spec.aux, Fixes.among(self.findings)
        return {
            "schema_version": SCHEMA_VERSION,
            "tool_version": __version__,
            "tool": TOOL,  # as verify's
            "version": __version__,
            "path": self.path,
            "revision": self.checkpoint.revision,
            "format": {
                "producer": spec.producer,
                "confidence": spec.producer_confidence,
                "evidence": spec.producer_evidence,
                "layer_prefix": spec.layer_prefix,
                "num_draft_layers": spec.num_draft_layers,
                "weight_format": ckpt.weight_format,
                "sharded": ckpt.index_path is not None or len(ckpt.shards) > 1,
                "shards": [  # the fingerprint is this machine's, not the report's
                    {"name": s.name, "size": s.size, "tensor_count": s.tensor_count, "metadata": s.metadata}
                    for s in ckpt.shards
                ],
                "pickle_files": list(ckpt.pickle_files),
            },
            "attention": spec.attention,
            "attention_evidence": spec.attention_evidence,
            "eagle_version": spec.eagle_version,
            "moe": spec.moe,
            "architectures": list(spec_architectures(ckpt)),
            "flags": {name: flag.value for name, flag in _flags(spec)},
            "flag_sources": {name: flag.source for name, flag in _flags(spec)},
            "aux_layers": {
                "ids": aux.ids,
                "location": aux.location,
                "top_level_ids": aux.top_level_ids,
                "eagle_config_ids": aux.eagle_config_ids,
                "convention": aux.convention,
                "confidence": aux.confidence,
                "evidence": aux.evidence,
                "hidden_state_indices": aux.hidden_state_indices,
                "readings": aux.states_by_convention,
                "engines": engines_json(spec, deployment=self.deployment),
            },
            "num_aux_hidden_states": spec.num_aux_hidden_states,
            "num_aux_hidden_states_source": spec.num_aux_source,
            "target_hidden_size": spec.target_hidden_size,
            "target": asdict(spec.target),
            "dims": asdict(spec.dims),
            "vocab": {
                "vocab_size": spec.vocab.vocab_size,
                "draft_vocab_size": spec.vocab.draft_vocab_size,
                "draft_vocab_size_key": spec.vocab.draft_vocab_size_key,
                "has_d2t": spec.vocab.has_d2t,
                "has_t2d": spec.vocab.has_t2d,
                "has_lm_head": spec.vocab.has_lm_head,
                "has_embed_tokens": spec.vocab.has_embed_tokens,
            },
            "tensors": {
                "count": len(ckpt.tensors),
                "total_bytes": ckpt.total_bytes,
                "groups": [asdict(g) for g in self.groups],
                "items": [
                    {"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "bytes": t.nbytes, "shard": t.shard}
                    for t in ckpt.tensors.values()
                ],
            },
            "findings": [{**f.to_dict(), **fixes.fields(f.rule_id)} for f in self.findings],
            "engines": list(self.engines),
            "deployment": dict(self.deployment),
            "summary": self.summary(),
        }


def spec_architectures(ckpt: Checkpoint) -> tuple[str, ...]:
    archs = (ckpt.config or {}).get("architectures")
    return tuple(a for a in archs if isinstance(a, str)) if isinstance(archs, list) else ()


def _flags(spec: DraftSpec) -> list[tuple[str, Any]]:
    f = spec.flags
    return [
        ("fc_norm", f.fc_norm),
        ("norm_output", f.norm_output),
        ("norm_before_fc", f.norm_before_fc),
        ("norm_before_residual", f.norm_before_residual),
    ]


def group_tensors(ckpt: Checkpoint) -> list[TensorGroup]:
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    dtypes: dict[str, set[str]] = {}
    for t in ckpt.tensors.values():
        group = split_name(t.name).group
        counts[group] += 1
        sizes[group] += t.nbytes
        dtypes.setdefault(group, set()).add(t.dtype)
    return [TensorGroup(g, counts[g], sizes[g], sorted(dtypes[g])) for g in counts]


def inspect_checkpoint(
    path: str | Path,
    target: str | Path | TargetConfig | None = None,
    aux_convention: str | None = None,
    token: str | None = None,
    engine: str = DEFAULT_ENGINES,
    deployment: Mapping[str, Any] | None = None,
) -> InspectReport:
    """Open ``path`` (a directory, file or Hub repo id; headers only), detect its format and return the report.

    ``engine`` selects the releases whose views the findings are checked against (as ``verify --engine``);
    ``deployment`` the user's deployment settings those views read (TensorRT-LLM's ``eagle3_layers_to_capture``,
    checked: a key no selected release reads, or a bad value, is a UsageError)."""
    releases = resolve_engines(engine)
    settings = check_deployment(deployment or {}, releases)
    ckpt = open_source(path, token)
    target_cfg = TargetConfig.from_path(target) if isinstance(target, str | Path) else target
    spec = detect(ckpt, target_cfg, aux_convention)
    chosen = tuple(r.name for r in releases)
    if [f.rule_id for f in spec.findings] == [NOT_A_DRAFT]:  # a model: its one finding, the rest would be noise
        model = [located(spec, ckpt, spec.findings[0])]
        return InspectReport(str(path), ckpt, spec, group_tensors(ckpt), model, chosen, settings)
    found = [finding(n.rule_id, n.message, severity=n.severity) for n in ckpt.notes]
    if ckpt.weight_format == "pickle":
        found.append(
            finding(
                "EC003",
                f"weights are pickle ({', '.join(ckpt.pickle_files)}): listed, not read; "
                "convert with `eagle-convert normalize --allow-pickle`",
            )
        )
    elif ckpt.weight_format == "none":
        found.append(finding("EC004", "no weight files: config only"))
    found += [
        finding("EC502", f"{key} is null; typed config classes reject it", subject=key)
        for key in null_typed_fields(ckpt.config or {})
    ]
    chosen_views = views(spec, releases, settings)
    found += null_findings(ckpt.config or {}, chosen_views)
    gate = gate_findings(spec, ckpt.tensors, chosen_views)
    found = [located(spec, ckpt, f) for f in found + spec.findings + gate]
    return InspectReport(str(path), ckpt, spec, group_tensors(ckpt), found, chosen, settings)
