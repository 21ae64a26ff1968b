"""The draft's architecture flags: ``fc_norm`` (EAGLE3.1, legacy ``use_aux_norm``), ``norm_output``,
``norm_before_fc`` and ``norm_before_residual``, each read from the config, else from the weights, else its default,
with the source it came from; a config that contradicts the weights or itself is a finding. Only headers are used
(no torch).
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle_convert.draft.layouts import FC_NORM_RE, LEGACY_FC_NORM_NAMES
from eagle_convert.draft.producers import Facts
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import finding


@dataclass(frozen=True)
class Flag:
    value: bool
    source: str  # the config key it came from, "weights", or "default ..."


@dataclass(frozen=True)
class Flags:
    fc_norm: Flag
    norm_output: Flag
    norm_before_fc: Flag
    norm_before_residual: Flag


def read_flags(f: Facts, producer: str, out: list[Finding]) -> Flags:
    """The four flags, each from its config key (or its legacy alias; for norm_before_fc the nested value wins),
    else from the weights, else its default (a speculators config: the speculators trainer's norm_before_residual,
    true). A config that contradicts the weights or itself, and a default nothing records, append a finding."""
    cfg = f.cfg
    # fc_norm (EAGLE3.1), legacy alias use_aux_norm / aux_norm_*.
    fc_norm_weights = sorted(n.name for n in f.names if n.layer is None and FC_NORM_RE.fullmatch(n.local))
    legacy_weights = sorted(n.name for n in f.names if n.layer is None and n.local in LEGACY_FC_NORM_NAMES)
    has_weights = bool(f.tensors)
    if cfg.fc_norm is not None:
        fc_norm = Flag(cfg.fc_norm, "fc_norm")
        if cfg.use_aux_norm is not None and cfg.use_aux_norm != cfg.fc_norm:
            out.append(
                finding(
                    "EC201",
                    f"fc_norm is {cfg.fc_norm} but legacy use_aux_norm is {cfg.use_aux_norm}",
                    subject="use_aux_norm",
                )
            )
    elif cfg.use_aux_norm is not None:
        fc_norm = Flag(cfg.use_aux_norm, "use_aux_norm (legacy)")
    elif fc_norm_weights or legacy_weights:
        fc_norm = Flag(True, "weights")
    else:
        fc_norm = Flag(False, "default")
    norm_weights = fc_norm_weights or legacy_weights
    if has_weights and fc_norm.value and not norm_weights:
        out.append(
            finding(
                "EC201",
                f"{fc_norm.source} is on but there are no fc_norm weights: the norms it asks for were never trained",
                subject="fc_norm",
            )
        )
    if has_weights and not fc_norm.value and norm_weights:
        out.append(
            finding(
                "EC201",
                f"fc_norm weights ({', '.join(norm_weights)}) but the flag is off: the config does not ask "
                "for the norms the weights were trained with",
                subject="fc_norm",
            )
        )

    # norm_before_fc: the nested value wins when both are set (each release's own reading is in releases/).
    if cfg.eagle_config_norm_before_fc is not None:
        nbf = Flag(cfg.eagle_config_norm_before_fc, "eagle_config.norm_before_fc")
    elif cfg.norm_before_fc is not None:
        nbf = Flag(cfg.norm_before_fc, "norm_before_fc")
    elif f.has_local("input_norm.weight"):
        nbf = Flag(True, "weights")
    else:
        nbf = Flag(False, "default")
    if has_weights and nbf.value != f.has_local("input_norm.weight"):
        state = "on but input_norm.weight is missing" if nbf.value else "off but input_norm.weight is present"
        out.append(finding("EC203", f"norm_before_fc is {state}", subject="input_norm.weight"))
    if fc_norm.value and nbf.value:
        out.append(
            finding(
                "EC205",
                "fc_norm and norm_before_fc are both on: the weights ask for two norms on the fc input, a "
                "combination the speculators trainer refuses to build",
            )
        )

    if cfg.norm_output is not None:
        norm_output = Flag(cfg.norm_output, "norm_output")
        if cfg.norm_output and producer == "specforge":
            out.append(
                finding(
                    "EC206",
                    "norm_output is true in a SpecForge config: before SpecForge PR #879 it "
                    "meant 'norm before lm_head' and the recurrence was pre-norm (EAGLE3 + fc_norm); "
                    "confirm the trainer version",
                    subject="norm_output",
                )
            )
    else:
        norm_output = Flag(False, "default")

    speculators_format = cfg.has("speculators_model_type")
    if cfg.norm_before_residual is not None:
        nbr = Flag(cfg.norm_before_residual, "norm_before_residual")
    elif speculators_format:
        # the producer's behaviour is the truth: the speculators trainer defaults norm_before_residual to true
        nbr = Flag(True, "default (speculators trainer: true)")
        out.append(
            finding(
                "EC208",
                "norm_before_residual is absent: taken as true, the speculators trainer's default, which "
                "nothing in the config records",
                subject="norm_before_residual",
            )
        )
    else:
        nbr = Flag(False, "default")
    return Flags(fc_norm, norm_output, nbf, nbr)
