"""Gate findings: each is a difference between the draft's truth and one release's view of its config.

The truth (what the weights were trained for) comes from detection; the view from :func:`engine_view`. A finding
names the release, what it will do, what the weights need, and whether ``normalize`` fixes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace
from typing import Any

from eagle_convert.draft.detect import DraftSpec
from eagle_convert.draft.layouts import split_name
from eagle_convert.draft.truth import DraftTruth, draft_truth
from eagle_convert.gate.deployment import CAPTURE_KEY, capture_from_deployment
from eagle_convert.read.config import FAMILY_MODEL_TYPE, IDS_KEY, id_of
from eagle_convert.releases import ENGINES, EngineView, Release, engine_view, newest, resolve_engines
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import finding

FIXES, CANNOT_FIX = "; `eagle-convert normalize` fixes it", "; normalize cannot fix this"
NOT_EAGLE3_NOTE = "; normalize cannot fix this (not an EAGLE3 draft, EC001)"


def _fix(fixable: bool) -> str:
    return FIXES if fixable else CANNOT_FIX


def _where(view: EngineView) -> str:
    return f"{view.ids_from} ids {view.ids}" if view.ids is not None else view.ids_from


def release_findings(truth: DraftTruth, view: EngineView, order: list[int] | None = None) -> list[Finding]:
    """Every way ``view`` differs from ``truth`` that loses acceptance or fails to load, as findings (``order``: the
    trained states in fc's order, for a release that sorts what it captures)."""
    out: list[Finding] = []
    rel = view.release
    if view.target_refusal is not None:
        out.append(
            finding(
                "EC111",
                f"{rel}: {view.target_refusal}" + _fix(False),
                subject="architectures",
                actual=view.target_class,
                engine=rel,
            )
        )
    if view.draft_class is None:
        out.append(
            finding(
                "EC012",
                f"{rel}: {view.citations.get('draft_class', 'no draft class')}; the draft needs an EAGLE3 "
                f"{truth.attention.upper()} class"
                + _fix(view.eagle3_attentions is None or truth.attention in view.eagle3_attentions),
                subject="architectures",
                engine=rel,
            )
        )
        return out
    if view.mla_built is False and truth.attention == "mla":
        out.append(
            finding(
                "EC013",
                f"{rel} builds MHA attention for this MLA draft: it detects MLA only for DeepSeek model types with "
                "kv_lora_rank set; the weights need MLA" + _fix(True),
                subject="model_type",
                expected="deepseek_v3",
                engine=rel,
            )
        )
    if (
        view.attention
        and view.attention != truth.attention
        and view.mla_built is None
        and view.unknown_tensors == "not read"
    ):
        # where the record cannot say what the loader does with tensors its class lacks, say the mismatch itself
        out.append(
            finding(
                "EC116",
                f"{rel} builds {view.draft_class}, {view.attention.upper()} attention, for this "
                f"{truth.attention.upper()} draft ({view.citations.get('draft_class', '')}): the weights do not fit "
                "the module it builds",
                subject="architectures",
                expected=truth.attention,
                actual=view.attention,
                engine=rel,
            )
        )
    picked, trained = view.hidden_state_indices, truth.hidden_states
    if capture_from_deployment(view.engine):  # the layers come from the deployment (TensorRT-LLM), not the draft
        out += capture_findings(truth, view, order)
    elif view.aux_capture is not False and picked is not None and trained is not None and picked != trained:
        out.append(
            finding(
                "EC104",
                f"{rel} reads {_where(view)} ({view.rule}) and feeds hs{picked}; the weights were trained on "
                f"hs{trained} ({truth.convention})" + _fix(True) + _server_setting(view),
                subject=IDS_KEY,
                expected=trained,
                actual=picked,
                engine=rel,
            )
        )
    for problem in view.problems:
        if "never reached" in problem or "packer" in problem or "captures nothing" in problem:
            out.append(finding("EC105", f"{rel}: {problem}", subject=IDS_KEY, actual=picked, engine=rel))
    if truth.has_weights:
        out += _flag_findings(truth, view)
        if truth.num_layers > view.num_layers:
            lost = "dropped silently" if view.unknown_tensors == "dropped" else "refused at load"
            out.append(
                finding(
                    "EC211",
                    f"{rel} builds {view.num_layers} draft layer(s) from num_hidden_layers; the weights hold "
                    f"{truth.num_layers}: the trained layers beyond are {lost}" + _fix(False),
                    subject="num_hidden_layers",
                    expected=truth.num_layers,
                    actual=view.num_layers,
                    engine=rel,
                )
            )
    return out


def _server_setting(view: EngineView) -> str:
    """A release whose server setting replaces the draft's ids (TokenSpeed): the exact value that feeds the trained
    states, as its command line takes it."""
    ids = (view.capture_setting or {}).get(CAPTURE_KEY)
    if ids is None or capture_from_deployment(view.engine):
        return ""
    flag = "--" + CAPTURE_KEY.replace("_", "-")
    value = ",".join(map(str, ids))
    return f"; or serve it with {flag} {value} (check it with --engine-arg {CAPTURE_KEY}={_compact(ids)})"


def capture_setting_for(hidden_states: list[int]) -> list[int] | None:
    """The ``eagle3_layers_to_capture`` that feeds ``hs[j]`` for each trained ``j``, in TensorRT-LLM's convention
    (id i is the output of decoder layer i, i.e. ``hs[i + 1]``); None when a state is no layer's output (hs[0],
    the embeddings)."""
    ids = [id_of(j, "output-of") for j in hidden_states]
    return ids if all(i >= 0 for i in ids) else None


def paste_ready(ids: list[int]) -> str:
    """The setting as one line of ``extra_llm_api_options`` YAML."""
    return f"`speculative_config: {{{CAPTURE_KEY}: {ids}}}`"


def capture_findings(truth: DraftTruth, view: EngineView, order: list[int] | None = None) -> list[Finding]:
    """A release that takes the captured layers from the deployment: the exact setting that feeds the trained states
    when it does not (EC114); a trained order it cannot feed, which normalize sorts (EC115); states no setting
    reaches (EC105). ``order``: the trained states in fc's order (None: ascending)."""
    rel, picked, trained = view.release, view.hidden_state_indices, truth.hidden_states
    if trained is None:
        return []
    given = view.ids if view.ids_from == "deployment" else None
    advised = (view.capture_setting or {}).get(CAPTURE_KEY) or capture_setting_for(trained)
    fed = f"feeds hs{picked}" if picked is not None else "feeds no known states"
    now = (
        f"{rel} is given {CAPTURE_KEY}: {given}, which {fed}"
        if given is not None
        else f"{rel} reads no aux-layer ids from the draft: with {CAPTURE_KEY} unset it captures its default layers "
        f"and {fed}"
    )
    reordered = order is not None and order != trained and len(order) == len(trained)
    if advised is not None and reordered:  # the same states in another order: normalize sorts fc's column blocks
        why = view.capture_impossible or f"it sorts {CAPTURE_KEY} and feeds hs{trained}, not hs{order}"
        return [
            finding(
                "EC115",
                f"{now}; no {CAPTURE_KEY} feeds the states in the order the weights were trained on: {why}"
                + f"; `eagle-convert normalize` fixes it (fc's column blocks in ascending layer order), then set "
                f"{CAPTURE_KEY}: {advised} ({paste_ready(advised)})",
                subject=CAPTURE_KEY,
                expected=order,
                actual=picked,
                engine=rel,
            )
        ]
    impossible = view.capture_impossible or (
        None if advised is not None else f"hs{[j for j in trained if j < 1]} is the embedding output, no layer's"
    )
    if impossible is not None:
        return [
            finding(
                "EC105",
                f"{now}; no {CAPTURE_KEY} feeds the states the weights were trained on, hs{trained}: {impossible}"
                + CANNOT_FIX,
                subject=CAPTURE_KEY,
                expected=trained,
                actual=picked,
                engine=rel,
            )
        ]
    if picked == trained or advised is None:
        return []
    return [
        finding(
            "EC114",
            f"{now}; the weights were trained on hs{trained} ({truth.convention}): "
            + (
                f"the right setting is {CAPTURE_KEY}: {advised}"
                if given is not None
                else f"set {CAPTURE_KEY}: {advised}"
            )
            + f", in the extra_llm_api_options YAML {paste_ready(advised)} (verify it with --engine-arg "
            f"{CAPTURE_KEY}={_compact(advised)})",
            subject=CAPTURE_KEY,
            expected=advised,
            actual=given,
            engine=rel,
        )
    ]


def _compact(ids: list[int]) -> str:
    return "[" + ",".join(str(i) for i in ids) + "]"


def _flag_findings(truth: DraftTruth, view: EngineView) -> list[Finding]:
    out: list[Finding] = []
    rel = view.release
    pairs = [
        ("fc_norm", truth.fc_norm, view.fc_norm, "the per-chunk fc_norm weights"),
        ("norm_before_fc", truth.norm_before_fc, view.norm_before_fc, "input_norm.weight"),
    ]
    if view.reads_norm_before_residual:  # a class with no norm-before-residual branch has nothing to differ on
        pairs.append(("norm_before_residual", truth.norm_before_residual, view.norm_before_residual, "the recurrence"))
    for key, needed, built, what in pairs:
        if needed == built:
            continue
        if needed:
            does = f"builds no {key}" + (
                " (this class has none)" if key == "norm_before_fc" and view.attention == "mla" else ""
            )
            lost = f"{what} are dropped" if view.unknown_tensors == "dropped" else f"{what} are refused at load"
            msg = f"{rel} {does} from this config: {lost}; the weights need {key} on"
        else:
            msg = f"{rel} turns {key} on but the weights have no {what}: it would run an unloaded norm"
        rule = "EC204" if key == "norm_before_fc" and needed else "EC211"
        out.append(
            finding(
                rule,
                msg + _fix(built is False and view.attention != "mla"),
                subject=key,
                expected=needed,
                actual=built,
                engine=rel,
            )
        )
    if truth.norm_output and not view.norm_output:  # the trained recurrence carries the final norm's output
        out.append(
            finding(
                "EC211",
                f"{rel} does not read this config's norm_output: {view.draft_class} carries the pre-norm state to the "
                "next draft step; the draft was trained with norm_output on" + _fix(False),
                subject="norm_output",
                expected=True,
                actual=False,
                engine=rel,
            )
        )
    out += _build_findings(truth, view)
    if view.use_aux_hidden_state and view.num_aux_hidden_states is not None and truth.num_aux_source.startswith("fc"):
        if view.num_aux_hidden_states != truth.num_aux:
            out.append(
                finding(
                    "EC211",
                    f"{rel} builds fc for K={view.num_aux_hidden_states} ({view.num_aux_from}); the weights hold "
                    f"K={truth.num_aux} ({truth.num_aux_source})" + _fix(True),
                    subject="num_aux_hidden_states",
                    expected=truth.num_aux,
                    actual=view.num_aux_hidden_states,
                    engine=rel,
                )
            )
    if truth.qk_norm_tensors and not view.qk_norm:
        refused = view.unknown_tensors == "refused"
        out.append(
            finding(
                "EC302",
                f"{rel}: {view.draft_class} has no q/k norm: {', '.join(truth.qk_norm_tensors)} "
                + ("are refused at load" if refused else "are dropped silently and the layer runs without them")
                + (f"; write architectures {view.qk_norm_class} for {rel}" if refused and view.qk_norm_class else ""),
                severity="error" if refused else "warning",
                subject=truth.qk_norm_tensors[0],
                engine=rel,
            )
        )
    return out


def _build_findings(truth: DraftTruth, view: EngineView) -> list[Finding]:
    """Where a release builds the draft's RoPE or fc width otherwise than the config and weights say (modelled for
    TensorRT-LLM's AutoDeploy: ``view.rope`` and ``view.fc_in_width``)."""
    out: list[Finding] = []
    rel, why = view.release, view.citations.get("rope", "")
    if truth.rope is not None and view.rope is not None and view.rope != truth.rope:
        out.append(
            finding(
                "EC211",
                f"{rel} builds {view.rope} RoPE for this draft ({why}): the {truth.rope} rope_scaling the draft was "
                "trained with is not applied, and every draft position is rotated otherwise" + _fix(False),
                subject="rope_scaling",
                expected=truth.rope,
                actual=view.rope,
                engine=rel,
            )
        )
    k_agrees = view.num_aux_hidden_states in (None, truth.num_aux)
    if (
        truth.has_weights
        and view.fc_in_width
        and truth.fc_in_width
        and view.fc_in_width != truth.fc_in_width
        and k_agrees
    ):
        out.append(
            finding(
                "EC211",
                f"{rel} builds fc with in-width {view.fc_in_width} (K x hidden_size: target_hidden_size is not read, "
                f"{view.citations.get('fc', '')}); the weights' fc takes {truth.fc_in_width} (K x target_hidden_size):"
                " the checkpoint's fc.weight does not fit it" + _fix(False),
                subject="target_hidden_size",
                expected=truth.fc_in_width,
                actual=view.fc_in_width,
                engine=rel,
            )
        )
    return out


# dropped tensors another rule already reports (t2d is never used at inference; input_norm: EC204; fc: EC112)
COVERED_DROPS = frozenset({"t2d", "input_norm.weight", "fc.weight"})


def tensor_findings(truth: DraftTruth, present: set[str], view: EngineView) -> list[Finding]:
    """The checkpoint's tensors (local names) joined with what the release's loader does with them: a tensor it
    refuses fails the load (EC412); with aux capture off, an fc trained on several aux states is lost (EC112)."""
    out: list[Finding] = []
    rel = view.release
    for fate in view.tensor_fates:
        if fate.fate == "refused" and fate.tensor in present:
            out.append(
                finding(
                    "EC412",
                    f"{rel} refuses the checkpoint's {fate.tensor} at load: {fate.why}"
                    # normalize drops d2t/t2d where they are the identity, which only their values tell (EC412's fix)
                    + ("" if fate.tensor in ("d2t", "t2d") else _fix(False)),
                    subject=fate.tensor,
                    engine=rel,
                )
            )
        elif fate.fate == "dropped" and fate.tensor in present and fate.tensor not in COVERED_DROPS:
            out.append(
                finding(
                    "EC413",
                    f"{rel} drops the checkpoint's trained {fate.tensor} at load: {fate.why}",
                    subject=fate.tensor,
                    engine=rel,
                )
            )
    if view.aux_capture is False and "fc.weight" in present and truth.num_aux > 1:
        fc = next((f for f in view.tensor_fates if f.tensor == "fc.weight"), None)
        lost = f"fc.weight is {fc.fate}: {fc.why}" if fc is not None else "fc's input is one state, not K"
        out.append(
            finding(
                "EC112",
                f"{rel} captures no aux states (eagle_config.use_aux_hidden_state: false; "
                f"{view.citations.get('hidden_state_indices', '')}) and feeds the target's last hidden state, but "
                f"fc.weight was trained on K={truth.num_aux} aux states ({truth.num_aux_source}); {lost}" + _fix(False),
                subject="eagle_config.use_aux_hidden_state",
                expected=True,
                actual=False,
                engine=rel,
            )
        )
    return out


def unknown_tensor_fates(
    views: Iterable[EngineView], refused: str = "refuse(s) them at load", dropped: str = "drop(s) them silently"
) -> str:
    """What the releases do with a name they have no parameter for: 'r1 <refused>; r2 <dropped>'."""
    chosen = list(views)
    refusing = [v.release for v in chosen if v.unknown_tensors == "refused"]
    dropping = [v.release for v in chosen if v.unknown_tensors != "refused"]
    return "; ".join(
        f"{', '.join(releases)} {does}" for releases, does in ((refusing, refused), (dropping, dropped)) if releases
    )


def naming_findings(truth: DraftTruth, views: list[EngineView]) -> list[Finding]:
    """Names the draft carries (facts) joined with what each selected release does with them (views): one finding
    per rule, whatever the number of releases."""
    out: list[Finding] = []
    if truth.wrappers:
        consequence = unknown_tensor_fates(views)
        out.append(
            finding(
                "EC010",
                f"tensor names carry the wrapper prefix {', '.join(truth.wrappers)}"
                + (f": {consequence}" if consequence else "")
                + "; normalize strips it",
                actual=list(truth.wrappers),
            )
        )
    if truth.legacy_norm_flag or truth.legacy_norm_names:
        what = "use_aux_norm" if truth.legacy_norm_flag else ", ".join(truth.legacy_norm_names)
        parts = []
        for view in views:
            does = []
            if truth.legacy_norm_flag:
                does.append("reads use_aux_norm" if view.reads_use_aux_norm else "ignores use_aux_norm")
            if truth.legacy_norm_names:
                if view.legacy_aux_norm_names:
                    does.append("maps aux_norm_* to fc_norm.*")
                else:
                    does.append("refuses the aux_norm_* tensors" if view.unknown_tensors == "refused" else "drops them")
            parts.append(f"{view.release} {' and '.join(does)}")
        out.append(
            finding(
                "EC202",
                f"legacy EAGLE3.1 naming ({what})"
                + (f": {'; '.join(parts)}" if parts else "")
                + "; normalize renames them",
                subject=what,
            )
        )
    return out


def disagreement(views: list[EngineView]) -> Finding | None:
    """When the trained states are unknown: releases that feed different states make the draft non-portable."""
    picks = {v.release: v.hidden_state_indices for v in views if v.hidden_state_indices is not None}
    if len({tuple(p) for p in picks.values()}) <= 1:
        return None
    text = "; ".join(f"{rel} feeds hs{p}" for rel, p in picks.items())
    return finding("EC103", f"{text}: at most one of them matches the training", subject=IDS_KEY, actual=picks)


# ------------------------------------------------------------------ the join: the truth against the views


def target_model_type(spec: DraftSpec) -> str | None:
    return spec.target.model_type or FAMILY_MODEL_TYPE.get(spec.target.family or "")


def views(
    spec: DraftSpec, releases: Iterable[Release], deployment: Mapping[str, Any] | None = None
) -> list[EngineView]:
    """Each release's view of the draft's config for its target, with the user's deployment settings (TensorRT-LLM's
    ``eagle3_layers_to_capture``; the other engines read none)."""
    mt, n, target, trained = target_model_type(spec), spec.target.num_hidden_layers, spec.target, spec.aux.trained_order
    return [
        engine_view(
            r,
            spec.config.raw,
            target_model_type=mt,
            target_num_layers=n,
            target_architecture=target.architecture,
            target_vocab_size=target.vocab_size,
            deployment=deployment,
            trained_states=trained,
        )
        for r in releases
    ]


def gate_findings(spec: DraftSpec, tensor_names: Iterable[str], chosen: list[EngineView]) -> list[Finding]:
    """One finding per difference between the truth and a selected release's view."""
    names = list(tensor_names)
    truth = draft_truth(spec, names)
    present = {split_name(n).local for n in names}
    out = naming_findings(truth, chosen)
    order = spec.aux.trained_order
    out += [
        f for view in chosen for f in (*release_findings(truth, view, order), *tensor_findings(truth, present, view))
    ]
    if truth.hidden_states is None:
        clash = disagreement(chosen)
        if clash is not None:
            out.append(clash)
    if spec.producer == "eagle1":  # normalize refuses a draft that is not EAGLE3: no finding may promise a fix
        out = [replace(f, message=f.message.replace(FIXES, NOT_EAGLE3_NOTE)) for f in out]
    return out


def engines_json(
    spec: DraftSpec, releases: Iterable[Release] | None = None, deployment: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``aux_layers.engines``: one entry per engine name (its newest release), then one per release, each read
    with the user's deployment settings."""
    chosen = list(releases) if releases is not None else resolve_engines("all")
    out: dict[str, Any] = {}
    for view in views(spec, [newest(e) for e in ENGINES], deployment):
        out[view.engine] = _entry(view)
    for view in views(spec, chosen, deployment):
        out[view.release] = _entry(view)
    return out


def _entry(view: EngineView) -> dict[str, Any]:
    doc = asdict(view)
    doc.pop("citations")
    doc["citations"] = dict(view.citations)
    return doc
