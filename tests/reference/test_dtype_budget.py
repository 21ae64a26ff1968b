"""--dtype auto: the compute dtype decided against the memory at hand before anything is loaded (reference/budget.py).

A real tiny pair (a transformers-written bfloat16 Llama target, a normalized EAGLE3 draft) with the memory faked by
EAGLE_CONVERT_MEMORY_LIMIT: float32 when it fits, the model's bfloat16 when only that fits, and exit 2 with one line
before a tensor is read when nothing fits or when an explicit --dtype does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from eagle_convert.draft.detect import detect
from eagle_convert.errors import UsageError
from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.probe import target as probe_target
from eagle_convert.probe.result import MIN_POSITIONS
from eagle_convert.probe.text import NEW_TOKENS, ROUND
from eagle_convert.read.checkpoint import open_checkpoint, open_weights
from eagle_convert.read.config import TargetConfig
from eagle_convert.reference import budget
from eagle_convert.reference.budget import MEMORY_ENV, Available, ReferenceRun, choose_dtype, parse_size
from eagle_convert.verify.run import verify_checkpoint
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS, TARGETS
from tests.conftest import run_cli

IDS = [list(range(3, 40)), list(range(50, 80))]
STEPS = 2


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(draft, target): the fixtures' 12-layer Llama target saved in bfloat16, and a draft normalized against it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("budget")
    raw = {k: v for k, v in TARGETS["target-llama"].items() if k not in ("architectures", "model_type")}
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**raw, tie_word_embeddings=False)).to(torch.bfloat16).save_pretrained(root / "t")
    src = write_layout(root / "src", LAYOUTS["specforge-mha-eagle3.1"])
    normalize_checkpoint(src, root / "draft", target=root / "t")
    return root / "draft", root / "t"


def _run(pair: tuple[Path, Path]) -> ReferenceRun:
    """The run verify sizes for ``--level target --token-ids IDS --probe-steps 2``, from the same headers."""
    draft, target = pair
    ckpt = open_checkpoint(draft)
    cfg = TargetConfig.from_path(target)
    spec = detect(ckpt, cfg)
    return budget.reference_run(
        {n: t.shape for n, t in ckpt.tensors.items()},
        spec.vocab.draft_vocab_size or spec.vocab.vocab_size or 0,
        len(spec.aux.hidden_state_indices or []),
        cfg.raw,
        {n: t.shape for n, t in open_weights(target).items()},
        IDS,
        steps=STEPS,
    )


def _limit(monkeypatch: pytest.MonkeyPatch, size: int | str) -> None:
    monkeypatch.setenv(MEMORY_ENV, str(size))


def _no_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a draft tensor fails the test: a refused run must stop before anything is loaded."""
    from eagle_convert.reference import draft_reader

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a tensor was read before the memory check")

    monkeypatch.setattr(draft_reader.TensorReader, "__init__", refuse)


def _verify(pair: tuple[Path, Path], dtype: str = "auto") -> dict[str, object]:
    draft, target = pair
    report = verify_checkpoint(
        draft, target=target, level="target", token_ids=IDS, probe_steps=STEPS, dtype=dtype, compute_hashes=False
    )
    probe = report.to_dict()["probe"]
    assert isinstance(probe, dict)
    return probe


def test_the_estimate_names_its_parts_and_float32_doubles_them(pair: tuple[Path, Path]) -> None:
    run = _run(pair)
    assert run.target is not None and run.model_dtype == "bfloat16"
    half, full = run.estimate("bfloat16"), run.estimate("float32")
    assert half.layers and half.draft and half.captured and half.activations and half.kv_cache == 0  # given text
    assert full.layers == 2 * half.layers and full.draft == 2 * half.draft and full.total > half.total
    assert half.describe().startswith(f"~{budget.gb(half.total)} (2 target layers")
    generated = ReferenceRun(run.draft_params, run.draft_vocab, True, 3, run.target)  # the target's own text
    assert generated.estimate("bfloat16").kv_cache > 0


def test_a_big_limit_picks_float32_and_the_report_says_why(
    pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _limit(monkeypatch, "64G")
    probe = _verify(pair)
    assert probe["dtype"] == "float32"
    assert probe["dtype_reason"] == (
        f"float32 fits (est. ~{budget.gb(_run(pair).estimate('float32').total)}, 68.7 GB available ({MEMORY_ENV}))"
    )


def test_a_limit_between_the_estimates_picks_the_models_bfloat16(
    pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _run(pair)
    half, full = run.estimate("bfloat16").total, run.estimate("float32").total
    _limit(monkeypatch, (half + full) // 2)
    probe = _verify(pair)
    assert probe["dtype"] == "bfloat16"
    reason = str(probe["dtype_reason"])
    assert reason.startswith(f"bfloat16 (the model's dtype): float32 would need ~{budget.gb(full)}"), reason


def test_float32_that_fits_but_is_not_cheap_is_not_chosen(pair: tuple[Path, Path]) -> None:
    """float32 that fits the streamed run but not the whole target in float32 costs more than it is worth."""
    run = _run(pair)
    full = run.estimate("float32")
    room = Available(full.total + full.whole_target // 2, "test")  # the run fits, holding every layer would not
    choice = choose_dtype(run, "auto", room)
    assert choice.dtype == "bfloat16" and "not cheap here" in choice.reason


def test_nothing_fits_stops_before_loading(pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(pair)
    _limit(monkeypatch, run.estimate("bfloat16").total // 2)
    _no_reads(monkeypatch)
    with pytest.raises(UsageError) as caught:
        _verify(pair)
    assert caught.value.exit_code == 2
    assert "the reference run in bfloat16 needs ~" in caught.value.message
    assert "nothing was loaded" in caught.value.message and MEMORY_ENV in caught.value.message


def test_cli_nothing_fits_is_one_line_and_exit_2(pair: tuple[Path, Path], tmp_path: Path) -> None:
    draft, target = pair
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps(IDS))
    result = run_cli(
        "verify", str(draft), "--level", "target", "--target", str(target), "--token-ids", str(ids), "--no-hash",
        env={MEMORY_ENV: "1M"},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "needs ~" in errors[0], result.stderr
    assert "nothing was loaded" in errors[0] and "Acceptance probe" not in result.stderr
    assert any(line.startswith("Hint:") for line in result.stderr.splitlines())


def test_explicit_float32_over_the_limit_stops_before_loading(
    pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _run(pair)
    half, full = run.estimate("bfloat16").total, run.estimate("float32").total
    _limit(monkeypatch, (half + full) // 2)
    _no_reads(monkeypatch)
    with pytest.raises(UsageError) as caught:
        _verify(pair, dtype="float32")
    assert "the reference run in float32 needs ~" in caught.value.message
    assert caught.value.hint is not None and "--dtype bfloat16 needs ~" in caught.value.hint
    assert "and fits" in caught.value.hint


def test_cli_explicit_float32_over_the_limit_exits_2(pair: tuple[Path, Path], tmp_path: Path) -> None:
    draft, target = pair
    run = _run(pair)
    between = (run.estimate("bfloat16").total + run.estimate("float32").total) // 2
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps(IDS))
    result = run_cli(
        "verify", str(draft), "--level", "target", "--target", str(target), "--token-ids", str(ids), "--no-hash",
        "--probe-steps", str(STEPS), "--dtype", "float32", "--format", "json",
        env={MEMORY_ENV: str(between)},
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "error" and "in float32 needs ~" in report["error"]["message"]


def test_explicit_dtype_that_fits_runs_as_asked(pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _limit(monkeypatch, "64GiB")
    probe = _verify(pair, dtype="bfloat16")
    assert probe["dtype"] == "bfloat16" and str(probe["dtype_reason"]).startswith("bfloat16 as asked (est. ~")


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("123456", 123456),
        ("24G", 24 * 2**30),
        ("24GiB", 24 * 2**30),
        ("24 gib", 24 * 2**30),
        ("1.5GB", 1_500_000_000),
        ("512M", 512 * 2**20),
        ("64k", 64 * 1024),
        ("100B", 100),
        ("2T", 2 * 2**40),
    ],
)
def test_memory_limit_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "12Q", "-1", "0", "GiB", "1.5.2G", "24i", "24iB"])
def test_a_bad_memory_limit_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_size(text)
    assert caught.value.message == f"{MEMORY_ENV}={text!r} is not a size" or "not a positive size" in (
        caught.value.message
    )
    assert caught.value.hint is not None and "24G" in caught.value.hint


def test_the_cli_names_a_bad_memory_limit(pair: tuple[Path, Path], tmp_path: Path) -> None:
    draft, _ = pair
    result = run_cli("verify", str(draft), "--level", "forward", "--no-hash", env={MEMORY_ENV: "plenty"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"Error: {MEMORY_ENV}='plenty' is not a size" in result.stderr, result.stderr


def test_the_measured_memory_without_an_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MEMORY_ENV, raising=False)
    available = budget.available_memory()
    assert available.bytes is None or available.bytes > 0
    assert available.source in ("MemAvailable", "what the cgroup's memory limit leaves", "unknown")
    monkeypatch.setenv(MEMORY_ENV, "3G")
    assert budget.available_memory() == Available(3 * 2**30, MEMORY_ENV)


def test_the_estimate_packs_as_the_probe_does() -> None:
    """budget.py sits below probe/ (and is torch-free), so it repeats the probe's sizes: they must agree."""
    assert (budget.LOGITS_BUDGET, budget.MIN_PACK, budget.MAX_PACK) == (
        probe_target.LOGITS_BUDGET,
        probe_target.MIN_PACK,
        probe_target.MAX_PACK,
    )
    assert budget.CACHE_BYTES == probe_target.CACHE_BYTES
    assert (budget.MIN_POSITIONS, budget.ROUND, budget.NEW_TOKENS) == (MIN_POSITIONS, ROUND, NEW_TOKENS)


def test_a_long_probe_hears_its_time_estimate_first(pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The estimate comes before the run (here with the threshold lowered: the tiny pair is never long)."""
    from eagle_convert.probe import session

    heard: list[str] = []
    draft, target = pair
    verify_checkpoint(draft, target=target, level="forward", compute_hashes=False, notice=heard.append)
    assert heard == []  # no target run, no estimate
    monkeypatch.setattr(session, "LONG_RUN_FLOP", 0.0)
    _no_reads(monkeypatch)  # the notice is heard before anything is read
    with pytest.raises(AssertionError, match="a tensor was read"):
        verify_checkpoint(
            draft, target=target, level="target", token_ids=IDS, compute_hashes=False, notice=heard.append
        )
    assert len(heard) == 1 and heard[0].startswith("estimate: the probe computes ~"), heard
    assert "GFLOP/s a matmul reached here" in heard[0]


def test_the_time_estimate_counts_target_and_chains(pair: tuple[Path, Path]) -> None:
    run = _run(pair)
    target, chains = run.flops()
    assert run.target is not None
    assert target == 2.0 * run.target.active_params * sum(map(len, IDS)) and chains > 0
    seconds, line = budget.time_estimate(run, 1e9)
    assert seconds == pytest.approx((target + chains) / 1e9) and line.startswith("estimate:")


def test_the_estimate_says_when_generation_reads_the_target_from_disk_every_step(pair: tuple[Path, Path]) -> None:
    """The target's own text reads every weight once per step: a target larger than the page cache can keep is
    read from disk at each step, and the estimate says so and what to do; given text (--token-ids) is not."""
    from dataclasses import replace

    generated = replace(_run(pair), token_lengths=None)
    assert generated.target is not None
    stored = generated.target.total_params * budget.DTYPE_BYTES[generated.target.model_dtype]
    _, small = budget.time_estimate(generated, 1e9, stored // 2)
    assert "from disk" in small and "--token-ids" in small and f"each of its {budget.NEW_TOKENS} steps" in small
    _, roomy = budget.time_estimate(generated, 1e9, stored * 2)
    _, given = budget.time_estimate(_run(pair), 1e9, stored // 2)
    assert "from disk" not in roomy and "from disk" not in given


def test_the_forward_check_builds_no_vocabulary_sized_table(
    pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A draft that borrows the target's embedding is checked with a [V, H] view of V + H - 1 random values, each
    token its own row (an 8B vocabulary in float32 was a 2 GB table)."""
    from eagle_convert.reference import eagle3_draft
    from eagle_convert.verify import forward

    seen: list[torch.Tensor] = []
    chain = eagle3_draft.chain

    def spy(*args: object, embed: torch.Tensor | None = None, **kwargs: object) -> object:
        assert embed is not None
        seen.append(embed)
        return chain(*args, embed=embed, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(eagle3_draft, "chain", spy)
    finite, _ = forward.forward_check(pair[0])
    (table,) = seen
    vocab, hidden = table.shape
    assert finite and table.untyped_storage().nbytes() == (vocab + hidden - 1) * table.element_size()
    assert not torch.equal(table[1], table[2])  # distinct rows
