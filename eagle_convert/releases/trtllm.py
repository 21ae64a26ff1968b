"""TensorRT-LLM releases (the PyTorch backend), modelled from its source and never run here: it needs CUDA.

The released wheels are on NVIDIA's package index, out of reach from these machines, and the repository is too large
to copy here; so the record was read from NVIDIA/TensorRT-LLM's files as stored by the reference index, each at the
commit named in its citation (``file@commit:lines``), not at a release tag:

- ``tensorrt_llm/_torch/speculative/eagle3.py`` at f933a60 (the capture: defaults, the refusal for small N, sorting);
- ``tensorrt_llm/_torch/models/modeling_speculative.py`` at b35ac1b, whose ``tensorrt_llm/version.py`` reads
  ``1.2.0rc2`` (the EAGLE3 draft class and the config keys it reads);
- ``tensorrt_llm/llmapi/llm_args.py`` (``EagleDecodingConfig``): its fields were read in the index's text, whose commit
  and lines could not be pinned here, so no behaviour cites it.

The 1.2.1 release could not be read at its tag: the repository snapshot (2,546,513,920 bytes) is over the 524,288,000
bytes that can be fetched here, PyPI's ``tensorrt-llm`` 1.2.1 is a 10 kB ``wheel_stub`` sdist that downloads the
wheel from NVIDIA's index at install time, and the index stores ``version.py`` at b35ac1b (1.2.0rc2) only.

The AutoDeploy backend's own drafter is a runner record of its own: ``trtllm_autodeploy.py``.

A second record, ``trtllm@main-00679c6``, is TensorRT-LLM's main branch as the index's newest copy of
``modeling_speculative.py`` (commit 00679c6, after 1.2.0rc2) has it: one EAGLE3 class that builds MLA attention for a
draft with ``kv_lora_rank``, and reads ``fc_norm``, ``norm_before_fc`` (from ``eagle_config``) and ``norm_output``.

Unlike SGLang and vLLM, TensorRT-LLM never reads the draft's ``eagle_aux_hidden_state_layer_ids``: the captured layers
are the deployment's ``speculative_config.eagle3_layers_to_capture`` (``DeploymentCapture``), ids of decoder layer
*outputs* (layer i feeds hs[i+1]), sorted before capture.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eagle_convert.releases.model import Behaviour, Capture, Cite, DeploymentCapture, DraftClass, Release

SOURCE = (
    "NVIDIA/TensorRT-LLM source as stored by the reference index, not a release tag: "
    "tensorrt_llm/_torch/speculative/eagle3.py at commit f933a60, "
    "tensorrt_llm/_torch/models/modeling_speculative.py at commit b35ac1b (version.py 1.2.0rc2)"
)
EAGLE3 = "tensorrt_llm/_torch/speculative/eagle3.py@f933a60"
MODELING = "tensorrt_llm/_torch/models/modeling_speculative.py@b35ac1b"
SETTING = "eagle3_layers_to_capture"


def _e(lines: str) -> Cite:
    return Cite(EAGLE3, lines)


def _m(lines: str) -> Cite:
    return Cite(MODELING, lines)


CAPTURE = DeploymentCapture(
    key=SETTING,
    shift=1,
    min_layers=5,
    single_layer=1,
    setting=_e("110-113"),
    defaults=_e("129-137"),
    sorts=_e("138-139"),
    capture=_e("208-222"),
    num_capture=_e("144"),
)

# the target-side rule, for the docs and for readers that ask a record for a family's capture: every target the
# PyTorch backend serves goes through the same spec metadata (which target classes call it was not read here)
_CAPTURE = Capture(rule="+1", can_capture_n=True, cite=_e("208-222"))

_DRAFT_CITES = (
    Behaviour("qkv", "layer 0 attention takes [embeds, hidden] (2H); q/k/v bias from attention_bias", _m("27-67")),
    Behaviour("mlp", "MLP width intermediate_size (intermediate_size_mlp for llama4_text); no MoE", _m("83-96")),
    Behaviour(
        "norms",
        "input_layernorm (embeddings), hidden_norm (the fed state), post_attention_layernorm, final norm: no fc_norm, "
        "input_norm, norm_output or norm_before_residual branch exists",
        _m("97-140"),
    ),
    Behaviour(
        "target_hidden_size",
        "fc in-width = target_hidden_size if the attribute exists, else hidden_size (an explicit null fails)",
        _m("159-162"),
    ),
    Behaviour(
        "fc",
        "fc is built only when the spec config captures more than one layer, K = its num_capture_layers (defined "
        "in llm_args.py, not read here), bias = config bias; applied only when the fed width differs from hidden_size",
        _m("164-169"),
    ),
    Behaviour("num_hidden_layers", "N draft layers (a ModuleList midlayer when N > 1)", _m("171-177")),
    Behaviour(
        "d2t",
        "d2t is a parameter only when draft_vocab_size is set and differs from vocab_size (read as an attribute)",
        _m("183-186"),
    ),
    Behaviour(
        "embed_tokens",
        "the draft builds its own embed_tokens only when target_hidden_size differs from hidden_size; otherwise "
        "the target's is used",
        _m("188-206"),
    ),
    Behaviour("draft_vocab_size", "draft_vocab_size null -> vocab_size", _m("264-266")),
    Behaviour(
        "lm_head",
        "the target's lm_head unless the checkpoint holds an lm_head tensor; every other name is prefixed model.",
        _m("301-323"),
    ),
)

EAGLE3_FOR_CAUSAL_LM = DraftClass(
    name="modeling_speculative.Eagle3ForCausalLM",
    attention="mha",
    fc_norm=lambda raw: False,
    norm_output=lambda raw: False,
    norm_before_fc=lambda raw: None,
    norm_before_residual=lambda raw: False,
    use_aux_hidden_state=lambda raw: True,
    # K comes from the deployment, not the config: engine_view replaces this with len(the captured layers)
    num_aux=lambda raw: (3, "the deployment's capture count (default 3)"),
    qk_norm=False,
    unknown_tensors="not read",  # DecoderModelForCausalLM.load_weights was not read here
    legacy_aux_norm_names=False,
    cites=_DRAFT_CITES,
    bias_is="fc",
    required_keys=("draft_vocab_size",),
    reads_norm_before_residual=False,
    null_target_hidden_size="crash",
    null_draft_vocab_size="vocab_size",
    embed_tokens="replaced by the target's",
)


def _draft_class(_raw: Mapping[str, Any]) -> tuple[DraftClass | None, str]:
    return EAGLE3_FOR_CAUSAL_LM, (
        f"the one-model builder takes Eagle3ForCausalLM (registered as EAGLE3LlamaForCausalLM, {_m('255-257')}) "
        f"whatever the draft's architectures say ({_m('479-484')}); 1.2.0rc2 has no other EAGLE3 class, none with MLA"
    )


def _read_ids(_raw: Mapping[str, Any], _model_type: str | None) -> tuple[str, list[int] | None, Cite]:
    return "defaults", None, CAPTURE.setting  # never the draft's ids: the deployment's setting (engine_view)


BEHAVIOURS = (
    Behaviour(
        "ids-location",
        "the captured layers are speculative_config.eagle3_layers_to_capture (a set, default None); the draft's "
        "eagle_aux_hidden_state_layer_ids are not read (EagleDecodingConfig in llm_args.py, read without lines)",
        CAPTURE.setting,
    ),
    Behaviour(
        "ids-convention",
        "layer i captures hidden_states + residual after decoder layer i: hs[i+1], up to hs[N]",
        CAPTURE.capture,
    ),
    Behaviour(
        "defaults",
        "unset: layers {1, N//2-1, N-4} = hs[2, N//2, N-3]; N == 1: layer 0; N <= 5: ValueError('Not enough hidden "
        "layers for default EAGLE3 capture') at start-up",
        CAPTURE.defaults,
    ),
    Behaviour(
        "defaults-one-model",
        "the one-model path (eagle3_one_model, default true) has the same defaults and refusal",
        _e("247-257"),
    ),
    Behaviour(
        "sorted",
        "a given set is sorted: a draft trained on its states in another order is fed them reordered",
        CAPTURE.sorts,
    ),
    Behaviour("sorted-one-model", "the one-model path sorts the set too", _e("258-259")),
    Behaviour(
        "minus-one",
        "two-model path: a -1 in the set is moved last; -1 is the target's final decoder output (its final norm "
        f"applied), which the target wrapper captures with no residual ({_m('533, 545-557')}); eagle3_model_arch "
        "mistral_large3 sets {-1} when the setting is unset (llm_args.py EagleDecodingConfig, lines not pinned here)",
        _e("140-143"),
    ),
    Behaviour("num-capture", "K = len(the captured layers) sizes the capture buffer", CAPTURE.num_capture),
    Behaviour(
        "target-classes",
        "a target class feeds the draft only as a SpecDecOneEngineForCausalLM (which builds the draft and captures "
        "layer -1) whose decoder layers call spec_metadata.maybe_capture_hidden_states; Gemma3ForCausalLM is neither "
        "(modeling_gemma3.py@b35ac1b:123-195, 257-258): EAGLE3 gets no states from it; the other target classes were "
        "not read here, so the views give no verdict on the target class",
        _m("497-500, 545-557"),
    ),
    Behaviour("capture-one-model", "the one-model path captures the same tensors", _e("293-305")),
    *(Behaviour(f"Eagle3ForCausalLM:{b.key}", b.does, b.cite) for b in _DRAFT_CITES),
)

# ---- TensorRT-LLM main at 00679c6 -----------------------------------------------------------------------------------
# modeling_speculative.py at commit 00679c66 (the index's newest stored copy, after 1.2.0rc2: its version.py is not
# stored at that commit, so no release is named). Its capture is eagle3.py's, read at f933a60 (the capture rules are
# the same in the two stored copies read, 001e670 and f933a60).

MAIN_COMMIT = "00679c6"
MODELING_MAIN = f"tensorrt_llm/_torch/models/modeling_speculative.py@{MAIN_COMMIT}"


def _n(lines: str) -> Cite:
    return Cite(MODELING_MAIN, lines)


def _eagle_config(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    nested = raw.get("eagle_config")
    return nested if isinstance(nested, Mapping) else {}


_MAIN_CITES = (
    Behaviour(
        "registered",
        "one class, Eagle3ForCausalLM, registered as EAGLE3LlamaForCausalLM and Eagle3DeepSeekV3ForCausalLM; the "
        "one-model builder takes it for eagle3_model_arch llama3 whatever the draft's architectures say",
        _n("883-885, 1495-1501"),
    ),
    Behaviour(
        "mla",
        "MLA attention (Eagle3MLAttention: q_lora_rank, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, "
        "v_head_dim; first layer in-width 2H) when the draft config has a non-zero kv_lora_rank, loaded by "
        "DeepseekV3WeightLoader; otherwise Llama attention (attention_bias)",
        _n("515-575, 897-905, 971-985"),
    ),
    Behaviour(
        "mistral_large3",
        "eagle3_model_arch mistral_large3 (a deployment setting) builds MistralLarge3EagleForCausalLM instead: fc over "
        "[embeds, one captured state], one DeepseekV3DecoderLayer, the target's vocabulary and lm_head; not modelled "
        "by this view",
        _n("1023-1057, 1109-1124, 1503-1506"),
    ),
    Behaviour(
        "fc_norm",
        "fc_norm (top-level config) builds one RMSNorm per captured state, applied to each chunk before fc; it takes "
        "precedence over norm_before_fc",
        _n("737-747, 1009-1017"),
    ),
    Behaviour(
        "norm_before_fc",
        "norm_before_fc is read from eagle_config only (top level: not read): input_norm over the K concatenated "
        "states before fc",
        _n("704, 727-735, 1016-1017"),
    ),
    Behaviour(
        "norm_output",
        "eagle_config.return_hidden_post_norm or the top-level norm_output: the state carried to the next step is "
        "the final norm's output",
        _n("712-714, 872-876"),
    ),
    Behaviour(
        "norm_before_residual",
        "no norm-before-residual branch: the layer's residual is the fed state before hidden_norm",
        _n("645-676"),
    ),
    Behaviour(
        "target_hidden_size",
        "fc in-width = target_hidden_size if the attribute exists, else hidden_size (an explicit null fails)",
        _n("707-710"),
    ),
    Behaviour(
        "fc",
        "fc is built only when the deployment captures more than one layer, K = num_capture_layers, bias = config "
        "bias; applied only when the fed width differs from hidden_size",
        _n("719-726, 996-1020"),
    ),
    Behaviour(
        "num_hidden_layers",
        "N draft layers (midlayer a ModuleList when N > 1); with eagle_config.next_layer_regular (default true) the "
        "layers after the first take the hidden state alone, not [embeds, hidden]",
        _n("590-598, 749-765"),
    ),
    Behaviour(
        "d2t",
        "d2t is an int32 parameter only when draft_vocab_size differs from vocab_size; t2d is never read",
        _n("773-778"),
    ),
    Behaviour("draft_vocab_size", "draft_vocab_size missing or null -> vocab_size, with a warning", _n("43-52, 894")),
    Behaviour(
        "embed_tokens",
        "the draft builds its own embed_tokens only when target_hidden_size differs from hidden_size; otherwise "
        "the target's is used",
        _n("793-811, 989-992"),
    ),
    Behaviour(
        "names",
        "checkpoint names layers.X.* are read as midlayer(.X).*; every name but lm_head is prefixed model.",
        _n("943-968"),
    ),
    Behaviour(
        "lm_head",
        "the target's lm_head unless the checkpoint holds an lm_head tensor",
        _n("913, 964-967, 993-994"),
    ),
    Behaviour(
        "eh_proj_before_attn",
        "eagle_config.eh_proj_before_attn adds enorm and eh_proj (2H -> H, bias eh_proj_bias) before the first "
        "layer, which then takes the projected state alone",
        _n("780-791, 846-849"),
    ),
    Behaviour(
        "capture-final",
        "the target wrapper captures layer -1: the output of the target's decoder stack (its final norm applied), "
        "with no residual",
        _n("1701, 1725-1730"),
    ),
)


def _main_class(attention: str) -> DraftClass:
    return DraftClass(
        name="modeling_speculative.Eagle3ForCausalLM" + (" (MLA)" if attention == "mla" else ""),
        attention=attention,
        fc_norm=lambda raw: bool(raw.get("fc_norm", False)),
        norm_output=lambda raw: bool(
            _eagle_config(raw).get("return_hidden_post_norm", False) or raw.get("norm_output", False)
        ),
        norm_before_fc=lambda raw: bool(_eagle_config(raw).get("norm_before_fc", False)),
        norm_before_residual=lambda raw: False,
        use_aux_hidden_state=lambda raw: True,
        num_aux=lambda raw: (3, "the deployment's capture count (default 3)"),
        qk_norm=False,
        unknown_tensors="not read",  # DecoderModelForCausalLM.load_weights / DeepseekV3WeightLoader were not read
        legacy_aux_norm_names=False,
        cites=_MAIN_CITES,
        builds_mla=(lambda raw: True) if attention == "mla" else None,
        bias_is="fc",
        reads_norm_before_residual=False,
        null_target_hidden_size="crash",
        null_draft_vocab_size="vocab_size",
        embed_tokens="replaced by the target's",
    )


MAIN_MHA, MAIN_MLA = _main_class("mha"), _main_class("mla")


def _main_draft_class(raw: Mapping[str, Any]) -> tuple[DraftClass | None, str]:
    mla = bool(raw.get("kv_lora_rank"))
    return (MAIN_MLA if mla else MAIN_MHA), (
        f"eagle3_model_arch llama3 (the default) builds Eagle3ForCausalLM whatever the architectures say "
        f"({_n('1495-1501')}), with MLA attention because kv_lora_rank is "
        + (f"{raw.get('kv_lora_rank')} ({_n('897-899')})" if mla else f"unset or 0 ({_n('897-899')})")
    )


TRTLLM_1_2 = Release(
    name="trtllm@1.2",
    engine="trtllm",
    version="1.2",
    runner=None,
    summary=(
        "TensorRT-LLM 1.2 (PyTorch backend), modelled from its source and not run here (CUDA only); captures the "
        "deployment's eagle3_layers_to_capture, not the draft's ids; not in the default selection"
    ),
    source=SOURCE,
    read_ids=_read_ids,
    capture=lambda _model_type: _CAPTURE,
    draft_class=_draft_class,
    behaviours=BEHAVIOURS,
    newest=True,
    deployed=False,  # kept out of --engine's default (deployed) selection: choose it with --engine trtllm
    deployment_capture=CAPTURE,
)
MAIN_BEHAVIOURS = (
    *(b for b in BEHAVIOURS if not b.key.startswith("Eagle3ForCausalLM:")),
    *(Behaviour(f"Eagle3ForCausalLM:{b.key}", b.does, b.cite) for b in _MAIN_CITES),
)

TRTLLM_MAIN = Release(
    name=f"trtllm@main-{MAIN_COMMIT}",
    engine="trtllm",
    version=f"main-{MAIN_COMMIT}",
    runner=None,
    summary=(
        f"TensorRT-LLM's main branch at {MAIN_COMMIT} (after 1.2.0rc2; PyTorch backend), modelled from its source and "
        "not run here: MLA drafts (kv_lora_rank), fc_norm, norm_before_fc (eagle_config), norm_output; captures the "
        "deployment's eagle3_layers_to_capture; not in the default selection"
    ),
    source=(
        f"NVIDIA/TensorRT-LLM source as stored by the reference index, not a release tag: "
        f"tensorrt_llm/_torch/models/modeling_speculative.py at commit {MAIN_COMMIT} (its version.py is not stored "
        "at that commit), tensorrt_llm/_torch/speculative/eagle3.py at commit f933a60"
    ),
    read_ids=_read_ids,
    capture=lambda _model_type: _CAPTURE,
    draft_class=_main_draft_class,
    behaviours=MAIN_BEHAVIOURS,
    deployed=False,
    deployment_capture=CAPTURE,
)
RELEASES = (TRTLLM_1_2, TRTLLM_MAIN)
