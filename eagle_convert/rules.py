"""The rule registry: every finding the tool can report has a stable id here.

Ids are a public contract (users select and ignore them in CI): never renumber, only add. Groups:
EC0xx identity and files, EC1xx aux layers, EC2xx EAGLE3.1 and norm flags, EC3xx tensors and shapes,
EC4xx vocabulary mapping, EC5xx config fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eagle_convert.findings import Finding


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    severity: str
    summary: str


_RULES = (
    Rule(
        "EC001",
        "eagle1-draft",
        "error",
        "The draft is EAGLE-1/2, not EAGLE3; the EAGLE3 paths of the engines cannot serve it.",
    ),
    Rule(
        "EC002",
        "moe-draft",
        "error",
        "The draft layer is mixture-of-experts; the engines' EAGLE3 draft loaders are dense only.",
    ),
    Rule(
        "EC003",
        "pickle-weights",
        "warning",
        "Weights are pickle files, which are never unpickled without --allow-pickle.",
    ),
    Rule("EC004", "no-weights", "warning", "No weight files: only the config could be inspected."),
    Rule("EC005", "unknown-producer", "info", "No producer layout matched; detection of the rest still ran."),
    Rule(
        "EC006",
        "multi-layer-draft",
        "warning",
        "More than one draft layer; the engines disagree on layers >= 1, so it is not portable.",
    ),
    Rule(
        "EC007",
        "config-weights-disagree",
        "error",
        "The config and the weights describe different models (attention kind, widths, K).",
    ),
    Rule(
        "EC008",
        "unrecognised-tensor",
        "warning",
        "A tensor name no known layout uses; SGLang ignores it silently, vLLM refuses to load.",
    ),
    Rule(
        "EC009",
        "prefused-tensor",
        "warning",
        "A pre-fused projection (qkv_proj, gate_up_proj, fused_qkv_a_proj_with_mqa) is stored.",
    ),
    Rule(
        "EC010",
        "wrapped-state-dict",
        "warning",
        "Tensor names carry a wrapper prefix (model., draft_model., eagle_module.) the engines do not strip.",
    ),
    Rule(
        "EC014",
        "shard-set",
        "warning",
        "Weight files the index does not name, several indexes, or shards read without an index.",
    ),
    Rule(
        "EC101",
        "aux-convention-ambiguous",
        "warning",
        "The aux-layer ids could mean 'output of layer X' or 'input to layer X'; nothing decides which.",
    ),
    Rule(
        "EC102",
        "aux-ids-absent",
        "warning",
        "No aux-layer ids: the engines fall back to hs[2], hs[N//2], hs[N-3], which may not be what was trained.",
    ),
    Rule(
        "EC103", "aux-engines-disagree", "error", "vLLM and SGLang would feed the draft different target hidden states."
    ),
    Rule(
        "EC104",
        "aux-engine-misreads",
        "error",
        "An engine would select hidden states other than the ones the draft was trained on.",
    ),
    Rule(
        "EC105",
        "aux-ids-out-of-range",
        "error",
        "An aux-layer id selects a hidden state the target does not have, or one an engine cannot capture.",
    ),
    Rule(
        "EC106",
        "aux-ids-unsorted",
        "info",
        "Aux-layer ids are not sorted or not unique; engines capture in ascending layer order.",
    ),
    Rule(
        "EC107",
        "aux-count-mismatch",
        "error",
        "K (number of aux states) differs between num_aux_hidden_states, the id list and the fc width.",
    ),
    Rule("EC108", "aux-convention-conflict", "warning", "The producer's convention and the id pattern disagree."),
    Rule(
        "EC201", "fc-norm-flag-weights", "error", "fc_norm (or legacy use_aux_norm) and the fc_norm weights disagree."
    ),
    Rule(
        "EC202",
        "legacy-fc-norm",
        "warning",
        "Legacy EAGLE3.1 names (use_aux_norm, aux_norm_*): SGLang reads them, vLLM does not.",
    ),
    Rule("EC203", "norm-before-fc-flag-weights", "error", "norm_before_fc and input_norm.weight disagree."),
    Rule(
        "EC204", "norm-before-fc-hidden", "warning", "norm_before_fc is only in eagle_config, where only vLLM reads it."
    ),
    Rule("EC205", "exclusive-norms", "error", "fc_norm and norm_before_fc are both on; they are mutually exclusive."),
    Rule(
        "EC206",
        "norm-output-provenance",
        "warning",
        "SpecForge's norm_output meant 'norm before lm_head' before its PR #879: the recurrence may be pre-norm.",
    ),
    Rule("EC207", "partial-eagle3-1", "info", "Only one of the two EAGLE3.1 flags (fc_norm, norm_output) is on."),
    Rule(
        "EC208",
        "norm-before-residual-default",
        "info",
        "norm_before_residual is absent: vLLM's speculators path assumes true, SGLang ignores it.",
    ),
)

RULES: dict[str, Rule] = {rule.id: rule for rule in _RULES}


def finding(
    rule_id: str,
    message: str,
    *,
    severity: str | None = None,
    subject: str | None = None,
    expected: Any = None,
    actual: Any = None,
) -> Finding:
    """A finding for a registered rule; its severity defaults to the rule's."""
    rule = RULES[rule_id]
    return Finding(rule.id, severity or rule.severity, message, subject, expected, actual)
