"""TensorRT-LLM's AutoDeploy backend, a runner of TensorRT-LLM as vLLM's V1 and V2 are runners of vLLM: chosen with
``LLM(backend="_autodeploy")`` or ``trtllm-serve --backend _autodeploy``, it builds its own EAGLE3 drafter instead of
the PyTorch backend's ``Eagle3ForCausalLM`` (the other trtllm records), and its own capture of the target's states.
Modelled from its source and never run here (CUDA only).

Read from NVIDIA/TensorRT-LLM as stored by the reference index, each file at the commit its citations name (main-branch
commits, no release tag: the 1.2.1 tag could not be read here, see ``trtllm.py``):

- ``tensorrt_llm/_torch/auto_deploy/models/custom/modeling_eagle.py`` at 09562d6: ``EagleConfig`` (the drafter's
  defaults per model_type), ``LlamaRotaryEmbedding``, ``Eagle3Attention``, ``LlamaEagleLayer``, ``EagleModel``,
  ``EagleDrafterForCausalLM`` and ``EagleWrapper`` (fc, d2t, embeddings, the captured buffers);
- ``tensorrt_llm/_torch/auto_deploy/transform/library/hidden_states.py`` at 06b74be: which target layers are
  captured (``DetectHiddenStatesForCapture``), from the deployment's ``eagle3_layers_to_capture``.

Not read with lines, so no behaviour cites them: the drafter factory (its ``_build_model`` passes the draft config's
own ``model_type`` to ``EagleConfig.from_base_config``), the checkpoint loader (what it does with a tensor the module
has no parameter for, or one of another shape), and the names of the capture buffers (their concatenation order).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eagle_convert.releases.model import Behaviour, Capture, Cite, DeploymentCapture, DraftClass, Release
from eagle_convert.releases.trtllm import SETTING

COMMIT = "09562d6"
MODELING = f"tensorrt_llm/_torch/auto_deploy/models/custom/modeling_eagle.py@{COMMIT}"
HIDDEN_STATES = "tensorrt_llm/_torch/auto_deploy/transform/library/hidden_states.py@06b74be"
RUNNER = "autodeploy"
DEFAULT_K = 3  # the llama drafter's num_capture_layers default (modeling_eagle.py:122)


def _m(lines: str) -> Cite:
    return Cite(MODELING, lines)


def _h(lines: str) -> Cite:
    return Cite(HIDDEN_STATES, lines)


CAPTURE = DeploymentCapture(
    key=SETTING,
    shift=1,
    min_layers=6,  # N <= 6: ValueError (hidden_states.py:89-90); the PyTorch backend refuses N <= 5
    single_layer=None,  # no one-layer case: a 1-layer target is refused like any N <= 6
    setting=_h("82"),
    defaults=_h("84-91, 173-175"),
    sorts=_m("1051-1072"),
    capture=_h("104-142, 183-199"),
    num_capture=_m("640-650"),
)
_CAPTURE = Capture(rule="+1", can_capture_n=True, cite=CAPTURE.capture)

_DRAFT_CITES = (
    Behaviour(
        "draft-types",
        "the layers are picked by the draft config's model_type: llama builds num_hidden_layers LlamaEagleLayer; "
        "deepseek_v3 and nemotron_h build those targets' MTP layers; any other model_type fails the load with "
        "ValueError (EagleConfig refuses it first)",
        _m("77-88, 95-100, 205-209"),
    ),
    Behaviour(
        "defaults",
        "llama: the target's embeddings, its own lm_head, num_capture_layers 3; a key of the draft config overrides "
        "a default",
        _m("118-133, 224-232"),
    ),
    Behaviour(
        "mtp-types",
        "deepseek_v3 and nemotron_h are MTP drafters: one captured state, no fc, the target's lm_head and its final "
        "norm applied to the captured state; no EAGLE3 draft runs there",
        _m("134-160"),
    ),
    Behaviour(
        "qkv",
        "every layer's attention takes [embeds, hidden] (2H); q/k/v/o bias from attention_bias; no q/k norm",
        _m("405-431"),
    ),
    Behaviour(
        "norms",
        "hidden_norm (the fed state), input_layernorm (embeddings), post_attention_layernorm, the final norm: no "
        "fc_norm, no input_norm (norm_before_fc) and no norm-before-residual branch; the residual is the fed state "
        "before hidden_norm",
        _m("545-547, 584-600, 742-745"),
    ),
    Behaviour(
        "fc",
        "fc in-width = hidden_size x num_capture_layers (the config's, default 3): target_hidden_size is never read; "
        "bias from the top-level bias; no fc when num_capture_layers <= 1; applied whenever built",
        _m("639-650, 918-925"),
    ),
    Behaviour(
        "norm_output",
        "the state carried to the next draft step is the final norm's output only with "
        "eagle_config.return_hidden_post_norm; the top-level norm_output is not read",
        _m("758-759, 798"),
    ),
    Behaviour(
        "rope",
        "RoPE from a top-level rope_type attribute only: absent, null or default -> plain RoPE at rope_theta; ntk -> "
        "NTK scaling (orig_max_position_embeddings); any other -> ValueError at load; rope_scaling (YaRN, llama3, "
        "linear) is never read",
        _m("240-273"),
    ),
    Behaviour(
        "d2t",
        "d2t is an int32 parameter when draft_vocab_size (missing or null: vocab_size) differs from vocab_size; a "
        "draft id becomes id + d2t[id]",
        _m("631-637, 928-933"),
    ),
    Behaviour(
        "embed_tokens",
        "llama drafts take the target's embeddings (load_embedding_from_target): the draft builds no embed_tokens",
        _m("120, 624-629, 935-941"),
    ),
    Behaviour("lm_head", "its own lm_head of draft_vocab_size rows (llama)", _m("748-756")),
    Behaviour(
        "names",
        "checkpoint names but lm_head.* and norm.* are prefixed model., midlayer becomes layers; one layer is the "
        "module itself (model.layers.*), several a ModuleList (model.layers.i.*)",
        _m("90-92, 129-132"),
    ),
)

BEHAVIOURS = (
    Behaviour(
        "ids-location",
        "the captured layers are the deployment's speculative_config.eagle3_layers_to_capture, handed to the "
        "capture transform; the draft's eagle_aux_hidden_state_layer_ids are not read",
        CAPTURE.setting,
    ),
    Behaviour(
        "ids-convention",
        "layer i is captured at its last residual add: the output of decoder layer i, hs[i+1], up to hs[N]",
        _h("104-142"),
    ),
    Behaviour(
        "defaults",
        "unset: layers {1, N//2-1, N-4} = hs[2, N//2, N-3]; N <= 6 (one layer too): ValueError('Not enough hidden "
        "layers for default EAGLE3 capture') at start-up, where the PyTorch backend refuses N <= 5 only",
        CAPTURE.defaults,
    ),
    Behaviour(
        "minus-one",
        "-1 in the set is layer N-1: hs[N], the last layer's output before the final norm (the PyTorch backend's -1 "
        "is the final norm's output)",
        _h("178-181"),
    ),
    Behaviour(
        "order",
        "the captured buffers are concatenated in the order of their names (names set by the cache transform, not "
        "read here: modelled as ascending layer order)",
        CAPTURE.sorts,
    ),
    Behaviour(
        "num-capture",
        "K of fc is the draft config's num_capture_layers (default 3), not the number of captured layers: a set of "
        "another size does not fit fc",
        _m("122, 640-650"),
    ),
    *(Behaviour(f"EagleDrafterForCausalLM:{b.key}", b.does, b.cite) for b in _DRAFT_CITES),
)


def _eagle_config(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    nested = raw.get("eagle_config")
    return nested if isinstance(nested, Mapping) else {}


def _capture_layers(raw: Mapping[str, Any]) -> int:
    k = raw.get("num_capture_layers")
    return k if isinstance(k, int) and not isinstance(k, bool) else DEFAULT_K


def _num_aux(raw: Mapping[str, Any]) -> tuple[int, str]:
    if "num_capture_layers" in raw:
        return _capture_layers(raw), f"num_capture_layers ({_m('640-650')})"
    return DEFAULT_K, f"num_capture_layers default {DEFAULT_K} ({_m('122')}); the capture count does not size fc"


def _fc_in_width(raw: Mapping[str, Any]) -> int | None:
    h = raw.get("hidden_size")
    return h * _capture_layers(raw) if isinstance(h, int) and not isinstance(h, bool) else None


def _rope(raw: Mapping[str, Any]) -> tuple[str | None, str | None]:
    kind = raw.get("rope_type")
    if kind in (None, "default"):
        return "default", None
    if kind == "ntk":
        return "ntk", None
    return None, f"top-level rope_type {kind!r}: ValueError('Not support rope_type') at load ({_m('247-273')})"


EAGLE_DRAFTER = DraftClass(
    name="modeling_eagle.EagleDrafterForCausalLM (LlamaEagleLayer)",
    attention="mha",
    fc_norm=lambda raw: False,
    norm_output=lambda raw: bool(_eagle_config(raw).get("return_hidden_post_norm", False)),
    norm_before_fc=lambda raw: None,
    norm_before_residual=lambda raw: False,
    use_aux_hidden_state=lambda raw: True,
    num_aux=_num_aux,
    qk_norm=False,
    unknown_tensors="not read",  # the loader was not read
    legacy_aux_norm_names=False,
    cites=_DRAFT_CITES,
    bias_is="fc",
    reads_norm_before_residual=False,
    null_target_hidden_size="hidden_size",  # never read: fc is sized from hidden_size
    null_draft_vocab_size="vocab_size",
    embed_tokens="replaced by the target's",
    rope=_rope,
    fc_in_width=_fc_in_width,
    fc_inputs_from_config=True,
)


def _draft_class(raw: Mapping[str, Any]) -> tuple[DraftClass | None, str]:
    model_type = raw.get("model_type")
    if model_type == "llama":
        return EAGLE_DRAFTER, f"model_type llama builds LlamaEagleLayer ({_m('77-79, 95-100')})"
    if model_type in ("deepseek_v3", "nemotron_h"):
        return None, (
            f"model_type {model_type} builds the {model_type} MTP drafter, not an EAGLE3 one: one captured state, no "
            f"fc ({_m('134-160')}); AutoDeploy's only EAGLE3 layer is LlamaEagleLayer (model_type llama)"
        )
    return None, (
        f"model_type {model_type!r} is none of llama, deepseek_v3, nemotron_h: the load fails with ValueError "
        f"({_m('205-209')}); AutoDeploy's EAGLE3 layer is LlamaEagleLayer (model_type llama)"
    )


def _read_ids(_raw: Mapping[str, Any], _model_type: str | None) -> tuple[str, list[int] | None, Cite]:
    return "defaults", None, CAPTURE.setting  # never the draft's ids: the deployment's setting (engine_view)


TRTLLM_AUTODEPLOY = Release(
    name=f"trtllm@main-{COMMIT}-{RUNNER}",
    engine="trtllm",
    version=f"main-{COMMIT}",
    runner=RUNNER,
    summary=(
        f"TensorRT-LLM's AutoDeploy backend (backend _autodeploy) at main {COMMIT}, modelled from its source and not "
        "run here: its own EAGLE3 drafter (model_type llama only, no fc_norm or input_norm, fc sized from "
        "hidden_size, the post-norm state only through eagle_config.return_hidden_post_norm, RoPE from a top-level "
        "rope_type: rope_scaling is not read); captures the deployment's eagle3_layers_to_capture; not in the "
        "default selection"
    ),
    source=(
        "NVIDIA/TensorRT-LLM source as stored by the reference index, not a release tag: "
        f"tensorrt_llm/_torch/auto_deploy/models/custom/modeling_eagle.py at commit {COMMIT}, "
        "tensorrt_llm/_torch/auto_deploy/transform/library/hidden_states.py at commit 06b74be"
    ),
    read_ids=_read_ids,
    capture=lambda _model_type: _CAPTURE,
    draft_class=_draft_class,
    behaviours=BEHAVIOURS,
    deployed=False,
    deployment_capture=CAPTURE,
    caveats=(
        Behaviour(
            "layers-prefix",
            "a one-layer draft stored as layers.0.* is read as model.layers.0.*, which its single LlamaEagleLayer "
            "(model.layers.*) does not have; what the loader does with those names was not read",
            _m("90-92, 129-132"),
        ),
    ),
    eagle3_attentions=("mha",),
)
RELEASES = (TRTLLM_AUTODEPLOY,)
