"""EC1xx, aux layers: which target hidden states the aux-layer ids select, how each engine reads them, and whether
the deployment captures them."""

from __future__ import annotations

from eagle_convert import engines
from eagle_convert.rules.rule import REWRITES, Rule

# the engines that read the aux-layer ids from the draft config (TokenSpeed unless its server argument is given; not
# TensorRT-LLM: a deployment setting picks them)
READS_DRAFT_IDS = engines.ID_READING

# the ids and their convention (EC101-EC108)
IDS = (
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
        fix=REWRITES,
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
)

# where the ids are written, and what a release or deployment captures (EC109-EC116)
CAPTURE = (
    Rule(
        "EC109",
        "aux-ids-wrong-location",
        "warning",
        summary=("Aux-layer ids only at the top level: a release that reads eagle_config only falls back to defaults."),
        fixable=True,
        fix=REWRITES,
        engines=READS_DRAFT_IDS,
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
)
