"""How transformers builds the streamed target (reference/hf_target.py): the config it reads (a remote-code wrapper
read as the trunk transformers has), the class it maps that config to, the text trunk's config and tensors, its decoder
layers and the modules that run on text alone, and the build on the meta device.

Nothing here reads a weight: reference/hf_target.py streams them into the model built from these answers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from eagle_convert.errors import ConfigError
from eagle_convert.reference.weights import SafetensorsWeights

_CONFIG_HINT = "--target must be a model transformers can build (AutoConfig reads its config.json)"

# Remote-code wrappers whose trunk transformers has: model_type -> (the trunk's model_type, where its config is,
# the prefix of the trunk's tensor names in the wrapper's checkpoint; the trunk reads them without it).
# Kimi K2/K2-Thinking ship ``kimi_k2`` (a DeepSeek-V3 config under another name); Kimi K2.5/K2.6 ship ``kimi_k25``,
# a multimodal wrapper whose ``text_config`` is a DeepSeek-V3 config and whose text weights sit under
# ``language_model.``.
TRUNKS: dict[str, tuple[str, str | None, str]] = {
    "kimi_k2": ("deepseek_v3", None, ""),
    "kimi_k25": ("deepseek_v3", "text_config", "language_model."),
}


def transformers_version() -> str:
    import transformers

    return str(transformers.__version__)


def hf_config(directory: Path, raw: Mapping[str, Any]) -> Any:
    """The target's config as transformers reads it (``AutoConfig``); a remote-code wrapper around a trunk
    transformers has is read as that trunk (:data:`TRUNKS`). An architecture transformers lacks: ConfigError."""
    from transformers import CONFIG_MAPPING, AutoConfig

    model_type = raw.get("model_type")
    trunk = TRUNKS.get(model_type) if isinstance(model_type, str) else None
    if trunk is not None:
        inner, key, _ = trunk
        body = raw.get(key) if key else raw
        if not isinstance(body, dict):
            raise ConfigError(f"model_type {model_type!r} has no {key} object", path=directory / "config.json")
        body = {k: v for k, v in body.items() if k not in ("model_type", "auto_map", "architectures")}
        return CONFIG_MAPPING[inner](**body)
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        raise ConfigError(
            f"the target's model_type {model_type!r} is not an architecture transformers {transformers_version()} has",
            path=directory / "config.json",
            hint="the reference runs the targets transformers can build; upgrade transformers, or probe against a "
            "checkpoint of a supported architecture",
        )
    try:
        return AutoConfig.from_pretrained(str(directory), trust_remote_code=False)
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise ConfigError(
            f"transformers cannot read the target's config: {exc}", path=directory / "config.json", hint=_CONFIG_HINT
        ) from None


def model_class(config: Any) -> Any:
    """The class transformers builds for ``config``: its causal LM, else its image-text-to-text model. A causal LM
    that takes only the text sub-config (Qwen3.5's text-only class, mapped from the multimodal config) is passed
    over: the whole config builds the image-text-to-text model, whose tensor names the checkpoint has."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    text_class = (getattr(config, "sub_configs", None) or {}).get("text_config")
    for auto in (AutoModelForCausalLM, AutoModelForImageTextToText):
        if type(config) in auto._model_mapping:
            cls = auto._model_mapping[type(config)]
            if text_class is None or getattr(cls, "config_class", None) is not text_class:
                return cls
    raise ConfigError(
        f"transformers {transformers_version()} has no causal language model for model_type {config.model_type!r}",
        hint="the reference runs text and image-text-to-text targets",
    )


def text_config(config: Any) -> Any:
    """The config of the text trunk (the config itself for a text model)."""
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def trunk_weights(weights: SafetensorsWeights, raw: Mapping[str, Any]) -> SafetensorsWeights:
    """The checkpoint's tensors as the model transformers builds names them: a remote-code wrapper's (:data:`TRUNKS`)
    trunk tensors with its prefix stripped, the rest of the wrapper's (its vision tower) left out."""
    model_type = raw.get("model_type")
    prefix = TRUNKS[model_type][2] if isinstance(model_type, str) and model_type in TRUNKS else ""
    return weights.under(prefix) if prefix else weights


def is_head(name: str) -> bool:
    """Whether a module is one of the final modules a causal LM runs after its layers (the final norm, the head)."""
    return name.split(".")[-1] in ("lm_head", "norm", "norm_f", "final_layernorm")


# Module names of the towers a multimodal model runs on images or audio: never on text, never read.
_NOT_TEXT = frozenset(
    {
        "visual",
        "vision_tower",
        "vision_model",
        "audio_tower",
        "multi_modal_projector",
        "vision_embed_tokens",
        "connector",
        "mm_projector",
        "embed_vision",
        "embed_audio",
        "audio_model",
    }
)


def runs_on_text(name: str) -> bool:
    """Whether the module at ``name`` runs with text input only (a vision or audio tower never does: never read)."""
    return not any(part in _NOT_TEXT for part in name.split("."))


def decoder_layers(model: Any, layers: int) -> list[torch.nn.Module]:
    """The text trunk's decoder layers: the ModuleList of ``layers`` modules outside any vision or audio tower."""
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == layers and runs_on_text(name):
            if name.endswith("layers") or name.endswith(".h") or name.endswith("blocks"):
                return list(module)
    raise ConfigError(f"cannot find the target's {layers} decoder layers in {type(model).__name__}")


@contextmanager
def meta_parameters() -> Iterator[None]:
    """Parameters created inside are on the meta device; buffers (rotary tables) are real."""
    from accelerate import init_empty_weights  # type: ignore[import-untyped]

    with init_empty_weights(include_buffers=False):
        yield
