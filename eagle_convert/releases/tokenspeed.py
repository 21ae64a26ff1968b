"""TokenSpeed releases, read from the released wheel (``pip download --no-deps tokenspeed==X``, a pure-Python wheel;
paths under ``tokenspeed/``), never run here: its kernels package (``tokenspeed-kernel``) refuses to import without
a CUDA, ROCm or Ascend device (``tokenspeed_kernel/platform.py:386-403`` of tokenspeed-kernel 0.1.4), and every
model module imports it.

Modelled: 0.1.1. Where the ids come from: the draft's ``eagle_config`` ids when the config has an ``eagle_config``
object (an object without ids: the target's defaults), else its top-level list, on the config and then on its
``text_config``; the server argument ``--eagle3-layers-to-capture`` replaces both. Every target class but Kimi-K3's
adds 1 to each id (no "first id is 1" test); Kimi-K3 takes them as they are. A target class that does not capture
starts anyway and feeds the draft its last hidden state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eagle_convert.releases.model import (
    IDS_KEY,
    Behaviour,
    Capture,
    Cite,
    DraftClass,
    Release,
    TargetClasses,
    TensorFate,
    ids_at,
    int_list,
)

VERSION = "0.1.1"
WHEEL = f"pip download --no-deps tokenspeed=={VERSION} (py3-none-any); paths under tokenspeed/"
SETTING = "eagle3_layers_to_capture"  # ServerArgs field; --eagle3-layers-to-capture 1,15,28 on the command line
# How a deployment serves a target with an EAGLE3 draft (runtime/utils/server_args.py:2749-2790, the --speculative-*
# options; cli/__main__.py:61-78, ``tokenspeed serve``).
LAUNCH = (
    "tokenspeed serve {target} --speculative-algorithm EAGLE3 \\\n"
    "    --speculative-draft-model-path {draft} --speculative-num-steps {steps} \\\n"
    "    --speculative-eagle-topk 1 --speculative-num-draft-tokens {tokens}"
)


def _c(file: str, lines: str) -> Cite:
    return Cite(f"tokenspeed/runtime/{file}", lines)


FACTORY = "execution/factory.py"
LLAMA = "models/llama_eagle3.py"
DSV3 = "models/deepseek_v3.py"
IDS_CITE = _c(FACTORY, "47-78")
SETTING_CITE = _c(FACTORY, "193-200 (utils/server_args.py:1160-1163, 2841-2846)")
NO_CAPTURE_FEEDS = (
    "start-up goes on (the capture is set only when the target class has set_eagle3_layers_to_capture, "
    f"{_c(FACTORY, '193-195')}, and this one's model never reads it); the logits processor then stores the target's "
    f"last hidden state, after its final norm ({_c('layers/logits_processor.py', '689-712')}), and the draft skips "
    f"fc because that state is hidden_size wide ({_c(LLAMA, '489-509')}): it is fed no aux state at all"
)


# ---- where the ids come from -------------------------------------------------------------------------------------


def read_ids(raw: Mapping[str, Any], _target_model_type: str | None) -> tuple[str, list[int] | None, Cite]:
    """``_eagle_aux_layer_ids`` (factory.py:47-78): the config, then its ``text_config``; on each, an ``eagle_config``
    object decides alone (its ids, or none), else the top-level list; the first non-empty list wins, none: the
    target's defaults."""
    candidates: list[tuple[str, Mapping[str, Any]]] = [("", raw)]
    text = raw.get("text_config")
    if isinstance(text, Mapping):
        candidates.append(("text_config.", text))
    for prefix, config in candidates:
        nested = config.get("eagle_config")
        if nested is not None:
            ids = nested.get(IDS_KEY) if isinstance(nested, Mapping) else None
            where = f"{prefix}eagle_config"
        else:
            ids, where = config.get(IDS_KEY), f"{prefix}top-level"
        if ids and int_list(ids) is not None:
            return where, list(ids), IDS_CITE
    return "defaults", None, IDS_CITE


# ---- per target class: how ids become captured states -----------------------------------------------------------

# BaseTransformerModel's loop: before layer i (0..N-1) it captures the residual entering it, hs[i], when i is in
# layers_to_capture; after the loop, index N + 1 captures the final norm's residual, hs[N]
_BASE_SET = "models/base/causal_lm.py"
_BASE = Capture(
    "+1 (id N: hs[N]; id N-1: none)",
    True,
    _c(_BASE_SET, "271-282 (loop: models/base/transformer_model.py:207-225; hs[N]: 240-253)"),
    final_index=_c("models/base/transformer_model.py", "240-253"),
)
# DeepseekV3Model's own loop: before layer i it captures hidden + residual, hs[i]; nothing after the last layer
_DEEPSEEK = Capture("+1", False, _c(DSV3, "2073-2080 (loop: 1995-2010)"))
CAPTURES: Mapping[str, Capture] = {
    "llama": _BASE,
    "gpt_oss": _BASE,  # GptOssModel is a BaseTransformerModel (models/gpt_oss.py:473-478)
    "deepseek_v3": _DEEPSEEK,
    "deepseek_v32": _DEEPSEEK,  # DeepseekV32ForCausalLM: the same set_eagle3_layers_to_capture (deepseek_v3.py:2073)
    "kimi_k2": _DEEPSEEK,  # served as DeepseekV3ForCausalLM
    "glm_moe_dsa": _DEEPSEEK,  # GlmMoeDsaForCausalLM(DeepseekV3ForCausalLM), GlmMoeDsaModel(DeepseekV3Model)
    # KimiK25ForConditionalGeneration builds a DeepseekV3ForCausalLM language model and hands the ids to it
    "kimi_k25": Capture("+1", False, _c("models/kimi_k25.py", "79-90, 274-281 (models/deepseek_v3.py:2073-2080)")),
    # one-based completed-layer ids, unchanged: after layer i it captures when i + 1 is among them, hs[i + 1]
    "kimi_k3": Capture(
        "as-is (sorted, unique, 1..N)",
        True,
        _c("models/kimi_k3.py", "3639-3658 (loop: 3538-3540; KimiK3ForConditionalGeneration: 4154-4159)"),
        strict_ids=_c("models/kimi_k3.py", "3647-3657"),
    ),
    # Qwen3_5ForCausalLM's loop (the model of Qwen3_5(Moe)ForConditionalGeneration and Qwen3_5MoeForCausalLM)
    **dict.fromkeys(
        ("qwen3_5", "qwen3_5_moe", "qwen3_5_moe_text"),
        Capture("+1", False, _c(_BASE_SET, "271-282 (loop: models/qwen3_5.py:1019-1036)")),
    ),
    "longcat_flash": Capture("+1", False, _c("models/longcat_flash.py", "999-1005 (loop: 912-918)")),
}

# The registered target classes that capture (tokenspeed/runtime/models/*.py EntryClass, registered by class name,
# models/registry.py:100-131), and where their capture comes from.
_CAPTURING = {
    "LlamaForCausalLM": _BASE.cite,
    "GptOssForCausalLM": _BASE.cite,
    "DeepseekV3ForCausalLM": _DEEPSEEK.cite,
    "DeepseekV32ForCausalLM": _DEEPSEEK.cite,
    "GlmMoeDsaForCausalLM": _DEEPSEEK.cite,
    "KimiK25ForConditionalGeneration": CAPTURES["kimi_k25"].cite,
    "KimiK3ForConditionalGeneration": CAPTURES["kimi_k3"].cite,
    "Qwen3_5ForConditionalGeneration": CAPTURES["qwen3_5"].cite,
    "Qwen3_5MoeForConditionalGeneration": CAPTURES["qwen3_5"].cite,
    "Qwen3_5MoeForCausalLM": CAPTURES["qwen3_5"].cite,
    "LongcatFlashForCausalLM": CAPTURES["longcat_flash"].cite,
}
# Registered target classes that inherit set_eagle3_layers_to_capture (causal_lm.py:271-282) but whose model never
# reads layers_to_capture: their forward returns (hidden_states, None)
_SILENT = {
    "Qwen2ForCausalLM": "models/qwen2.py:335-367",
    "Qwen3ForCausalLM": "models/qwen3.py:357-389",
    "Qwen3MoeForCausalLM": "models/qwen3_moe.py:169-195",
}
TARGET_CLASSES = TargetClasses(
    eagle3=_CAPTURING,
    without=frozenset(_SILENT),
    refusal=_c("models/registry.py", "48-60"),
    fallback="the model registry has no class for it and raises ValueError: TokenSpeed cannot serve this target",
    fallback_eagle3=False,
    fallback_cite=_c("models/registry.py", "48-60, 86-97"),
    registered=44,  # EntryClass names in models/*.py (27 define or inherit set_eagle3_layers_to_capture)
    without_feeds=NO_CAPTURE_FEEDS,
)


def _aux_capture(_raw: Mapping[str, Any], _model_type: str | None) -> tuple[bool | None, Cite]:
    # EAGLE3 asks the target for the capture whenever its class has the method; use_aux_hidden_state is not read
    return True, _c(FACTORY, "193-200")


# ---- draft classes -----------------------------------------------------------------------------------------------


def _top(raw: Mapping[str, Any], key: str) -> bool:
    return bool(raw.get(key))


def _k_llama(raw: Mapping[str, Any]) -> tuple[int, str]:
    # len(config.eagle_aux_hidden_state_layer_ids) if the attribute exists, else 3: the top-level list only
    ids = raw.get(IDS_KEY)
    if IDS_KEY in raw and isinstance(ids, list):
        return len(ids), "len(top-level ids)"
    return 3, "default 3 (no top-level ids)" if IDS_KEY not in raw else "top-level ids not a list: len() fails"


def _k_mla(raw: Mapping[str, Any]) -> tuple[int, str]:
    # _get_eagle_layer_ids: eagle_config decides when present (its ids, or None -> 3), else the top-level list
    nested = raw.get("eagle_config")
    if nested is not None:
        ids = ids_at(raw, "eagle_config", IDS_KEY)
        return (len(ids), "len(eagle_config ids)") if isinstance(ids, list) else (3, "default 3 (eagle_config, no ids)")
    top = raw.get(IDS_KEY)
    return (len(top), "len(top-level ids)") if isinstance(top, list) else (3, "default 3")


LLAMA_EAGLE3 = DraftClass(
    name="llama_eagle3.LlamaForCausalLMEagle3",
    attention="mha",
    fc_norm=lambda raw: _top(raw, "fc_norm"),
    norm_output=lambda raw: _top(raw, "norm_output"),
    norm_before_fc=lambda raw: _top(raw, "norm_before_fc"),
    norm_before_residual=lambda raw: False,
    use_aux_hidden_state=lambda raw: True,
    num_aux=_k_llama,
    qk_norm=False,
    unknown_tensors="dropped",
    legacy_aux_norm_names=False,
    bias_is="none",
    reads_norm_before_residual=False,
    null_target_hidden_size="hidden_size",
    null_draft_vocab_size="uses the target's lm_head and ignores any draft head",
    embed_tokens="replaced by the target's",
    one_layer=_c(LLAMA, "561-562"),
    cites=(
        Behaviour(
            "K", "len(top-level eagle_aux_hidden_state_layer_ids) if the key exists, else 3", _c(LLAMA, "413-417")
        ),
        Behaviour(
            "fc",
            "fc is hidden_size * K wide, without bias: target_hidden_size and the bias key are not read",
            _c(LLAMA, "419-429"),
        ),
        Behaviour("norm_before_fc", "top-level norm_before_fc only (eagle_config's is not read)", _c(LLAMA, "431-439")),
        Behaviour("fc_norm", "top-level fc_norm only (use_aux_norm is not read)", _c(LLAMA, "440-449")),
        Behaviour("norm_output", "top-level norm_output", _c(LLAMA, "460, 538-539")),
        Behaviour("fc-applied", "fc runs only when the fed state is wider than the embeddings", _c(LLAMA, "489-509")),
        Behaviour("norm_before_residual", "not read: the residual is the fc output", _c(LLAMA, "340")),
        Behaviour("num_hidden_layers", "anything but 1 fails the load (ValueError)", _c(LLAMA, "561-562")),
        Behaviour(
            "lm_head",
            "tie_word_embeddings: lm_head is embed_tokens; else a head of draft_vocab_size (or vocab_size), taken from "
            "the target when draft_vocab_size is missing or null",
            _c(LLAMA, "566-588"),
        ),
        Behaviour("layers.0", "a name starting layers.0. is read as midlayer.", _c(LLAMA, "644-646")),
        Behaviour("tensor:d2t", "any name containing d2t: hot_token_id = d2t + arange", _c(LLAMA, "648-652")),
        Behaviour("tensor:t2d", "any name containing t2d is skipped", _c(LLAMA, "654-655")),
        Behaviour(
            "unknown-tensors",
            "a name with no parameter (as given or with model. prefixed) is skipped without a word",
            _c(LLAMA, "657-676"),
        ),
        Behaviour(
            "embed_tokens",
            "the target's embedding replaces the draft's unless target_hidden_size differs from hidden_size",
            _c(LLAMA, "684-711"),
        ),
    ),
)

EAGLE3_MLA = DraftClass(
    name="deepseek_v3.Eagle3DeepseekV2ForCausalLM",
    attention="mla",
    fc_norm=lambda raw: _top(raw, "fc_norm"),
    norm_output=lambda raw: _top(raw, "norm_output"),
    norm_before_fc=lambda raw: None,
    norm_before_residual=lambda raw: False,
    use_aux_hidden_state=lambda raw: True,
    num_aux=_k_mla,
    qk_norm=False,
    unknown_tensors="dropped",
    legacy_aux_norm_names=False,
    builds_mla=lambda raw: True,
    bias_is="none",
    reads_norm_before_residual=False,
    null_target_hidden_size="crash",
    null_draft_vocab_size="vocab_size, and the target's head when the key is missing",
    embed_tokens="replaced by the target's",
    one_layer=_c(DSV3, "2662-2663"),
    cites=(
        Behaviour(
            "K",
            "len(eagle_config ids) when eagle_config exists (none there: 3), else len(top-level ids), else 3",
            _c(DSV3, "2494-2501, 2521-2522"),
        ),
        Behaviour(
            "fc",
            "fc is target_hidden_size (default hidden_size; null fails) * K wide, without bias",
            _c(DSV3, "2524-2537"),
        ),
        Behaviour("fc_norm", "top-level fc_norm only", _c(DSV3, "2548-2557")),
        Behaviour("norm_output", "top-level norm_output", _c(DSV3, "2568, 2636-2637")),
        Behaviour("num_hidden_layers", "anything but 1 fails the load (ValueError)", _c(DSV3, "2662-2663")),
        Behaviour(
            "lm_head",
            "a head of draft_vocab_size (or vocab_size); taken from the target when the key is missing and the "
            "checkpoint has no lm_head",
            _c(DSV3, "2672-2698, 2758-2761"),
        ),
        Behaviour("tensor:d2t", "any name containing d2t: hot_token_id = d2t + arange", _c(DSV3, "2746-2750")),
        Behaviour("tensor:t2d", "any name containing t2d is skipped", _c(DSV3, "2751-2752")),
        Behaviour("names", "^layers.0. -> midlayer.; model. prefixed to all but lm_head", _c(DSV3, "2756-2762")),
        Behaviour("unknown-tensors", "a name with no parameter is skipped with a warning", _c(DSV3, "2102-2115")),
        Behaviour(
            "embed_tokens",
            "the target's embedding replaces the draft's when the shapes match, unless target_hidden_size differs",
            _c(DSV3, "2796-2812"),
        ),
    ),
)

DRAFT_CLASSES = {"LlamaForCausalLMEagle3": LLAMA_EAGLE3, "Eagle3DeepseekV2ForCausalLM": EAGLE3_MLA}
_REWRITE = _c("utils/hf_transformers_utils.py", "460-475")
_REGISTRY = _c("models/registry.py", "48-60, 86-97")


def draft_class(raw: Mapping[str, Any]) -> tuple[DraftClass | None, str]:
    """The model loader walks every name of ``architectures`` in order and builds the first registered one; before
    that, a draft's architectures[0] without NextN, MTP, Eagle, DFlash or DSpark in it gets NextN appended."""
    archs = raw.get("architectures")
    names = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    if not names:
        return None, f"no architectures: the registry resolves nothing ({_REGISTRY})"
    first = names[0]
    if not any(tag in first for tag in ("NextN", "MTP", "Eagle", "DFlash", "DSpark")):
        names[0] = f"{first}NextN"
    for name in names:
        if name in DRAFT_CLASSES:
            return DRAFT_CLASSES[name], f"architectures {name} (EntryClass, {_REGISTRY})"
        if name.endswith("NextN") and name.removesuffix("NextN") in ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"):
            return None, f"{first} is rewritten to {name} ({_REWRITE}), an MTP head, not an EAGLE3 draft"
    return None, (
        f"no EAGLE3 draft class is registered as {' or '.join(names)}"
        + (f" ({first} is rewritten to {names[0]}, {_REWRITE})" if names[0] != first else "")
        + f"; start-up fails with ValueError ({_REGISTRY})"
    )


def tensor_fates(raw: Mapping[str, Any], cls: str | None, _target_vocab: int | None) -> tuple[TensorFate, ...]:
    if cls is None:
        return ()
    mla = cls == EAGLE3_MLA.name
    lines = ("2746-2752", "2102-2115") if mla else ("648-655", "657-676")
    file = DSV3 if mla else LLAMA
    out = [
        TensorFate("d2t", "loaded", f"as hot_token_id = d2t + arange ({_c(file, lines[0])})"),
        TensorFate("t2d", "dropped", f"skipped ({_c(file, lines[0])})"),
        TensorFate("fc.bias", "dropped", f"fc is built without bias: no parameter takes it ({_c(file, lines[1])})"),
    ]
    if not mla:
        out.append(
            TensorFate(
                "fc_norm.0.weight",
                "dropped",
                f"skipped without a word unless the top-level fc_norm is true ({_c(LLAMA, '440-449, 669-676')})",
            )
        )
        width, hidden = raw.get("target_hidden_size"), raw.get("hidden_size")
        if isinstance(width, int) and isinstance(hidden, int) and width != hidden:
            out.append(
                TensorFate(
                    "fc.weight",
                    "refused",
                    f"fc is built hidden_size ({hidden}) * K wide, not target_hidden_size ({width}) * K "
                    f"({_c(LLAMA, '419-429')}): the shape check fails the load "
                    f"({_c('layers/linear.py', '465')})",
                )
            )
    return tuple(out)


BEHAVIOURS = (
    Behaviour(
        "ids-location",
        "the draft config, then its text_config: an eagle_config object's ids (an eagle_config without ids: the "
        "next candidate, then the defaults), else the top-level list; an empty list counts as none",
        IDS_CITE,
    ),
    Behaviour(
        "ids-setting",
        "--eagle3-layers-to-capture (comma-separated ids) replaces the ids read from the draft",
        SETTING_CITE,
    ),
    Behaviour(
        "target-classes",
        f"{len(_CAPTURING)} registered target classes capture aux states; Qwen2, Qwen3 and Qwen3-MoE inherit the "
        "method but their models never capture, and start-up goes on; an unregistered target is refused",
        _c(FACTORY, "193-200"),
    ),
    Behaviour(
        "capture-state",
        "a captured state is the residual entering the layer",
        _c("models/base/decoder_layer.py", "135-145"),
    ),
    Behaviour("no-capture-feeds", NO_CAPTURE_FEEDS, _c("layers/logits_processor.py", "689-712")),
    *(
        Behaviour(f"capture:{mt}", c.rule + ("; can capture hs[N]" if c.can_capture_n else ""), c.cite)
        for mt, c in sorted(CAPTURES.items())
    ),
    *(
        Behaviour(f"no-capture:{arch}", "the model returns no aux states", _c(*where.split(":")))
        for arch, where in _SILENT.items()
    ),
    Behaviour(
        "draft-classes",
        "LlamaForCausalLMEagle3 and Eagle3DeepseekV2ForCausalLM (EntryClass); architectures are walked in order; "
        "a draft's architectures[0] without NextN/MTP/Eagle/DFlash/DSpark gets NextN appended",
        _REWRITE,
    ),
    *(
        Behaviour(f"{cls.name.split('.')[-1]}:{b.key}", b.does, b.cite)
        for cls in DRAFT_CLASSES.values()
        for b in cls.cites
    ),
)

TOKENSPEED_0_1_1 = Release(
    name=f"tokenspeed@{VERSION}",
    engine="tokenspeed",
    version=VERSION,
    runner=None,
    summary=(
        "TokenSpeed 0.1.1, modelled from its wheel and not run here (its kernels need a GPU); reads the draft's ids "
        "(eagle_config object first), --eagle3-layers-to-capture wins; not in the default selection"
    ),
    source=WHEEL,
    read_ids=read_ids,
    capture=lambda model_type: CAPTURES.get(model_type or ""),
    draft_class=draft_class,
    behaviours=BEHAVIOURS,
    newest=True,
    deployed=False,  # kept out of --engine's default (deployed) selection: choose it with --engine tokenspeed
    target_classes=TARGET_CLASSES,
    aux_capture=_aux_capture,
    tensor_fates=tensor_fates,
    ids_setting=(SETTING, SETTING_CITE),
)
RELEASES = (TOKENSPEED_0_1_1,)
