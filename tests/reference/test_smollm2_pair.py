"""The acceptance probe on a real target: SmolLM2-135M-Instruct and the committed draft trained on its hs[4, 13, 25].

Expected values come from how the draft was trained (fixtures/smollm2_pair.py: top-level ids [4, 13, 25] input-to,
norm_output false), not from the probe's own output. The probe runs with its defaults (no text given).

One target load and one probe text serve the whole module: ``loaded`` opens the pair once, ``probe_text`` is the
default probe's text (its first round), generated once and kept by probe_target.generated for every later probe of
the same target (the verify calls of the variant configs, normalize --aux-convention auto) and for the step-by-step
check; :func:`test_each_text_was_generated_once` holds the module to it. The target's per-token work is small, so it
runs on one thread: on a shared two-core machine two OpenMP threads per process stall each other (measured: a
[2, 576] x [576, 1536] linear 0.16 ms on one thread, 1.7-3.8 ms on two; the module took 20 minutes on two).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from eagle_convert.draft.detect import detect
from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.probe import run as probe
from eagle_convert.probe import target as probe_target
from eagle_convert.probe.text import ROUND, prompt_pool
from eagle_convert.read.checkpoint import open_checkpoint
from eagle_convert.reference import eagle3_draft
from eagle_convert.reference.compute import CPU_FLOAT32
from eagle_convert.verify.run import verify_checkpoint
from fixtures.smollm2_pair import HIDDEN_STATE_INDICES, smollm2_pair

pytestmark = pytest.mark.slow
TRUE = HIDDEN_STATE_INDICES
GENERATED: Counter[tuple[Any, ...]] = Counter()  # (prompts, new tokens, eos) -> times the target generated it


@pytest.fixture(scope="module", autouse=True)
def one_thread_and_counted_texts() -> Iterator[None]:
    """One torch thread for the module (see the module docstring), and every text the target generates counted."""
    threads, generate = torch.get_num_threads(), probe_target._generate_text

    def counted(target: Any, prompts: Any, text: str, *args: Any) -> Any:
        GENERATED[(tuple(map(tuple, prompts)), text, *args[-2:])] += 1  # args[-2:]: new tokens, eos
        return generate(target, prompts, text, *args)

    torch.set_num_threads(1)
    probe_target._generate_text = counted  # type: ignore[assignment]
    try:
        yield
    finally:
        probe_target._generate_text = generate  # type: ignore[assignment]
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def pair() -> tuple[Path, Path]:
    pytest.importorskip("tokenizers")
    return smollm2_pair()


@pytest.fixture(scope="module")
def loaded(pair: tuple[Path, Path]) -> tuple[probe.LoadedDraft, probe_target.Target]:
    """The pair opened once: the draft detected against the target, and the target."""
    target_dir, draft_dir = pair
    return probe.open_pair(draft_dir, target_dir, CPU_FLOAT32)


@pytest.fixture(scope="module")
def probe_text(
    pair: tuple[Path, Path], loaded: tuple[probe.LoadedDraft, probe_target.Target]
) -> list[probe_target.Chunk]:
    """The default probe's text: the target's greedy continuations of the first ROUND default prompts, as
    probe.run_probe_on generates them (the same call, so every probe in the module finds it generated)."""
    _, target = loaded
    prompts = prompt_pool(pair[0], target.vocab_size)[:ROUND]
    return probe_target.generated(target, prompts, "greedy", TRUE, None)


def _variant(draft: Path, out: Path, **changes: object) -> Path:
    """A copy of the draft whose config says something else (same weights)."""
    shutil.copytree(draft, out)
    raw = json.loads((out / "config.json").read_text())
    raw.update(changes)
    (out / "config.json").write_text(json.dumps(raw, indent=2))
    return out


def _probe(draft: Path, target: Path) -> dict[str, object]:
    report = verify_checkpoint(draft, target=target, level="target", device="cpu", select="EC7")
    assert report.probe is not None
    return {"report": report, "probe": report.to_dict()["probe"]}


# The default probe's acceptance lengths on this pair (float32, 4,504 positions), as the hand-written Llama reference
# computed them at 3a35588, before the target side became transformers' own model streamed: the table must not move.
TABLE = {
    "configured": 1.5081,
    "ids read as output-of (one layer later)": 1.4695,
    "ids one layer earlier": 1.4424,
    "norm_output true": 1.406,
    "norm_output as SpecForge 0.2.0 reads it": 1.4763,
    "hs[4] alone one layer earlier": 1.3545,
    "hs[4] alone one layer later": 1.3566,
    "hs[13] alone one layer earlier": 1.3533,
    "hs[13] alone one layer later": 1.3545,
    "hs[25] alone one layer earlier": 1.334,
    "hs[25] alone one layer later": 1.3376,
}


def test_default_probe_passes_the_true_config(pair: tuple[Path, Path]) -> None:
    target, draft = pair
    out = _probe(draft, target)
    report, table = out["report"], out["probe"]
    assert report.status == "pass", report.findings  # type: ignore[attr-defined]
    assert table["positions"] >= probe.MIN_POSITIONS and table["text"] == "greedy"  # type: ignore[index]
    rows = {r["reading"]: r for r in table["rows"]}  # type: ignore[index]
    for r in rows.values():  # shown with -s
        print(r["reading"], r["hidden_states"], r["top1"], r["top1_ci"], r["acceptance_length"])
        print("   ", r["acceptance_length_ci"], r["delta_top1"], r["p_value"], r["verdict"], r["positions_needed"])
    print(table["positions"], table["sequences"], table["decided"])  # type: ignore[index]
    assert table["positions"] == 4504 and {k: round(r["acceptance_length"], 4) for k, r in rows.items()} == TABLE  # type: ignore[index]
    configured = rows["configured"]
    assert configured["hidden_states"] == TRUE and table["best"] == "configured"  # type: ignore[index]
    assert configured["top1_ci"][0] < configured["top1"] < configured["top1_ci"][1]
    assert len(configured["acceptance_rates"]) == 3 and configured["cycles"] > 0
    # the draft reads best as trained: each misreading the engines apply is decisively worse
    for name in ("ids read as output-of (one layer later)", "ids one layer earlier"):
        assert rows[name]["delta_top1"] <= -0.01 and rows[name]["verdict"] == "worse", rows[name]
    assert rows["norm_output true"]["delta_accepted"] <= -0.02, rows["norm_output true"]
    assert rows["norm_output true"]["verdict"] == "worse", rows["norm_output true"]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"eagle_aux_hidden_state_layer_ids": [j - 1 for j in TRUE]}, (TRUE, False)),  # ids one layer early
        ({"eagle_aux_hidden_state_layer_ids": [j + 1 for j in TRUE]}, (TRUE, False)),  # ids one layer late
        ({"norm_output": True}, (TRUE, False)),  # norm_output flipped
    ],
    ids=["ids-1", "ids+1", "norm_output"],
)
def test_default_probe_flags_a_misread_config(
    pair: tuple[Path, Path], tmp_path: Path, changes: dict[str, object], expected: tuple[list[int], bool]
) -> None:
    target, draft = pair
    raw = json.loads((draft / "config.json").read_text())
    if "eagle_aux_hidden_state_layer_ids" in changes:  # both id lists move together (same convention)
        ids = changes["eagle_aux_hidden_state_layer_ids"]
        changes["eagle_config"] = {**raw["eagle_config"], "eagle_aux_hidden_state_layer_ids": [j - 1 for j in ids]}  # type: ignore[union-attr]
        changes["eagle_convert"] = {**raw["eagle_convert"], "hidden_state_indices": ids}
    report = _probe(_variant(draft, tmp_path / "draft", **changes), target)["report"]
    found = [f for f in report.findings if f.rule_id == "EC711"]  # type: ignore[attr-defined]
    assert found, report.findings  # type: ignore[attr-defined]
    assert found[0].expected == {"hidden_states": expected[0], "norm_output": expected[1]}


def test_normalize_auto_resolves_the_convention(pair: tuple[Path, Path], tmp_path: Path) -> None:
    """Only eagle_config ids [3, 12, 24] and no producer: ambiguous to the static rules; the weights say output-of."""
    target, draft = pair
    raw = json.loads((draft / "config.json").read_text())
    src = _variant(draft, tmp_path / "src")
    ambiguous = {k: v for k, v in raw.items() if k not in ("eagle_convert", "eagle_aux_hidden_state_layer_ids")}
    (src / "config.json").write_text(json.dumps(ambiguous, indent=2))
    assert detect(open_checkpoint(src)).aux.convention == "ambiguous"
    report = normalize_checkpoint(src, tmp_path / "out", target=target, aux_convention="auto", device="cpu")
    assert report.semantics["hidden_states"] == TRUE
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["eagle_aux_hidden_state_layer_ids"] == TRUE
    assert "output-of hs[4, 13, 25]" in written["eagle_convert"]["convention_measured"]


def test_acceptance_length_matches_a_step_by_step_draft_verify_cycle(
    loaded: tuple[probe.LoadedDraft, probe_target.Target], probe_text: list[probe_target.Chunk]
) -> None:
    """The probe's engine-style acceptance against an independent simulation: at each cycle the draft sees only the
    prefix (its chain run on tokens up to the current position), the target's greedy text decides what is accepted,
    and decoding continues after the accepted tokens and the target's own token."""
    draft, target = loaded
    cfg, weights, embed = draft.cfg, draft.weights, draft.embedding(target)
    chunks = probe_text[:2]  # two of the default probe's texts
    reading = probe.Reading("configured", tuple(TRUE), False)
    steps, ours, theirs = 3, [], []
    for chunk in chunks:
        ours += probe._score(chunk, reading, cfg, weights, embed, steps)[2]
        ids, t = chunk.ids, chunk.start
        aux = torch.cat([chunk.hidden[j] for j in TRUE], dim=-1)
        while t < ids.numel() - 1 - steps:
            chain = eagle3_draft.chain(cfg, weights, ids[1 : t + 2], aux[: t + 1], steps, embed=embed)
            drafted = [int(s.target_tokens[t]) for s in chain]  # the chain from the last position only
            accepted = 0
            while accepted < steps and drafted[accepted] == int(ids[t + 2 + accepted]):
                accepted += 1
            theirs.append(accepted)
            t += accepted + 1
    assert len(ours) == len(theirs) > 50
    assert abs(sum(ours) / len(ours) - sum(theirs) / len(theirs)) <= 0.02


def test_engine_run_prediction_counts_cycles_as_a_literal_decode_loop(
    pair: tuple[Path, Path], loaded: tuple[probe.LoadedDraft, probe_target.Target]
) -> None:
    """predict_engine_run against speculative decoding written out step by step, as the engines run it: the target's
    prefill yields the first new token; each cycle the draft proposes `steps` tokens from the last verified one, the
    target accepts the longest matching prefix and adds its own token; a prompt is done once `new_tokens` are out
    (the last cycle still verifies its whole chain, past the limit), whatever the end-of-sequence token (the engine
    level ignores it). The text is the one the prediction generates (the same call: generated once)."""
    draft, target = loaded
    cfg, weights, embed = draft.cfg, draft.weights, draft.embedding(target)
    prompts = prompt_pool(pair[0], target.vocab_size)[:3]
    steps, new_tokens = 3, 40
    text = probe_target.generated(target, prompts, "greedy", TRUE, None, new_tokens + steps, ignore_eos=True)
    cycles, outputs = [], []
    for prompt, chunk in zip(prompts, text, strict=True):
        ids = chunk.ids.tolist()
        aux = torch.cat([chunk.hidden[j] for j in TRUE], dim=-1)
        done = len(prompt) + 1  # tokens known after the prefill: the prompt and the target's first token
        while done - len(prompt) < new_tokens:
            t = done - 2  # the chain row: states of the token before the last verified one, and that token
            row = torch.tensor(ids[1 : t + 2])
            chain = eagle3_draft.chain(cfg, weights, row, aux[: t + 1], steps, embed=embed)
            drafted = [int(s.target_tokens[t]) for s in chain]
            accepted = 0
            while accepted < steps and drafted[accepted] == ids[done + accepted]:
                accepted += 1
            cycles.append(accepted)
            done += accepted + 1
        outputs.append(ids[len(prompt) : len(prompt) + new_tokens])
    predicted = probe.predict_engine_run_on(draft, target, prompts, new_tokens, steps=steps)
    assert predicted.cycles == len(cycles) > 3 * (new_tokens // (steps + 1))
    assert predicted.acceptance_length == pytest.approx(1 + sum(cycles) / len(cycles), abs=1e-4)
    assert predicted.outputs == outputs


def test_each_text_was_generated_once() -> None:
    """The module's probes and checks shared their texts (the default probe's, the engine run's): none was
    generated twice, which is what made this module slow."""
    assert GENERATED and max(GENERATED.values()) == 1, {k[1:]: n for k, n in GENERATED.items()}
