"""The type of every config key the tool reads, in one table per kind of config, and the one check against it.

A value of the wrong type is never read as something else: the engines would (``bool("false")`` is true in the
Python both engines are written in, ``getattr(torch, "bfloat17")`` fails transformers' config loader at
``configuration_utils.py:443-448`` in 5.24), so the tool names the key and the value instead. A draft's problems
become EC507 findings (draft/config_types.py turns them into findings; normalize refuses them); a target's are
the user's input error, raised by :class:`~eagle_convert.read.config.TargetConfig`. ``null`` is not a type error
here: a null that strict config classes reject is EC502, a null the engines read as a default is EC508.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# torch's dtype names (torch 2.13 ``torch.<name>`` dtypes, aliases included): what transformers' config loader turns
# a ``torch_dtype``/``dtype`` string into with ``getattr(torch, name)``; any other string fails there.
DTYPE_NAMES = frozenset(
    {
        "float32", "float", "float64", "double", "float16", "half", "bfloat16",
        "complex32", "chalf", "complex64", "cfloat", "complex128", "cdouble",
        "uint8", "uint16", "uint32", "uint64", "int8", "int16", "short", "int32", "int", "int64", "long", "bool",
        "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
    }
)  # fmt: skip
MAX_SHOWN = 80  # characters of a wrong value a message repeats


def _integer(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _dtype(v: Any) -> bool:
    return v in DTYPE_NAMES if isinstance(v, str) else isinstance(v, dict) and all(_dtype(x) for x in v.values())


_CANNOT = "the engines cannot read it as one"


@dataclass(frozen=True)
class Kind:
    """What a value must be: ``what`` says it in a message, ``accepts`` tests it (never called with None), and
    ``misread`` says what the engines would do with a value it refuses."""

    what: str
    accepts: Callable[[Any], bool]
    misread: str = _CANNOT


BOOL = Kind(
    "true or false",
    lambda v: isinstance(v, bool),
    'the engines test it with Python truthiness, so any non-empty string ("false" too) or list turns it on',
)
INT = Kind("an integer", _integer)
NUMBER = Kind("a number", lambda v: isinstance(v, int | float) and not isinstance(v, bool))
NAME = Kind("a non-empty string", lambda v: isinstance(v, str) and bool(v.strip()))
TEXT = Kind("a string", lambda v: isinstance(v, str))
OBJECT = Kind("an object", lambda v: isinstance(v, dict))
NAMES = Kind("a list of non-empty strings", lambda v: isinstance(v, list) and all(NAME.accepts(x) for x in v))
INTS = Kind("a list of integers", lambda v: isinstance(v, list) and all(_integer(x) for x in v))
INT_LISTS = Kind("a list of integer lists", lambda v: isinstance(v, list) and all(INTS.accepts(x) for x in v))
INT_OR_INTS = Kind("an integer or a list of integers", lambda v: _integer(v) or INTS.accepts(v))
DTYPE = Kind(
    "a torch dtype name such as bfloat16, float16 or float32",
    _dtype,
    "transformers' config loader fails on it (getattr(torch, name), configuration_utils.py:443-448 in 5.24)",
)

# Sizes every model config holds (read/config.py MODEL_SIZE_RANGES has their ranges) and the other integer keys
# the tool reads from a draft.
_MODEL_SIZES = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "num_hidden_layers",
    "vocab_size",
    "max_position_embeddings",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)
# Flags the engines read with Python truthiness (``bool(config.get(key))``, ``getattr(config, key, False)``): the
# draft's EAGLE3/3.1 flags, its bias keys and the transformers flags the tool reads.
DRAFT_FLAGS = (
    "fc_norm",
    "use_aux_norm",
    "norm_output",
    "norm_before_fc",
    "norm_before_residual",
    "bias",
    "attention_bias",
    "mlp_bias",
    "tie_word_embeddings",
    "use_cache",
    "use_sliding_window",
    "eagle_config.use_aux_hidden_state",
    "eagle_config.norm_before_fc",
)
# Every key the tool reads from a draft's config.json (dotted: nested in that object), with its type. The keys of
# a speculators config's transformer_layer_config are read with the same types.
DRAFT_TYPES: Mapping[str, Kind] = {
    **dict.fromkeys(_MODEL_SIZES, INT),
    **dict.fromkeys(
        (
            "draft_vocab_size",
            "target_vocab_size",
            "target_hidden_size",
            "num_aux_hidden_states",
            "sliding_window",
            "max_window_layers",
            "first_k_dense_replace",
            "num_experts",
            "n_routed_experts",
            "num_local_experts",
        ),
        INT,
    ),
    **dict.fromkeys(
        ("rms_norm_eps", "rope_theta", "initializer_range", "rope_scaling.rope_theta", "rope_parameters.rope_theta"),
        NUMBER,
    ),
    **dict.fromkeys(DRAFT_FLAGS, BOOL),
    **dict.fromkeys(
        (
            "model_type",
            "hidden_act",
            "speculators_model_type",
            "target_model_type",
            "eagle_aux_injection_mode",
            "quantization_config.quant_method",
        ),
        NAME,
    ),
    **dict.fromkeys(("torch_dtype", "dtype"), DTYPE),
    **dict.fromkeys(
        (
            "eagle_config",
            "transformer_layer_config",
            "speculators_config",
            "quantization_config",
            "rope_scaling",
            "rope_parameters",
            "eagle3",
            "eagle_convert",
        ),
        OBJECT,
    ),
    **dict.fromkeys(("architectures", "layer_types"), NAMES),
    **dict.fromkeys(
        (
            "eagle_aux_hidden_state_layer_ids",
            "eagle_config.eagle_aux_hidden_state_layer_ids",
            "aux_hidden_states_layer_ids",
            "target_layer_ids",
            "mlp_only_layers",
        ),
        INTS,
    ),
    "eagle_aux_layer_bands": INT_LISTS,
}
# Every key the tool reads from a target's config.json (or its text_config), with its type: the sizes may be
# per-layer lists (Gemma 3n writes intermediate_size so), the dtype a per-sub-config object.
TARGET_TYPES: Mapping[str, Kind] = {
    **dict.fromkeys(_MODEL_SIZES, INT_OR_INTS),
    **dict.fromkeys(
        ("rms_norm_eps", "layer_norm_eps", "rope_theta", "rope_scaling.rope_theta", "rope_parameters.rope_theta"),
        NUMBER,
    ),
    "tie_word_embeddings": BOOL,
    "model_type": NAME,
    "_name_or_path": TEXT,
    **dict.fromkeys(("torch_dtype", "dtype"), DTYPE),
    **dict.fromkeys(
        ("text_config", "language_config", "quantization_config", "rope_scaling", "rope_parameters"), OBJECT
    ),
    "quantization_config.quant_method": NAME,
    "architectures": NAMES,
    **dict.fromkeys(("eos_token_id", "bos_token_id", "pad_token_id"), INT_OR_INTS),
}


@dataclass(frozen=True)
class TypeProblem:
    """A key whose value has the wrong type: the dotted key as written, the value, and what it must be."""

    key: str
    value: Any
    kind: Kind

    @property
    def message(self) -> str:
        return f"{self.key} is {shown(self.value)}, must be {self.kind.what}"


def shown(value: Any) -> str:
    """``value`` as a message repeats it: its JSON-ish repr, cut to MAX_SHOWN characters."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def type_problems(scopes: Iterable[tuple[str, Mapping[str, Any]]], types: Mapping[str, Kind]) -> list[TypeProblem]:
    """Every key of ``types`` present in a scope with a non-null value of the wrong type; a scope is (the prefix its
    keys are named with, the object). A dotted key is looked up in the object its first part names."""
    out: list[TypeProblem] = []
    for prefix, scope in scopes:
        for key, kind in types.items():
            parent, _, leaf = key.rpartition(".")
            holder = scope.get(parent) if parent else scope
            if not isinstance(holder, Mapping) or leaf not in holder:
                continue
            value = holder[leaf]
            if value is not None and not kind.accepts(value):
                out.append(TypeProblem(prefix + key, value, kind))
    return out


def without(doc: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """A copy of ``doc`` without the dotted ``keys`` (the objects on their paths copied, ``doc`` untouched): what
    the typed readers read once the keys of the wrong type are set aside."""
    out = dict(doc)
    for key in keys:
        head, _, rest = key.partition(".")
        if not rest:
            out.pop(head, None)
        elif isinstance(out.get(head), Mapping):
            out[head] = without(out[head], [rest])
    return out
