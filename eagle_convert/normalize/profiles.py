"""Output profiles of `normalize`: how the resolved semantics of a draft are written as a config, and the engines
(and so the modelled releases) each profile is written for.

A registry maps each profile name to one builder; every builder starts from the flattened source config (unknown
keys preserved), writes the semantics explicitly and returns the config plus the reason for each key it set or
removed, so the report can explain every change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eagle_convert import engines
from eagle_convert.draft.aux_layers import ids_for
from eagle_convert.read.config import IDS_KEY, PROVENANCE_KEY, SPECULATORS_LAYER_KEY
from eagle_convert.releases import RELEASES, Release, draft_architecture, vllm_qk_norm_architecture

# Keys the speculators format keeps at the top level; everything else lives in transformer_layer_config.
SPECULATORS_TOP_KEYS = frozenset(
    {
        "architectures",
        "speculators_model_type",
        "speculators_version",
        "speculators_config",
        SPECULATORS_LAYER_KEY,
        "draft_vocab_size",
        "norm_before_residual",
        "target_hidden_size",
        IDS_KEY,
        "norm_before_fc",
        "fc_norm",
        "norm_output",
        "embed_requires_grad",
        "torch_dtype",
        "dtype",
    }
)
# Keys that only make sense in the EAGLE3-config formats (dropped from transformer_layer_config).
_EAGLE_ONLY_KEYS = frozenset(
    {"eagle_config", PROVENANCE_KEY, "num_aux_hidden_states", "bias", "use_aux_norm", "tie_word_embeddings"}
)


@dataclass(frozen=True)
class Semantics:
    """Everything normalize resolved about the draft; the same for every profile."""

    attention: str
    num_aux_hidden_states: int
    target_hidden_size: int
    draft_vocab_size: int | None
    fc_norm: bool
    norm_output: bool
    norm_before_fc: bool
    norm_before_residual: bool
    fc_bias: bool
    hidden_states: list[int] | None  # None: no ids, the engines' defaults apply
    sglang_ids: list[int] | None
    provenance: dict[str, Any]
    speculators_stash: dict[str, Any] = field(default_factory=dict)
    qk_norm: bool = False  # the draft attention has q_norm/k_norm weights


Reasons = dict[str, str]


def _eagle_flat(cfg: dict[str, Any], sem: Semantics, reasons: Reasons, *, top_ids: bool, nested_ids: bool) -> None:
    """The explicit EAGLE3 config shared by the portable, sglang and vllm profiles (edits ``cfg`` in place)."""

    def put(key: str, value: Any, why: str) -> None:
        cfg[key] = value
        reasons[key] = why

    arch, model_type, why = draft_architecture(sem.attention, sem.qk_norm) or vllm_qk_norm_architecture()
    put("architectures", [arch], why)
    put("model_type", model_type, "the config class of the draft layer (" + why + ")")
    put(
        "draft_vocab_size",
        sem.draft_vocab_size,
        "explicit: a release that reads it as an attribute fails when it is missing (releases/)",
    )
    put("target_hidden_size", sem.target_hidden_size, "explicit integer: null crashes both engines")
    put("num_aux_hidden_states", sem.num_aux_hidden_states, "explicit fc width in aux states (K)")
    put("tie_word_embeddings", False, "the draft head must never be re-tied to the V-row embedding")
    put(
        "bias",
        sem.fc_bias,
        "fc.bias exists (only fc-bias releases load it)"
        if sem.fc_bias
        else "no fc.bias; some releases read bias as an o_proj bias",
    )
    for flag in ("fc_norm", "norm_output", "norm_before_fc", "norm_before_residual"):
        put(flag, getattr(sem, flag), "explicit boolean for every flag")
    if cfg.pop("use_aux_norm", None) is not None:
        reasons["use_aux_norm"] = "legacy alias, written as fc_norm"
    eagle_config = dict(cfg.get("eagle_config") or {})
    if eagle_config.pop("norm_before_fc", None) is not None:
        reasons["eagle_config.norm_before_fc"] = "written at the top level, where both engines read it"
    if sem.hidden_states is not None and top_ids:
        put(
            IDS_KEY,
            ids_for(sem.hidden_states, "input-to"),
            "the input-to convention of top-level ids: id j selects hs[j]",
        )
    elif cfg.pop(IDS_KEY, None) is not None:
        reasons[IDS_KEY] = "this profile's engine does not read top-level ids"
    if sem.hidden_states is not None and nested_ids and sem.sglang_ids is not None:
        eagle_config[IDS_KEY] = list(sem.sglang_ids)
        reasons[f"eagle_config.{IDS_KEY}"] = "the eagle_config reading of the target family (releases/ capture rules)"
    elif eagle_config.pop(IDS_KEY, None) is not None:
        reasons[f"eagle_config.{IDS_KEY}"] = "this profile's engine does not read eagle_config ids"
    if sem.hidden_states is not None or "use_aux_hidden_state" in eagle_config:
        eagle_config["use_aux_hidden_state"] = True
        reasons["eagle_config.use_aux_hidden_state"] = "the draft consumes aux hidden states"
    if eagle_config:
        put("eagle_config", eagle_config, "aux-layer settings")
    else:
        cfg.pop("eagle_config", None)
    _rope_keys(cfg, reasons)
    put(PROVENANCE_KEY, sem.provenance, "provenance: source producer, convention, hidden states, tool version")


# why normalize writes the rotary settings under both keys (releases/rope.py)
_ROPE_WHY = (
    "rotary settings under both keys: transformers 5 reads either, transformers 4 only rope_scaling and a top-level "
    "rope_theta (a YaRN draft saved by transformers 5 with rope_parameters alone loses its scaling there)"
)


def _rope_keys(cfg: dict[str, Any], reasons: Reasons) -> None:
    """Write the rotary settings a config gives under one key under the other too (edits ``cfg`` in place):
    ``rope_parameters`` alone (transformers 5's save_pretrained) gets ``rope_scaling`` and a top-level ``rope_theta``;
    ``rope_scaling`` alone gets ``rope_parameters``. Keys that are both set are kept as written (EC018 reports them
    when they disagree); a ``rope_parameters`` nested by layer type has no transformers 4 form and is kept."""
    scaling, params = cfg.get("rope_scaling"), cfg.get("rope_parameters")
    if isinstance(params, dict) and params and scaling is None:
        if any(isinstance(v, dict) for v in params.values()):
            return
        if params.get("rope_theta") is not None and cfg.get("rope_theta") is None:
            cfg["rope_theta"] = params["rope_theta"]
            reasons["rope_theta"] = _ROPE_WHY
        if params.get("rope_type", params.get("type", "default")) != "default":
            cfg["rope_scaling"] = {k: v for k, v in params.items() if k != "rope_theta"}
            reasons["rope_scaling"] = _ROPE_WHY
    elif isinstance(scaling, dict) and scaling and params is None:
        written = {("rope_type" if k == "type" else k): v for k, v in scaling.items()}
        if cfg.get("rope_theta") is not None:
            written.setdefault("rope_theta", cfg["rope_theta"])
        cfg["rope_parameters"] = written
        reasons["rope_parameters"] = _ROPE_WHY


def _portable(cfg: dict[str, Any], sem: Semantics, reasons: Reasons) -> dict[str, Any]:
    _eagle_flat(cfg, sem, reasons, top_ids=True, nested_ids=True)
    return cfg


def _sglang(cfg: dict[str, Any], sem: Semantics, reasons: Reasons) -> dict[str, Any]:
    _eagle_flat(cfg, sem, reasons, top_ids=False, nested_ids=True)
    return cfg


def _vllm(cfg: dict[str, Any], sem: Semantics, reasons: Reasons) -> dict[str, Any]:
    _eagle_flat(cfg, sem, reasons, top_ids=True, nested_ids=False)
    return cfg


def _speculators(cfg: dict[str, Any], sem: Semantics, reasons: Reasons) -> dict[str, Any]:
    stash = sem.speculators_stash
    _rope_keys(cfg, reasons)  # the layer's config (transformer_layer_config) takes them
    layer = {k: v for k, v in cfg.items() if k not in SPECULATORS_TOP_KEYS and k not in _EAGLE_ONLY_KEYS}
    # a speculators eagle3 config is routed by its layer model_type: qwen3 is the class with q/k norms (releases/)
    layer["architectures"] = stash.get("layer_architectures") or [
        "Qwen3ForCausalLM" if sem.qk_norm else "LlamaForCausalLM"
    ]
    layer["model_type"] = "qwen3" if sem.qk_norm else "llama"
    out: dict[str, Any] = {
        "architectures": stash.get("architectures") or ["Eagle3Speculator"],
        "speculators_model_type": stash.get("speculators_model_type", "eagle3"),
        "speculators_version": stash.get("speculators_version", "0.3.0"),
        "speculators_config": stash.get("speculators_config")
        or {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3, "verifier_accept_k": 1}],
            "default_proposal_method": "greedy",
            "verifier": sem.provenance.get("verifier", {"name_or_path": None, "architectures": []}),
        },
        SPECULATORS_LAYER_KEY: layer,
        "draft_vocab_size": sem.draft_vocab_size,
        "target_hidden_size": sem.target_hidden_size,
        "norm_before_residual": sem.norm_before_residual,
        "norm_before_fc": sem.norm_before_fc,
        "fc_norm": sem.fc_norm,
        "norm_output": sem.norm_output,
    }
    if sem.hidden_states is not None:
        out[IDS_KEY] = ids_for(sem.hidden_states, "input-to")
    for key in ("torch_dtype", "dtype"):
        if key in cfg:
            out[key] = cfg[key]
    reasons.update({key: "speculators format" for key in out})
    reasons["norm_before_residual"] = "explicit: the speculators trainer's default (true), written out"
    reasons[IDS_KEY] = "speculators ids are input-to"
    return out


PROFILES: dict[str, Callable[[dict[str, Any], Semantics, Reasons], dict[str, Any]]] = {
    "portable": _portable,
    "sglang": _sglang,
    "vllm": _vllm,
    "speculators": _speculators,
}
# Output tensor layout of each profile (decoder-layer prefix); the speculators format uses layers.{i}.
PROFILE_LAYOUT = {"portable": "midlayer.", "sglang": "midlayer.", "vllm": "midlayer.", "speculators": "layers.0."}

# The engines each profile is written for (the output must select the trained hidden states in each): portable for
# the engines of the default selection (vLLM and SGLang: it writes the ids in both readings), a profile named for an
# engine for that engine, speculators for vLLM (the one engine that reads the speculators format).
PROFILE_ENGINES: dict[str, tuple[str, ...]] = {
    "portable": engines.DEFAULT_NAMES,
    **{profile: (profile,) for profile in PROFILES if profile in engines.NAMES},
    "speculators": ("vllm",),
}


def profile_releases(profile: str) -> list[Release]:
    """Every modelled release of the engines ``profile`` writes for."""
    return [r for r in RELEASES.values() if r.engine in PROFILE_ENGINES[profile]]
