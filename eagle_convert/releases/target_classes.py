"""Each modelled release's target classes, read from its wheel by ``scripts/read-target-classes``
(generated: do not edit; rerun the script). ``EAGLE3``: architecture -> where the class gets EAGLE3 capture
(SGLang: the ``set_eagle3_layers_to_capture`` it or a base defines; vLLM: ``SupportsEagle3`` among its
bases), as a path under the package root and a line. ``WITHOUT``: the registered target architectures
without it (vLLM only; in SGLang every other class lacks it, the Transformers fallback included)."""

EAGLE3: dict[str, dict[str, str]] = {}
WITHOUT: dict[str, tuple[str, ...]] = {}
REGISTERED: dict[str, int] = {}

# sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl: 290 registered, 71 with EAGLE3 capture
EAGLE3["sglang 0.5.23"] = {
    "ApertusForCausalLM": "models/apertus.py:675",
    "BailingMoEForCausalLM": "models/bailing_moe.py:1098",
    "BailingMoeForCausalLM": "models/bailing_moe.py:1098",
    "BailingMoeV2ForCausalLM": "models/bailing_moe.py:1098",
    "Cosmos3ForConditionalGeneration": "models/qwen3_vl.py:1777",
    "DeepseekV2ForCausalLM": "models/deepseek_v2.py:3458",
    "DeepseekV32ForCausalLM": "models/deepseek_v2.py:3458",
    "DeepseekV3ForCausalLM": "models/deepseek_v2.py:3458",
    "DeepseekV3ForCausalLMNextN": "models/deepseek_v2.py:3458",
    "EmbeddingGemmaModel": "models/gemma3_causal.py:917",
    "ExaoneMoEForCausalLM": "models/exaone_moe.py:866",
    "ExaoneMoEForCausalLMMTP": "models/exaone_moe.py:866",
    "ExaoneMoeForCausalLM": "models/exaone_moe.py:866",
    "Gemma3ForCausalLM": "models/gemma3_causal.py:917",
    "Gemma3ForConditionalGeneration": "models/gemma3_mm.py:543",
    "Gemma4AssistantForCausalLM": "models/gemma4_causal.py:1495",
    "Gemma4ForCausalLM": "models/gemma4_causal.py:1495",
    "Gemma4ForConditionalGeneration": "models/gemma4_mm.py:1155",
    "Gemma4UnifiedAssistantForCausalLM": "models/gemma4_causal.py:1495",
    "Gemma4UnifiedForConditionalGeneration": "models/gemma4_mm.py:1155",
    "Glm4MoeForCausalLM": "models/glm4_moe.py:1269",
    "Glm4MoeForCausalLMNextN": "models/glm4_moe.py:1269",
    "Glm4MoeLiteForCausalLM": "models/glm4_moe_lite.py:805",
    "Glm4MoeLiteForCausalLMNextN": "models/glm4_moe_lite.py:805",
    "Glm5NextForConditionalGeneration": "models/glm5_next.py:1533",
    "Glm5NextForConditionalGenerationNextN": "models/deepseek_v2.py:3458",
    "GlmMoeDsaForCausalLM": "models/deepseek_v2.py:3458",
    "GlmMoeDsaForCausalLMNextN": "models/deepseek_v2.py:3458",
    "GptOssForCausalLM": "models/gpt_oss.py:1337",
    "IQuestCoderForCausalLM": "models/llama.py:929",
    "InternLM3ForCausalLM": "models/llama.py:929",
    "InternS1ProForConditionalGeneration": "models/qwen3_vl.py:1777",
    "InternS2MobiusForConditionalGeneration": "models/qwen3_vl.py:1777",
    "InternS2PreviewForConditionalGeneration": "models/qwen3_vl.py:1777",
    "KimiK25ForConditionalGeneration": "models/kimi_k25.py:928",
    "Llama4ForCausalLM": "models/llama.py:929",
    "Llama4ForConditionalGeneration": "models/mllama4.py:971",
    "LlamaForCausalLM": "models/llama.py:929",
    "LlamaForCausalLMEagle": "models/llama.py:929",
    "LlamaForCausalLMEagle3": "models/llama.py:929",
    "LongcatFlashForCausalLM": "models/longcat_flash.py:1112",
    "LongcatFlashForCausalLMNextN": "models/longcat_flash.py:1112",
    "MellumForCausalLM": "models/qwen3_moe.py:1128",
    "MindSporeForCausalLM": "models/mindspore.py:359",
    "MiniMaxM2ForCausalLM": "models/minimax_m2.py:1067",
    "MiniMaxM3SparseForCausalLM": "models/minimax_m3.py:2056",
    "MiniMaxM3SparseForConditionalGeneration": "models/minimax_m3_vl.py:246",
    "Ministral3ForCausalLM": "models/llama.py:929",
    "MistralForCausalLM": "models/llama.py:929",
    "MistralForCausalLMEagle": "models/llama.py:929",
    "MistralLarge3ForCausalLM": "models/deepseek_v2.py:3458",
    "MistralLarge3ForCausalLMEagle": "models/deepseek_v2.py:3458",
    "Phi3ForCausalLM": "models/llama.py:929",
    "Qwen2ForCausalLM": "models/qwen2.py:781",
    "Qwen2ForCausalLMEagle": "models/qwen2.py:781",
    "Qwen2MoeForCausalLM": "models/qwen2_moe.py:1418",
    "Qwen2_5_VLForConditionalGeneration": "models/qwen2_5_vl.py:990",
    "Qwen3ForCausalLM": "models/qwen3.py:778",
    "Qwen3MoeForCausalLM": "models/qwen3_moe.py:1128",
    "Qwen3MoeForCausalLMMTP": "models/qwen3_moe.py:1128",
    "Qwen3NextForCausalLM": "models/qwen3_next.py:1286",
    "Qwen3NextForCausalLMMTP": "models/qwen3_next.py:1286",
    "Qwen3VLForConditionalGeneration": "models/qwen3_vl.py:1777",
    "Qwen3VLMoeForConditionalGeneration": "models/qwen3_vl.py:1777",
    "Qwen3_5ForCausalLM": "models/qwen3_5_text.py:150",
    "Qwen3_5ForConditionalGeneration": "models/qwen3_vl.py:1777",
    "Qwen3_5MoeForCausalLM": "models/qwen3_5_text.py:150",
    "Qwen3_5MoeForConditionalGeneration": "models/qwen3_vl.py:1777",
    "Qwen4ExpForConditionalGeneration": "models/qwen3_vl.py:1777",
    "SarvamMoEForCausalLM": "models/bailing_moe.py:1098",
    "TeleFLMForCausalLM": "models/llama.py:929",
}
REGISTERED["sglang 0.5.23"] = 290

# sglang-0.5.16-cp311-cp311-manylinux_2_34_x86_64.whl: 233 registered, 61 with EAGLE3 capture
EAGLE3["sglang 0.5.16"] = {
    "ApertusForCausalLM": "models/apertus.py:666",
    "BailingMoEForCausalLM": "models/bailing_moe.py:1026",
    "BailingMoeForCausalLM": "models/bailing_moe.py:1026",
    "BailingMoeV2ForCausalLM": "models/bailing_moe.py:1026",
    "DeepseekV2ForCausalLM": "models/deepseek_v2.py:2915",
    "DeepseekV32ForCausalLM": "models/deepseek_v2.py:2915",
    "DeepseekV3ForCausalLM": "models/deepseek_v2.py:2915",
    "DeepseekV3ForCausalLMNextN": "models/deepseek_v2.py:2915",
    "ExaoneMoEForCausalLM": "models/exaone_moe.py:859",
    "ExaoneMoEForCausalLMMTP": "models/exaone_moe.py:859",
    "Gemma3ForCausalLM": "models/gemma3_causal.py:903",
    "Gemma3ForConditionalGeneration": "models/gemma3_mm.py:498",
    "Gemma4AssistantForCausalLM": "models/gemma4_causal.py:1407",
    "Gemma4ForCausalLM": "models/gemma4_causal.py:1407",
    "Gemma4ForConditionalGeneration": "models/gemma4_mm.py:1101",
    "Gemma4UnifiedAssistantForCausalLM": "models/gemma4_causal.py:1407",
    "Gemma4UnifiedForConditionalGeneration": "models/gemma4_mm.py:1101",
    "Glm4MoeForCausalLM": "models/glm4_moe.py:1451",
    "Glm4MoeForCausalLMNextN": "models/glm4_moe.py:1451",
    "Glm4MoeLiteForCausalLM": "models/glm4_moe_lite.py:1015",
    "Glm4MoeLiteForCausalLMNextN": "models/glm4_moe_lite.py:1015",
    "GlmMoeDsaForCausalLM": "models/deepseek_v2.py:2915",
    "GlmMoeDsaForCausalLMNextN": "models/deepseek_v2.py:2915",
    "GptOssForCausalLM": "models/gpt_oss.py:1284",
    "IQuestCoderForCausalLM": "models/llama.py:808",
    "InternLM3ForCausalLM": "models/llama.py:808",
    "InternS1ProForConditionalGeneration": "models/qwen3_vl.py:1537",
    "InternS2PreviewForConditionalGeneration": "models/qwen3_vl.py:1537",
    "KimiK25ForConditionalGeneration": "models/kimi_k25.py:921",
    "Llama4ForCausalLM": "models/llama.py:808",
    "Llama4ForConditionalGeneration": "models/mllama4.py:985",
    "LlamaForCausalLM": "models/llama.py:808",
    "LlamaForCausalLMEagle": "models/llama.py:808",
    "LlamaForCausalLMEagle3": "models/llama.py:808",
    "LongcatFlashForCausalLM": "models/longcat_flash.py:1126",
    "LongcatFlashForCausalLMNextN": "models/longcat_flash.py:1126",
    "MellumForCausalLM": "models/qwen3_moe.py:1068",
    "MindSporeForCausalLM": "models/mindspore.py:359",
    "MiniMaxM2ForCausalLM": "models/minimax_m2.py:1248",
    "MiniMaxM3SparseForCausalLM": "models/minimax_m3.py:1491",
    "Ministral3ForCausalLM": "models/llama.py:808",
    "MistralForCausalLM": "models/llama.py:808",
    "MistralForCausalLMEagle": "models/llama.py:808",
    "MistralLarge3ForCausalLM": "models/deepseek_v2.py:2915",
    "MistralLarge3ForCausalLMEagle": "models/deepseek_v2.py:2915",
    "Phi3ForCausalLM": "models/llama.py:808",
    "Qwen2ForCausalLM": "models/qwen2.py:655",
    "Qwen2ForCausalLMEagle": "models/qwen2.py:655",
    "Qwen2MoeForCausalLM": "models/qwen2_moe.py:1188",
    "Qwen2_5_VLForConditionalGeneration": "models/qwen2_5_vl.py:897",
    "Qwen3ForCausalLM": "models/qwen3.py:688",
    "Qwen3MoeForCausalLM": "models/qwen3_moe.py:1068",
    "Qwen3MoeForCausalLMMTP": "models/qwen3_moe.py:1068",
    "Qwen3NextForCausalLM": "models/qwen3_next.py:1266",
    "Qwen3NextForCausalLMMTP": "models/qwen3_next.py:1266",
    "Qwen3VLForConditionalGeneration": "models/qwen3_vl.py:1537",
    "Qwen3VLMoeForConditionalGeneration": "models/qwen3_vl.py:1537",
    "Qwen3_5ForConditionalGeneration": "models/qwen3_vl.py:1537",
    "Qwen3_5MoeForConditionalGeneration": "models/qwen3_vl.py:1537",
    "SarvamMoEForCausalLM": "models/bailing_moe.py:1026",
    "TeleFLMForCausalLM": "models/llama.py:808",
}
REGISTERED["sglang 0.5.16"] = 233

# vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl: 274 registered, 117 with EAGLE3 capture
EAGLE3["vllm 0.33"] = {
    "AfmoeForCausalLM": "model_executor/models/afmoe.py:470",
    "Alpamayo2Super": "model_executor/models/qwen3_vl.py:1946",
    "ApertusForCausalLM": "model_executor/models/apertus.py:404",
    "ArceeForCausalLM": "model_executor/models/transformers/base.py:116",
    "BeamForCausalLM": "models/beam/nvidia/model.py:345",
    "Cohere2MoeForCausalLM": "model_executor/models/cohere2_moe.py:695",
    "CohereCompassForConditionalGeneration": "model_executor/models/cohere_compass.py:1309",
    "Cosmos3ForConditionalGeneration": "model_executor/models/qwen3_vl.py:1946",
    "CwmForCausalLM": "model_executor/models/transformers/base.py:116",
    "DeepseekForCausalLM": "model_executor/models/deepseek_v2.py:1878",
    "DeepseekV2ForCausalLM": "model_executor/models/deepseek_v2.py:1878",
    "DeepseekV32ForCausalLM": "model_executor/models/deepseek_v2.py:1878",
    "DeepseekV3ForCausalLM": "model_executor/models/deepseek_v2.py:1878",
    "DeepseekV41ForCausalLM": "models/deepseek_v41/nvidia/vl_model.py:124",
    "DeepseekV4ForCausalLM": "models/deepseek_v4/nvidia/model.py:1312",
    "DeepseekV4ForConditionalGeneration": "models/deepseek_v4/common/vl_model.py:106",
    "Emu3ForConditionalGeneration": "model_executor/models/transformers/base.py:116",
    "Ernie4_5ForCausalLM": "model_executor/models/llama.py:470",
    "Exaone4_5_ForConditionalGeneration": "model_executor/models/qwen2_5_vl.py:1302",
    "FlexOlmoForCausalLM": "model_executor/models/transformers/base.py:116",
    "GPTBigCodeForCausalLM": "model_executor/models/transformers/base.py:116",
    "GPTNeoXForCausalLM": "model_executor/models/transformers/base.py:116",
    "Gemma4ForCausalLM": "model_executor/models/gemma4.py:1403",
    "Gemma4ForConditionalGeneration": "model_executor/models/gemma4_mm.py:1041",
    "Gemma4UnifiedForConditionalGeneration": "model_executor/models/gemma4_mm.py:1041",
    "Glm5NextForCausalLM": "models/glm5next/common/model.py:1048",
    "Glm5NextForConditionalGeneration": "models/glm5next/common/model.py:1150",
    "GlmForCausalLM": "model_executor/models/transformers/base.py:116",
    "GlmMoeDsaForCausalLM": "model_executor/models/deepseek_v2.py:1878",
    "GptOssForCausalLM": "model_executor/models/gpt_oss.py:1370",
    "GraniteForCausalLM": "model_executor/models/granite.py:412",
    "GraniteMoeForCausalLM": "model_executor/models/granitemoe.py:391",
    "GraniteMoeSWAForCausalLM": "model_executor/models/granitemoeshared.py:227",
    "GraniteMoeSharedForCausalLM": "model_executor/models/granitemoeshared.py:227",
    "GraniteSWAForCausalLM": "model_executor/models/granite.py:412",
    "HunYuanDenseV1ForCausalLM": "model_executor/models/transformers/base.py:116",
    "HunYuanMoEV1ForCausalLM": "model_executor/models/transformers/base.py:116",
    "HunYuanVLForConditionalGeneration": "model_executor/models/transformers/base.py:116",
    "IQuestCoderForCausalLM": "model_executor/models/llama.py:470",
    "InternLM3ForCausalLM": "model_executor/models/llama.py:470",
    "InternS1ProForConditionalGeneration": "model_executor/models/qwen3_vl.py:1946",
    "InternS2MobiusForConditionalGeneration": "model_executor/models/qwen3_vl.py:1946",
    "InternS2PreviewForConditionalGeneration": "model_executor/models/qwen3_vl.py:1946",
    "Jais2ForCausalLM": "model_executor/models/transformers/base.py:116",
    "K2HorizonForCausalLM": "model_executor/models/k2_horizon.py:1476",
    "KimiK25ForConditionalGeneration": "model_executor/models/kimi_k25.py:297",
    "KimiK3ForConditionalGeneration": "models/kimi_k3/nvidia/model.py:1574",
    "KimiLinearForCausalLM": "models/kimi_k3/nvidia/model.py:1408",
    "Kolibri1ForCausalLM": "model_executor/models/transformers/base.py:116",
    "LLaMAForCausalLM": "model_executor/models/llama.py:470",
    "LagunaForCausalLM": "model_executor/models/laguna.py:697",
    "LightOnOCRForConditionalGeneration": "model_executor/models/mistral3.py:424",
    "Llama4ForCausalLM": "model_executor/models/llama.py:470",
    "Llama4ForConditionalGeneration": "model_executor/models/mllama4.py:734",
    "LlamaForCausalLM": "model_executor/models/llama.py:470",
    "LlavaForConditionalGeneration": "model_executor/models/llava.py:498",
    "MellumForCausalLM": "model_executor/models/transformers/base.py:116",
    "MiMoForCausalLM": "model_executor/models/qwen2.py:459",
    "MiMoV2FlashForCausalLM": "model_executor/models/mimo_v2.py:1061",
    "MiMoV2ForCausalLM": "model_executor/models/mimo_v2.py:1061",
    "MiMoV2OmniForCausalLM": "model_executor/models/mimo_v2_omni.py:1230",
    "MiniCPM3ForCausalLM": "model_executor/models/minicpm.py:559",
    "MiniCPMForCausalLM": "model_executor/models/minicpm.py:559",
    "MiniCPMOcrForConditionalGeneration": "model_executor/models/minicpmv4_6.py:1157",
    "MiniCPMV4_6ForConditionalGeneration": "model_executor/models/minicpmv4_6.py:1157",
    "MiniCPMV4_7ForConditionalGeneration": "model_executor/models/minicpmv4_6.py:1157",
    "MiniMaxM2ForCausalLM": "model_executor/models/minimax_m2.py:428",
    "MiniMaxM3SparseForCausalLM": "models/minimax_m3/amd/model.py:1704",
    "MiniMaxM3SparseForConditionalGeneration": "models/minimax_m3/amd/model.py:1779",
    "Ministral3ForCausalLM": "model_executor/models/llama.py:470",
    "Mistral3ForConditionalGeneration": "model_executor/models/mistral3.py:424",
    "MistralForCausalLM": "model_executor/models/llama.py:470",
    "MistralLarge3ForCausalLM": "model_executor/models/deepseek_v2.py:1878",
    "MuseGlimmerForCausalLM": "model_executor/models/muse_glimmer.py:1143",
    "MuseGlimmerForConditionalGeneration": "model_executor/models/muse_glimmer.py:1143",
    "MuseSparkForConditionalGeneration": "model_executor/models/llama.py:470",
    "NanbeigeForCausalLM": "model_executor/models/transformers/base.py:116",
    "NemotronHForCausalLM": "model_executor/models/nemotron_h.py:725",
    "NemotronHPuzzleForCausalLM": "model_executor/models/nemotron_h.py:725",
    "NemotronH_Nano_Omni_Reasoning_V3": "model_executor/models/nano_nemotron_vl.py:932",
    "NemotronH_Nano_VL_V2": "model_executor/models/nano_nemotron_vl.py:932",
    "NemotronH_Omni_Reasoning_V3": "model_executor/models/nano_nemotron_vl.py:932",
    "NemotronH_Super_Omni_Reasoning_V3": "model_executor/models/nano_nemotron_vl.py:932",
    "Olmo2ForCausalLM": "model_executor/models/transformers/base.py:116",
    "Olmo3ForCausalLM": "model_executor/models/transformers/base.py:116",
    "OlmoForCausalLM": "model_executor/models/transformers/base.py:116",
    "OpenCUAForConditionalGeneration": "model_executor/models/qwen2_5_vl.py:1302",
    "Phi3ForCausalLM": "model_executor/models/llama.py:470",
    "PhiForCausalLM": "model_executor/models/transformers/base.py:116",
    "PixtralForConditionalGeneration": "model_executor/models/pixtral.py:350",
    "Plamo3ForCausalLM": "model_executor/models/plamo3.py:395",
    "Qwen2ForCausalLM": "model_executor/models/qwen2.py:459",
    "Qwen2_5_VLForConditionalGeneration": "model_executor/models/qwen2_5_vl.py:1302",
    "Qwen3ASRForConditionalGeneration": "model_executor/models/qwen3_asr.py:400",
    "Qwen3ASRRealtimeGeneration": "model_executor/models/qwen3_asr.py:400",
    "Qwen3ForCausalLM": "model_executor/models/qwen3.py:281",
    "Qwen3MoeForCausalLM": "model_executor/models/qwen3_moe.py:548",
    "Qwen3NextForCausalLM": "model_executor/models/qwen3_next.py:820",
    "Qwen3OmniMoeForConditionalGeneration": "model_executor/models/qwen3_omni_moe_thinker.py:1617",
    "Qwen3VLForConditionalGeneration": "model_executor/models/qwen3_vl.py:1946",
    "Qwen3VLMoeForConditionalGeneration": "model_executor/models/qwen3_vl.py:1946",
    "Qwen3_5ForCausalLM": "model_executor/models/qwen3_5.py:302",
    "Qwen3_5ForConditionalGeneration": "model_executor/models/qwen3_vl.py:1946",
    "Qwen3_5MoeForCausalLM": "model_executor/models/qwen3_5.py:302",
    "Qwen3_5MoeForConditionalGeneration": "model_executor/models/qwen3_vl.py:1946",
    "Qwen4ExpForConditionalGeneration": "model_executor/models/qwen3_vl.py:1946",
    "RadioMBartPrefixForCausalLM": "model_executor/models/nemotron_parse3_5.py:657",
    "SarvamMLAForCausalLM": "model_executor/models/sarvam.py:645",
    "SeedOssForCausalLM": "model_executor/models/transformers/base.py:116",
    "SmolLM3ForCausalLM": "model_executor/models/transformers/base.py:116",
    "Starcoder2ForCausalLM": "model_executor/models/transformers/base.py:116",
    "Step1ForCausalLM": "model_executor/models/step1.py:314",
    "TeleChat2ForCausalLM": "model_executor/models/llama.py:470",
    "TeleChat3ForCausalLM": "model_executor/models/llama.py:470",
    "TeleFLMForCausalLM": "model_executor/models/llama.py:470",
    "VaultGemmaForCausalLM": "model_executor/models/transformers/base.py:116",
    "VibeVoiceAsrForConditionalGeneration": "model_executor/models/transformers/base.py:116",
}
REGISTERED["vllm 0.33"] = 274
WITHOUT["vllm 0.33"] = tuple(
    """AXK1ForCausalLM AliceAIForCausalLM AriaForConditionalGeneration
    AudioFlamingo3ForConditionalGeneration BagelForConditionalGeneration BailingMoeForCausalLM
    BailingMoeV2ForCausalLM BailingMoeV2_5ForCausalLM BailingMoeV3ForCausalLM
    BailingMoeV3VLForConditionalGeneration BeeForConditionalGeneration Blip2ForConditionalGeneration
    BloomForCausalLM ChatGLMForConditionalGeneration ChatGLMModel Cohere2ForCausalLM
    Cohere2VisionForConditionalGeneration CohereAsrForConditionalGeneration CohereForCausalLM
    Cosmos3EdgeForConditionalGeneration DbrxForCausalLM DeciLMForCausalLM DeepseekOCR2ForCausalLM
    DeepseekOCRForCausalLM DeepseekVLV2ForCausalLM DiffusionGemmaForBlockDiffusion DomynEdgeForCausalLM
    DoryForCausalLM Dots3NoteForCausalLM DotsOCRForCausalLM Eagle2_5_VLForConditionalGeneration
    Ernie4_5_MoeForCausalLM Ernie4_5_VLMoeForConditionalGeneration Exaone4ForCausalLM ExaoneForCausalLM
    ExaoneMoEForCausalLM ExaoneMoeForCausalLM FalconForCausalLM FalconH1ForCausalLM
    FalconMambaForCausalLM FireRedASR2ForConditionalGeneration FlintForCausalLM
    FunASRForConditionalGeneration FunAudioChatForConditionalGeneration GLM4VForCausalLM
    GPT2LMHeadModel GPTJForCausalLM Gemma2ForCausalLM Gemma3ForCausalLM Gemma3ForConditionalGeneration
    Gemma3nForCausalLM Gemma3nForConditionalGeneration GemmaForCausalLM Glm4ForCausalLM
    Glm4MoeForCausalLM Glm4MoeLiteForCausalLM Glm4vForConditionalGeneration
    Glm4vMoeForConditionalGeneration GlmAsrForConditionalGeneration GlmOcrForConditionalGeneration
    Granite4VisionForConditionalGeneration GraniteMoeHybridForCausalLM
    GraniteSpeechForConditionalGeneration GraniteSpeechPlusForConditionalGeneration H2OVLChatModel
    HCXVisionV2ForCausalLM HYV3ForCausalLM HYV4ForCausalLM HfMoondream HrmTextForCausalLM
    HyperCLOVAXForCausalLM IQuestLoopCoderForCausalLM Idefics3ForConditionalGeneration
    InklingForCausalLM InklingForConditionalGeneration InternLM2ForCausalLM
    InternS1ForConditionalGeneration InternVLChatModel InternVLForConditionalGeneration
    IsaacForConditionalGeneration JambaForCausalLM KananaVForConditionalGeneration
    KeyeForConditionalGeneration KeyeVL1_5ForConditionalGeneration KimiVLForConditionalGeneration
    Lfm2ForCausalLM Lfm2MoeForCausalLM Lfm2VlForConditionalGeneration Llama_Nemotron_Nano_VL
    LlavaNextForConditionalGeneration LlavaNextVideoForConditionalGeneration
    LlavaOnevision2ForConditionalGeneration LlavaOnevisionForConditionalGeneration
    LongcatFlashForCausalLM LongcatFlashNgramForCausalLM Mamba2ForCausalLM MambaForCausalLM
    MiDashengLMModel MiniCPMO MiniCPMV MixtralForCausalLM Molmo2ForConditionalGeneration
    MolmoForCausalLM Moondream3ForCausalLM MoonshotKimiaForCausalLM MossAudioModel
    MossTranscribeDiarizeForConditionalGeneration NVLM_D NemotronForCausalLM
    NemotronParseForConditionalGeneration OPTForCausalLM OlmoHybridForCausalLM OlmoeForCausalLM
    OpenPanguVLForConditionalGeneration OpenVLAForActionPrediction OrionForCausalLM Ovis Ovis2_5
    Ovis2_6ForCausalLM Ovis2_6_MoeForCausalLM PaddleOCRVLForConditionalGeneration
    PaliGemmaForConditionalGeneration PanguEmbeddedForCausalLM PanguProMoEV2ForCausalLM
    PanguUltraMoEForCausalLM Param2MoEForCausalLM Phi3VForCausalLM Phi4ForCausalLMV Phi4MMForCausalLM
    PhiMoEForCausalLM QianfanOCRForConditionalGeneration Qwen2AudioForConditionalGeneration
    Qwen2MoeForCausalLM Qwen2VLForConditionalGeneration Qwen2_5OmniForConditionalGeneration
    Qwen2_5OmniModel Qwen4ExpForCausalLM RForConditionalGeneration Rnj1ForCausalLM SarvamMoEForCausalLM
    SkyworkR1VChatModel SmolVLMForConditionalGeneration SolarForCausalLM StableLmForCausalLM
    Step3TextForCausalLM Step3VLForConditionalGeneration Step3p5ForCausalLM
    Step3p7ForConditionalGeneration Step5ForCausalLM Step5ForConditionalGeneration
    StepVLForConditionalGeneration UltravoxModel UnlimitedOCRForCausalLM
    VoxtralForConditionalGeneration VoxtralRealtimeGeneration WhisperForConditionalGeneration
    Zamba2ForCausalLM""".split()
)

# vllm-0.28.0-cp38-abi3-manylinux_2_28_x86_64.whl: 258 registered, 81 with EAGLE3 capture
EAGLE3["vllm 0.28"] = {
    "AfmoeForCausalLM": "model_executor/models/afmoe.py:468",
    "ApertusForCausalLM": "model_executor/models/apertus.py:405",
    "ArceeForCausalLM": "model_executor/models/arcee.py:277",
    "Cosmos3ForConditionalGeneration": "model_executor/models/qwen3_vl.py:1742",
    "CwmForCausalLM": "model_executor/models/llama.py:453",
    "DeepseekForCausalLM": "model_executor/models/deepseek_v2.py:1800",
    "DeepseekV2ForCausalLM": "model_executor/models/deepseek_v2.py:1800",
    "DeepseekV32ForCausalLM": "model_executor/models/deepseek_v2.py:1800",
    "DeepseekV3ForCausalLM": "model_executor/models/deepseek_v2.py:1800",
    "DeepseekV4ForCausalLM": "models/deepseek_v4/nvidia/model.py:1457",
    "Emu3ForConditionalGeneration": "model_executor/models/transformers/base.py:103",
    "Ernie4_5ForCausalLM": "model_executor/models/llama.py:453",
    "Exaone4_5_ForConditionalGeneration": "model_executor/models/qwen2_5_vl.py:1236",
    "Fairseq2LlamaForCausalLM": "model_executor/models/llama.py:453",
    "GPTBigCodeForCausalLM": "model_executor/models/transformers/base.py:103",
    "Gemma4ForCausalLM": "model_executor/models/gemma4.py:1495",
    "Gemma4ForConditionalGeneration": "model_executor/models/gemma4_mm.py:993",
    "Gemma4UnifiedForConditionalGeneration": "model_executor/models/gemma4_mm.py:993",
    "GlmForCausalLM": "model_executor/models/llama.py:453",
    "GlmMoeDsaForCausalLM": "model_executor/models/deepseek_v2.py:1800",
    "GptOssForCausalLM": "model_executor/models/gpt_oss.py:1171",
    "GritLM": "model_executor/models/llama.py:453",
    "HunYuanDenseV1ForCausalLM": "model_executor/models/hunyuan_v1.py:896",
    "HunYuanMoEV1ForCausalLM": "model_executor/models/hunyuan_v1.py:896",
    "HunYuanVLForConditionalGeneration": "model_executor/models/hunyuan_vision.py:824",
    "IQuestCoderForCausalLM": "model_executor/models/llama.py:453",
    "InternLM3ForCausalLM": "model_executor/models/llama.py:453",
    "InternS1ProForConditionalGeneration": "model_executor/models/qwen3_vl.py:1742",
    "InternS2MobiusForConditionalGeneration": "model_executor/models/qwen3_vl.py:1742",
    "InternS2PreviewForConditionalGeneration": "model_executor/models/qwen3_vl.py:1742",
    "KimiK25ForConditionalGeneration": "model_executor/models/kimi_k25.py:305",
    "KimiK3ForConditionalGeneration": "models/kimi_k3/nvidia/model.py:1697",
    "KimiLinearForCausalLM": "models/kimi_k3/nvidia/model.py:1562",
    "LLaMAForCausalLM": "model_executor/models/llama.py:453",
    "LagunaForCausalLM": "model_executor/models/laguna.py:711",
    "LightOnOCRForConditionalGeneration": "model_executor/models/mistral3.py:368",
    "Llama4ForCausalLM": "model_executor/models/llama.py:453",
    "Llama4ForConditionalGeneration": "model_executor/models/mllama4.py:736",
    "LlamaForCausalLM": "model_executor/models/llama.py:453",
    "LlavaForConditionalGeneration": "model_executor/models/llava.py:508",
    "MellumForCausalLM": "model_executor/models/qwen3_moe.py:539",
    "MiMoForCausalLM": "model_executor/models/qwen2.py:442",
    "MiMoV2FlashForCausalLM": "model_executor/models/mimo_v2.py:832",
    "MiMoV2ForCausalLM": "model_executor/models/mimo_v2.py:832",
    "MiniCPM3ForCausalLM": "model_executor/models/minicpm.py:557",
    "MiniCPMForCausalLM": "model_executor/models/minicpm.py:557",
    "MiniMaxM2ForCausalLM": "model_executor/models/minimax_m2.py:430",
    "MiniMaxM3SparseForCausalLM": "models/minimax_m3/amd/model.py:1279",
    "MiniMaxM3SparseForConditionalGeneration": "models/minimax_m3/amd/model.py:1344",
    "Ministral3ForCausalLM": "model_executor/models/llama.py:453",
    "Mistral3ForConditionalGeneration": "model_executor/models/mistral3.py:368",
    "MistralForCausalLM": "model_executor/models/llama.py:453",
    "MistralLarge3ForCausalLM": "model_executor/models/deepseek_v2.py:1800",
    "MuseGlimmerForCausalLM": "model_executor/models/muse_glimmer.py:1371",
    "MuseGlimmerForConditionalGeneration": "model_executor/models/muse_glimmer.py:1371",
    "NemotronHForCausalLM": "model_executor/models/nemotron_h.py:700",
    "NemotronHPuzzleForCausalLM": "model_executor/models/nemotron_h.py:700",
    "Olmo2ForCausalLM": "model_executor/models/transformers/base.py:103",
    "OlmoForCausalLM": "model_executor/models/transformers/base.py:103",
    "OpenCUAForConditionalGeneration": "model_executor/models/qwen2_5_vl.py:1236",
    "Phi3ForCausalLM": "model_executor/models/llama.py:453",
    "PixtralForConditionalGeneration": "model_executor/models/pixtral.py:295",
    "Qwen2ForCausalLM": "model_executor/models/qwen2.py:442",
    "Qwen2_5_VLForConditionalGeneration": "model_executor/models/qwen2_5_vl.py:1236",
    "Qwen3ForCausalLM": "model_executor/models/qwen3.py:272",
    "Qwen3MoeForCausalLM": "model_executor/models/qwen3_moe.py:539",
    "Qwen3NextForCausalLM": "model_executor/models/qwen3_next.py:738",
    "Qwen3VLForConditionalGeneration": "model_executor/models/qwen3_vl.py:1742",
    "Qwen3VLMoeForConditionalGeneration": "model_executor/models/qwen3_vl.py:1742",
    "Qwen3_5ForCausalLM": "model_executor/models/qwen3_5.py:291",
    "Qwen3_5ForConditionalGeneration": "model_executor/models/qwen3_vl.py:1742",
    "Qwen3_5MoeForCausalLM": "model_executor/models/qwen3_5.py:291",
    "Qwen3_5MoeForConditionalGeneration": "model_executor/models/qwen3_vl.py:1742",
    "SmolLM3ForCausalLM": "model_executor/models/transformers/base.py:103",
    "Starcoder2ForCausalLM": "model_executor/models/transformers/base.py:103",
    "Step1ForCausalLM": "model_executor/models/step1.py:314",
    "TeleChat2ForCausalLM": "model_executor/models/llama.py:453",
    "TeleChat3ForCausalLM": "model_executor/models/llama.py:453",
    "TeleFLMForCausalLM": "model_executor/models/llama.py:453",
    "VaultGemmaForCausalLM": "model_executor/models/transformers/base.py:103",
    "VibeVoiceAsrForConditionalGeneration": "model_executor/models/transformers/base.py:103",
}
REGISTERED["vllm 0.28"] = 258
WITHOUT["vllm 0.28"] = tuple(
    """AXK1ForCausalLM ArcticForCausalLM AriaForConditionalGeneration
    AudioFlamingo3ForConditionalGeneration BagelForConditionalGeneration BailingMoeForCausalLM
    BailingMoeV2ForCausalLM BailingMoeV2_5ForCausalLM BailingMoeV3ForCausalLM
    BeeForConditionalGeneration Blip2ForConditionalGeneration BloomForCausalLM
    ChameleonForConditionalGeneration ChatGLMForConditionalGeneration ChatGLMModel Cheers
    CheersForConditionalGeneration Cohere2ForCausalLM Cohere2MoeForCausalLM
    Cohere2VisionForConditionalGeneration CohereAsrForConditionalGeneration CohereForCausalLM
    Cosmos3EdgeForConditionalGeneration DbrxForCausalLM DeciLMForCausalLM DeepseekOCR2ForCausalLM
    DeepseekOCRForCausalLM DeepseekVLV2ForCausalLM DiffusionGemmaForBlockDiffusion Dots3NoteForCausalLM
    DotsOCRForCausalLM Eagle2_5_VLForConditionalGeneration Ernie4_5_MoeForCausalLM
    Ernie4_5_VLMoeForConditionalGeneration Exaone4ForCausalLM ExaoneForCausalLM ExaoneMoeForCausalLM
    FalconForCausalLM FalconH1ForCausalLM FalconMambaForCausalLM FireRedASR2ForConditionalGeneration
    FireRedLIDForConditionalGeneration FlexOlmoForCausalLM FunASRForConditionalGeneration
    FunAudioChatForConditionalGeneration GLM4VForCausalLM GPT2LMHeadModel GPTJForCausalLM
    GPTNeoXForCausalLM Gemma2ForCausalLM Gemma3ForCausalLM Gemma3ForConditionalGeneration
    Gemma3nForCausalLM Gemma3nForConditionalGeneration GemmaForCausalLM Glm4ForCausalLM
    Glm4MoeForCausalLM Glm4MoeLiteForCausalLM Glm4vForConditionalGeneration
    Glm4vMoeForConditionalGeneration GlmAsrForConditionalGeneration GlmOcrForConditionalGeneration
    Granite4VisionForConditionalGeneration GraniteForCausalLM GraniteMoeForCausalLM
    GraniteMoeHybridForCausalLM GraniteMoeSharedForCausalLM GraniteSpeechForConditionalGeneration
    GraniteSpeechPlusForConditionalGeneration H2OVLChatModel HCXVisionForCausalLM
    HCXVisionV2ForCausalLM HYV3ForCausalLM HfMoondream HrmTextForCausalLM HyperCLOVAXForCausalLM
    IQuestLoopCoderForCausalLM Idefics3ForConditionalGeneration InklingForCausalLM
    InklingForConditionalGeneration InternLM2ForCausalLM InternS1ForConditionalGeneration
    InternVLChatModel InternVLForConditionalGeneration IsaacForConditionalGeneration Jais2ForCausalLM
    JambaForCausalLM KananaVForConditionalGeneration KeyeForConditionalGeneration
    KeyeVL1_5ForConditionalGeneration KimiVLForConditionalGeneration Lfm2ForCausalLM Lfm2MoeForCausalLM
    Lfm2VlForConditionalGeneration Llama_Nemotron_Nano_VL LlavaNextForConditionalGeneration
    LlavaNextVideoForConditionalGeneration LlavaOnevision2ForConditionalGeneration
    LlavaOnevisionForConditionalGeneration LongcatFlashForCausalLM LongcatFlashNgramForCausalLM
    MPTForCausalLM Mamba2ForCausalLM MambaForCausalLM MiDashengLMModel MiMoV2OmniForCausalLM MiniCPMO
    MiniCPMV MiniCPMV4_6ForConditionalGeneration MixtralForCausalLM Molmo2ForConditionalGeneration
    MolmoForCausalLM Moondream3ForCausalLM MoonshotKimiaForCausalLM MossAudioModel
    MossTranscribeDiarizeForConditionalGeneration MptForCausalLM NVLM_D NemotronForCausalLM
    NemotronH_Nano_Omni_Reasoning_V3 NemotronH_Nano_VL_V2 NemotronH_Super_Omni_Reasoning_V3
    NemotronParseForConditionalGeneration OPTForCausalLM Olmo3ForCausalLM OlmoHybridForCausalLM
    OlmoeForCausalLM OpenPanguVLForConditionalGeneration OpenVLAForActionPrediction OrionForCausalLM
    Ovis Ovis2_5 Ovis2_6ForCausalLM Ovis2_6_MoeForCausalLM PaddleOCRVLForConditionalGeneration
    PaliGemmaForConditionalGeneration PanguEmbeddedForCausalLM PanguProMoEV2ForCausalLM
    PanguUltraMoEForCausalLM Param2MoEForCausalLM Phi3VForCausalLM Phi4ForCausalLMV Phi4MMForCausalLM
    PhiForCausalLM PhiMoEForCausalLM Plamo3ForCausalLM QianfanOCRForConditionalGeneration
    Qwen2AudioForConditionalGeneration Qwen2MoeForCausalLM Qwen2VLForConditionalGeneration
    Qwen2_5OmniForConditionalGeneration Qwen2_5OmniModel Qwen3ASRForConditionalGeneration
    Qwen3ASRRealtimeGeneration Qwen3OmniMoeForConditionalGeneration RForConditionalGeneration
    RWForCausalLM Rnj1ForCausalLM SarvamMLAForCausalLM SarvamMoEForCausalLM SeedOssForCausalLM
    SkyworkR1VChatModel SmolVLMForConditionalGeneration SolarForCausalLM StableLMEpochForCausalLM
    StableLmForCausalLM Step3TextForCausalLM Step3VLForConditionalGeneration Step3p5ForCausalLM
    Step3p7ForConditionalGeneration StepVLForConditionalGeneration UltravoxModel
    UnlimitedOCRForCausalLM VoxtralForConditionalGeneration VoxtralRealtimeGeneration
    WhisperForConditionalGeneration Zamba2ForCausalLM""".split()
)
