"""EC2xx, flags: the EAGLE3.1 norms (fc_norm, norm_before_fc, norm_output), bias, and the flags a release builds."""

from __future__ import annotations

from eagle_convert.rules.rule import REWRITES, Rule

# the EAGLE3.1 norm flags against the weights (EC201-EC208)
EAGLE3_1 = (
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
        fix=REWRITES,
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
        fix=REWRITES,
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
        fix=REWRITES,
    ),
)

# bias, and input_norm on an MLA draft (EC209-EC210)
BIAS_AND_MLA = (
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
)

# a release that builds other flags than the weights need (EC211)
ENGINE_MISREAD = (
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
)
