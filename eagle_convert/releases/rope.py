"""How each release reads a draft config whose rotary settings are in ``rope_parameters`` alone.

transformers 5's ``save_pretrained`` writes ``rope_parameters`` (with ``rope_theta`` inside) and no ``rope_scaling``;
transformers 4 reads ``rope_scaling`` and the top-level ``rope_theta`` only, so a YaRN draft saved that way loses its
scaling there. Every modelled SGLang and vLLM release requires transformers 5 (its wheel's METADATA), whose config
classes fill ``rope_parameters`` from ``rope_scaling`` or ``rope_parameters`` in config.json and make
``config.rope_scaling`` the same value; their Llama draft layers build the rotary embedding from
``config.rope_parameters``. Read from the wheels (``pip download --no-deps``) and transformers' own at the versions the
wheels require. The other records say nothing here: TensorRT-LLM's rotary parameters (``RopeParams.from_config``) and
its transformers requirement were not read at the records' commits (its AutoDeploy record reads a top-level
``rope_type``, its own finding), and TokenSpeed's rotary reading was not read for this.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle_convert.releases.model import Behaviour, Cite


@dataclass(frozen=True)
class RopeReading:
    """One release's reading of rotary settings: what its draft layer reads, and the transformers that fills it."""

    layer: Cite  # where the Llama draft layer builds its rotary embedding (a path in the release's wheel)
    reads: str  # the attribute(s) it reads there
    transformers: str  # the transformers the wheel requires (its METADATA)
    merge: str  # where that transformers fills rope_parameters from either key, and aliases rope_scaling to it

    def behaviour(self) -> Behaviour:
        return Behaviour(
            "rope-parameters-only",
            f"a config with rope_parameters and no rope_scaling keeps its scaling (YaRN): the draft layer reads "
            f"{self.reads}, and the wheel requires {self.transformers}, whose config classes fill rope_parameters "
            f"from rope_scaling or rope_parameters and alias rope_scaling to it ({self.merge})",
            self.layer,
        )


_TRANSFORMERS = "transformers {v} modeling_rope_utils.py:{merge}, configuration_utils.py:{alias}"

SGLANG = {
    "0.5.23": RopeReading(
        Cite("sglang/srt/models/llama.py", "322-328 (LlamaDecoderLayer; models/llama_eagle3.py:46-60 subclasses it)"),
        "config.rope_parameters, else rope_scaling",
        "transformers==5.19.0",
        _TRANSFORMERS.format(v="5.19.0", merge="753-754", alias="584-590"),
    ),
    "0.5.16": RopeReading(
        Cite("sglang/srt/models/llama.py", "262-268 (LlamaDecoderLayer; models/llama_eagle3.py:44-52 subclasses it)"),
        "config.rope_parameters, else rope_scaling",
        "transformers==5.12.1",
        _TRANSFORMERS.format(v="5.12.1", merge="707-708", alias="488-494"),
    ),
}
VLLM = {
    "0.33": RopeReading(
        Cite(
            "vllm/model_executor/models/llama.py",
            "236-248 (LlamaAttention._init_rotary_emb; llama_eagle3.py:27-28, 67)",
        ),
        "config.rope_parameters",
        "transformers>=5.16.1,<5.21.0",
        _TRANSFORMERS.format(v="5.16.1", merge="743-744", alias="548-554"),
    ),
    "0.28": RopeReading(
        Cite("vllm/model_executor/models/llama.py", "234-246 (LlamaAttention._init_rotary_emb; llama_eagle3.py:35)"),
        "config.rope_parameters",
        "transformers>=5.5.3",
        _TRANSFORMERS.format(v="5.5.3", merge="707-708", alias="471-477"),
    ),
}
