"""Config rules: the draft class and keys as the loaders read them (EC011-EC021), and the typed fields (EC5xx)."""

from __future__ import annotations

from eagle_convert.rules.rule import REWRITES, Rule

# EC011/EC012: what normalize writes as architectures (normalize/profiles.py, releases.draft_architecture)
_ARCHITECTURE = (
    "run `eagle-convert normalize SRC OUT`: it writes the draft class every modelled release loads "
    "(LlamaForCausalLMEagle3, or Eagle3DeepseekV2ForCausalLM for MLA; a draft with q/k norms gets the one class "
    "that has them); --profile speculators keeps Eagle3Speculator, which not every release loads"
)

# the draft class, model_type and keys a loader reads the config by; a model passed as the draft (EC011-EC021)
CLASS_AND_KEYS = (
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
        fix=REWRITES,
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
)

# the config's fields against the weights and the target (EC501-EC508)
FIELDS = (
    Rule(
        "EC501",
        "target-hidden-size",
        "error",
        summary=("target_hidden_size is null (crashes both engines), missing while fc is wider, or wrong."),
        fixable=True,
        fix=REWRITES,
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
)
