"""Producer recognition as data: each signal is one fact about a checkpoint that points at a trainer.

Signals add weight to a producer; the best-scoring producer wins and the margin over the runner-up sets the
confidence. Every signal that fired is reported as evidence, so a reader can see why, and a weak call is
reported as weak instead of being dressed up as certain.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

from eagle_convert.draft.layouts import TensorName
from eagle_convert.read.config import PROVENANCE_KEY, DraftConfig
from eagle_convert.read.safetensors_header import TensorInfo

PRODUCERS = (
    "eagle",
    "specforge",
    "speculators",
    "modelopt",
    "torchspec",
    "angelslim",
    "nemo",
    "canonical",
    "eagle1",
    "unknown",
)

_MODELOPT_ONLY_KEYS = frozenset(
    {"next_layer_regular", "parallel_draft_step", "parallel_draft_heads_num_layers", "has_lm_head"}
)
_MODELOPT_SHARED_KEYS = frozenset({"use_input_layernorm_in_first_layer", "use_last_layernorm", "use_mtp_layernorm"})


@dataclass(frozen=True)
class Facts:
    """What the signals look at: the typed config, the split tensor names and their headers."""

    cfg: DraftConfig
    names: tuple[TensorName, ...]
    tensors: Mapping[str, TensorInfo]
    shard_metadata: Mapping[str, str]
    has_pickle: bool

    @cached_property
    def _top_level(self) -> dict[str, str]:
        """Local name -> full name of the first tensor of each name outside the decoder layer (built once)."""
        found: dict[str, str] = {}
        for n in self.names:
            if n.layer is None:
                found.setdefault(n.local, n.name)
        return found

    def has_local(self, local: str) -> bool:
        return local in self._top_level

    def shape(self, local: str) -> tuple[int, ...] | None:
        name = self._top_level.get(local)
        return self.tensors[name].shape if name is not None else None

    @property
    def archs(self) -> frozenset[str]:
        return frozenset(self.cfg.architectures)

    @property
    def layer_prefixes(self) -> frozenset[str]:
        return frozenset(n.prefix for n in self.names if n.layer is not None)

    @property
    def outer_prefixes(self) -> frozenset[str]:
        return frozenset(n.outer for n in self.names if n.local.startswith("fc.") or n.layer is not None)


def _fc_is_eagle1(f: Facts) -> bool:
    fc, hidden = f.shape("fc.weight"), f.cfg.dims.hidden_size
    return fc is not None and hidden is not None and len(fc) == 2 and fc[1] == 2 * hidden


def _eagle1_config(f: Facts) -> bool:
    cfg = f.cfg
    return (
        f.archs == {"LlamaForCausalLM"}
        and cfg.dims.draft_vocab_size_key == "absent"
        and not cfg.eagle_config
        and cfg.top_level_ids is None
        and not f.has_local("d2t")
        and not _speculators_research(f)
    )


def _speculators_research(f: Facts) -> bool:
    """A speculators research trainer's config (github.com/vllm-project/speculators research/): Eagle3Deepspeed
    writes vocab_size as the draft's beside target_vocab_size (model/llama_eagle3_full_grad.py:83-88 at dd2a2f2),
    onlineEagle3 a nested eagle3 block with concat_factor and fc dims (train/llama33_70b_head_k3.json at edc5096)."""
    return f.cfg.has("target_vocab_size") or f.cfg.research_block is not None


@dataclass(frozen=True)
class Signal:
    producer: str
    weight: int
    evidence: str
    test: Callable[[Facts], bool]


SIGNALS: tuple[Signal, ...] = (
    Signal("canonical", 20, f"config has the {PROVENANCE_KEY} provenance block", lambda f: f.cfg.has(PROVENANCE_KEY)),
    Signal("speculators", 10, "config has speculators_model_type", lambda f: f.cfg.has("speculators_model_type")),
    Signal(
        "speculators",
        4,
        "config has speculators_config or transformer_layer_config",
        lambda f: f.cfg.has("speculators_config") or f.cfg.has("transformer_layer_config"),
    ),
    Signal(
        "speculators",
        4,
        "architectures Eagle3Speculator/Eagle3DraftModel",
        lambda f: bool(f.archs & {"Eagle3Speculator", "Eagle3DraftModel"}),
    ),
    Signal(
        "speculators",
        6,
        "target_vocab_size or a nested eagle3 block (speculators research trainers, research/Eagle3Deepspeed and "
        "research/onlineEagle3)",
        _speculators_research,
    ),
    Signal("eagle1", 10, "model_type 'eagle' wrapper (EAGLE-1/2)", lambda f: f.cfg.model_type == "eagle"),
    Signal("eagle1", 10, "fc.weight is [H, 2H]: EAGLE-1/2 fuses one feature with the embedding", _fc_is_eagle1),
    Signal(
        "eagle1",
        5,
        "plain LlamaForCausalLM with no draft_vocab_size, no d2t and no EAGLE3 keys (EAGLE-1/2 config)",
        _eagle1_config,
    ),
    Signal(
        "nemo", 10, "architectures LlamaEagle3DraftModel (NeMo Automodel)", lambda f: "LlamaEagle3DraftModel" in f.archs
    ),
    Signal(
        "nemo", 6, "fc and layer tensors carry a model. prefix (NeMo Automodel)", lambda f: "model." in f.outer_prefixes
    ),
    Signal(
        "modelopt",
        4,
        "tensors wrapped in eagle_module. (a raw ModelOpt training state dict)",
        lambda f: any(n.outer.startswith("eagle_module.") for n in f.names),
    ),
    Signal(
        "specforge",
        3,
        "tensors wrapped in draft_model. (a raw SpecForge training state dict)",
        lambda f: any(n.outer.startswith("draft_model.") for n in f.names),
    ),
    Signal("torchspec", 10, "config has _torchspec_version", lambda f: f.cfg.has("_torchspec_version")),
    Signal(
        "torchspec", 10, "safetensors metadata has torchspec_version", lambda f: "torchspec_version" in f.shard_metadata
    ),
    Signal(
        "torchspec",
        2,
        "MLA draft Eagle3DeepseekV2ForCausalLM that ships embed_tokens",
        lambda f: "Eagle3DeepseekV2ForCausalLM" in f.archs and f.has_local("embed_tokens.weight"),
    ),
    Signal(
        "angelslim",
        6,
        "architectures Eagle3LlamaForCausalLM (AngelSlim)",
        lambda f: "Eagle3LlamaForCausalLM" in f.archs,
    ),
    Signal(
        "angelslim",
        4,
        "config has aux_hidden_states_layer_ids or eagle_aux_injection_mode (the AngelSlim trainer's keys)",
        lambda f: f.cfg.trainer_ids is not None or f.cfg.injection_mode is not None,
    ),
    Signal(
        "torchspec",
        4,
        "TorchSpec draft keys use_moe/train_router, or architectures Glm4MoeForCausalLMEagle3/"
        "LlamaForCausalLMEagle3Gated (TorchSpec draft classes)",
        lambda f: (
            f.cfg.has("use_moe")
            or f.cfg.has("train_router")
            or bool(f.archs & {"Glm4MoeForCausalLMEagle3", "LlamaForCausalLMEagle3Gated"})
        ),
    ),
    Signal(
        "angelslim",
        3,
        "config has target_model_type (AngelSlim; some SpecForge configs too)",
        lambda f: f.cfg.has("target_model_type"),
    ),
    Signal(
        "modelopt",
        8,
        "ModelOpt-only keys (next_layer_regular, parallel_draft_*, has_lm_head)",
        lambda f: bool(_MODELOPT_ONLY_KEYS & (f.cfg.eagle_config.keys() | f.cfg.raw.keys())),
    ),
    Signal(
        "modelopt",
        3,
        "eagle_config has use_*_layernorm keys (ModelOpt; TorchSpec copies them)",
        lambda f: bool(_MODELOPT_SHARED_KEYS & f.cfg.eagle_config.keys()),
    ),
    Signal(
        "torchspec",
        3,
        "eagle_config has use_*_layernorm keys (TorchSpec; ModelOpt writes them too)",
        lambda f: bool(_MODELOPT_SHARED_KEYS & f.cfg.eagle_config.keys()),
    ),
    Signal(
        "modelopt",
        3,
        "top-level use_*_layernorm keys (ModelOpt training defaults)",
        lambda f: bool(_MODELOPT_SHARED_KEYS & f.cfg.raw.keys()),
    ),
    Signal(
        "torchspec",
        2,
        "MLA draft Eagle3DeepseekV2ForCausalLM without ModelOpt-only keys (TorchSpec / lightseekorg)",
        lambda f: (
            "Eagle3DeepseekV2ForCausalLM" in f.archs
            and not _MODELOPT_ONLY_KEYS & (f.cfg.eagle_config.keys() | f.cfg.raw.keys())
        ),
    ),
    Signal(
        "modelopt",
        4,
        "layers.0.* with d2t and lm_head but no t2d and no embed_tokens (ModelOpt export)",
        lambda f: (
            "layers.0." in f.layer_prefixes
            and f.has_local("d2t")
            and f.has_local("lm_head.weight")
            and not f.has_local("t2d")
            and not f.has_local("embed_tokens.weight")
        ),
    ),
    Signal(
        "eagle",
        5,
        "plain LlamaForCausalLM with draft_vocab_size (official EAGLE3 training config; SpecForge's "
        "earliest configs copied it)",
        lambda f: f.archs == {"LlamaForCausalLM"} and f.cfg.dims.draft_vocab_size_key == "present",
    ),
    Signal("eagle", 3, "pickle weights (official EAGLE3 uploads ship pytorch_model.bin)", lambda f: f.has_pickle),
    Signal(
        "specforge",
        3,
        "architectures LlamaForCausalLMEagle3 (SpecForge; TorchSpec and ModelOpt use it too)",
        lambda f: "LlamaForCausalLMEagle3" in f.archs,
    ),
    Signal(
        "specforge",
        6,
        "architectures DeepseekV3ForCausalLMEagle3/Qwen3MoeForCausalLMEagle3 (SpecForge branches)",
        lambda f: bool(
            f.archs & {"DeepseekV3ForCausalLMEagle3", "Qwen3MoeForCausalLMEagle3", "Qwen3MoEForCausalLMEagle3"}
        ),
    ),
    Signal(
        "specforge",
        4,
        "architectures PEagleDraftModel (SpecForge P-EAGLE, specforge/modeling/draft/peagle.py)",
        lambda f: "PEagleDraftModel" in f.archs,
    ),
    Signal(
        "specforge",
        2,
        "midlayer.* with d2t and t2d and no embed_tokens (SpecForge export)",
        lambda f: (
            "midlayer." in f.layer_prefixes
            and f.has_local("d2t")
            and f.has_local("t2d")
            and not f.has_local("embed_tokens.weight")
        ),
    ),
    Signal(
        "specforge",
        4,
        "legacy EAGLE3.1 use_aux_norm / aux_norm_* (SpecForge branch)",
        lambda f: f.cfg.has("use_aux_norm") or f.has_local("aux_norm_low.weight"),
    ),
)


@dataclass(frozen=True)
class ProducerCall:
    producer: str
    confidence: str
    evidence: list[str]
    scores: dict[str, int]


def recognise(facts: Facts) -> ProducerCall:
    scores: dict[str, int] = {}
    evidence: dict[str, list[str]] = {}
    for signal in SIGNALS:
        if signal.test(facts):
            scores[signal.producer] = scores.get(signal.producer, 0) + signal.weight
            evidence.setdefault(signal.producer, []).append(signal.evidence)
    normalized = _normalized(facts, evidence)
    if normalized is not None:
        return ProducerCall("canonical", "high", normalized, scores)
    if not scores:
        return ProducerCall("unknown", "low", ["no producer signal matched"], {})
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], PRODUCERS.index(kv[0])))
    best, top = ranked[0]
    runner_up = ranked[1][1] if len(ranked) > 1 else 0
    if top >= 8 and top >= 2 * runner_up:
        confidence = "high"
    elif top >= 4 and top > runner_up:
        confidence = "medium"
    else:
        confidence = "low"
    notes = list(evidence[best])
    notes += [f"also consistent with {p} (score {s} vs {top}): {'; '.join(evidence[p])}" for p, s in ranked[1:]]
    return ProducerCall(best, confidence, notes, scores)


def _normalized(facts: Facts, evidence: dict[str, list[str]]) -> list[str] | None:
    """The evidence of a draft `eagle-convert normalize` wrote (its config's provenance block names the source
    producer): canonical with high confidence whatever source keys it kept (unknown keys are preserved, e.g.
    _torchspec_version), which are listed after; None for any other draft."""
    provenance = facts.cfg.raw.get(PROVENANCE_KEY)
    if not isinstance(provenance, dict) or not isinstance(provenance.get("source_producer"), str):
        return None
    source = provenance["source_producer"]
    notes = [
        f"normalized from {source} by eagle-convert {provenance.get('version', '?')} (config {PROVENANCE_KEY} "
        "provenance block)"
    ]
    notes += [f"also matches {p}: {line}" for p, lines in evidence.items() if p != "canonical" for line in lines]
    return notes
