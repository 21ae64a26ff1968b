"""The reference forward passes: the target is transformers' own model class, built on the meta device with its
weights streamed from its safetensors a unit at a time (``hf_target``, ``stream``, ``weights``; a MoE layer's routed
experts a group at a time, ``experts``; quantized formats dequantized as they stream, ``formats``), and the EAGLE3
draft is ours, in pure PyTorch (``eagle3_draft``); the device and dtype choice (``compute``) and the memory plan
(``budget``)."""
