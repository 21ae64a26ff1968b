"""The model card `push` publishes: YAML metadata plus the facts a deployer needs, rendered locally.

Never uses huggingface_hub's ModelCard.push_to_hub/validate (they call the network); the card is plain text.
"""

from __future__ import annotations

import json

from eagle_convert.draft.aux_layers import ids_for
from eagle_convert.draft.detect import DraftSpec
from eagle_convert.gate.deployment import CAPTURE_KEY
from eagle_convert.gate.findings import views
from eagle_convert.read.config import TargetConfig
from eagle_convert.releases import Release, launch_command, resolve_engines
from eagle_convert.render.escape import markdown_code, markdown_text
from eagle_convert.verify.report import VerifyReport


def _v(value: object) -> str:
    """A value as the card shows it: true/false/null as in config.json, never Python's True/False/None."""
    return json.dumps(value) if value is None or isinstance(value, bool) else str(value)


def _yaml_list(items: list[str]) -> str:
    return "\n".join(f"- {json.dumps(i)}" for i in items)


def trtllm_launch(spec: DraftSpec, releases: list[Release], target: str, draft: str, steps: int = 3) -> list[str]:
    """TensorRT-LLM's launch lines when a trtllm release was verified: ``trtllm-serve`` with an
    ``extra_llm_api_options`` YAML whose ``speculative_config`` carries the ``eagle3_layers_to_capture`` that feeds
    the trained states (TensorRT-LLM reads no aux-layer ids from the draft), left out where its default does. Only
    for a verified trtllm release: the card launches what the gate checked."""
    releases = [r for r in releases if r.engine == "trtllm"]
    if not releases:
        return []
    hidden = spec.aux.hidden_state_indices
    view = views(spec, releases[:1])[0]
    backend = " --backend _autodeploy" if releases[0].runner == "autodeploy" else ""  # AutoDeploy's drafter and capture
    default = view.hidden_state_indices  # what it feeds with the setting unset
    setting = (view.capture_setting or {}).get(CAPTURE_KEY)  # the release record's own advice (None: default right)
    yaml = [
        "speculative_config:",
        "  decoding_type: Eagle3",
        f"  max_draft_len: {steps}",
        f"  speculative_model_dir: {draft}",
    ]
    if setting is not None:
        yaml.append(f"  {CAPTURE_KEY}: {setting}  # TensorRT-LLM's convention: the outputs of these decoder layers")
    why = "TensorRT-LLM reads no aux-layer ids from the draft: "
    if setting is not None:
        why += f"`{CAPTURE_KEY}: {setting}` makes it feed the trained `hs{hidden}` (unset, it captures its default)."
    elif hidden is not None and hidden == default:
        why += f"its default {CAPTURE_KEY} feeds the trained `hs{hidden}`."
    else:
        why += f"set {CAPTURE_KEY} to the outputs of the layers the draft was trained on."
    return [
        "trtllm:",
        "",
        why,
        "",
        "```yaml",
        "# extra_llm_api_options.yaml",
        *yaml,
        "```",
        "",
        "```bash",
        f"trtllm-serve {target}{backend} --extra_llm_api_options extra_llm_api_options.yaml",
        "```",
        "",
    ]


def engine_launch(engine: str, spec: DraftSpec, releases: list[Release], target: str, draft: str) -> str | None:
    """``engine``'s launch command (None where its records hold none: TensorRT-LLM, trtllm_launch); for a release
    whose server argument replaces the draft's ids (TokenSpeed's ``--eagle3-layers-to-capture``), with the value its
    record advises where the draft's own ids feed other states."""
    command = launch_command(engine, target, draft)
    if command is None:
        return None
    chosen = [r for r in releases if r.engine == engine and r.ids_setting is not None]
    setting = (views(spec, chosen[:1])[0].capture_setting or {}).get(CAPTURE_KEY) if chosen else None
    if setting is None:
        return command
    flag = "--" + CAPTURE_KEY.replace("_", "-")
    return f"{command} \\\n    {flag} {','.join(map(str, setting))}"


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
    releases = resolve_engines(report.engine)
    engines = list(dict.fromkeys(r.engine for r in releases))
    meta += [f"library_name: {engines[0]}", "---", ""]
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
        f"| rope | theta {_v(spec.config.rope_theta)}, scaling {markdown_text(json.dumps(rope)) if rope else 'none'} |",
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
            f"| input-to (id X is the input of layer X) | {ids_for(hidden, 'input-to')} |",
            f"| output-of (id X is the output of layer X) | {ids_for(hidden, 'output-of')} |",
            "",
            f"In this config: top level {_v(aux.top_level_ids)}, `eagle_config` {_v(aux.eagle_config_ids)} "
            f"(convention: {aux.convention}).",
        ]
    else:
        lines += ["No aux-layer ids are written: each engine release captures its default hidden states."]
    lines += [
        "",
        "What each engine release this draft was verified for feeds it (eagle-convert's engine records):",
        "",
        "| release | reads | hidden states fed |",
        "|---|---|---|",
        *[
            f"| {v.release} | {v.ids_from} ({v.rule}) | "
            f"{_v(v.hidden_state_indices) if v.hidden_state_indices is not None else 'unknown without the target'} |"
            for v in views(spec, releases)
        ],
    ]
    target_name = base_model or "<target-model>"
    lines += [
        "",
        "## Launch",
        "",
        *[
            line
            for engine, command in ((e, engine_launch(e, spec, releases, target_name, repo_id)) for e in engines)
            if command is not None  # TensorRT-LLM's launch lines carry a deployment setting: trtllm_launch
            for line in (f"{engine}:", "", "```bash", command, "```", "")
        ],
        *trtllm_launch(spec, releases, target_name, repo_id),
        "## Verification",
        "",
        f"`eagle-convert verify` (level `{report.level}`, engine `{report.engine}`: "
        f"{', '.join(f'`{r.name}`' for r in releases)}): **{report.status}**, "
        f"{report.summary()['errors']} error(s), {report.summary()['warnings']} warning(s). "
        "The full report is `verify-report.json` in this commit.",
        "",
        "| file | bytes | sha256 |",
        "|---|---|---|",
        *[f"| {markdown_code(f.name)} | {f.size} | `{f.sha256}` |" for f in report.files],
        "",
    ]
    if target is not None:
        lines.insert(
            lines.index("## Aux layers"),
            f"Target config: {target.num_hidden_layers} layers, hidden "
            f"{target.hidden_size}, family {target.family or 'unknown'}.\n",
        )
    return "\n".join(meta + lines)
