"""The rule registry: every finding the tool can report has a stable id here.

Ids are a public contract (users select and ignore them in CI): never renumber, only add. Groups:
EC0xx identity and files, EC1xx aux layers, EC2xx EAGLE3.1 and norm flags, EC3xx tensors and shapes,
EC4xx vocabulary mapping, EC5xx config fields.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from eagle_convert import engines
from eagle_convert.rules.finding import Finding
from eagle_convert.version import docs_url

# each verify level runs the rules of the levels before it
LEVELS = ("static", "tensors", "forward", "target", "engine")
# the modelled engines (eagle_convert/engines.py): a rule concerns all of them unless it names some
ALL_ENGINES = engines.NAMES
# the engines that read the aux-layer ids from the draft config (not TensorRT-LLM: a deployment setting picks them)
ID_READING_ENGINES = engines.ID_READING
READS_DRAFT_IDS = ID_READING_ENGINES  # (TokenSpeed reads them unless its server argument is given)
# the engines `verify --level engine` starts in their own environment (measured from inside the engine)
RUN_ENGINES = engines.RUNNERS
# the engines whose running server `verify --engine-url` measures (from its spec-decode counters)
SERVED_ENGINES = engines.ATTACHABLE


@dataclass(frozen=True)
class Rule:
    """Everything about one rule, in one record: the registry below is the only place a rule's facts live."""

    id: str
    name: str
    severity: str  # the severity of its findings (``--strict`` raises strict_error rules to errors)
    summary: str
    level: str = "static"  # the lowest verify level that runs it
    fixable: bool = False  # `eagle-convert normalize` resolves it
    fix: str = ""  # what to do about a finding (every fixable rule names normalize)
    strict_error: bool = False  # `verify --strict` makes its findings errors (a gate that cannot tell must not pass)
    needs_headers: bool = False  # compares tensor headers with the config: skipped when the weights are pickle
    needs_target: bool = False  # compares the draft with the target: skipped without --target
    blocks_normalize: bool = False  # an error of this rule means normalize cannot convert without guessing
    engines: tuple[str, ...] = ALL_ENGINES  # the engines whose behaviour it concerns

    @property
    def docs(self) -> str:
        """Where the rule is documented, as a URL (docs/rules.md is generated from this registry)."""
        return docs_url("docs/rules.md", self.id.lower())


# the fix of a rule normalize resolves by rewriting names or config
_REWRITES = "run `eagle-convert normalize SRC OUT`: it rewrites this"
# EC011/EC012: what normalize writes as architectures (normalize/profiles.py, releases.draft_architecture)
_ARCHITECTURE = (
    "run `eagle-convert normalize SRC OUT`: it writes the draft class every modelled release loads "
    "(LlamaForCausalLMEagle3, or Eagle3DeepseekV2ForCausalLM for MLA; a draft with q/k norms gets the one class "
    "that has them); --profile speculators keeps Eagle3Speculator, which not every release loads"
)

_RULES = (
    Rule(
        "EC001",
        "eagle1-draft",
        "error",
        summary=("The draft is EAGLE-1/2, not EAGLE3; the EAGLE3 paths of the engines cannot serve it."),
        fix=(
            "serve it with the engines' EAGLE (not EAGLE3) method, or train an EAGLE3 draft; "
            "normalize cannot convert EAGLE-1/2 weights"
        ),
        blocks_normalize=True,
    ),
    Rule(
        "EC002",
        "moe-draft",
        "error",
        summary=("The draft layer is mixture-of-experts; the engines' EAGLE3 draft loaders are dense only."),
        fix=(
            "train the draft with a dense MLP (the engines' EAGLE3 draft layer has no "
            "experts); normalize cannot remove experts"
        ),
        blocks_normalize=True,
    ),
    Rule(
        "EC003",
        "pickle-weights",
        "warning",
        summary="Weights are pickle files, which are never unpickled without --allow-pickle.",
        fixable=True,
        fix=(
            "run `eagle-convert normalize SRC OUT --allow-pickle`: it converts the weights to"
            " safetensors with torch's weights-only loader"
        ),
        strict_error=True,
    ),
    Rule("EC004", "no-weights", "warning", summary="No weight files: only the config could be inspected."),
    Rule("EC005", "unknown-producer", "info", summary="No producer layout matched; detection of the rest still ran."),
    Rule(
        "EC006",
        "multi-layer-draft",
        "warning",
        summary=("More than one draft layer; the engines disagree on layers >= 1, so it is not portable."),
    ),
    Rule(
        "EC007",
        "config-weights-disagree",
        "error",
        summary=("The config and the weights describe different models (attention kind, widths, K)."),
        blocks_normalize=True,
    ),
    Rule(
        "EC008",
        "unrecognised-tensor",
        "warning",
        summary=("A tensor name no known layout uses; an engine release drops it silently or refuses to load."),
    ),
    Rule(
        "EC009",
        "prefused-tensor",
        "warning",
        summary=("A pre-fused projection (qkv_proj, gate_up_proj, fused_qkv_a_proj_with_mqa) is stored."),
        fixable=True,
        fix=_REWRITES,
    ),
    Rule(
        "EC010",
        "wrapped-state-dict",
        "warning",
        summary=("Tensor names carry a wrapper prefix (model., draft_model., eagle_module.) the engines do not strip."),
        fixable=True,
        fix=_REWRITES,
    ),
    Rule(
        "EC014",
        "shard-set",
        "warning",
        summary=("Weight files the index does not name, several indexes, or shards read without an index."),
    ),
    Rule(
        "EC101",
        "aux-convention-ambiguous",
        "warning",
        summary=("The aux-layer ids could mean 'output of layer X' or 'input to layer X'; nothing decides which."),
        fix="pass --aux-convention output-of|input-to to say which reading the trainer used",
        strict_error=True,
    ),
    Rule(
        "EC102",
        "aux-ids-absent",
        "warning",
        summary=(
            "No aux-layer ids: the engines fall back to hs[2], hs[N//2], hs[N-3], which may not be what was trained."
        ),
        fix=("write the trainer's aux-layer ids into config.json (or confirm the engine defaults were used)"),
        strict_error=True,
    ),
    Rule(
        "EC103",
        "aux-engines-disagree",
        "error",
        summary="The selected engine releases would feed the draft different target hidden states.",
        fixable=True,
        fix=(
            "run `eagle-convert normalize SRC OUT --aux-convention output-of|input-to`: it "
            "writes the ids so every modelled release reads the trained hidden states"
        ),
    ),
    Rule(
        "EC104",
        "aux-engine-misreads",
        "error",
        summary=(
            "An engine would select hidden states other than the ones the draft was trained on (SGLang, vLLM and "
            "TokenSpeed, which read the ids from the draft; TensorRT-LLM reads its deployment's setting: EC114, EC115)."
        ),
        fixable=True,
        fix=(
            "run `eagle-convert normalize SRC OUT --target TARGET` (with the --aux-convention you declared, if any):"
            " it writes the ids in each engine's reading of the hidden states the draft was trained on"
        ),
        engines=READS_DRAFT_IDS,
    ),
    Rule(
        "EC105",
        "aux-ids-out-of-range",
        "error",
        summary=("An aux-layer id selects a hidden state the target does not have, or one an engine cannot capture."),
    ),
    Rule(
        "EC106",
        "aux-ids-unsorted",
        "info",
        summary=("Aux-layer ids are not sorted or not unique; engines capture in ascending layer order."),
        fixable=True,
        fix=_REWRITES,
    ),
    Rule(
        "EC107",
        "aux-count-mismatch",
        "error",
        summary=("K (number of aux states) differs between num_aux_hidden_states, the id list and the fc width."),
        blocks_normalize=True,
    ),
    Rule(
        "EC108",
        "aux-convention-conflict",
        "warning",
        summary="The producer's convention and the id pattern disagree.",
        strict_error=True,
    ),
    Rule(
        "EC201",
        "fc-norm-flag-weights",
        "error",
        summary="fc_norm (or legacy use_aux_norm) and the fc_norm weights disagree.",
        blocks_normalize=True,
    ),
    Rule(
        "EC202",
        "legacy-fc-norm",
        "warning",
        summary=("Legacy EAGLE3.1 names (use_aux_norm, aux_norm_*): some engine releases read them, others do not."),
        fixable=True,
        fix=_REWRITES,
    ),
    Rule(
        "EC203",
        "norm-before-fc-flag-weights",
        "error",
        summary="norm_before_fc and input_norm.weight disagree.",
        blocks_normalize=True,
    ),
    Rule(
        "EC204",
        "norm-before-fc-hidden",
        "warning",
        summary="The weights have input_norm but an engine release does not build it.",
        fixable=True,
        fix=_REWRITES,
    ),
    Rule(
        "EC205",
        "exclusive-norms",
        "error",
        summary="fc_norm and norm_before_fc are both on; they are mutually exclusive.",
        blocks_normalize=True,
    ),
    Rule(
        "EC206",
        "norm-output-provenance",
        "warning",
        summary=(
            "SpecForge's norm_output meant 'norm before lm_head' before its PR #879: the recurrence may be pre-norm."
        ),
    ),
    Rule(
        "EC207", "partial-eagle3-1", "info", summary="Only one of the two EAGLE3.1 flags (fc_norm, norm_output) is on."
    ),
    Rule(
        "EC208",
        "norm-before-residual-default",
        "info",
        summary=(
            "norm_before_residual is absent from a speculators config: the speculators trainer's default (true) "
            "is assumed."
        ),
        fixable=True,
        fix=_REWRITES,
    ),
    Rule(
        "EC011",
        "target-class-architecture",
        "error",
        summary=(
            "architectures names a target model class: an engine release that builds architectures[0] loads the "
            "draft as that model (random or missing weights)."
        ),
        engines=("sglang",),
        fixable=True,
        fix=_ARCHITECTURE,
    ),
    Rule(
        "EC012",
        "architecture-not-accepted",
        "error",
        summary="No entry of architectures is a draft class the chosen engine accepts.",
        fixable=True,
        fix=_ARCHITECTURE,
    ),
    Rule(
        "EC013",
        "mla-model-type",
        "error",
        summary=(
            "An MLA draft whose model_type is not deepseek_v2/deepseek_v3: an engine release that detects MLA by "
            "model_type builds MHA attention."
        ),
        engines=("vllm",),
    ),
    Rule(
        "EC015",
        "layer-prefix-engine",
        "warning",
        summary=("The decoder layer is stored as layers.0.*, which some engine builds skip silently (random layer)."),
        fixable=True,
        fix=_REWRITES,
        needs_headers=True,
        engines=("sglang",),
    ),
    Rule(
        "EC016",
        "aux-injection-not-modelled",
        "error",
        summary=(
            "The config sets eagle_aux_injection_mode to a mode other than fused_fc, or eagle_aux_layer_bands (the "
            "AngelSlim research fork's banded, progressive and hawk drafts): the trainer mixes or routes the aux "
            "states in a way no engine builds (neither SGLang 0.5.23 nor vLLM 0.33 reads either key), and "
            "eagle-convert does not model it."
        ),
        fix=(
            "serve it with the trainer's own runtime, or train a stock EAGLE3 draft (fused_fc); normalize cannot "
            "turn band mixes or per-layer injection into one fc"
        ),
        blocks_normalize=True,
    ),
    Rule(
        "EC017",
        "draft-vocab-in-vocab-size",
        "error",
        summary=(
            "The config has target_vocab_size and no draft_vocab_size, so vocab_size is the draft's vocabulary (the "
            "speculators research trainers' layout); the engines read vocab_size as the target's and "
            "draft_vocab_size as the draft's."
        ),
        fix="write vocab_size = the target's vocabulary (target_vocab_size) and draft_vocab_size = the draft's",
        blocks_normalize=True,
    ),
    Rule(
        "EC018",
        "rope-keys-disagree",
        "warning",
        summary=(
            "rope_scaling and rope_parameters are both set and disagree: transformers 5 applies rope_scaling "
            "(modeling_rope_utils.py:776-777) and transformers 4 never reads rope_parameters, so which rotary "
            "frequencies the draft gets depends on the loader."
        ),
        fix="keep one of the two keys, the one the draft was trained with",
    ),
    Rule(
        "EC019",
        "draft-model-type-of-target",
        "warning",
        summary=(
            "A Llama-class MHA draft whose model_type is a target family's (gpt_oss, glm4_moe, kimi_k2, deepseek_*): "
            "a loader parses the config with that family's config class, whose defaults for the keys the config "
            "leaves out (head_dim, rope, partial_rotary_factor, attention_bias, sliding_window) are not Llama's."
        ),
        fixable=True,
        fix="run `eagle-convert normalize SRC OUT`: it writes model_type llama for an MHA draft",
    ),
    Rule(
        "EC020",
        "config-value-out-of-range",
        "error",
        summary=(
            "A size, epsilon, rope factor or list in the draft's config lies outside what any model has (zero or "
            "negative sizes, astronomically large ones, an empty aux-id list, a 100k-entry architectures), or sizes "
            "that must agree do not (heads that do not divide hidden_size with no head_dim, KV heads that do not "
            "divide the heads, a draft vocabulary larger than the target's, hidden_size unlike the target's with no "
            "target_hidden_size)."
        ),
        fix="fix the config from the trainer's own record of the model; normalize refuses it until then",
        blocks_normalize=True,
    ),
    Rule(
        "EC021",
        "model-not-draft",
        "error",
        summary=(
            "The checkpoint is a model (a full causal LM: several decoder layers, no fc and no draft keys in its "
            "config), not an EAGLE3 draft: often the target passed where the draft belongs. Every other finding "
            "about it would be noise, so verify reports this one alone."
        ),
        fix=(
            "pass the EAGLE3 draft as PATH and the model as --target; normalize refuses a model (there is no draft "
            "in it to convert)"
        ),
        blocks_normalize=True,
    ),
    Rule(
        "EC109",
        "aux-ids-wrong-location",
        "warning",
        summary=("Aux-layer ids only at the top level: a release that reads eagle_config only falls back to defaults."),
        fixable=True,
        fix=_REWRITES,
        engines=ID_READING_ENGINES,
    ),
    Rule(
        "EC110",
        "aux-count-without-ids",
        "error",
        summary=("K differs from 3 but no aux-layer ids are written: the default capture is three layers."),
    ),
    Rule(
        "EC111",
        "target-class-without-eagle3",
        "error",
        summary=(
            "The target's model class in a selected engine release cannot capture EAGLE3 aux states (its model "
            "registry has no such method or interface for that class, nor for the fallback serving an unregistered "
            "one): the release fails at start-up whatever the draft. The finding names the release, the class and "
            "the line that fails."
        ),
        fix=(
            "serve this target with a release whose finding does not name it, or with a target class that captures "
            "(`eagle-convert engines` lists the classes of each release); a draft cannot change it"
        ),
    ),
    Rule(
        "EC112",
        "aux-capture-off",
        "error",
        summary=(
            "eagle_config.use_aux_hidden_state is false, so the release captures no aux states and feeds the "
            "target's last hidden state, but the weights' fc was trained on several aux states: it is skipped at "
            "load or never applied."
        ),
        fix=(
            "drop use_aux_hidden_state: false from eagle_config (or set it true) and write the aux-layer ids the "
            "draft was trained on"
        ),
        needs_headers=True,
    ),
    Rule(
        "EC113",
        "aux-ids-contradict-record",
        "error",
        summary=(
            "The aux-layer ids contradict eagle-convert's own provenance record, or the two id locations disagree "
            "beyond the recorded conventions: edited after normalize, and nothing says which is true."
        ),
        fix=(
            "pass --aux-convention output-of|input-to to inspect, verify and normalize to say which reading of the "
            "ids is true (the finding names the hidden states each selects); until then EC103, EC104 and EC109 are "
            "not fixable and normalize refuses the draft; `eagle-convert normalize SRC OUT --aux-convention ...` "
            "then writes every id location and the record for that reading"
        ),
        blocks_normalize=True,
    ),
    Rule(
        "EC114",
        "aux-capture-setting",
        "error",
        summary=(
            "TensorRT-LLM would feed hidden states other than the trained ones: it reads no aux-layer ids from the "
            "draft, only the deployment's speculative_config.eagle3_layers_to_capture (unset: its default {1, N//2 - "
            "1, N - 4}, the outputs of those layers, hs[2, N//2, N-3]), and the setting given (or the default) "
            "differs from the layers the draft was trained on."
        ),
        fix=(
            "deploy with the eagle3_layers_to_capture the finding names (TensorRT-LLM's convention: id i is the "
            "output of decoder layer i, hs[i+1]), in the YAML given to `trtllm-serve --extra_llm_api_options FILE`: "
            "`speculative_config: {eagle3_layers_to_capture: [...]}`; check it with `eagle-convert verify DRAFT "
            "--engine trtllm@X.Y --engine-arg eagle3_layers_to_capture=[...]` (normalize cannot fix it: the setting "
            "lives in the deployment, not in the draft)"
        ),
        engines=("trtllm",),
    ),
    Rule(
        "EC115",
        "aux-capture-impossible",
        "error",
        summary=(
            "No eagle3_layers_to_capture makes TensorRT-LLM feed the states in the order the draft was trained on: "
            "it sorts the set it is given, so a draft whose fc takes its states in another order is fed them "
            "reordered; states no setting reaches (hs[0], the embeddings) are EC105."
        ),
        fixable=True,
        fix=(
            "run `eagle-convert normalize SRC OUT`: it puts fc's column blocks in ascending layer order and sorts the "
            "ids; then deploy with the eagle3_layers_to_capture that `eagle-convert verify OUT --engine trtllm` names"
        ),
        engines=("trtllm",),
    ),
    Rule(
        "EC116",
        "attention-kind-not-built",
        "error",
        summary=(
            "The release builds the other attention kind than the draft's weights hold (MHA projections for an MLA "
            "draft, or MLA for an MHA one): the weights do not fit the module it builds."
        ),
        fix=(
            "deploy on a release whose EAGLE3 class builds the draft's attention kind (for TensorRT-LLM, MLA drafts "
            "need a build whose Eagle3ForCausalLM reads kv_lora_rank, e.g. trtllm@main-00679c6, with kv_lora_rank in "
            "the draft config)"
        ),
        engines=("trtllm",),
    ),
    Rule(
        "EC209",
        "bias-flag-weights",
        "error",
        summary=("The bias flag and fc.bias disagree, or bias is true where a release reads it as an o_proj bias."),
        needs_headers=True,
    ),
    Rule(
        "EC210",
        "mla-norm-before-fc",
        "error",
        summary="norm_before_fc on an MLA draft: neither engine's MLA loader applies input_norm.",
    ),
    Rule(
        "EC301",
        "missing-tensor",
        "error",
        summary=(
            "A tensor the draft needs is missing; the engine leaves the parameter at its "
            "random initialisation or fails."
        ),
        needs_headers=True,
    ),
    Rule(
        "EC302",
        "unexpected-tensor",
        "warning",
        summary=("A tensor the engine has no place for: a release refuses to load or drops it silently."),
        needs_headers=True,
    ),
    Rule(
        "EC303",
        "shape-mismatch",
        "error",
        summary=(
            "A tensor's shape differs from the one the config implies (head_dim, MLA ranks, 2H inputs, fc [H, K*Ht])."
        ),
        needs_headers=True,
    ),
    Rule(
        "EC304",
        "dtype-role",
        "error",
        summary=("A tensor's dtype does not fit its role (d2t integer, t2d bool, weights floating point)."),
        needs_headers=True,
    ),
    Rule(
        "EC305",
        "fp8-without-quantization",
        "error",
        summary="FP8 weights without a quantization_config that describes them.",
        needs_headers=True,
    ),
    Rule(
        "EC306",
        "head-dim-explicit",
        "info",
        summary=("Explicit head_dim differs from hidden_size / num_attention_heads; every consumer must honour it."),
    ),
    Rule(
        "EC401",
        "lm-head-missing",
        "error",
        summary=("No lm_head although draft_vocab_size is an integer: the engines use a random head."),
        needs_headers=True,
    ),
    Rule("EC402", "lm-head-rows", "error", summary="lm_head rows differ from draft_vocab_size.", needs_headers=True),
    Rule(
        "EC403",
        "tied-embeddings",
        "error",
        summary=("tie_word_embeddings is true: a loader that honours it uses the V-row embedding as the draft head."),
        fixable=True,
        fix=_REWRITES,
    ),
    Rule(
        "EC404",
        "d2t-missing",
        "error",
        summary=("draft_vocab_size < vocab_size and no d2t: the engines emit wrong tokens without an error."),
        needs_headers=True,
    ),
    Rule(
        "EC405",
        "draft-vocab-size-key",
        "error",
        summary=("draft_vocab_size is missing (a release that requires it fails) or null (the target head is used)."),
        fixable=True,
        fix=_REWRITES,
        engines=("sglang",),
    ),
    Rule(
        "EC406",
        "d2t-out-of-range",
        "error",
        summary="d2t maps a draft token outside the target vocabulary.",
        level="tensors",
    ),
    Rule(
        "EC407",
        "d2t-not-unique",
        "error",
        summary="d2t maps two draft tokens to the same target token (or is not increasing).",
        level="tensors",
    ),
    Rule(
        "EC408",
        "t2d-inconsistent",
        "error",
        summary=(
            "t2d does not mark exactly the targets of d2t (count != draft_vocab_size, or a mapped target unmarked)."
        ),
        level="tensors",
    ),
    Rule(
        "EC409",
        "d2t-all-zero",
        "error",
        summary=("d2t is all zero while draft_vocab_size < vocab_size: an identity map into a larger vocabulary."),
        level="tensors",
    ),
    Rule(
        "EC410",
        "lm-head-identical-rows",
        "error",
        summary="Every lm_head row is the same: the head was never trained.",
        level="tensors",
    ),
    Rule(
        "EC411",
        "embed-needed",
        "warning",
        summary="target_hidden_size differs from hidden_size but no embed_tokens is shipped.",
        needs_headers=True,
    ),
    Rule(
        "EC412",
        "tensor-refused-at-load",
        "error",
        summary=(
            "A selected release's draft loader refuses a tensor the checkpoint holds and the load fails before "
            "serving: e.g. d2t when draft_vocab_size (or, when it is null or missing, vocab_size) equals the "
            "target's vocab_size, where a loader builds no draft-to-target map and has no parameter to put it in."
        ),
        fixable=True,
        fix=(
            "run `eagle-convert normalize SRC OUT`: where d2t and t2d are the identity (every offset zero, every "
            "target token marked), as they are with draft_vocab_size equal to the target's vocabulary, it drops both, "
            "as the engines expect; a d2t that maps anything else is kept and its own findings say what is wrong"
        ),
        needs_headers=True,
        engines=("vllm",),
    ),
    Rule(
        "EC413",
        "tensor-dropped-at-load",
        "error",
        summary=(
            "A selected release's draft loader skips a trained tensor the checkpoint holds, without an error, and "
            "serves the draft without it: e.g. lm_head.weight when tie_word_embeddings is true (SGLang ties the "
            "draft's head to the target's embedding)."
        ),
        fixable=True,
        fix=(
            "run `eagle-convert normalize SRC OUT`: it writes tie_word_embeddings false, so the draft keeps the "
            "lm_head it was trained with"
        ),
        needs_headers=True,
    ),
    Rule(
        "EC414",
        "d2t-absolute-ids",
        "error",
        summary=(
            "d2t holds target token ids where every engine reads offsets (target = draft + d2t[draft]): e.g. "
            "verl-SpeCo 0.1.0's default arange(draft_vocab_size), served as draft token i -> target token 2i. Its "
            "values strictly increase where offsets repeat (at every two adjacent target tokens the draft keeps), and "
            "with a draft vocabulary at most half the target's every range and order check passes."
        ),
        level="tensors",
        fixable=True,
        fix=(
            "run `eagle-convert normalize SRC OUT`: it writes the target ids as offsets (d2t[i] = id - i), the "
            "mapping the trainer meant; or re-export d2t as offsets from the trainer's vocabulary mapping"
        ),
    ),
    Rule(
        "EC501",
        "target-hidden-size",
        "error",
        summary=("target_hidden_size is null (crashes both engines), missing while fc is wider, or wrong."),
        fixable=True,
        fix=_REWRITES,
        needs_headers=True,
    ),
    Rule(
        "EC502", "typed-field-null", "error", summary="A typed config field is null; strict config classes reject it."
    ),
    Rule(
        "EC503",
        "rope-vs-target",
        "warning",
        summary=("The draft's rope scaling differs from the target's (type or factor), or was dropped."),
        needs_target=True,
    ),
    Rule(
        "EC504",
        "max-positions-below-target",
        "error",
        summary=(
            "max_position_embeddings is below the target's: a release that checks refuses a draft shorter than the "
            "served context."
        ),
        needs_target=True,
        engines=("sglang",),
    ),
    Rule(
        "EC505",
        "quantization-config-leak",
        "error",
        summary="quantization_config (usually the target's) in an unquantized draft's config.",
        needs_headers=True,
    ),
    Rule(
        "EC506",
        "q-lora-rank-missing",
        "error",
        summary="An MLA draft without q_lora_rank: both engines' EAGLE3 MLA layers need it.",
    ),
    Rule(
        "EC507",
        "config-value-type",
        "error",
        summary=(
            "A config key the tool and the engines read holds a value of the wrong type: a string for a boolean "
            '(Python reads "false" as true), a torch_dtype that names no dtype (transformers\' config loader '
            "fails on it), a list or string where an object belongs (quantization_config, rope_scaling, "
            "eagle_config), an empty model_type, a number for a name. The tool reads the key as absent and names it."
        ),
        fix=(
            "write the value with its JSON type (true/false unquoted, a number unquoted, an object in braces, a "
            "dtype name such as bfloat16) or remove the key; normalize refuses the draft until then"
        ),
        blocks_normalize=True,
    ),
    Rule(
        "EC508",
        "config-value-null",
        "warning",
        summary=(
            "A flag or the aux-layer ids are null: no type, but the engines read null in a defined way (a flag as "
            "false, null ids as absent, so each release falls back to its own default ids or to the other "
            "location's); the finding names what each selected release does."
        ),
        fix=(
            "write the value the trainer used (true/false, the aux-layer id list) or remove the key; `eagle-convert "
            "normalize` writes every flag as an explicit boolean"
        ),
    ),
    Rule("EC601", "non-finite", "error", summary="A tensor holds NaN or Inf.", level="tensors"),
    Rule(
        "EC602",
        "norm-all-zero",
        "error",
        summary="A norm weight is all zero: the layer output is zeroed.",
        level="tensors",
    ),
    Rule(
        "EC603",
        "init-like",
        "warning",
        summary="A tensor has the statistics of a fresh initialisation, not of trained weights.",
        level="tensors",
    ),
    Rule("EC604", "all-zero-weight", "error", summary="A weight matrix is all zero.", level="tensors"),
    Rule(
        "EC605",
        "embed-differs-from-target",
        "warning",
        summary=(
            "The draft ships its own embed_tokens, different from the target's: a release that keeps it and one that"
            " replaces it run different drafts."
        ),
        level="tensors",
        needs_target=True,
    ),
    Rule(
        "EC701",
        "forward-non-finite",
        "error",
        summary="The draft's own forward pass (seeded random inputs) produces NaN or Inf.",
        level="forward",
    ),
    Rule(
        "EC702",
        "forward-not-runnable",
        "error",
        summary=("The reference forward pass cannot run the draft (a tensor or setting it cannot place)."),
        level="forward",
    ),
    Rule(
        "EC711",
        "probe-reading-beaten",
        "error",
        summary=(
            "With the target, the draft agrees decisively better under another reading of its"
            " config (ids shifted, norm_output): a paired sign test p < 0.01 and at least 1 "
            "point of top-1 or 0.02 accepted tokens per position."
        ),
        level="target",
    ),
    Rule(
        "EC712",
        "probe-low-agreement",
        "warning",
        summary=(
            "With the target, the draft's first token rarely matches the target's greedy one "
            "(untrained, or wrong target)."
        ),
        level="target",
    ),
    Rule(
        "EC713",
        "probe-convention-measured",
        "info",
        summary=(
            "The aux-id convention was ambiguous; the probe measured which reading the draft "
            "was trained on (or says the comparison is inconclusive)."
        ),
        level="target",
    ),
    Rule(
        "EC714",
        "saved-states-disagree",
        "error",
        summary=("Hidden states saved by the trainer or engine are not the target boundaries the config selects."),
        level="target",
    ),
    Rule(
        "EC715",
        "saved-states-matched",
        "info",
        summary="Saved hidden states identify the target boundaries the draft was trained on.",
        level="target",
    ),
    Rule(
        "EC716",
        "oracle-mismatch",
        "error",
        summary=(
            "The reference target disagrees with transformers on these tokens: the probe's numbers cannot be trusted."
        ),
        level="target",
    ),
    Rule(
        "EC211",
        "engine-flag-misread",
        "error",
        summary=(
            "An engine release builds the draft with a flag, RoPE or fc width (fc_norm, norm_before_fc, "
            "norm_before_residual, norm_output, rope_scaling, K, fc's in-width) other than the weights need."
        ),
        fixable=True,
        fix=(
            "run `eagle-convert normalize SRC OUT`: it writes the flags where the release reads them; where the "
            "finding says normalize cannot fix it (the release never builds what the weights need: TensorRT-LLM's "
            "AutoDeploy sizes fc from hidden_size and reads no rope_scaling), deploy on a release that builds it; "
            "AutoDeploy reads norm_output only as eagle_config.return_hidden_post_norm: true"
        ),
    ),
    Rule(
        "EC721",
        "engine-fed-untrained-states",
        "error",
        summary=(
            "Run in the engine, the draft was fed target hidden states other than those its "
            "weights were trained on (captured inside the engine and matched against the "
            "reference target's boundaries)."
        ),
        level="engine",
        engines=RUN_ENGINES,
    ),
    Rule(
        "EC722",
        "engine-acceptance-below-probe",
        "warning",
        summary=(
            "The engine's measured mean acceptance length is more than 0.15 below what the "
            "probe predicts for the configured reading on the same run (same prompts, text "
            "and draft length; the probe's own text when the reference forward cannot run the"
            " draft): the engine runs the draft differently from the reference."
        ),
        level="engine",
        engines=tuple(dict.fromkeys(RUN_ENGINES + SERVED_ENGINES)),
    ),
    Rule(
        "EC723",
        "engine-output-changed",
        "warning",
        summary=(
            "Greedy speculative decoding in the engine produced text other than the target "
            "alone on the same prompts: speculation must never change greedy output (a "
            "near-tie flipped by the verification pass's numerics can, in bfloat16; in "
            "float32 it points at the engine or the draft's integration)."
        ),
        level="engine",
        engines=RUN_ENGINES,
    ),
    Rule(
        "EC724",
        "engine-dropped-trained-tensor",
        "error",
        summary=(
            "Loaded by the engine, a trained tensor of the draft went into no parameter of the "
            "draft module the engine built (every file tensor is looked up in the built "
            "parameters, fused projections by row slices): the engine runs the draft without it."
        ),
        level="engine",
        fixable=True,
        fix=(
            "run `eagle-convert normalize SRC OUT --profile ENGINE`: it writes the names and "
            "flags the engine loads, then run the engine level again"
        ),
        engines=RUN_ENGINES,
    ),
    Rule(
        "EC725",
        "engine-built-untrained-flag",
        "error",
        summary=(
            "The draft module the engine built differs from the weights in a trained switch "
            "(fc_norm, input_norm, K of fc): read off the built module, not predicted."
        ),
        level="engine",
        fixable=True,
        fix=(
            "run `eagle-convert normalize SRC OUT --profile ENGINE`: it writes every flag the "
            "weights were trained with explicitly"
        ),
        engines=RUN_ENGINES,
    ),
    Rule(
        "EC726",
        "engine-serves-other-draft",
        "error",
        summary=(
            "The running server (--engine-url) reports a speculative draft other than the one "
            "verified: its acceptance says nothing about this draft."
        ),
        level="engine",
        engines=SERVED_ENGINES,
    ),
    Rule(
        "EC727",
        "engine-foreign-traffic",
        "warning",
        summary=(
            "Other clients' requests moved the running server's counters during the run "
            "(--engine-url): the measured acceptance mixes their drafts with ours and is not "
            "compared with the probe."
        ),
        level="engine",
        engines=SERVED_ENGINES,
    ),
    Rule(
        "EC728",
        "engine-refused-draft",
        "error",
        summary=(
            "The engine refused to start with the draft (its own error, quoted) while the target alone starts with "
            "the same settings: the draft cannot be served as it is."
        ),
        fix=(
            "read the engine's message; the static findings of the same run often predict it and say what to change "
            "(EC412: a tensor the loader has no parameter for; EC111: a target class that cannot capture aux states)"
        ),
        level="engine",
        engines=RUN_ENGINES,
    ),
)

RULES: dict[str, Rule] = {rule.id: rule for rule in _RULES}


NOT_EAGLE3 = "EC001"  # the draft is not EAGLE3: normalize refuses it, so no other finding of it is fixable
NOT_EAGLE3_FIX = "not an EAGLE3 draft (EC001): normalize converts EAGLE3 drafts only; retrain or export it as EAGLE3"
# the ids contradict the provenance record: which hidden states the draft was trained on is unknown until the user
# says, so no finding that depends on them is fixable (normalize refuses the draft without --aux-convention)
RECORD_CONTRADICTED = "EC113"
DEPENDS_ON_READING = frozenset({"EC103", "EC104", "EC109"})
RECORD_CONTRADICTED_FIX = (
    "the aux-layer ids contradict eagle-convert's provenance record (EC113): normalize refuses the draft until "
    "--aux-convention output-of|input-to says which reading of the ids is true; pass it to verify as well"
)


@dataclass(frozen=True)
class Fixes:
    """What ``eagle-convert normalize`` fixes among one report's findings. The rule ids present are collected once
    (:meth:`among`), so asking about every finding of a report costs time linear in the findings (a set rebuilt per
    finding made ``inspect --json`` of 20,000 findings take 15 s)."""

    ids: frozenset[str]

    @classmethod
    def among(cls, findings: Iterable[Finding]) -> Fixes:
        return cls(frozenset(f.rule_id for f in findings))

    def refusal(self, rule_id: str) -> str | None:
        """Why normalize does not fix a finding of ``rule_id`` although the rule is fixable, or None."""
        if NOT_EAGLE3 in self.ids:
            return NOT_EAGLE3_FIX
        if RECORD_CONTRADICTED in self.ids and rule_id in DEPENDS_ON_READING:
            return RECORD_CONTRADICTED_FIX
        return None

    def fixable(self, rule_id: str) -> bool:
        """The rule's own answer, except beside EC001, where normalize refuses the draft and fixes nothing, and for
        the rules that depend on the trained hidden states beside EC113, where the ids contradict the provenance
        record."""
        rule = RULES.get(rule_id)
        return bool(rule and rule.fixable) and self.refusal(rule_id) is None

    def fields(self, rule_id: str) -> dict[str, Any]:
        """The ``fixable`` and ``fix`` fields every finding carries in JSON (unregistered ids: not fixable)."""
        rule = RULES.get(rule_id)
        refusal = self.refusal(rule_id)
        if rule is not None and rule.fixable and refusal is not None:
            return {"fixable": False, "fix": refusal}
        return {"fixable": rule.fixable if rule else False, "fix": rule.fix if rule else ""}


def fixable(rule_id: str, findings: Iterable[Finding] = ()) -> bool:
    """Whether ``eagle-convert normalize`` fixes a finding of ``rule_id`` among ``findings`` (:meth:`Fixes.fixable`;
    for one finding: a loop over a report's findings builds :class:`Fixes` once)."""
    return Fixes.among(findings).fixable(rule_id)


def fix_fields(rule_id: str, findings: Iterable[Finding] = ()) -> dict[str, Any]:
    """The ``fixable`` and ``fix`` fields of one finding of ``rule_id`` among ``findings`` (:meth:`Fixes.fields`)."""
    return Fixes.among(findings).fields(rule_id)


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
    file: str | None = None,
    pointer: str | None = None,
    subject: str | None = None,
    expected: Any = None,
    actual: Any = None,
    engine: str | None = None,
) -> Finding:
    """A finding for a registered rule; its severity defaults to the rule's."""
    rule = RULES[rule_id]
    return Finding(rule.id, severity or rule.severity, message, file, pointer, expected, actual, subject, engine)
