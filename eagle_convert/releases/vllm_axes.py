"""Two things about vLLM 0.33.0's EAGLE3 support that the draft config does not decide, read from the 0.33.0 wheel
(``pip download --no-deps vllm==0.33.0``; paths under ``vllm/``):

- **the platform**: since 0.33 some registered targets live in ``vllm/models/<name>/`` with one implementation per
  platform, and the package's ``__init__`` picks the class by ``current_platform``. One of them has ``SupportsEagle3``
  on CUDA and not on ROCm or XPU (``KimiLinearForCausalLM``). ROCm's own lists of unsupported and partly supported
  architectures are empty. Every other target's EAGLE3 support is the same on every platform.
- **pipeline parallelism**: Model Runner V2 checks, when ``pipeline_parallel_size`` > 1, that the target's decoder
  class relays the captured aux states from one pipeline stage to the next (``supports_aux_hidden_states_over_pp``,
  False unless the class sets it), and refuses to start otherwise. The V1 runner checks nothing.

The records that use these are in ``releases/vllm.py``; the views read ``platform`` and ``pipeline_parallel_size``
from the deployment (``engine_view(..., deployment=)``), and report what the verdict depends on when they are unset.
"""

from __future__ import annotations

from eagle_convert.releases.model import Behaviour, Cite, PipelineParallel, PlatformClass, PlatformRelay


def _c(file: str, lines: str) -> Cite:
    return Cite(f"vllm/{file}", lines)


# ---- the platform ---------------------------------------------------------------------------------------------------

PLATFORMS_0_33 = {
    "KimiLinearForCausalLM": PlatformClass(
        without_on=("rocm", "xpu"),
        cite=_c("models/kimi_k3/__init__.py", "21-36"),
        why=(
            "ROCm and XPU get KimiLinearForCausalLM from models/kimi_k3/amd/linear.py:1077-1084, whose bases lack "
            "SupportsEagle3 (CUDA: models/kimi_k3/nvidia/model.py:1402-1409); TPU gets no class from the package"
        ),
    ),
    "DeepseekV4ForConditionalGeneration": PlatformClass(
        without_on=("xpu", "cpu"),
        cite=_c("models/deepseek_v4/__init__.py", "26-39"),
        why=(
            "XPU and CPU get the stub of models/deepseek_v4/vl_stub.py:8-14, which has no SupportsEagle3 and raises "
            "NotImplementedError when built (CUDA and ROCm: models/deepseek_v4/common/vl_model.py:105-106)"
        ),
    ),
    **{
        arch: PlatformClass(
            without_on=("xpu",),
            cite=_c("models/glm5next/__init__.py", "6-9"),
            why=(
                "on XPU importing models/glm5next raises NotImplementedError('GLM-5.3-Flash does not currently support "
                "XPU.') before any class is defined (every other platform: models/glm5next/common/model.py)"
            ),
        )
        for arch in ("Glm5NextForCausalLM", "Glm5NextForConditionalGeneration")
    },
}

PLATFORM_BEHAVIOURS_0_33 = (
    Behaviour(
        "target-classes:platform",
        "KimiLinearForCausalLM captures on CUDA and not on ROCm or XPU, where vLLM builds its class from "
        "models/kimi_k3/amd/linear.py:1077-1084, without SupportsEagle3: start-up fails there",
        PLATFORMS_0_33["KimiLinearForCausalLM"].cite,
    ),
    Behaviour(
        "target-classes:platform-stub",
        "DeepseekV4ForConditionalGeneration is a stub without SupportsEagle3 on XPU and CPU (vl_stub.py:8-14): the "
        "model itself fails to build there",
        PLATFORMS_0_33["DeepseekV4ForConditionalGeneration"].cite,
    ),
    Behaviour(
        "target-classes:platform-import",
        "Glm5NextForCausalLM and Glm5NextForConditionalGeneration cannot be built on XPU: the package raises "
        "NotImplementedError on import there",
        PLATFORMS_0_33["Glm5NextForCausalLM"].cite,
    ),
    Behaviour(
        "target-classes:platform-others",
        "no other target's EAGLE3 support depends on the platform: ROCm's unsupported and partly supported "
        "architecture lists are empty, and the other classes picked by platform in vllm/models/*/__init__.py "
        "(deepseek_v32, deepseek_v4, deepseek_v41, hy_v4, inkling, kimi_k3's KimiK3ForConditionalGeneration, "
        "minimax_m3, muse_spark, qwen4_exp) have SupportsEagle3 on every platform or on none (whether their decoder "
        "relays aux states over pipeline stages may still depend on it: PIPELINE_PARALLEL_V2.by_platform)",
        _c("platforms/rocm.py", "71-76, 1207-1220 (model_executor/models/registry.py:1146-1148)"),
    ),
)

# ---- pipeline parallelism -------------------------------------------------------------------------------------------

_LLAMA = _c("model_executor/models/llama.py", "358")  # LlamaModel.supports_aux_hidden_states_over_pp = True
_QWEN2 = _c("model_executor/models/qwen2.py", "335")  # Qwen2Model.supports_aux_hidden_states_over_pp = True
_NO = "model_executor/models/interfaces.py:1611"  # EagleModelMixin.supports_aux_hidden_states_over_pp = False

# target architecture -> where its decoder class sets supports_aux_hidden_states_over_pp = True (the class's own
# line, or the base it inherits it from); read by hand from each class's decoder (``self.model``)
RELAYS_0_33 = {
    "LlamaForCausalLM": _LLAMA,  # llama.py:523-529 builds LlamaModel
    "InternLM3ForCausalLM": _LLAMA,  # registry.py:143: llama.LlamaForCausalLM
    "IQuestCoderForCausalLM": _LLAMA,  # registry.py:144
    "LLaMAForCausalLM": _LLAMA,  # registry.py:158
    "TeleChat3ForCausalLM": _LLAMA,  # registry.py:215
    "Phi3ForCausalLM": _LLAMA,  # phi3.py:10: Phi3ForCausalLM(LlamaForCausalLM)
    "MistralForCausalLM": _c("model_executor/models/mistral.py", "207 (MistralModel(LlamaModel); llama.py:358)"),
    "Ministral3ForCausalLM": _c("model_executor/models/mistral.py", "207 (MistralModel(LlamaModel); llama.py:358)"),
    "Llama4ForCausalLM": _c("model_executor/models/llama4.py", "384 (Llama4Model(LlamaModel); llama.py:358)"),
    "Qwen2ForCausalLM": _QWEN2,
    "Qwen3ForCausalLM": _c("model_executor/models/qwen3.py", "269 (Qwen3Model(Qwen2Model); qwen2.py:335)"),
    "Qwen3VLForConditionalGeneration": _c(
        "model_executor/models/qwen3_vl.py", "1846 (Qwen3LLMModel(Qwen3Model); qwen2.py:335)"
    ),
    "SarvamMLAForCausalLM": _c("model_executor/models/sarvam.py", "466"),
    "KimiLinearForCausalLM": _c("models/kimi_k3/nvidia/model.py", "943 (CUDA's class)"),
}


def _without(file: str, line: str, base: str = _NO) -> Cite:
    return _c(f"model_executor/models/{file}", f"{line} (supports_aux_hidden_states_over_pp: {base})")


# target architecture -> its decoder class, which does not set it (EagleModelMixin's False, or a class without it)
REFUSES_0_33 = {
    "Qwen3MoeForCausalLM": _without("qwen3_moe.py", "435"),
    "Qwen3VLMoeForConditionalGeneration": _without("qwen3_vl_moe.py", "93", "Qwen3MoeModel, interfaces.py:1611"),
    "Qwen3NextForCausalLM": _without("qwen3_next.py", "633"),
    "Qwen3_5ForCausalLM": _without("qwen3_5.py", "223", "Qwen3NextModel, interfaces.py:1611"),
    "Qwen3_5MoeForCausalLM": _without("qwen3_5.py", "223", "Qwen3NextModel, interfaces.py:1611"),
    "Qwen3_5ForConditionalGeneration": _without("qwen3_5.py", "223", "Qwen3NextModel, interfaces.py:1611"),
    "Qwen3_5MoeForConditionalGeneration": _without("qwen3_5.py", "223", "Qwen3NextModel, interfaces.py:1611"),
    "GptOssForCausalLM": _without("gpt_oss.py", "472"),
    "MiniMaxM2ForCausalLM": _without("minimax_m2.py", "321"),
    "Gemma4ForCausalLM": _without("gemma4.py", "989"),
    "GraniteForCausalLM": _without("granite.py", "316"),
    "GraniteMoeForCausalLM": _without("granitemoe.py", "304"),
    "NemotronHForCausalLM": _without("nemotron_h.py", "564"),
    "MiMoForCausalLM": _c("model_executor/models/mimo.py", "58 (MiMoModel sets it False)"),
    "DeepseekV2ForCausalLM": _without("deepseek_v2.py", "1427, 1883", "none: DeepseekV2Model is no EagleModelMixin"),
    "DeepseekV3ForCausalLM": _without("deepseek_v2.py", "1427, 1883", "none: DeepseekV2Model is no EagleModelMixin"),
    # the classes of vllm/models/ (read from every platform's branch that builds them)
    "BeamForCausalLM": _c("models/beam/nvidia/model.py", "188 (BeamModel, EagleModelMixin: interfaces.py:1611)"),
    "Glm5NextForCausalLM": _c("models/glm5next/common/model.py", "701 (Glm5NextModel: interfaces.py:1611)"),
    "Glm5NextForConditionalGeneration": _c(
        "models/glm5next/common/model.py", "701 (Glm5NextModel via Glm5NextForCausalLM, 1226-1230)"
    ),
    "DeepseekV41ForCausalLM": _c(
        "models/deepseek_v41/nvidia/model.py", "699 (DeepseekV4Model: interfaces.py:1611; ROCm: amd/model.py:494)"
    ),
}

# target architecture -> its decoder relays on CUDA (the default branch of its package) and not on the platforms named
BY_PLATFORM_0_33 = {
    **{
        arch: PlatformRelay(
            refuses_on=("rocm",),
            relays=_c("models/minimax_m3/nvidia/model.py", "801-803"),
            refuses=_c("models/minimax_m3/amd/model.py", "1385 (MiniMaxM3Model: interfaces.py:1611)"),
        )
        for arch in ("MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration")  # VL: nvidia 1171-1175
    },
    "DeepseekV4ForCausalLM": PlatformRelay(
        refuses_on=("rocm", "xpu", "cpu"),
        relays=_c("models/deepseek_v4/nvidia/model.py", "811-812"),
        refuses=_c(
            "models/deepseek_v4/amd/model.py",
            "1111 (DeepseekV4Model: interfaces.py:1611; XPU: xpu/model.py:962; CPU: cpu/model.py:454)",
        ),
    ),
    # its text model is DeepseekV4ForCausalLM (common/vl_model.py:183-187)
    "DeepseekV4ForConditionalGeneration": PlatformRelay(
        refuses_on=("rocm",),  # XPU and CPU get a stub without the capture at all (PLATFORMS_0_33)
        relays=_c("models/deepseek_v4/nvidia/model.py", "811-812"),
        refuses=_c("models/deepseek_v4/amd/model.py", "1111 (DeepseekV4Model: interfaces.py:1611)"),
    ),
}

PP_CHECK_V2 = _c(
    "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py", "43-45, 57-62 (v1/worker/gpu/model_runner.py:238, 412-418)"
)
PIPELINE_PARALLEL_V2 = PipelineParallel(
    relays=RELAYS_0_33,
    refuses=REFUSES_0_33,
    by_platform=BY_PLATFORM_0_33,
    check=PP_CHECK_V2,
    does=(
        "start-up fails with ValueError unless the target's decoder class sets supports_aux_hidden_states_over_pp "
        f"(False by default: {_NO}); this record has no verdict on this class's decoder ({PP_CHECK_V2})"
    ),
)
PP_V1 = _c("v1/worker/gpu_model_runner.py", "5169-5188 (no pipeline check; buffer without aux slots: 5740-5747)")
PIPELINE_PARALLEL_V1 = PipelineParallel(
    relays={},
    refuses={},
    check=None,
    does=(
        "the V1 runner runs no pipeline-parallel check for EAGLE3 and reserves no slot for aux states in the "
        "tensors it passes between stages (only V2 does: v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:79-105), "
        "so states captured before the last stage do not reach the draft as on V2; with async scheduling V1 "
        f"refuses pipeline parallelism outright (config/vllm.py:3096-3108) ({PP_V1})"
    ),
)

PP_BEHAVIOUR_V2 = Behaviour(
    "pipeline-parallel",
    "with pipeline_parallel_size > 1, start-up fails (ValueError: the target class 'does not support eagle3 with "
    "pipeline parallelism') unless the target's decoder class relays aux states between stages "
    "(supports_aux_hidden_states_over_pp, False by default: interfaces.py:1611): LlamaModel (llama.py:358: Llama, "
    "Mistral, Ministral, Phi3, Llama4 targets), Qwen2Model (qwen2.py:335: Qwen2, Qwen3, Qwen3-VL), SarvamMLAModel, "
    "and the CUDA classes of Kimi-Linear, MiniMax-M3 and DeepSeek-V4 set it (MiniMax-M3's ROCm class and DeepSeek-V4's "
    "ROCm, XPU and CPU classes do not: the verdict for those targets depends on the platform); Qwen3-MoE, Qwen3-Next, "
    "Qwen3.5, GPT-OSS, DeepSeek-V2/V3/V4.1, MiniMax-M2, GLM-5.3-Flash (Glm5Next), Beam, Gemma 4, Granite and "
    "Nemotron-H targets do not; with 1 (the default) every EAGLE3 target runs",
    PP_CHECK_V2,
)
PP_BEHAVIOUR_V1 = Behaviour(
    "pipeline-parallel",
    "no pipeline-parallel check for EAGLE3: with pipeline_parallel_size > 1 the aux states captured before the "
    "last stage are not relayed as V2 relays them (no slots reserved; non-relaying decoders such as "
    "qwen3_moe.py:517-520 pass on hidden_states and residual only), and with async scheduling V1 refuses "
    "pipeline parallelism (config/vllm.py:3096-3108); the outcome per target class is not modelled",
    PP_V1,
)
