"""The probe's readings batched: one forward per chain step for every reading gives each reading exactly what its own
chain gives (eagle3_draft.chains against eagle3_draft.chain; probe._score_readings against probe._score).

Reference level: random drafts at the parity tests' tiny sizes (MHA with GQA, fc_norm, norm_before_fc with fc.bias
and norm_before_residual, MLA with YaRN), rows mixing the output flags and the number of steps. Probe level: the real
SmolLM2-135M target and the draft trained on it (fixtures/smollm2_pair.py), over teacher-forced chat prompts, under
the probe's own readings plus a mixed set, with budgets that force one, two and three readings per batch. Equality is
bit for bit in float32.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from eagle_convert.errors import ConfigError
from eagle_convert.probe import run as probe
from eagle_convert.probe import target as probe_target
from eagle_convert.probe.text import prompt_pool
from eagle_convert.reference import eagle3_config, eagle3_draft
from eagle_convert.reference.compute import CPU_FLOAT32
from tests.reference.test_reference_draft import YARN, K, build, mha_config, mla_config

T = 64  # tokens: at fewer rows the CPU matmul kernels may round differently with the batch size (9: 5e-5)
FLAGS = [(False, True, 3), (True, True, 1), (True, False, 3), (False, False, 2), (False, True, 1)]  # mixed rows
CONFIGS = {
    "mha-gqa-fc-norm": mha_config(fc_norm=True),
    "mha-norm-before-fc-bias-residual": mha_config(norm_before_fc=True, bias=True, norm_before_residual=True),
    "mla-yarn": mla_config(YARN),
}


def _inputs(cfg: eagle3_config.Eagle3Config, rows: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab_size, (T,), generator=g)
    aux = torch.randn(rows, T, K * cfg.target_hidden_size, generator=g)  # a different aux input per row
    return tokens, aux


@pytest.mark.parametrize("raw", CONFIGS.values(), ids=CONFIGS.keys())
def test_one_batched_step_is_each_rows_own_step(raw: dict[str, Any]) -> None:
    """draft_step over [R, T] with per-row flags: every row's logits and next hidden state equal, bit for bit, the
    step run on that row alone under a config carrying its flags; first and later steps."""
    cfg, weights, _ = build(raw)
    tokens, aux = _inputs(cfg, len(FLAGS))
    flags = eagle3_draft.RowFlags(torch.tensor([f[0] for f in FLAGS]), torch.tensor([f[1] for f in FLAGS]))
    pos = torch.arange(T)
    batch = eagle3_draft.draft_step(
        cfg, weights, tokens.expand(len(FLAGS), -1), aux, first_step=True, positions=pos, rows=flags
    )
    later = eagle3_draft.draft_step(
        cfg, weights, batch.target_tokens, batch.next_hidden, first_step=False, positions=pos + 1, past=[batch.kv]
    )  # config flags for every row, keys and values of the batch
    for r, (norm_output, head_norm, _) in enumerate(FLAGS):
        rcfg = dataclasses.replace(cfg, norm_output=norm_output, head_norm=head_norm)
        one = eagle3_draft.draft_step(rcfg, weights, tokens, aux[r], first_step=True, positions=pos)
        assert torch.equal(batch.logits[r], one.logits) and torch.equal(batch.next_hidden[r], one.next_hidden)
        two = eagle3_draft.draft_step(
            cfg, weights, one.target_tokens, one.next_hidden, first_step=False, positions=pos + 1, past=[one.kv]
        )
        assert torch.equal(later.logits[r], two.logits) and torch.equal(later.next_hidden[r], two.next_hidden)


@pytest.mark.parametrize("raw", CONFIGS.values(), ids=CONFIGS.keys())
def test_chains_give_each_reading_its_own_chain(raw: dict[str, Any]) -> None:
    """chains with rows of mixed flags and steps (a one-step row first and in the middle: rows leave the batch out of
    order) against one chain per row."""
    cfg, weights, _ = build(raw)
    tokens, aux = _inputs(cfg, len(FLAGS))
    rows = [eagle3_draft.ChainRow(*f) for f in FLAGS]
    got = eagle3_draft.chains(cfg, weights, tokens, aux, rows)
    for r, row in enumerate(rows):
        rcfg = dataclasses.replace(cfg, norm_output=row.norm_output, head_norm=row.head_norm)
        want = eagle3_draft.chain(rcfg, weights, tokens, aux[r], row.steps)
        assert len(got[r]) == row.steps
        for drafted, step in zip(got[r], want, strict=True):
            assert torch.equal(drafted, step.target_tokens)


@pytest.mark.parametrize("raw", CONFIGS.values(), ids=CONFIGS.keys())
def test_chains_go_on_only_from_the_rows_needed(raw: dict[str, Any]) -> None:
    """``needed`` drops chain rows from later steps: a step runs on the rows some reading goes on from (its own and
    every earlier step's tokens needed), gives there what each reading's own chain gives, and -1 elsewhere."""
    cfg, weights, _ = build(raw)
    tokens, aux = _inputs(cfg, len(FLAGS))
    rows = [eagle3_draft.ChainRow(*f) for f in FLAGS]
    calls: list[tuple[int, int]] = []

    def needed(s: int, at: torch.Tensor, drafted: torch.Tensor) -> torch.Tensor:
        calls.append((s, at.numel()))
        return (at % 2 == 0) & (drafted % 3 != 0) if s == 0 else drafted % 2 == 0  # [R', N]

    got = eagle3_draft.chains(cfg, weights, tokens, aux, rows, needed=needed)
    want = [
        eagle3_draft.chain(dataclasses.replace(cfg, norm_output=r.norm_output, head_norm=r.head_norm), weights,
                           tokens, aux[i], r.steps)
        for i, r in enumerate(rows)
    ]  # fmt: skip
    going = [torch.ones(T, dtype=torch.bool) for _ in rows]  # per reading: rows its chain goes on from
    for s in range(max(r.steps for r in rows)):
        live = [i for i, r in enumerate(rows) if r.steps > s]
        ran = torch.stack([going[i] for i in live]).any(0)  # the rows step s runs on
        assert 0 < int(ran.sum()) and (s == 0 or int(ran.sum()) < T)
        for i in live:
            mine = want[i][s].target_tokens
            assert torch.equal(got[i][s][ran], mine[ran]) and bool((got[i][s][~ran] == -1).all())
            rows_now = torch.arange(T)
            going[i] &= ((rows_now % 2 == 0) & (mine % 3 != 0)) if s == 0 else (mine % 2 == 0)
    assert calls[0] == (0, T) and all(n < T for s, n in calls[1:])


def test_chains_refuse_an_empty_or_zero_step_batch() -> None:
    cfg, weights, _ = build(mha_config())
    tokens, aux = _inputs(cfg, 1)
    for rows in ([], [eagle3_draft.ChainRow(False, True, 0)]):
        with pytest.raises(ConfigError):
            eagle3_draft.chains(cfg, weights, tokens, aux[: len(rows)], rows)


# ------------------------------------------------------------------------------------------------- the SmolLM2 pair


@pytest.fixture(scope="module")
def smollm2() -> tuple[probe.LoadedDraft, probe_target.Target, list[probe_target.Chunk]]:
    """The pair, and four chat prompts of the default pool run teacher-forced through the target (every boundary a
    reading below can take)."""
    pytest.importorskip("tokenizers")
    from fixtures.smollm2_pair import smollm2_pair

    target_dir, draft_dir = smollm2_pair()
    draft, target = probe.open_pair(draft_dir, target_dir, CPU_FLOAT32)
    prompts = prompt_pool(Path(target_dir), target.vocab_size)[:4]
    chunks = probe_target.teacher_forced(target, prompts, [0] * 4, list(range(target.num_layers + 1)), None)
    return draft, target, chunks


def _mixed(configured: tuple[int, ...]) -> list[probe.Reading]:
    """Readings the probe never makes together: a diagnostic first, both head_norm values under norm_output true,
    the same states twice, a shifted diagnostic in the middle."""
    shifted = tuple(j + 1 for j in configured)
    return [
        probe.Reading("diagnostic first", (configured[0] - 1, *configured[1:]), False, diagnostic=True),
        probe.Reading("configured", configured, False),
        probe.Reading("post-norm, head reads s", configured, True, head_norm=False),
        probe.Reading("post-norm", configured, True),
        probe.Reading("diagnostic middle", (*configured[:2], configured[2] + 1), True, diagnostic=True),
        probe.Reading("shifted, head reads s", shifted, False, head_norm=False),
    ]


@pytest.mark.slow
def test_batched_readings_score_as_one_at_a_time_on_smollm2(
    smollm2: tuple[probe.LoadedDraft, probe_target.Target, list[probe_target.Chunk]],
) -> None:
    """The probe's readings of the real pair, and a mixed set, batched under the default budget and under budgets
    that force one, two and three readings per batch: the same top-1 hits, accepted tokens and cycles as each
    reading's own chains, bit for bit."""
    draft, target, chunks = smollm2
    cfg, weights, embed = draft.cfg, draft.weights, draft.embedding(target)
    _, ours = probe.readings(draft.spec, target.num_layers)
    assert len(ours) == 11 and any(r.diagnostic for r in ours) and any(not r.head_norm for r in ours)
    steps = 3
    for candidates in (ours, _mixed(ours[0].hidden_states)):
        for chunk in chunks[:2]:
            alone = [probe._score(chunk, r, cfg, weights, embed, steps) for r in candidates]
            per_reading = eagle3_draft.chain_elements(cfg, chunk.ids.numel() - 1, steps) * 4  # bytes in float32
            for budget in (None, per_reading, 2 * per_reading + 1, 3 * per_reading):
                batched = probe._score_readings(chunk, candidates, cfg, weights, embed, steps, budget)
                for r, a, b in zip(candidates, alone, batched, strict=True):
                    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2] == b[2], (r.name, budget)
    assert sum(int(s[1].sum()) for s in alone) > 0  # the chains accept something: a real draft on real text


@pytest.mark.slow
def test_the_batched_probe_keeps_the_default_budget_on_real_sizes(
    smollm2: tuple[probe.LoadedDraft, probe_target.Target, list[probe_target.Chunk]],
) -> None:
    """Every reading of a default-probe sequence fits one batch, for the SmolLM2 draft in float32 and for an
    8B-shaped draft (Llama-3.1-8B target, 32k draft vocabulary) in bfloat16; a 1,024-token sequence of the 8B draft
    runs a reading at a time (its attention scores alone are about 0.3 GB)."""
    draft, _, _ = smollm2
    t_len = 190  # about a default probe sequence: a chat prompt and up to 144 new tokens
    assert eagle3_draft.chain_elements(draft.cfg, t_len, 3) * 4 * 11 <= probe.CHAIN_BYTES
    big = dataclasses.replace(
        draft.cfg,
        hidden_size=4096,
        target_hidden_size=4096,
        intermediate_size=14336,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        vocab_size=128256,
        draft_vocab_size=32000,
    )
    assert eagle3_draft.chain_elements(big, t_len, 3) * 2 * 11 <= probe.CHAIN_BYTES  # bfloat16
    assert eagle3_draft.chain_elements(big, 1024, 3) * 2 * 2 > probe.CHAIN_BYTES
