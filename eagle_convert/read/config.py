"""Typed views of a draft's config.json and of a target model's config.

Reading never guesses: a key that is absent stays ``None`` (the caller decides and records any default). A key of
the wrong type (read/config_types.py has the type of every key read) is never read as something else: a draft's is
kept as a :class:`TypeProblem` and read as absent (verify reports it as EC507, normalize refuses it), a target's is a
:class:`ConfigError` naming the key and the value. The raw dict is kept so unknown keys survive conversion.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle_convert.errors import ConfigError
from eagle_convert.read.config_types import DRAFT_TYPES, TARGET_TYPES, TypeProblem, type_problems, without
from eagle_convert.read.jsonstrict import load_json_object

IDS_KEY = "eagle_aux_hidden_state_layer_ids"  # the one spelling of the aux-layer ids key; import it, never retype it
# Other trainers' id keys, read by no engine's EAGLE3 id reader except where noted (sglang 0.5.23 / vllm 0.33 wheels):
# - AngelSlim's trainer list, hs[id+1] (train/models/target/target_model_wrapper.py _extract_auxiliary_hidden_states,
#   embed_offset = 1); read by neither engine;
# - DFlash's target_layer_ids, the output of layer id (vLLM's V2 runner reads a top-level list +1 for EAGLE3 too:
#   v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:138-140).
TRAINER_IDS_KEY = "aux_hidden_states_layer_ids"
TARGET_LAYER_IDS_KEY = "target_layer_ids"
# Aux-state injection modes: only "fused_fc" (stock EAGLE3: K states concatenated into one fc) is what the engines
# build; the AngelSlim research fork's banded/progressive/hawk modes are read by neither engine (no occurrence of
# eagle_aux_injection_mode or eagle_aux_layer_bands in sglang 0.5.23 or vllm 0.33).
INJECTION_MODE_KEY = "eagle_aux_injection_mode"
BANDS_KEY = "eagle_aux_layer_bands"
STOCK_INJECTION = "fused_fc"


# Every size of a model config the tool reads or hands to transformers: (least, most). The bounds are wide (a
# 1T-parameter model sits far inside them); a value outside is a broken or hostile config, not a model, and nothing
# downstream may size memory or loops by it. Positions: 128M is past any released context.
MODEL_SIZE_RANGES: dict[str, tuple[int, int]] = {
    "hidden_size": (1, 1 << 17),
    "intermediate_size": (1, 1 << 20),
    "num_attention_heads": (1, 1 << 12),
    "num_key_value_heads": (1, 1 << 12),
    "head_dim": (1, 1 << 12),
    "num_hidden_layers": (1, 1 << 12),
    "vocab_size": (1, 1 << 24),
    "max_position_embeddings": (1, 1 << 27),
    "q_lora_rank": (1, 1 << 16),
    "kv_lora_rank": (1, 1 << 16),
    "qk_nope_head_dim": (1, 1 << 12),
    "qk_rope_head_dim": (1, 1 << 12),
    "v_head_dim": (1, 1 << 12),
}
_TARGET_HINT = "--target must be the target model's own config.json, as its trainer or the Hub ships it"


def default_hidden_states(num_layers: int, shift: int = 0) -> list[int]:
    """The default capture of a config without ids: ``hs[2], hs[N//2], hs[N-3]`` (the original EAGLE3 code's choice,
    which trainers and engines reuse; ``shift`` is added by readers that move it, see the engine records)."""
    return sorted({2 + shift, num_layers // 2 + shift, num_layers - 3 + shift})


# The two conventions of aux-layer ids (FORMATS.md section 3), as what id X selects among HF ``hidden_states``
# (``hs[j]`` = input of 0-based layer j = output of layer j-1): ``output-of``, id X = output of layer X = hs[X+1];
# ``input-to``, id X = input to layer X = hs[X]. The one place the +-1 between ids and states lives: the draft's
# reading (draft/aux_layers.py), the engine records' capture rules (releases/), the probe's readings and the model card
# all derive theirs from it, through :func:`state_of` and :func:`id_of`.
SHIFT: dict[str, int] = {"output-of": 1, "input-to": 0}


def state_of(layer_id: int, convention: str) -> int:
    """The ``hidden_states`` index aux-layer id ``layer_id`` selects under ``convention``."""
    return layer_id + SHIFT[convention]


def id_of(state: int, convention: str) -> int:
    """The aux-layer id that selects ``hidden_states`` index ``state`` under ``convention`` (:func:`state_of`'s
    inverse)."""
    return state - SHIFT[convention]


# Keys that hold the draft layer's own settings in the speculators format.
SPECULATORS_LAYER_KEY = "transformer_layer_config"
SPECULATORS_WRAPPER_KEYS = ("speculators_model_type", "speculators_version", "speculators_config")
# The block normalize writes into config.json and shard metadata: its provenance and the conventions it wrote.
PROVENANCE_KEY = "eagle_convert"


class _Reader:
    """Typed access to a config dict; errors name the file and the dotted key."""

    def __init__(self, raw: dict[str, Any], source: str, scopes: tuple[tuple[str, dict[str, Any]], ...]) -> None:
        self.raw = raw
        self.source = source
        self.scopes = scopes  # (prefix, dict) searched in order

    def find(self, key: str) -> tuple[str, Any] | None:
        """(dotted key, value) of the first scope that has ``key``, or None when absent everywhere."""
        for prefix, scope in self.scopes:
            if key in scope:
                return prefix + key, scope[key]
        return None

    def value(self, key: str) -> Any:
        hit = self.find(key)
        return None if hit is None else hit[1]

    def int(self, key: str) -> int | None:
        hit = self.find(key)
        if hit is None or hit[1] is None:
            return None
        where, value = hit
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} is {value!r}, must be an integer", path=self.source)
        return value

    def float(self, key: str) -> float | None:
        hit = self.find(key)
        if hit is None or hit[1] is None:
            return None
        where, value = hit
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} is {value!r}, must be a number", path=self.source)
        return float(value)

    def bool(self, key: str) -> bool | None:
        hit = self.find(key)
        if hit is None or hit[1] is None:
            return None
        where, value = hit
        if not isinstance(value, bool):
            raise ConfigError(f"{where} is {value!r}, must be true or false", path=self.source)
        return value


def _dict_at(raw: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{key} is {type(value).__name__}, must be an object", path=source)
    return value


# The longest list of layer ids read: one id per layer of the largest model read (MODEL_SIZE_RANGES); a longer list
# names no model, and every finding that quotes the ids would repeat it.
MAX_LAYER_IDS = MODEL_SIZE_RANGES["num_hidden_layers"][1]


def _ids(value: list[int] | None, where: str, source: str) -> list[int] | None:
    """A copy of an id list (its type checked against DRAFT_TYPES before it is read); a ConfigError past
    MAX_LAYER_IDS entries."""
    if value is None:
        return None
    _at_most_layers(value, where, source, "layer ids")
    return list(value)


def _bands(value: list[list[int]] | None, source: str) -> list[list[int]] | None:
    if value is None:
        return None
    _at_most_layers(value, BANDS_KEY, source, "bands")
    return [_ids(band, BANDS_KEY, source) or [] for band in value]


def _at_most_layers(value: list[Any], where: str, source: str, what: str) -> None:
    if len(value) > MAX_LAYER_IDS:
        raise ConfigError(
            f"{where} lists {len(value):,} {what}, over the {MAX_LAYER_IDS:,} limit (a model has at most "
            f"{MAX_LAYER_IDS:,} layers)",
            path=source,
        )


@dataclass(frozen=True)
class Dims:
    hidden_size: int | None
    num_attention_heads: int | None
    num_key_value_heads: int | None
    head_dim: int | None  # explicit, or hidden_size // heads
    head_dim_explicit: bool
    intermediate_size: int | None
    num_hidden_layers: int | None
    vocab_size: int | None
    draft_vocab_size: int | None
    draft_vocab_size_key: str  # "present", "null" or "absent": the engines treat each differently
    target_hidden_size: int | None
    max_position_embeddings: int | None
    rms_norm_eps: float | None
    q_lora_rank: int | None
    kv_lora_rank: int | None
    qk_nope_head_dim: int | None
    qk_rope_head_dim: int | None
    v_head_dim: int | None


@dataclass(frozen=True)
class DraftConfig:
    """A draft's config.json, typed. ``raw`` is the file as read (unknown keys preserved)."""

    raw: dict[str, Any]
    source: str
    architectures: tuple[str, ...]
    model_type: str | None
    dims: Dims
    eagle_config: dict[str, Any]
    top_level_ids: list[int] | None
    eagle_config_ids: list[int] | None
    num_aux_hidden_states: int | None
    use_aux_hidden_state: bool | None
    fc_norm: bool | None
    use_aux_norm: bool | None
    norm_output: bool | None
    norm_before_fc: bool | None  # top level
    eagle_config_norm_before_fc: bool | None
    norm_before_residual: bool | None
    bias: bool | None
    attention_bias: bool | None
    rope_theta: float | None
    rope_scaling: dict[str, Any] | None  # the scaling that applies: rope_scaling, else a non-default rope_parameters
    rope_parameters: dict[str, Any] | None = None  # transformers 5's key, as written
    trainer_ids: list[int] | None = None  # aux_hidden_states_layer_ids (AngelSlim trainer list, hs[id+1])
    target_layer_ids: list[int] | None = None  # top-level target_layer_ids (DFlash key, output of layer id)
    injection_mode: str | None = None  # eagle_aux_injection_mode as written (None: absent)
    aux_layer_bands: list[list[int]] | None = None  # eagle_aux_layer_bands
    research_block: dict[str, Any] | None = None  # a nested "eagle3" block (speculators research configs)
    aliases: tuple[str, ...] = ()  # every alias or non-standard reading applied, as a sentence (for the report)
    type_problems: tuple[TypeProblem, ...] = ()  # keys of the wrong type, each read as absent (EC507)

    @classmethod
    def from_dict(cls, given: dict[str, Any], source: str | Path = "config.json") -> DraftConfig:
        """The typed view of ``given``; every key of the wrong type is kept in ``type_problems`` and read as absent."""
        src = str(source)
        scopes: list[tuple[str, dict[str, Any]]] = [("", given)]
        if isinstance(given.get(SPECULATORS_LAYER_KEY), dict):
            scopes.append((SPECULATORS_LAYER_KEY + ".", given[SPECULATORS_LAYER_KEY]))
        problems = tuple(type_problems(scopes, DRAFT_TYPES))
        raw = without(given, (p.key for p in problems))  # what is read below: every remaining value is well typed
        eagle_config = _dict_at(raw, "eagle_config", src)
        layer = _dict_at(raw, SPECULATORS_LAYER_KEY, src)
        r = _Reader(raw, src, (("", raw), (SPECULATORS_LAYER_KEY + ".", layer)))
        ec = _Reader(raw, src, (("eagle_config.", eagle_config),))

        architectures = raw.get("architectures") or layer.get("architectures") or []
        model_type = r.value("model_type")

        hidden, heads = r.int("hidden_size"), r.int("num_attention_heads")
        explicit_head_dim = r.int("head_dim")
        draft_vocab_key = (
            "absent"
            if r.find("draft_vocab_size") is None
            else ("null" if r.value("draft_vocab_size") is None else "present")
        )
        aliases: list[str] = []
        vocab, draft_vocab = r.int("vocab_size"), r.int("draft_vocab_size")
        target_vocab = r.int("target_vocab_size")
        if target_vocab is not None and draft_vocab_key == "absent":
            # speculators research trainers (research/Eagle3Deepspeed model/llama_eagle3_full_grad.py:83-88): the
            # embedding has target_vocab_size rows and lm_head vocab_size rows, so vocab_size is the draft's
            aliases.append(
                f"vocab_size {vocab} read as the draft vocabulary and target_vocab_size {target_vocab} as the "
                "target's (a speculators research config; no draft_vocab_size)"
            )
            vocab, draft_vocab = target_vocab, vocab
        dims = Dims(
            hidden_size=hidden,
            num_attention_heads=heads,
            num_key_value_heads=r.int("num_key_value_heads") or heads,
            head_dim=explicit_head_dim or (hidden // heads if hidden and heads else None),
            head_dim_explicit=explicit_head_dim is not None,
            intermediate_size=r.int("intermediate_size"),
            num_hidden_layers=r.int("num_hidden_layers"),
            vocab_size=vocab,
            draft_vocab_size=draft_vocab,
            draft_vocab_size_key=draft_vocab_key,
            target_hidden_size=r.int("target_hidden_size"),
            max_position_embeddings=r.int("max_position_embeddings"),
            rms_norm_eps=r.float("rms_norm_eps"),
            q_lora_rank=r.int("q_lora_rank"),
            kv_lora_rank=r.int("kv_lora_rank"),
            qk_nope_head_dim=r.int("qk_nope_head_dim"),
            qk_rope_head_dim=r.int("qk_rope_head_dim"),
            v_head_dim=r.int("v_head_dim"),
        )
        rope_scaling, rope_parameters, rope_theta = _rope(r, raw, src)
        research = raw.get("eagle3")
        return cls(
            raw=given,
            source=src,
            architectures=tuple(architectures),
            model_type=model_type,
            dims=dims,
            eagle_config=eagle_config,
            top_level_ids=_ids(raw.get(IDS_KEY), IDS_KEY, src),
            eagle_config_ids=_ids(eagle_config.get(IDS_KEY), "eagle_config." + IDS_KEY, src),
            num_aux_hidden_states=r.int("num_aux_hidden_states"),
            use_aux_hidden_state=ec.bool("use_aux_hidden_state"),
            fc_norm=r.bool("fc_norm"),
            use_aux_norm=r.bool("use_aux_norm"),
            norm_output=r.bool("norm_output"),
            norm_before_fc=r.bool("norm_before_fc"),
            eagle_config_norm_before_fc=ec.bool("norm_before_fc"),
            norm_before_residual=r.bool("norm_before_residual"),
            bias=r.bool("bias"),
            attention_bias=r.bool("attention_bias"),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            rope_parameters=rope_parameters,
            trainer_ids=_ids(r.value(TRAINER_IDS_KEY), TRAINER_IDS_KEY, src),
            target_layer_ids=_ids(raw.get(TARGET_LAYER_IDS_KEY), TARGET_LAYER_IDS_KEY, src),
            injection_mode=r.value(INJECTION_MODE_KEY),
            aux_layer_bands=_bands(r.value(BANDS_KEY), src),
            research_block=research if isinstance(research, dict) else None,
            aliases=tuple(aliases),
            type_problems=problems,
        )

    def has(self, key: str) -> bool:
        return key in self.raw


def _rope(
    r: _Reader, raw: dict[str, Any], src: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, float | None]:
    """(the scaling that applies, rope_parameters as written, theta), the way transformers 5 merges the two keys.

    transformers 5.23 ``modeling_rope_utils.py:776-777``: ``rope_parameters = rope_scaling or rope_parameters``, then
    a ``rope_theta`` inside the dict wins over the top-level one (``:785``, ``:794``). A ``rope_parameters`` whose
    ``rope_type`` is ``default`` carries only theta: no scaling. transformers 4 reads ``rope_scaling`` only."""
    scaling, params = r.value("rope_scaling"), r.value("rope_parameters")
    if scaling is not None and not isinstance(scaling, dict):
        raise ConfigError(f"rope_scaling is {scaling!r}, must be an object or null", path=src)
    if params is not None and not isinstance(params, dict):
        raise ConfigError(f"rope_parameters is {params!r}, must be an object or null", path=src)
    merged = scaling or params
    theta = None
    if isinstance(merged, dict) and merged.get("rope_theta") is not None:
        where = "rope_scaling." if scaling else "rope_parameters."
        theta = _Reader(raw, src, ((where, merged),)).float("rope_theta")
    if theta is None:
        theta = r.float("rope_theta")
    if scaling is None and isinstance(params, dict):
        kind = params.get("rope_type", params.get("type"))
        scaling = None if kind in (None, "default") else params
    return scaling, params, theta


@dataclass(frozen=True)
class TargetFamily:
    """A target model family (FORMATS.md section 3): the model_types in it and the architecture-name hints for it."""

    name: str
    model_types: tuple[str, ...]  # the first stands for the family when only the family is known
    arch_hints: tuple[str, ...]  # lower-case substrings of an architecture name (``_`` and ``-`` removed)


# The one table of target families; everything below (and every other module) derives from it.
TARGET_FAMILIES = (
    TargetFamily(
        "llama",
        (
            "llama",
            "llama4",
            "llama4_text",
            "mistral",
            "mistral3",
            "ministral",
            "phi3",
            "gemma2",
            "gemma3",
            "gemma3_text",
        ),
        ("llama", "mistral"),
    ),
    TargetFamily(
        "qwen",
        ("qwen3", "qwen2", "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"),
        ("qwen",),
    ),
    TargetFamily(
        "deepseek",
        ("deepseek_v3", "deepseek_v2", "deepseek_v32", "kimi_k2", "kimi_k25", "kimi_vl"),
        ("deepseek", "kimi"),
    ),
    TargetFamily("gpt-oss", ("gpt_oss",), ("gptoss",)),
)
FAMILIES = tuple(f.name for f in TARGET_FAMILIES)
FAMILY_BY_MODEL_TYPE = {mt: f.name for f in TARGET_FAMILIES for mt in f.model_types}
# A target family named without its model_type (a draft-config hint): the model_type that stands for it.
FAMILY_MODEL_TYPE = {f.name: f.model_types[0] for f in TARGET_FAMILIES}
# Checked most specific first: an MLA or GPT-OSS name before a generic Llama/Qwen one.
_ARCH_HINT_ORDER = ("deepseek", "gpt-oss", "qwen", "llama")


def family_of(model_type: str | None) -> str | None:
    return FAMILY_BY_MODEL_TYPE.get(model_type or "")


def family_of_architecture(arch: str) -> str | None:
    """The family an architecture name hints at (``Qwen3ForCausalLM`` -> qwen), or None."""
    key = arch.lower().replace("_", "").replace("-", "")
    by_name = {f.name: f for f in TARGET_FAMILIES}
    return next(
        (name for name in _ARCH_HINT_ORDER for needle in by_name[name].arch_hints if needle in key),
        None,
    )


@dataclass(frozen=True)
class TargetConfig:
    """The parts of a target model's config a draft depends on. Kimi-style ``text_config`` nesting is unwrapped."""

    source: str
    model_type: str | None
    text_model_type: str | None
    family: str | None
    num_hidden_layers: int
    hidden_size: int
    vocab_size: int | None
    max_position_embeddings: int | None
    rope_theta: float | None
    rope_scaling: dict[str, Any] | None
    quantization_config: dict[str, Any] | None
    nested_text_config: bool
    architectures: tuple[str, ...] = ()
    name_or_path: str | None = None  # the target config's _name_or_path (a Hub id or the path it was saved from)
    eos_token_id: int | None = None  # the end-of-sequence token (the first when config.json lists several)
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # config.json as read

    @property
    def directory(self) -> Path:
        """The target's folder (its config.json's): where its weights, tokenizer and chat template are."""
        return Path(self.source).parent

    @property
    def has_weights(self) -> bool:
        """Whether the target's folder holds safetensors shards the reference can read (else it is config only)."""
        return Path(self.source).is_file() and any(self.directory.glob("*.safetensors"))

    @classmethod
    def from_path(cls, path: str | Path) -> TargetConfig:
        path = Path(path)
        config_path = path / "config.json" if path.is_dir() else path
        # anything else there (a FIFO, a socket, a symlink that loops) is named by the reader, never opened
        if not config_path.exists() and not config_path.is_symlink():
            raise ConfigError(
                "target config.json not found",
                path=config_path,
                hint="--target takes a model directory or its config.json",
            )
        return cls.from_dict(load_json_object(config_path, ConfigError, "target config"), config_path)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str | Path = "target config.json") -> TargetConfig:
        src = str(source)
        marker = draft_marker(raw)
        if marker is not None:
            raise ConfigError(
                f"this is a speculative draft's config ({marker}), not the target model's",
                path=src,
                hint="--target takes the model the draft was trained for (its directory or config.json); the draft "
                "is the PATH argument",
            )
        text_key = next((key for key in ("text_config", "language_config") if _dict_at(raw, key, src)), None)
        scope = raw[text_key] if text_key else raw
        text_scope = ((text_key + ".", scope),) if text_key else ()
        wrong = type_problems((*text_scope, ("", raw)), TARGET_TYPES)
        if wrong:  # the user's input: the first key of the wrong type, by name and value
            raise ConfigError(wrong[0].message, path=src, hint=_TARGET_HINT)
        r = _Reader(raw, src, (*text_scope, ("", raw)))
        layers, hidden = r.int("num_hidden_layers"), r.int("hidden_size")
        if layers is None:  # hybrid configs that transformers writes with a per-layer list instead (Nemotron-H)
            layers = pattern_length(scope)
        if layers is None or hidden is None:
            raise ConfigError(
                "target config has no num_hidden_layers/hidden_size",
                path=src,
                hint="--target must be the target model's config (for VLMs, the one with text_config)",
            )
        outer_type = raw.get("model_type") if isinstance(raw.get("model_type"), str) else None
        inner_type = scope.get("model_type") if isinstance(scope.get("model_type"), str) else outer_type
        rope_scaling, _, rope_theta = _rope(r, raw, src)
        _check_target_sizes(r, rope_theta)
        quant = raw.get("quantization_config") or scope.get("quantization_config")
        return cls(
            source=src,
            model_type=outer_type,
            text_model_type=inner_type,
            family=family_of(inner_type) or family_of(outer_type),
            num_hidden_layers=layers,
            hidden_size=hidden,
            vocab_size=r.int("vocab_size"),
            max_position_embeddings=r.int("max_position_embeddings"),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            quantization_config=quant if isinstance(quant, dict) else None,
            nested_text_config=text_key is not None,
            architectures=tuple(a for a in raw.get("architectures") or () if isinstance(a, str)),
            name_or_path=raw.get("_name_or_path") if isinstance(raw.get("_name_or_path"), str) else None,
            eos_token_id=cls._eos(raw.get("eos_token_id")),
            raw=raw,
        )

    @staticmethod
    def _eos(value: Any) -> int | None:
        value = value[0] if isinstance(value, list) and value else value
        return value if isinstance(value, int) and not isinstance(value, bool) else None


_DRAFT_KEYS = ("draft_vocab_size", "eagle_config", *SPECULATORS_WRAPPER_KEYS)  # keys only a draft's config holds
_DRAFT_ARCHITECTURE = re.compile(r"eagle|speculator|medusa", re.IGNORECASE)


def draft_marker(raw: dict[str, Any]) -> str | None:
    """What shows a config to be a draft's (a key only drafts write, an architecture named for a draft), or None."""
    key = next((k for k in _DRAFT_KEYS if k in raw), None)
    if key is not None:
        return f"it holds {key}"
    names = raw.get("architectures")
    arch = (
        next((a for a in names if isinstance(a, str) and _DRAFT_ARCHITECTURE.search(a)), None)
        if isinstance(names, list)
        else None
    )
    return f"its architecture is {arch}" if arch is not None else None


def _check_target_sizes(r: _Reader, rope_theta: float | None) -> None:
    """Each size of the target's config against MODEL_SIZE_RANGES (a per-layer list, as Gemma 3n writes
    ``intermediate_size``, element by element), its norm epsilon and rope theta: the target is the user's input, so a
    value no model has is a ConfigError (exit 2) naming the key, before any work."""

    def refuse(where: str, value: Any, why: str) -> None:
        raise ConfigError(f"{where} is {value!r}: {why}", path=r.source, hint=_TARGET_HINT)

    for key, (least, most) in MODEL_SIZE_RANGES.items():
        hit = r.find(key)
        values = hit[1] if hit is not None and isinstance(hit[1], list) else [hit[1] if hit is not None else None]
        for value in values:
            if isinstance(value, int) and not isinstance(value, bool) and not least <= value <= most:
                refuse(hit[0] if hit else key, value, f"must lie in {least}..{most}")
    for key in ("rms_norm_eps", "layer_norm_eps"):
        hit = r.find(key)
        eps = hit[1] if hit is not None else None
        if isinstance(eps, int | float) and not isinstance(eps, bool) and not (math.isfinite(eps) and 0 < eps < 1):
            refuse(hit[0] if hit else key, eps, "must be a positive number below 1")
    if rope_theta is not None and not (math.isfinite(rope_theta) and rope_theta > 0):
        refuse("rope_theta", rope_theta, "must be a positive number")


LAYER_PATTERN_KEYS = ("layers_block_type", "hybrid_override_pattern")  # Nemotron-H: one entry per decoder layer


def pattern_length(scope: Mapping[str, Any]) -> int | None:
    """The number of decoder layers a config gives only as a per-layer pattern (a list, or a string of one letter per
    layer), as transformers reads it; None when it has none."""
    for key in LAYER_PATTERN_KEYS:
        value = scope.get(key)
        if isinstance(value, list | str) and 0 < len(value):
            return len(value)
    return None


def flatten_source(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(EAGLE3-style flat config, stash of speculators wrapper keys) from any source config."""
    cfg = copy.deepcopy(raw)
    stash: dict[str, Any] = {}
    layer = cfg.pop(SPECULATORS_LAYER_KEY, None)
    if isinstance(layer, dict):
        stash["layer_architectures"] = layer.get("architectures")
        stash["architectures"] = cfg.get("architectures")
        for key in SPECULATORS_WRAPPER_KEYS:
            if key in cfg:
                stash[key] = cfg.pop(key)
        cfg = {**{k: v for k, v in layer.items() if k != "architectures"}, **cfg}
    provenance = cfg.get(PROVENANCE_KEY)
    if isinstance(provenance, dict) and isinstance(provenance.get("speculators"), dict):
        stash = {**provenance["speculators"], **stash}
    return cfg, stash
