"""Tensor rules: the headers against the config (EC3xx) and the values themselves (EC6xx, level tensors)."""

from __future__ import annotations

from eagle_convert.rules.rule import Rule

# names, shapes and dtypes against the config (EC301-EC306)
HEADERS = (
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
)

# the values: non-finite, zero, untrained (EC601-EC605)
VALUES = (
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
)
