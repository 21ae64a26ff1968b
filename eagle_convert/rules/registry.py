"""The rule registry: every finding the tool can report has a stable id here.

Ids are a public contract (users select and ignore them in CI): never renumber, only add. Groups:
EC0xx identity and files, EC1xx aux layers, EC2xx EAGLE3.1 and norm flags, EC3xx tensors and shapes,
EC4xx vocabulary mapping, EC5xx config fields.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from eagle_convert.rules.finding import Finding

# each verify level runs the rules of the levels before it
LEVELS = ("static", "tensors", "forward", "target", "engine")


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    severity: str
    summary: str
    level: str = "static"  # the lowest verify level that runs it
    fixable: bool = False  # `eagle-convert normalize` resolves it (set from FIXED_BY_NORMALIZE)
    fix: str = ""  # what to do about a finding (from _FIX; every fixable rule names normalize)


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
        "EC204",
        "norm-before-fc-hidden",
        "warning",
        "The weights have input_norm but an engine release does not build it.",
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
    Rule(
        "EC011",
        "target-class-architecture",
        "error",
        "architectures names a target model class: SGLang loads the draft as that model (random or missing weights).",
    ),
    Rule(
        "EC012",
        "architecture-not-accepted",
        "error",
        "No entry of architectures is a draft class the chosen engine accepts.",
    ),
    Rule(
        "EC013",
        "mla-model-type",
        "error",
        "An MLA draft whose model_type is not deepseek_v2/deepseek_v3: vLLM does not treat it as MLA.",
    ),
    Rule(
        "EC015",
        "layer-prefix-engine",
        "warning",
        "The decoder layer is stored as layers.0.*, which SGLang builds before PR #24663 skip silently (random layer).",
    ),
    Rule(
        "EC109",
        "aux-ids-wrong-location",
        "warning",
        "Aux-layer ids only at the top level: SGLang never reads them and falls back to its defaults.",
    ),
    Rule(
        "EC110",
        "aux-count-without-ids",
        "error",
        "K differs from 3 but no aux-layer ids are written: the engines capture three default layers.",
    ),
    Rule(
        "EC209",
        "bias-flag-weights",
        "error",
        "The bias flag and fc.bias disagree, or bias is true (vLLM reads it as an o_proj bias).",
    ),
    Rule(
        "EC210",
        "mla-norm-before-fc",
        "error",
        "norm_before_fc on an MLA draft: neither engine's MLA loader applies input_norm.",
    ),
    Rule(
        "EC301",
        "missing-tensor",
        "error",
        "A tensor the draft needs is missing; the engine leaves the parameter at its random initialisation or fails.",
    ),
    Rule(
        "EC302",
        "unexpected-tensor",
        "warning",
        "A tensor the engine has no place for: vLLM refuses to load, SGLang ignores it silently.",
    ),
    Rule(
        "EC303",
        "shape-mismatch",
        "error",
        "A tensor's shape differs from the one the config implies (head_dim, MLA ranks, 2H inputs, fc [H, K*Ht]).",
    ),
    Rule(
        "EC304",
        "dtype-role",
        "error",
        "A tensor's dtype does not fit its role (d2t integer, t2d bool, weights floating point).",
    ),
    Rule(
        "EC305",
        "fp8-without-quantization",
        "error",
        "FP8 weights without a quantization_config that describes them.",
    ),
    Rule(
        "EC306",
        "head-dim-explicit",
        "info",
        "Explicit head_dim differs from hidden_size / num_attention_heads; every consumer must honour it.",
    ),
    Rule(
        "EC401",
        "lm-head-missing",
        "error",
        "No lm_head although draft_vocab_size is an integer: the engines use a random head.",
    ),
    Rule(
        "EC402",
        "lm-head-rows",
        "error",
        "lm_head rows differ from draft_vocab_size.",
    ),
    Rule(
        "EC403",
        "tied-embeddings",
        "error",
        "tie_word_embeddings is true: SGLang would use the V-row embedding as the draft head.",
    ),
    Rule(
        "EC404",
        "d2t-missing",
        "error",
        "draft_vocab_size < vocab_size and no d2t: both engines emit wrong tokens without an error.",
    ),
    Rule(
        "EC405",
        "draft-vocab-size-key",
        "error",
        "draft_vocab_size is missing (SGLang Llama drafts fail) or null (the target head is used).",
    ),
    Rule(
        "EC406",
        "d2t-out-of-range",
        "error",
        "d2t maps a draft token outside the target vocabulary.",
    ),
    Rule(
        "EC407",
        "d2t-not-unique",
        "error",
        "d2t maps two draft tokens to the same target token (or is not increasing).",
    ),
    Rule(
        "EC408",
        "t2d-inconsistent",
        "error",
        "t2d does not mark exactly the targets of d2t (count != draft_vocab_size, or a mapped target unmarked).",
    ),
    Rule(
        "EC409",
        "d2t-all-zero",
        "error",
        "d2t is all zero while draft_vocab_size < vocab_size: an identity map into a larger vocabulary.",
    ),
    Rule(
        "EC410",
        "lm-head-identical-rows",
        "error",
        "Every lm_head row is the same: the head was never trained.",
    ),
    Rule(
        "EC411",
        "embed-needed",
        "warning",
        "target_hidden_size differs from hidden_size but no embed_tokens is shipped.",
    ),
    Rule(
        "EC501",
        "target-hidden-size",
        "error",
        "target_hidden_size is null (crashes both engines), missing while fc is wider, or wrong.",
    ),
    Rule(
        "EC502",
        "typed-field-null",
        "error",
        "A typed config field is null; strict config classes reject it.",
    ),
    Rule(
        "EC503",
        "rope-vs-target",
        "warning",
        "The draft's rope scaling differs from the target's (type or factor), or was dropped.",
    ),
    Rule(
        "EC504",
        "max-positions-below-target",
        "error",
        "max_position_embeddings is below the target's: SGLang refuses a draft shorter than the served context.",
    ),
    Rule(
        "EC505",
        "quantization-config-leak",
        "error",
        "quantization_config (usually the target's) in an unquantized draft's config.",
    ),
    Rule(
        "EC506",
        "q-lora-rank-missing",
        "error",
        "An MLA draft without q_lora_rank: both engines' EAGLE3 MLA layers need it.",
    ),
    Rule(
        "EC601",
        "non-finite",
        "error",
        "A tensor holds NaN or Inf.",
    ),
    Rule(
        "EC602",
        "norm-all-zero",
        "error",
        "A norm weight is all zero: the layer output is zeroed.",
    ),
    Rule(
        "EC603",
        "init-like",
        "warning",
        "A tensor has the statistics of a fresh initialisation, not of trained weights.",
    ),
    Rule(
        "EC604",
        "all-zero-weight",
        "error",
        "A weight matrix is all zero.",
    ),
    Rule(
        "EC605",
        "embed-differs-from-target",
        "warning",
        "The draft ships its own embed_tokens, different from the target's: SGLang replaces it, vLLM uses it.",
    ),
    Rule(
        "EC701",
        "forward-non-finite",
        "error",
        "The draft's own forward pass (seeded random inputs) produces NaN or Inf.",
    ),
    Rule(
        "EC702",
        "forward-not-runnable",
        "error",
        "The reference forward pass cannot run the draft (a tensor or setting it cannot place).",
    ),
    Rule(
        "EC711",
        "probe-reading-beaten",
        "error",
        "With the target, the draft agrees decisively better under another reading of its config (ids shifted, "
        "norm_output): a paired sign test p < 0.01 and at least 1 point of top-1 or 0.02 accepted tokens per position.",
    ),
    Rule(
        "EC712",
        "probe-low-agreement",
        "warning",
        "With the target, the draft's first token rarely matches the target's greedy one (untrained, or wrong target).",
    ),
    Rule(
        "EC713",
        "probe-convention-measured",
        "info",
        "The aux-id convention was ambiguous; the probe measured which reading the draft was trained on "
        "(or says the comparison is inconclusive).",
    ),
    Rule(
        "EC714",
        "saved-states-disagree",
        "error",
        "Hidden states saved by the trainer or engine are not the target boundaries the config selects.",
    ),
    Rule(
        "EC715",
        "saved-states-matched",
        "info",
        "Saved hidden states identify the target boundaries the draft was trained on.",
    ),
    Rule(
        "EC716",
        "oracle-mismatch",
        "error",
        "The reference target disagrees with transformers on these tokens: the probe's numbers cannot be trusted.",
    ),
    Rule(
        "EC211",
        "engine-flag-misread",
        "error",
        "An engine release builds the draft with a flag or fc width (fc_norm, norm_before_fc, norm_before_residual, "
        "K) other than the weights need.",
    ),
    Rule(
        "EC721",
        "engine-fed-untrained-states",
        "error",
        "Run in the engine, the draft was fed target hidden states other than those its weights were trained on "
        "(captured inside the engine and matched against the reference target's boundaries).",
    ),
    Rule(
        "EC722",
        "engine-acceptance-below-probe",
        "warning",
        "The engine's measured mean acceptance length is more than 0.15 below what the probe predicts for the "
        "configured reading on the same run (same prompts, text and draft length; the probe's own text when the "
        "reference forward cannot run the draft): the engine runs the draft differently from the reference.",
    ),
    Rule(
        "EC723",
        "engine-output-changed",
        "warning",
        "Greedy speculative decoding in the engine produced text other than the target alone on the same prompts: "
        "speculation must never change greedy output (a near-tie flipped by the verification pass's numerics can, "
        "in bfloat16; in float32 it points at the engine or the draft's integration).",
    ),
)

# Rules that read tensor values (verify --level tensors).
_TENSOR_LEVEL = frozenset({"EC406", "EC407", "EC408", "EC409", "EC410", "EC601", "EC602", "EC603", "EC604", "EC605"})
# Rules whose findings `eagle-convert normalize` resolves (it rewrites names and config; it never invents weights).
FIXED_BY_NORMALIZE = frozenset(
    {
        "EC009",
        "EC010",
        "EC015",
        "EC103",
        "EC104",
        "EC106",
        "EC109",
        "EC202",
        "EC204",
        "EC208",
        "EC211",
        "EC403",
        "EC405",
        "EC501",
        "EC003",
    }
)
_LEVEL_OF = {
    **dict.fromkeys(_TENSOR_LEVEL, "tensors"),
    **dict.fromkeys(("EC701", "EC702"), "forward"),
    **dict.fromkeys(("EC711", "EC712", "EC713", "EC714", "EC715", "EC716"), "target"),
    **dict.fromkeys(("EC721", "EC722", "EC723"), "engine"),
}
_NORMALIZE = "run `eagle-convert normalize SRC OUT"  # the fix texts close the backquote after their flags
# What to do about a finding, per rule; rules fixed by normalize get the normalize line when not listed here.
_FIX = {
    "EC001": "serve it with the engines' EAGLE (not EAGLE3) method, or train an EAGLE3 draft; normalize cannot "
    "convert EAGLE-1/2 weights",
    "EC002": "train the draft with a dense MLP (the engines' EAGLE3 draft layer has no experts); normalize cannot "
    "remove experts",
    "EC003": f"{_NORMALIZE} --allow-pickle`: it converts the weights to safetensors with torch's weights-only loader",
    "EC103": f"{_NORMALIZE} --aux-convention output-of|input-to`: it writes the ids so both engines read the trained "
    "hidden states",
    "EC104": f"{_NORMALIZE} --target TARGET`: it writes the ids in each engine's reading of the hidden states the "
    "draft was trained on",
    "EC101": "pass --aux-convention output-of|input-to to say which reading the trainer used",
    "EC102": "write the trainer's aux-layer ids into config.json (or confirm the engine defaults were used)",
}
RULES: dict[str, Rule] = {
    rule.id: replace(
        rule,
        level=_LEVEL_OF.get(rule.id, rule.level),
        fixable=rule.id in FIXED_BY_NORMALIZE,
        fix=_FIX.get(rule.id, f"{_NORMALIZE}`: it rewrites this" if rule.id in FIXED_BY_NORMALIZE else ""),
    )
    for rule in _RULES
}


def fix_fields(rule_id: str) -> dict[str, Any]:
    """The ``fixable`` and ``fix`` fields every finding carries in JSON (unregistered ids: not fixable)."""
    rule = RULES.get(rule_id)
    return {"fixable": rule.fixable if rule else False, "fix": rule.fix if rule else ""}


def find_rule(code: str) -> Rule:
    """The rule with id ``code`` (case-insensitive); a usage error naming the id otherwise."""
    from eagle_convert.errors import UsageError

    rule = RULES.get(code.strip().upper())
    if rule is None:
        raise UsageError(f"no rule {code!r}", hint="run `eagle-convert rules` for the list of rule ids")
    return rule


def finding(
    rule_id: str,
    message: str,
    *,
    severity: str | None = None,
    subject: str | None = None,
    expected: Any = None,
    actual: Any = None,
    engine: str | None = None,
) -> Finding:
    """A finding for a registered rule; its severity defaults to the rule's."""
    rule = RULES[rule_id]
    return Finding(rule.id, severity or rule.severity, message, subject, expected, actual, engine)
