"""Measured rules: what running the draft shows, in the reference forward (EC70x), with the target (EC71x, the
probe) and in a real engine (EC72x)."""

from __future__ import annotations

from eagle_convert import engines
from eagle_convert.rules.rule import Rule

# the engines `verify --level engine` starts in their own environment (measured from inside the engine)
RUN_ENGINES = engines.RUNNERS
# the engines whose running server `verify --engine-url` measures (from its spec-decode counters)
SERVED_ENGINES = engines.ATTACHABLE

# the reference forward and the acceptance probe (EC701-EC716)
FORWARD_AND_PROBE = (
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
)

# the draft in a real engine, or on the user's running server (EC721-EC728)
ENGINE_RUN = (
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
