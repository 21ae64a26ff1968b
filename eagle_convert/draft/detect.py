"""Format detection: from config, tensor names and shapes to a typed :class:`DraftSpec`.

Every inference carries its evidence and a confidence; conflicts between the config and the weights become
findings instead of being resolved silently. Only headers are used (no torch).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from eagle_convert.draft.aux_layers import (
    CONVENTIONS,
    TRAINS_WITH_DEFAULTS,
    AuxLayers,
    ConventionInputs,
    decide_convention,
    record_conflict,
    to_hidden_states,
)
from eagle_convert.draft.config_shapes import config_shape_findings, declared_k, declared_states, non_stock_injection
from eagle_convert.draft.flags import Flags, read_flags
from eagle_convert.draft.layouts import MLA_ONLY, MOE_RE, PREFUSED_NAMES, split_name
from eagle_convert.draft.model_check import not_a_draft
from eagle_convert.draft.producers import Facts, recognise
from eagle_convert.read.checkpoint import Checkpoint
from eagle_convert.read.config import (
    FAMILIES,
    IDS_KEY,
    PROVENANCE_KEY,
    Dims,
    DraftConfig,
    TargetConfig,
    default_hidden_states,
    family_of,
    family_of_architecture,
)
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import finding


@dataclass(frozen=True)
class Vocab:
    vocab_size: int | None
    draft_vocab_size: int | None
    draft_vocab_size_key: str
    has_d2t: bool
    has_t2d: bool
    has_lm_head: bool
    has_embed_tokens: bool


@dataclass(frozen=True)
class TargetInfo:
    family: str | None
    family_source: str
    num_hidden_layers: int | None
    hidden_size: int | None
    source: str | None
    model_type: str | None = None  # the target's (text) model_type when known exactly
    architecture: str | None = None  # the target config's architectures[0]: the class the engines build
    vocab_size: int | None = None  # the target's vocab_size (what vLLM compares draft_vocab_size with)


@dataclass(frozen=True)
class DraftSpec:
    producer: str
    producer_confidence: str
    producer_evidence: list[str]
    layer_prefix: str | None
    num_draft_layers: int
    attention: str  # "mha", "mla" or "unknown"
    attention_evidence: str
    eagle_version: str  # "eagle3", "eagle3.1" or "eagle1" (EAGLE-1/2, refused)
    moe: bool
    flags: Flags
    num_aux_hidden_states: int
    num_aux_source: str
    target_hidden_size: int | None
    aux: AuxLayers
    vocab: Vocab
    dims: Dims
    target: TargetInfo
    findings: list[Finding]
    config: DraftConfig


_MLA_ARCHS = frozenset(
    {
        "Eagle3DeepseekV2ForCausalLM",
        "Eagle3DeepseekV3ForCausalLM",  # vLLM's alias of the MLA class (registry.py:713)
        "DeepseekV3ForCausalLMEagle3",
        "DeepSeekForCausalLMEagle3",
    }
)
_GATED_ARCHS = frozenset({"LlamaForCausalLMEagle3Gated"})


def detect(ckpt: Checkpoint, target: TargetConfig | None = None, aux_convention: str | None = None) -> DraftSpec:
    cfg = DraftConfig.from_dict(ckpt.config or {}, ckpt.config_path or ckpt.path)
    names = tuple(split_name(n) for n in ckpt.tensors)
    metadata = {k: v for shard in ckpt.shards for k, v in shard.metadata.items()}
    facts = Facts(cfg, names, ckpt.tensors, metadata, bool(ckpt.pickle_files))
    model = not_a_draft(cfg, names, ckpt.config_path, target)  # then the one finding: the rest would be noise
    out: list[Finding] = []

    call = recognise(facts)
    if call.producer == "unknown":
        out.append(finding("EC005", "no producer layout matched the config or tensor names"))
    if call.producer == "eagle1":
        out.append(finding("EC001", "EAGLE-1/2 draft: " + "; ".join(call.evidence[:2])))

    layer_prefix, num_layers = _layers(facts, out)
    attention, attention_evidence = _attention(facts, out)
    out += config_shape_findings(cfg, attention, target)
    moe = _moe(facts)
    if moe:
        out.append(finding("EC002", "mixture-of-experts draft layer: " + moe))
    # wrapper prefixes (EC010) and legacy EAGLE3.1 names (EC202) are facts whose cost depends on the release:
    # the gate reports them with each selected release's reading (gate/findings.py naming_findings)
    for n in names:
        if not n.known:
            out.append(finding("EC008", f"tensor {n.name} matches no known layout", subject=n.name))
        elif n.local in PREFUSED_NAMES:
            out.append(finding("EC009", f"pre-fused tensor {n.name}: normalize splits it", subject=n.name))

    flags = read_flags(facts, call.producer, out)
    version = (
        "eagle1"
        if call.producer == "eagle1"
        else ("eagle3.1" if flags.fc_norm.value or flags.norm_output.value else "eagle3")
    )
    if version == "eagle3.1" and flags.fc_norm.value != flags.norm_output.value:
        on = "fc_norm" if flags.fc_norm.value else "norm_output"
        out.append(finding("EC207", f"only {on} is on; EAGLE3.1 drafts set both fc_norm and norm_output"))

    tinfo = _target_info(cfg, target)
    ths, k, k_source = _aux_count(facts, tinfo, out)
    aux_out: list[Finding] = []  # an EAGLE-1/2 draft reads no aux hidden states: no aux-id findings for it
    aux = _aux_layers(cfg, call.producer, call.confidence, tinfo, aux_convention, aux_out)
    out += aux_out if call.producer != "eagle1" else []
    if aux.ids and k_source != "default" and len(set(aux.ids)) != k and not non_stock_injection(cfg):
        out.append(
            finding(
                "EC107",
                f"{len(set(aux.ids))} aux-layer ids but K={k} ({k_source})",
                subject=IDS_KEY,
                expected=k,
                actual=len(set(aux.ids)),
            )
        )

    vocab = Vocab(
        vocab_size=cfg.dims.vocab_size,
        draft_vocab_size=cfg.dims.draft_vocab_size,
        draft_vocab_size_key=cfg.dims.draft_vocab_size_key,
        has_d2t=facts.has_local("d2t"),
        has_t2d=facts.has_local("t2d"),
        has_lm_head=facts.has_local("lm_head.weight"),
        has_embed_tokens=facts.has_local("embed_tokens.weight"),
    )
    return DraftSpec(
        producer=call.producer,
        producer_confidence=call.confidence,
        producer_evidence=call.evidence,
        layer_prefix=layer_prefix,
        num_draft_layers=num_layers,
        attention=attention,
        attention_evidence=attention_evidence,
        eagle_version=version,
        moe=bool(moe),
        flags=flags,
        num_aux_hidden_states=k,
        num_aux_source=k_source,
        target_hidden_size=ths,
        aux=aux,
        vocab=vocab,
        dims=cfg.dims,
        target=tinfo,
        findings=[model] if model is not None else out,
        config=cfg,
    )


def with_measured_convention(spec: DraftSpec, convention: str, evidence: str) -> DraftSpec:
    """``spec`` (detected with no declared convention) as it reads once ``convention`` is measured: the aux-layer
    reading and its findings derived again from the config detection parsed, nothing re-opened or re-detected.

    ``normalize --aux-convention auto`` declares no convention until the probe has measured one, and the probe needs
    the detected draft to run; this is the one step that measurement adds to the one detection."""
    args = (spec.config, spec.producer, spec.producer_confidence, spec.target)
    before: list[Finding] = []
    _aux_layers(*args, None, before)
    after: list[Finding] = []
    aux = _aux_layers(*args, convention, after)
    aux = replace(aux, confidence="high", evidence=[evidence, *aux.evidence[1:]])  # measured, not set by a flag
    kept = [f for f in spec.findings if f not in before]
    return replace(spec, aux=aux, findings=kept + (after if spec.producer != "eagle1" else []))


def _layers(f: Facts, out: list[Finding]) -> tuple[str | None, int]:
    layer_names = [n for n in f.names if n.layer is not None]
    declared = f.cfg.dims.num_hidden_layers
    if not layer_names:
        if declared and declared > 1:
            out.append(finding("EC006", f"num_hidden_layers is {declared}: a {declared}-layer draft", actual=declared))
        return None, declared or 0  # 0: unknown (no layer tensors, no layer count)
    indices = sorted({n.layer for n in layer_names if n.layer is not None})
    if declared and declared != len(indices):
        out.append(
            finding(
                "EC007",
                f"num_hidden_layers is {declared} but the weights hold {len(indices)} decoder layer(s) "
                f"(indices {indices}): an engine builds {declared} layer(s) and "
                + (
                    "leaves those without weights random"
                    if declared > len(indices)
                    else "has no parameter for the others' weights"
                ),
                subject="num_hidden_layers",
                expected=len(indices),
                actual=declared,
            )
        )
    prefixes = Counter(n.outer + n.layer_prefix for n in layer_names if n.layer == indices[0])
    prefix = prefixes.most_common(1)[0][0]
    if len(prefixes) > 1:
        out.append(
            finding(
                "EC007",
                f"layer {indices[0]} is stored under several prefixes {sorted(prefixes)}: "
                "an engine loads one and leaves the other's weights random",
                actual=sorted(prefixes),
            )
        )
    if len(indices) > 1:
        out.append(
            finding(
                "EC006", f"{len(indices)} draft layers ({prefix.split('.')[0]} indices {indices})", actual=len(indices)
            )
        )
    return prefix, len(indices)


def _attention(f: Facts, out: list[Finding]) -> tuple[str, str]:
    cfg = f.cfg
    by_config = None
    if cfg.dims.kv_lora_rank is not None or f.archs & _MLA_ARCHS:
        by_config = "mla"
    elif cfg.dims.num_attention_heads is not None:
        by_config = "mha"
    locals_ = {n.local for n in f.names if n.layer is not None}
    by_weights = None
    if locals_ & (MLA_ONLY | {"self_attn.fused_qkv_a_proj_with_mqa.weight"}):
        by_weights = "mla"
    elif locals_ & {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.qkv_proj.weight"}:
        by_weights = "mha"
    if by_weights and by_config and by_weights != by_config:
        out.append(
            finding(
                "EC007",
                f"config describes {by_config.upper()} attention but the weights are {by_weights.upper()}",
                subject="self_attn",
                expected=by_config,
                actual=by_weights,
            )
        )
    if by_weights:
        return by_weights, "attention projection tensor names"
    if by_config == "mla":
        return "mla", "config has kv_lora_rank or an MLA architecture"
    if by_config == "mha":
        return "mha", "config has attention heads and no MLA keys"
    return "unknown", "no attention keys or tensors"


def _moe(f: Facts) -> str:
    """Why the draft layer is mixture-of-experts, or '' when it is dense."""
    if any(n.layer is not None and MOE_RE.match(n.local) for n in f.names):
        return "expert tensors in the draft layer"
    if f.archs & _GATED_ARCHS:
        # TorchSpec gated_eagle3.py: a shared MLP scaled by a sigmoid shared_expert_gate plus depth-0 and depth-N
        # specialist MLPs in the one layer, where the engines' EAGLE3 classes build one dense SwiGLU
        return "architecture LlamaForCausalLMEagle3Gated (a shared MLP with a sigmoid gate plus depth-0/depth-N MLPs)"
    raw = f.cfg.raw
    layers = f.cfg.dims.num_hidden_layers or 1
    experts = raw.get("num_experts") or raw.get("n_routed_experts") or raw.get("num_local_experts")
    if not isinstance(experts, int) or experts <= 0:
        return ""
    dense_first = raw.get("first_k_dense_replace")
    if isinstance(dense_first, int) and dense_first >= layers:
        return ""  # every draft layer is in the dense prefix
    mlp_only = raw.get("mlp_only_layers")
    if isinstance(mlp_only, list) and all(i in mlp_only for i in range(layers)):
        return ""
    return f"config routes the draft layer to {experts} experts"


def _target_info(cfg: DraftConfig, target: TargetConfig | None) -> TargetInfo:
    if target is not None:
        family_source = f"target config model_type {target.text_model_type!r}"
        return TargetInfo(
            target.family,
            family_source,
            target.num_hidden_layers,
            target.hidden_size,
            target.source,
            target.text_model_type or target.model_type,
            target.architectures[0] if target.architectures else None,
            target.vocab_size,
        )
    hints: list[tuple[str, Any]] = [("draft config target_model_type", cfg.raw.get("target_model_type"))]
    verifier = cfg.raw.get("speculators_config", {})
    if isinstance(verifier, dict) and isinstance(verifier.get("verifier"), dict):
        archs = verifier["verifier"].get("architectures")
        for arch in archs if isinstance(archs, list) else []:
            hints.append(("speculators verifier architecture", arch))
    provenance = cfg.raw.get(PROVENANCE_KEY)
    if isinstance(provenance, dict):
        hints.insert(0, ("eagle-convert provenance target_family", provenance.get("target_family")))
    if cfg.dims.kv_lora_rank is not None or set(cfg.architectures) & _MLA_ARCHS:
        hints.append(("MLA draft model_type", cfg.model_type))
    for source, hint in hints:
        if not isinstance(hint, str):
            continue
        family = (
            (hint if hint in FAMILIES else None)
            if source.startswith("eagle-convert")
            else (family_of(hint) or family_of_architecture(hint))
        )
        if family:
            exact = hint if family_of(hint) and not source.startswith("MLA") else None
            return TargetInfo(family, f"{source} {hint!r} (no --target)", None, None, None, exact)
    return TargetInfo(None, "unknown (pass --target)", None, None, None)


def _aux_count(f: Facts, target: TargetInfo, out: list[Finding]) -> tuple[int | None, int, str]:
    """(target hidden size, K, where K came from). Weights win over declarations; conflicts are findings."""
    cfg = f.cfg
    ths = cfg.dims.target_hidden_size
    if target.hidden_size is not None:
        if ths is not None and ths != target.hidden_size:
            out.append(
                finding(
                    "EC007",
                    f"target_hidden_size is {ths} but the target's hidden_size is {target.hidden_size}",
                    subject="target_hidden_size",
                    expected=target.hidden_size,
                    actual=ths,
                )
            )
        ths = target.hidden_size
    width = ths or cfg.dims.hidden_size
    declared, declared_key = declared_k(cfg, width, out)
    ids = cfg.top_level_ids or cfg.eagle_config_ids or cfg.trainer_ids or cfg.target_layer_ids
    fc = f.shape("fc.weight")
    by_weights = fc[1] // width if fc and len(fc) == 2 and width and fc[1] % width == 0 else None
    if by_weights is not None and declared is not None and by_weights != declared:
        out.append(
            finding(
                "EC107",
                f"{declared_key} is {declared} but fc.weight {list(fc or ())} holds {by_weights} chunks of {width}",
                subject=declared_key.split(" ")[0],
                expected=by_weights,
                actual=declared,
            )
        )
    if by_weights is not None:
        return ths, by_weights, f"fc.weight width / {width}"
    if declared is not None:
        return ths, declared, declared_key
    if ids:
        return ths, len(set(ids)), "number of aux-layer ids"
    return ths, 3, "default"


def _aux_layers(
    cfg: DraftConfig,
    producer: str,
    confidence: str,
    target: TargetInfo,
    aux_convention: str | None,
    out: list[Finding],
) -> AuxLayers:
    top, nested = cfg.top_level_ids or None, cfg.eagle_config_ids or None
    location = {(True, True): "both", (True, False): "top-level", (False, True): "eagle_config"}.get(
        (bool(top), bool(nested)), "absent"
    )
    ids = top or nested
    declared = declared_states(cfg)
    if ids is None and declared is not None:  # only another trainer's key names the states: read that list
        ids, location = declared[2], "top-level"
    recorded, contradiction = None, None
    provenance = cfg.raw.get(PROVENANCE_KEY)
    if isinstance(provenance, dict):  # written by normalize: each location's convention is on record
        conventions = provenance.get("aux_conventions")
        location_used = "top-level" if top else "eagle_config"
        if isinstance(conventions, dict) and conventions.get(location_used) in CONVENTIONS:
            recorded = conventions[location_used]
        states = provenance.get("hidden_state_indices")
        states_ok = isinstance(states, list) and all(isinstance(j, int) and not isinstance(j, bool) for j in states)
        contradiction = record_conflict(
            top, nested, conventions if isinstance(conventions, dict) else {}, states if states_ok else None
        )
    paired = bool(
        top and nested and top != nested and to_hidden_states(top, "input-to") == to_hidden_states(nested, "output-of")
    )
    n = target.num_hidden_layers
    call = decide_convention(
        ConventionInputs(
            ids,
            producer,
            confidence,
            aux_convention,
            recorded,
            n,
            location=location,
            paired=paired,
            family=target.family,
            declared_states=declared[:2] if declared else None,
            record_conflict=contradiction,
        )
    )
    convention = call.convention
    if convention == "default":
        trained = default_hidden_states(n) if n else None
    elif convention in ("output-of", "input-to") and ids:
        trained = to_hidden_states(ids, convention)
    else:
        trained = None
    readings = {c: to_hidden_states(ids, c) for c in ("output-of", "input-to")} if ids else {}
    aux = AuxLayers(ids, location, top, nested, convention, call.confidence, call.evidence, trained, readings)
    if call.conflict:
        out.append(finding("EC108", "; ".join(call.evidence), subject=IDS_KEY))
    if call.contradicts_record and ids:
        out.append(
            finding(
                "EC113",
                f"{contradiction}, and nothing says which is true; pass --aux-convention output-of|input-to to say "
                f"which reading of the {'top-level' if top else 'eagle_config'} ids {ids} is true: "
                + ", ".join(f"{c} selects hs{readings[c]}" for c in CONVENTIONS),
                subject=IDS_KEY,
                actual=readings,
            )
        )
    research = cfg.has("target_vocab_size") or cfg.research_block is not None
    _aux_findings(aux, producer, n, out, speculators_research=research, contradicted=call.contradicts_record)
    return aux


def _aux_findings(
    aux: AuxLayers,
    producer: str,
    n: int | None,
    out: list[Finding],
    *,
    speculators_research: bool = False,
    contradicted: bool = False,
) -> None:
    key = IDS_KEY
    if aux.convention == "ambiguous" and not contradicted:  # a contradicted record is EC113's error, not EC101
        out.append(
            finding(
                "EC101",
                f"aux-layer ids {aux.ids} are ambiguous: output-of selects hs"
                f"{aux.states_by_convention['output-of']}, input-to selects hs{aux.states_by_convention['input-to']}; "
                "pass --aux-convention output-of|input-to",
                subject=key,
            )
        )
    if aux.convention == "default" and aux.location == "absent":
        safe = producer in TRAINS_WITH_DEFAULTS
        out.append(
            finding(
                "EC102",
                "no aux-layer ids: the default capture is hs[2], hs[N//2], hs[N-3]"
                + (
                    f", which is what {producer} trains with"
                    if safe
                    else "; nothing records whether the draft was trained on those"
                    + (
                        " (the speculators research trainers that write this config shape captured hs[3], "
                        "hs[N//2+1], hs[N-2]: research/*/ge_data/llamasharegpt.py)"
                        if speculators_research
                        else ""
                    )
                ),
                severity="info" if safe else None,
                subject=key,
            )
        )
    if aux.ids and (sorted(set(aux.ids)) != aux.ids):
        out.append(
            finding(
                "EC106",
                f"aux-layer ids {aux.ids} are not sorted and unique; a capture takes "
                f"{sorted(set(aux.ids))} in layer order (fc column blocks must follow that order)",
                subject=key,
            )
        )
    if n is not None and aux.hidden_state_indices and not all(1 <= j <= n for j in aux.hidden_state_indices):
        out.append(
            finding(
                "EC105",
                f"trained hidden states hs{aux.hidden_state_indices} fall outside hs[1..{n}] of a {n}-layer target",
                subject=key,
                actual=aux.hidden_state_indices,
            )
        )
