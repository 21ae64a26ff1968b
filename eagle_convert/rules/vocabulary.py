"""EC4xx, vocabulary: the draft head, draft_vocab_size and the d2t/t2d mapping into the target vocabulary."""

from __future__ import annotations

from eagle_convert.rules.rule import REWRITES, Rule

# the head, the vocabulary sizes, d2t and t2d (EC401-EC414)
VOCABULARY = (
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
        fix=REWRITES,
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
        fix=REWRITES,
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
)
