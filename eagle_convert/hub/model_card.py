"""The model card `push` publishes: YAML metadata plus the facts a deployer needs, rendered locally.

Never uses huggingface_hub's ModelCard.push_to_hub/validate (they call the network); the card is plain text.
"""

from __future__ import annotations

import json

from eagle_convert.draft.aux_layers import ids_for
from eagle_convert.draft.detect import DraftSpec
from eagle_convert.read.config import TargetConfig
from eagle_convert.verify.report import VerifyReport


def _v(value: object) -> str:
    """A value as the card shows it: true/false/null as in config.json, never Python's True/False/None."""
    return json.dumps(value) if value is None or isinstance(value, bool) else str(value)


def _yaml_list(items: list[str]) -> str:
    return "\n".join(f"- {json.dumps(i)}" for i in items)


def render_card(
    repo_id: str, spec: DraftSpec, report: VerifyReport, target: TargetConfig | None, base_model: str | None
) -> str:
    aux = spec.aux
    hidden = aux.hidden_state_indices
    flags = spec.flags
    tags = ["eagle3", "speculative-decoding", "draft-model"]
    meta = ["---", "pipeline_tag: text-generation", "tags:", _yaml_list(tags)]
    if base_model:
        meta += [f"base_model: {json.dumps(base_model)}"]
    meta += ["library_name: sglang", "---", ""]
    d = spec.dims
    rope = spec.config.rope_scaling
    lines = [
        f"# {repo_id}",
        "",
        f"An {'EAGLE3.1' if spec.eagle_version == 'eagle3.1' else 'EAGLE3'} speculative-decoding draft"
        + (f" for `{base_model}`" if base_model else "")
        + ". This card was written by eagle-convert from the "
        "checkpoint itself; every value below is read from the files in this commit.",
        "",
        "## Draft",
        "",
        "| | |",
        "|---|---|",
        f"| producer layout | {spec.producer} ({spec.producer_confidence} confidence) |",
        f"| attention | {spec.attention.upper()} |",
        f"| EAGLE version | {spec.eagle_version} |",
        f"| fc_norm / norm_output / norm_before_fc / norm_before_residual | {_v(flags.fc_norm.value)} / "
        f"{_v(flags.norm_output.value)} / {_v(flags.norm_before_fc.value)} / {_v(flags.norm_before_residual.value)} |",
        f"| hidden size / target hidden size | {_v(d.hidden_size)} / {_v(spec.target_hidden_size or d.hidden_size)} |",
        f"| aux hidden states (K) | {spec.num_aux_hidden_states} |",
        f"| vocab / draft vocab | {_v(d.vocab_size)} / {_v(d.draft_vocab_size)} |",
        f"| rope | theta {_v(spec.config.rope_theta)}, scaling {json.dumps(rope) if rope else 'none'} |",
        f"| max_position_embeddings | {_v(d.max_position_embeddings)} |",
        "",
        "## Aux layers",
        "",
    ]
    if hidden:
        lines += [
            f"The draft reads the target's hidden states `hs{hidden}` (Hugging Face `output_hidden_states` indices;"
            " `hs[j]` is the input of layer j).",
            "",
            "| convention | ids |",
            "|---|---|",
            f"| input-to (vLLM, speculators; top-level ids) | {ids_for(hidden, 'input-to')} |",
            f"| output-of (SpecForge, ModelOpt; SGLang adds 1 for Llama/Qwen) | {ids_for(hidden, 'output-of')} |",
            "",
            f"In this config: top level {_v(aux.top_level_ids)}, `eagle_config` {_v(aux.eagle_config_ids)} "
            f"(convention: {aux.convention}).",
        ]
    else:
        lines += ["No aux-layer ids are written: the engines capture `hs[2], hs[N//2], hs[N-3]` of an N-layer target."]
    target_name = base_model or "<target-model>"
    lines += [
        "",
        "## Launch",
        "",
        "SGLang:",
        "",
        "```bash",
        f"python -m sglang.launch_server --model-path {target_name} --speculative-algorithm EAGLE3 \\",
        f"    --speculative-draft-model-path {repo_id} --speculative-num-steps 3 \\",
        "    --speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
        "```",
        "",
        "vLLM:",
        "",
        "```bash",
        f"vllm serve {target_name} \\",
        f"    --speculative-config '{json.dumps({'method': 'eagle3', 'model': repo_id, 'num_speculative_tokens': 3})}'",
        "```",
        "",
        "## Verification",
        "",
        f"`eagle-convert verify` (level `{report.level}`, engine `{report.engine}`): **{report.status}**, "
        f"{report.summary()['errors']} error(s), {report.summary()['warnings']} warning(s). "
        "The full report is `verify-report.json` in this commit.",
        "",
        "| file | bytes | sha256 |",
        "|---|---|---|",
        *[f"| {f.name} | {f.size} | `{f.sha256}` |" for f in report.files],
        "",
    ]
    if target is not None:
        lines.insert(
            lines.index("## Aux layers"),
            f"Target config: {target.num_hidden_layers} layers, hidden "
            f"{target.hidden_size}, family {target.family or 'unknown'}.\n",
        )
    return "\n".join(meta + lines)
