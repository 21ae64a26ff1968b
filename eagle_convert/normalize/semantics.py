"""What a draft means, resolved for ``normalize``: the :class:`Semantics` every profile writes (attention, K, the
flags, the vocabulary, the hidden states its aux-layer ids select, the provenance), each either resolved by evidence
or refused with the reason and the profile that would take it. Nothing is guessed; no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from eagle_convert.draft.aux_layers import TRAINS_WITH_DEFAULTS, default_hidden_states
from eagle_convert.draft.detect import DraftSpec
from eagle_convert.draft.layouts import split_name
from eagle_convert.draft.model_check import NOT_A_DRAFT
from eagle_convert.errors import NormalizeRefused
from eagle_convert.normalize.profiles import PROFILE_ENGINES, PROFILES, Semantics, profile_releases
from eagle_convert.read.checkpoint import Checkpoint
from eagle_convert.read.config import IDS_KEY, PROVENANCE_KEY, TargetConfig, flatten_source
from eagle_convert.read.hub_store import parse_repo_ref
from eagle_convert.releases import (
    FAMILY_MODEL_TYPE,
    EngineView,
    Release,
    draft_architecture,
    eagle_config_ids_for,
    engine_view,
)
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import RULES, finding
from eagle_convert.version import __version__

# Profiles whose engines run draft layers >= 1 as trained: plain pre-norm decoder layers (vLLM llama_eagle3.py
# LlamaDecoderLayer with layer_idx > 0; speculators' decoder_layer_class); SGLang's use hidden_norm (ENGINES.md E10).
MULTI_LAYER_PROFILES = ("vllm", "speculators")


def resolve_semantics(
    src: Path, ckpt: Checkpoint, spec: DraftSpec, target: TargetConfig | None, family: str | None, profile: str
) -> tuple[Semantics, list[Finding]]:
    """What the draft means, with every ambiguity either resolved by evidence or refused."""
    blocking = [f for f in spec.findings if RULES[f.rule_id].blocks_normalize and f.severity == "error"]
    if blocking and blocking[0].rule_id == NOT_A_DRAFT:  # "SRC is a model, not an EAGLE3 draft: ...", SRC as given
        raise NormalizeRefused(f"{src} is {blocking[0].message}", hint=RULES[NOT_A_DRAFT].fix)
    if blocking:
        raise NormalizeRefused(f"{blocking[0].rule_id}: {blocking[0].message}", path=src)
    if spec.num_draft_layers > 1 and profile not in MULTI_LAYER_PROFILES:
        raise NormalizeRefused(
            f"{spec.num_draft_layers} draft layers: the engines disagree on layers >= 1 (SGLang norms their input "
            "with hidden_norm, vLLM and the speculators trainer with input_layernorm), so a multi-layer draft cannot "
            f"be made {profile}",
            path=src,
            hint="use --profile vllm or speculators: vLLM runs layers >= 1 as the speculators trainer built them",
        )
    if spec.attention not in ("mha", "mla"):
        raise NormalizeRefused("cannot tell MHA from MLA attention", path=src)
    if profile == "speculators" and spec.attention == "mla":
        raise NormalizeRefused(
            "the speculators format has no MLA draft",
            path=src,
            hint="use --profile portable, sglang or vllm for MLA drafts",
        )
    if "fc.bias" in {_local(n) for n in ckpt.tensors}:
        _refuse_unless_all_build(
            profile, spec, lambda v: v.bias_is == "fc", "fc.bias exists and {} build no fc bias to load it into", src
        )

    aux = spec.aux
    findings = [f for f in spec.findings if f.rule_id not in ("EC104", "EC103", "EC010", "EC202", "EC009")]
    if aux.convention == "ambiguous":
        readings = ", ".join(f"{c} selects hs{v}" for c, v in aux.states_by_convention.items())
        raise NormalizeRefused(
            f"aux-layer ids {aux.ids} are ambiguous ({readings}); normalize never guesses",
            path=src,
            hint="pass --aux-convention output-of or --aux-convention input-to (say which the trainer used)",
        )
    hidden = aux.hidden_state_indices
    if aux.convention == "default":
        hidden = None
        n = spec.target.num_hidden_layers
        if spec.producer in TRAINS_WITH_DEFAULTS and n:
            hidden = default_hidden_states(n)  # written out, so no engine default can differ
        else:
            why = (
                f"{spec.producer} is not known to train with the default capture"
                if n
                else "the target's N is unknown (pass --target)"
            )
            findings.append(
                finding(
                    "EC102",
                    f"no aux-layer ids written: {why}; the default capture hs[2], hs[N//2], hs[N-3] stays in force",
                    subject=IDS_KEY,
                )
            )
    qk_norm = any(_local(n).endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight")) for n in ckpt.tensors)
    if qk_norm and draft_architecture(spec.attention, qk_norm) is None:
        _refuse_unless_all_build(
            profile,
            spec,
            lambda v: v.qk_norm_class is not None,
            "the draft has q/k norm weights and {} have no EAGLE3 class with q/k norms (they would drop them)",
            src,
        )
    if len(set(aux.ids or [])) != len(aux.ids or []):
        raise NormalizeRefused(f"aux-layer ids {aux.ids} repeat a layer; the engines capture each layer once", path=src)
    sglang_ids, sglang_convention = None, None
    if hidden is not None and profile in ("portable", "sglang"):
        if family is None:
            raise NormalizeRefused(
                f"{_names(r for r in profile_releases(profile) if r.engine == 'sglang')} read eagle_config ids per "
                "target family, and the family is unknown",
                path=src,
                hint="pass --target PATH (the target model) or --target-family llama|qwen|deepseek|gpt-oss",
            )
        found = eagle_config_ids_for(
            "sglang", hidden, target.text_model_type if target else FAMILY_MODEL_TYPE.get(family), None
        )
        if found is None:
            raise NormalizeRefused(
                f"{_names(r for r in profile_releases(profile) if r.engine == 'sglang')} cannot select hs{hidden} "
                f"on {family} targets with eagle_config ids",
                path=src,
                hint=_profiles_hint(lambda profile: "sglang" not in PROFILE_ENGINES[profile]),
            )
        sglang_ids, sglang_convention = found
    flags = spec.flags
    d = spec.dims
    hidden_size = d.hidden_size or 0
    lm_head = next((t for n, t in ckpt.tensors.items() if _local(n) == "lm_head.weight"), None)
    draft_vocab = d.draft_vocab_size if d.draft_vocab_size is not None else (lm_head.shape[0] if lm_head else None)
    stash = flatten_source(ckpt.config or {})[1]
    prior = (ckpt.config or {}).get(PROVENANCE_KEY)
    origin = {
        "source_producer": spec.producer,
        "source_layout": spec.layer_prefix,
        "source_convention": aux.convention,
        "source_ids": {"top-level": aux.top_level_ids, "eagle_config": aux.eagle_config_ids},
    }
    if isinstance(prior, dict):  # normalizing a normalized draft: the original source stays on record
        origin.update({k: prior[k] for k in origin if k in prior})
    provenance: dict[str, Any] = {
        "version": __version__,
        "profile": profile,
        # what `verify` checks the output against when no --engine is given (releases.recorded_releases)
        "engines": list(PROFILE_ENGINES[profile]),
        **origin,
        "hidden_state_indices": hidden,
        "target_family": family,
        "aux_conventions": {"top-level": "input-to", "eagle_config": sglang_convention},
    }
    if stash:
        provenance["speculators"] = stash
    if target is not None:
        hub_id = _hub_id(target.name_or_path)
        # a Hub id or nothing: never the local path the target was read from
        provenance["verifier"] = {"name_or_path": hub_id, "architectures": list(target.architectures)}
    sem = Semantics(
        attention=spec.attention,
        num_aux_hidden_states=spec.num_aux_hidden_states,
        target_hidden_size=spec.target_hidden_size or hidden_size,
        draft_vocab_size=draft_vocab,
        fc_norm=flags.fc_norm.value,
        norm_output=flags.norm_output.value,
        norm_before_fc=flags.norm_before_fc.value,
        norm_before_residual=flags.norm_before_residual.value,
        fc_bias="fc.bias" in {_local(n) for n in ckpt.tensors},
        hidden_states=hidden,
        sglang_ids=sglang_ids,
        provenance=provenance,
        speculators_stash=stash,
        qk_norm=qk_norm,
    )
    return sem, findings


def _hub_id(name: str | None) -> str | None:
    """``owner/name`` when ``name`` is a Hub id; None for a local path or nothing."""
    if not name or name.startswith((".", "/", "~")):
        return None
    ref = parse_repo_ref(name)
    return ref[0] if ref else None


def _local(name: str) -> str:
    """A source tensor's name without its wrapper and layer prefixes."""
    return split_name(name).local


def _names(releases: Iterable[Release]) -> str:
    return ", ".join(r.name for r in releases)


def _profiles_hint(fits: Callable[[str], bool]) -> str | None:
    fitting = [p for p in PROFILES if fits(p)]
    return f"use --profile {' or '.join(fitting)}" if fitting else None


def _refuse_unless_all_build(
    profile: str, spec: DraftSpec, builds: Callable[[EngineView], bool], message: str, src: Path
) -> None:
    """Refuse when a release the profile writes for does not build what the weights need (asked of its view)."""

    def missing(name: str) -> list[Release]:
        views = [(r, engine_view(r, spec.config.raw, target_model_type=None, target_num_layers=None))
                 for r in profile_releases(name)]  # fmt: skip
        return [r for r, view in views if not builds(view)]

    lacking = missing(profile)
    if lacking:
        raise NormalizeRefused(
            message.format(_names(lacking)), path=src, hint=_profiles_hint(lambda name: not missing(name))
        )
