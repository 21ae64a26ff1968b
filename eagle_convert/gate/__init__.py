"""The gate: the draft's truth (``draft/``) joined with each selected release's view of its config (``releases/``).

``findings`` makes one finding per difference between the two; ``nulls`` says what each release reads a null of
the config as; ``deployment`` checks the user's deployment settings every view reads (TensorRT-LLM's
``eagle3_layers_to_capture``); ``located`` places a finding at its file and JSON pointer. Headers and configs only:
inspect, verify's static level, normalize and the model card all ask it, and none of it imports torch.
"""
