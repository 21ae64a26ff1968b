"""The engine level for people: one table per kind of engine run (decoded in the engine's environment, measured on
a running server, or loaded only), each saying what was measured, on which text, and what was not observed."""

from __future__ import annotations

from typing import TYPE_CHECKING, assert_never

from rich import box
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # the run's modules are imported by the engine level that makes it
    from eagle_convert.probe.result import ProbeResult
    from eagle_convert.real_engine.base import EngineObservation
    from eagle_convert.real_engine.record import EngineRun, InProcessRun, LoadOnlyRun, ServedRun


def render_engine_run(run: EngineRun, console: Console, probe: ProbeResult | None = None) -> None:
    """The engine level's table, one per kind of run: what the engine measured and what it fed the draft; each
    acceptance length says which text it was measured on (the probe table's, above, is on other text than the
    engine run)."""
    from eagle_convert.real_engine.record import InProcessRun, LoadOnlyRun, ServedRun

    match run:
        case LoadOnlyRun():
            render_engine_load(run, console)
        case ServedRun():
            render_engine_server(run, console, probe)
        case InProcessRun():
            render_engine_in_process(run, console, probe)
        case _:
            assert_never(run)


def render_engine_in_process(run: InProcessRun, console: Console, probe: ProbeResult | None = None) -> None:
    """A run the engine decoded in its own environment: acceptance, the probe on the same run, the fed states."""
    o = run.observation
    prompts, tokens = len(o.outputs), sum(len(out) for out in o.outputs)
    table = Table(
        title=f"Engine run: {o.engine} {o.version} (runner {o.runner}), {prompts} prompts, {tokens} tokens, greedy",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_header=False,
    )
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")
    doc = run.to_dict()
    per_position = " / ".join(f"{r:.3f}" for r in doc["acceptance_per_position"]) or "-"
    lossless = {True: "yes", False: "NO", None: "not checked"}[doc["lossless"]]
    fed = f"hs{run.hidden_states}" if run.hidden_states is not None else "not captured"
    flags = ", ".join(f"{k} {str(v).lower()}" for k, v in o.flags.items() if isinstance(v, bool)) or "-"
    rows = (
        (
            "mean acceptance length",
            f"{run.mean_acceptance_length:.3f} over {o.drafts} drafts: the engine on its {prompts} prompts, {tokens} "
            "new tokens",
        ),
        ("the probe on the same run", _same_run(run.probe_acceptance_length, run.probe_same_text)),
        *_probe_elsewhere(probe),
        ("accept rate per position", per_position),
        ("output equals target alone", lossless),
        ("hidden states fed to the draft", fed),
        ("flags the engine built", flags),
        ("load / generate", f"{o.load_s:.1f} s / {o.generate_s:.1f} s"),
        ("engine peak memory", f"{o.peak_rss_mib:.0f} MiB RSS"),
        *(("not observed", line) for line in o.not_observed),
    )
    for what, value in rows:
        table.add_row(what, value)
    console.print(table)


def render_engine_server(run: ServedRun, console: Console, probe: ProbeResult | None = None) -> None:
    """The engine level against a running server (--engine-url): what the server measured for this run, which
    draft it serves, other clients' traffic, and what a client cannot observe."""
    m, server = run.measured, run.measured.server
    table = Table(
        title=f"Engine run on a server: {server.engine} {server.version} at {server.url}, {m.prompts} prompts, "
        f"{sum(len(o) for o in m.outputs)} tokens, greedy",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_header=False,
    )
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")
    per_position = " / ".join(f"{r:.3f}" for r in m.acceptance_per_position) or "-"
    foreign = "; ".join(f"{c.counter} moved {c.observed:g}, this run {c.expected:g}" for c in m.foreign_traffic)
    k = server.num_speculative_tokens
    same_run = (
        _same_run(run.probe_acceptance_length, run.probe_same_text)
        if run.probe_not_run is None
        else f"not run: {run.probe_not_run}"
    )
    rows = (
        (
            "mean acceptance length",
            f"{m.mean_acceptance_length:.3f} over {m.drafts} drafts ({m.measured_from}; "
            f"{m.concurrency} requests in flight at most)",
        ),
        ("the probe on the same run", same_run),
        *_probe_elsewhere(probe),
        ("accept rate per position", per_position),
        ("speculative settings", f"{server.method or '?'}, {k if k is not None else '?'} draft tokens per step"),
        ("draft served", f"{m.draft_identity}: {m.draft_identity_note}"),
        ("other traffic", foreign or "none: the counters moved by this run's requests only"),
        ("requests", f"{m.wall_s:.1f} s"),
        *(("not observed", line) for line in run.not_observed),
    )
    for what, value in rows:
        table.add_row(what, value)
    console.print(table)


def _load_table(title: str, o: EngineObservation) -> Table:
    """The two-column table of a load-only engine run, captioned with why nothing was measured."""
    table = Table(
        title=title,
        title_justify="left",
        caption=o.not_measured,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_header=False,
    )
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")
    return table


def render_engine_load(run: LoadOnlyRun, console: Console) -> None:
    """An engine run that loaded the draft and set up the capture without decoding (SGLang on a CPU): what the
    engine read and built, where each file tensor went, and why acceptance was not measured; or an engine that
    refused the draft (EC728): its own error."""
    o = run.observation
    if run.refused is not None:
        table = _load_table(f"Engine load: {o.engine} {o.version} refused the draft; acceptance not measured", o)
        table.add_row("the engine's error", run.refused)
        table.add_row("load", f"{o.load_s:.1f} s until the refusal")
        console.print(table)
        return
    built = o.built or {}
    table = _load_table(
        f"Engine load: {o.engine} {o.version}, target {o.target_class or '?'}; acceptance not measured", o
    )
    ids = o.requested_layers
    tensors = o.tensors or {}
    dropped = run.dropped_tensors or []
    hot = built.get("hot_token_id")
    rows = (
        ("ids the engine read", str(ids) if ids is not None else "none: the engine's defaults"),
        ("hidden states it captures", f"hs{run.hidden_states}" if run.hidden_states is not None else "-"),
        ("draft class", str(built.get("class", "-"))),
        ("K (fc)", f"{built.get('num_aux')}, fc {built.get('fc_shape')}"),
        (
            "norms built",
            ", ".join(f"{k} {str(built.get(k)).lower()}" for k in ("fc_norm", "input_norm", "norm_output")),
        ),
        ("lm_head", str(built.get("lm_head", "-"))),
        ("hot tokens (d2t)", f"{hot}" if hot is not None else "none"),
        ("file tensors loaded", f"{len(tensors) - len(dropped)} of {len(tensors)}"),
        ("dropped", ", ".join(dropped) or "none"),
        ("load", f"{o.load_s:.1f} s, engine peak memory {o.peak_rss_mib:.0f} MiB RSS"),
    )
    for what, value in rows:
        table.add_row(what, value)
    console.print(table)


def _same_run(acceptance_length: float | None, same_text: bool | None) -> str:
    if acceptance_length is None:
        return "not measured (the reference forward cannot run this draft)"
    text = (
        "the same text as the engine's"
        if same_text
        else "the reference target's greedy text, which differs from the engine's in places"
    )
    return (
        f"{acceptance_length:.3f}: the reference forward on the same prompts and new tokens, {text}; "
        "equal to the engine's when the engine runs the draft as the weights need"
    )


def _probe_elsewhere(probe: ProbeResult | None) -> tuple[tuple[str, str], ...]:
    """The probe table's configured acceptance length, and why it differs from the two above: other text."""
    if probe is None or not any(r.reading == probe.configured for r in probe.rows):
        return ()
    row = probe.row(probe.configured)
    return (
        (
            "the probe table above",
            f"{row.acceptance_length:.3f} ({row.reading} row): measured on other text ({probe.positions} positions "
            f"of {probe.sequences} sequences of its own prompts), so it differs from the two above",
        ),
    )
