"""EC0xx, identity and files: what the checkpoint is (EAGLE3, dense, one layer) and how its weights are stored."""

from __future__ import annotations

from eagle_convert.rules.rule import REWRITES, Rule

# the draft and its files (EC001-EC014)
DRAFT_AND_FILES = (
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
        fix=REWRITES,
    ),
    Rule(
        "EC010",
        "wrapped-state-dict",
        "warning",
        summary=("Tensor names carry a wrapper prefix (model., draft_model., eagle_module.) the engines do not strip."),
        fixable=True,
        fix=REWRITES,
    ),
    Rule(
        "EC014",
        "shard-set",
        "warning",
        summary=("Weight files the index does not name, several indexes, or shards read without an index."),
    ),
)
