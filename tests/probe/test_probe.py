"""verify's forward levels: the draft's own forward pass, and the probe against a target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from jsonschema import Draft202012Validator

from eagle_convert.draft.detect import detect
from eagle_convert.errors import EagleConvertError
from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.probe import target as probe_target
from eagle_convert.probe.run import _draft_config, _draft_state, readings, run_probe
from eagle_convert.read.checkpoint import open_checkpoint
from eagle_convert.reference import eagle3_config, eagle3_draft
from eagle_convert.verify.run import verify_checkpoint
from fixtures.broken import CORPUS, write_broken
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS, TARGETS
from tests.conftest import ROOT, SCHEMAS, run_cli

REPORT = Draft202012Validator(json.loads((SCHEMAS / "verify-report.schema.json").read_text()))


@pytest.fixture(scope="module")
def random_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixtures' 12-layer target with random weights (a real HF checkpoint written by transformers)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("target")
    raw = {k: v for k, v in TARGETS["target-llama"].items() if k not in ("architectures", "model_type")}
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**raw, tie_word_embeddings=False)).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, random_target: Path) -> Path:
    root = tmp_path_factory.mktemp("clean")
    src = write_layout(root / "src", LAYOUTS["specforge-mha-eagle3.1"])
    normalize_checkpoint(src, root / "draft", target=random_target)
    return root / "draft"


def test_forward_level_passes_a_clean_draft(clean: Path) -> None:
    report = verify_checkpoint(clean, level="forward")
    assert report.status == "pass"
    outcomes = {c.rule_id: c.outcome for c in report.checks}
    assert outcomes["EC701"] == outcomes["EC702"] == "pass" and outcomes["EC711"] == "skipped"


def test_forward_level_catches_non_finite_outputs(tmp_path: Path) -> None:
    case = next(c for c in CORPUS if c.name == "nan-in-fc")
    draft = write_broken(tmp_path / "nan", case)
    report = verify_checkpoint(draft, level="forward", select="EC7")
    assert [f.rule_id for f in report.findings] == ["EC701"]


def test_forward_level_needs_a_canonical_draft(fx: Path) -> None:
    report = verify_checkpoint(fx / "layouts" / "specforge-mha-fused", level="forward", select="EC7")
    assert [f.rule_id for f in report.findings] == ["EC702"]
    assert "normalize" in report.findings[0].message


def test_normalize_keeps_forward_outputs_bit_identical(fx: Path, tmp_path: Path) -> None:
    src = fx / "layouts-sharded" / "speculators-mha-eagle3.1"
    normalize_checkpoint(src, tmp_path / "out", target_family="llama")
    outputs = []
    for path in (src, tmp_path / "out"):
        ckpt = open_checkpoint(path)
        spec = detect(ckpt)
        cfg = _draft_config(spec)
        weights = eagle3_config.load_draft(cfg, _draft_state(ckpt, spec))
        g = torch.Generator().manual_seed(3)
        tokens = torch.randint(0, cfg.vocab_size, (12,), generator=g)
        aux = torch.randn(12, cfg.num_aux * cfg.target_hidden_size, generator=g)
        outputs.append(eagle3_draft.chain(cfg, weights, tokens, aux, 3))
    for a, b in zip(*outputs, strict=True):
        assert torch.equal(a.logits, b.logits) and torch.equal(a.next_hidden, b.next_hidden)


def test_target_level_probe_table_and_untrained_warning(clean: Path, random_target: Path) -> None:
    report = verify_checkpoint(clean, target=random_target, level="target", probe_steps=2, probe_positions=64)
    doc = report.to_dict()
    REPORT.validate(doc)
    probe = doc["probe"]
    assert probe["configured"] == "configured" and probe["steps"] == 2 and probe["positions"] > 50
    names = [r["reading"] for r in probe["rows"] if not r["diagnostic"]]
    assert names == [
        "configured",
        "ids read as output-of (one layer later)",
        "ids one layer earlier",
        "norm_output false",
    ]  # the clean draft says norm_output true; SpecForge reads it the same
    assert len([r for r in probe["rows"] if r["diagnostic"]]) == 6  # each of the 3 aux states, each way
    assert all(r["verdict"] != "better" for r in probe["rows"])  # nothing decisive on random weights
    assert probe["rows"][0]["hidden_states"] == [2, 6, 9]
    assert any(f.rule_id == "EC712" for f in report.findings)  # random weights agree with nothing


def test_readings_cover_both_conventions_when_ambiguous(fx: Path) -> None:
    spec = detect(open_checkpoint(fx / "layouts" / "torchspec-mla-eagle3.1-vllm"))
    configured, rows = readings(spec, 12)
    assert configured == "ids as input-to"
    assert {
        r.name: list(r.hidden_states) for r in rows if not r.name.startswith("norm_output") and not r.diagnostic
    } == {
        "ids as input-to": [2, 6, 9],
        "ids as output-of": [3, 7, 10],
        "ids one layer earlier": [1, 5, 8],
    }


def test_probe_with_explicit_token_ids(clean: Path, random_target: Path) -> None:
    result = run_probe(clean, random_target, token_ids=[list(range(20)), list(range(40, 70))], steps=1)
    assert result.sequences == 2 and result.positions == 18 + 28


def test_cli_target_level_requires_target(clean: Path, tmp_path: Path, random_target: Path) -> None:
    assert run_cli("verify", str(clean), "--level", "target").returncode == 2
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps([list(range(16))]))
    result = run_cli(
        "verify",
        str(clean),
        "--level",
        "target",
        "--target",
        str(random_target),
        "--token-ids",
        str(ids),
        "--exit-zero",
    )
    assert result.returncode == 0, result.stderr
    assert "Acceptance probe" in result.stdout and "configured" in result.stdout  # the report on stdout


def _pair_copy(tmp_path: Path, edit: dict[str, object]) -> tuple[Path, Path, list[list[int]]]:
    import shutil

    from safetensors.torch import load_file

    from fixtures.trained_pair import trained_pair

    pair = trained_pair()
    draft = tmp_path / "draft"
    shutil.copytree(pair.draft_dir, draft)
    config = json.loads((draft / "config.json").read_text())
    config.update(edit)
    (draft / "config.json").write_text(json.dumps(config))
    ids = load_file(pair.token_ids_path)["token_ids"][:4, :64].tolist()
    return draft, pair.target_dir, ids


@pytest.mark.slow
def test_probe_confirms_the_trained_reading(tmp_path: Path) -> None:
    draft, target, ids = _pair_copy(tmp_path, {})
    report = verify_checkpoint(draft, target=target, level="target", token_ids=ids)
    probe = report.to_dict()["probe"]
    assert probe is not None and probe["best"] == "configured", probe
    assert probe["rows"][0]["top1"] > 0.8
    assert not [f for f in report.findings if f.rule_id in ("EC711", "EC712")]


@pytest.mark.slow
@pytest.mark.parametrize("shift", [-1, 1], ids=["one-layer-earlier", "one-layer-later"])
def test_probe_flags_ids_one_layer_off(tmp_path: Path, shift: int) -> None:
    """-1: output-of ids written as if they were input-to (vLLM's misreading); +1: the other way round."""
    config = json.loads(
        (__import__("fixtures.trained_pair", fromlist=["x"]).trained_pair().draft_dir / "config.json").read_text()
    )
    shifted = [i + shift for i in config["eagle_aux_hidden_state_layer_ids"]]
    provenance = {**config["eagle_convert"], "hidden_state_indices": shifted}
    draft, target, ids = _pair_copy(
        tmp_path,
        {
            "eagle_aux_hidden_state_layer_ids": shifted,
            "eagle_config": {
                "eagle_aux_hidden_state_layer_ids": [i - 1 for i in shifted],
                "use_aux_hidden_state": True,
            },
            "eagle_convert": provenance,
        },
    )
    report = verify_checkpoint(draft, target=target, level="target", token_ids=ids)
    flagged = [f for f in report.findings if f.rule_id == "EC711"]
    assert flagged and flagged[0].expected["hidden_states"] == config["eagle_aux_hidden_state_layer_ids"], report.probe


@pytest.mark.slow
def test_probe_flags_flipped_norm_output(tmp_path: Path) -> None:
    draft, target, ids = _pair_copy(tmp_path, {"norm_output": True})
    report = verify_checkpoint(draft, target=target, level="target", token_ids=ids, probe_steps=3)
    flagged = [f for f in report.findings if f.rule_id == "EC711"]
    assert flagged and flagged[0].expected["norm_output"] is False, report.probe


@pytest.mark.slow
def test_reinitialised_embedding_is_flagged(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    draft, target, ids = _pair_copy(tmp_path, {})
    shard = next(draft.glob("*.safetensors"))
    state = load_file(shard)
    g = torch.Generator().manual_seed(7)
    state["embed_tokens.weight"] = torch.randn(state["embed_tokens.weight"].shape, generator=g) * 0.02
    save_file(state, str(shard), metadata={"format": "pt"})
    report = verify_checkpoint(draft, target=target, level="target", token_ids=ids)
    rules = {f.rule_id for f in report.findings if f.pointer == "embed_tokens.weight"}
    assert "EC603" in rules, [(f.rule_id, f.pointer) for f in report.findings]
    assert report.probe is not None and report.probe.result.rows[0].top1 < 0.5  # and the draft stops agreeing


@pytest.mark.slow
def test_normalize_measures_the_convention_when_asked(tmp_path: Path) -> None:
    """eagle_config ids [0, 2, 4] are ambiguous to the static rules; the weights say output-of (hs[1, 3, 5])."""
    from fixtures.trained_pair import trained_pair

    true_states = trained_pair().hidden_state_indices
    ids = [j - 1 for j in true_states]
    draft, target, _ = _pair_copy(tmp_path, {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}})
    config = json.loads((draft / "config.json").read_text())
    del config["eagle_convert"], config["eagle_aux_hidden_state_layer_ids"]
    (draft / "config.json").write_text(json.dumps(config))
    assert detect(open_checkpoint(draft)).aux.convention == "ambiguous"
    with pytest.raises(EagleConvertError, match="ambiguous"):
        normalize_checkpoint(draft, tmp_path / "refused", target=target)
    report = normalize_checkpoint(draft, tmp_path / "out", target=target, aux_convention="auto")
    assert report.semantics["hidden_states"] == true_states
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert "output-of hs[1, 3, 5]" in written["eagle_convert"]["convention_measured"]


@pytest.mark.slow
def test_saved_hidden_states_and_the_transformers_oracle(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from eagle_convert.probe.target import Target
    from fixtures.trained_pair import trained_pair

    pair = trained_pair()
    draft, target, ids = _pair_copy(tmp_path, {})
    tokens = torch.tensor(ids[0])
    captured = Target(target).run(tokens, capture=range(7)).hidden
    for name, states in (("true", pair.hidden_state_indices), ("shifted", [j + 1 for j in pair.hidden_state_indices])):
        save_file(
            {"token_ids": tokens, "hidden_states": torch.stack([captured[j] for j in states])},
            str(tmp_path / f"{name}.safetensors"),
        )
    ok = verify_checkpoint(
        draft,
        target=target,
        level="target",
        token_ids=ids[:1],
        reference_hidden_states=tmp_path / "true.safetensors",
        oracle="transformers",
    )
    assert [f.rule_id for f in ok.findings if f.rule_id in ("EC714", "EC715", "EC716")] == ["EC715"]
    assert ok.probe is not None and ok.probe.oracle is not None and ok.probe.oracle.max_relative_error < 1e-4
    assert ok.probe.saved_states is not None
    assert [m.boundary for m in ok.probe.saved_states.matches] == pair.hidden_state_indices
    bad = verify_checkpoint(
        draft,
        target=target,
        level="target",
        token_ids=ids[:1],
        reference_hidden_states=tmp_path / "shifted.safetensors",
    )
    assert any(f.rule_id == "EC714" for f in bad.findings)


def test_prompts_go_through_the_targets_chat_template() -> None:
    """SmolLM2 (real tokenizer.json and chat template): each prompt is one user turn, as transformers renders it."""
    pytest.importorskip("tokenizers")
    from transformers import AutoTokenizer

    from eagle_convert.probe.text import DEFAULT_PROMPTS, prompt_pool
    from fixtures.smollm2 import smollm2_tokenizer

    target = smollm2_tokenizer()
    ids = prompt_pool(target, 49152, ["The capital of France is", "Speculative decoding drafts tokens"])
    hf = AutoTokenizer.from_pretrained(str(target))
    for prompt, got in zip(["The capital of France is", "Speculative decoding drafts tokens"], ids, strict=True):
        text = hf.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
        assert got == hf.encode(text, add_special_tokens=False)
        assert hf.decode(got).endswith("<|im_start|>assistant\n") and prompt in hf.decode(got)
    assert len(prompt_pool(target, 49152)) == len(DEFAULT_PROMPTS) == 128


def test_kv_cached_generation_matches_the_streaming_forward(random_target: Path) -> None:
    """Greedy tokens and captured states of the KV-cached generator equal a full forward over the finished text."""
    from eagle_convert.probe.target import Target

    target = Target(random_target)
    prompts = [[5], [17, 3, 250], [99, 1]]
    gen = target.model.generate(prompts, 6, capture=[0, 3, target.num_layers])
    assert gen.sequences == target.generate(prompts, 6)  # the recomputing generator, packed
    for seq, hidden in zip(gen.sequences, gen.hidden, strict=True):
        full = target.run(torch.tensor(seq), capture=[0, 3, target.num_layers])
        for j, h in hidden.items():
            torch.testing.assert_close(h, full.hidden[j][:-1], rtol=1e-4, atol=1e-5)


def test_engine_acceptance_counts_cycles() -> None:
    """vLLM's definitions: mean acceptance length 1 + accepted/drafts, per-position rates; cycles skip what they
    accepted plus the target's own token."""
    from eagle_convert.probe.stats import Cycles, simulate

    accepted = torch.tensor([2, 0, 0, 3, 1, 0, 0, 0, 1, 0])
    cycles = simulate(accepted, 0, 8)  # rows 0, 3 (after 2 + 1), 7 (after 3 + 1); row 8 is past the stop
    assert cycles == [2, 3, 0]
    c = Cycles(torch.tensor(cycles), 3)
    assert c.acceptance_length == pytest.approx(1 + 5 / 3) and c.rates() == [0.6667, 0.6667, 0.3333]


def test_paired_verdicts_and_positions_needed() -> None:
    from eagle_convert.probe.stats import compare

    n = 4000
    base = torch.zeros(n, dtype=torch.bool)
    base[: n // 2] = True
    better = base.clone()
    better[n // 2 : n // 2 + 200] = True  # +5 points, never worse
    r = compare(better, better.long(), base, base.long())
    assert r.verdict == "better" and r.p_value < 1e-10 and r.delta_top1 == 0.05
    assert r.delta_top1_ci[0] < 0.05 < r.delta_top1_ci[1]
    same = compare(base, base.long(), base, base.long())
    assert same.verdict == "no better" and same.p_value == 1.0
    assert compare(base[:200], base[:200].long(), base[:200], base[:200].long()).verdict == "no better"
    few = torch.zeros(200, dtype=torch.bool)
    few[:100] = True
    noisy = few.clone()
    noisy[100:106], noisy[:3] = True, False  # 6 wins, 3 losses over 200 positions: could still be +5 points
    r = compare(noisy, noisy.long(), few, few.long())
    assert r.verdict == "inconclusive" and r.p_value > 0.1
    assert r.positions_needed is not None and r.positions_needed > 200
    assert compare(few, few.long(), noisy, noisy.long()).verdict == "inconclusive"  # and the other way round


@pytest.mark.slow
def test_probe_ranks_the_trained_convention_first_with_a_clear_margin() -> None:
    """The default probe (the target's own greedy text) on the trained pair: the configured reading wins, and both
    readings one layer off lose by the margin and by the sign test, as does norm_output flipped."""
    from fixtures.trained_pair import trained_pair

    pair = trained_pair()
    result = run_probe(pair.draft_dir, pair.target_dir, min_positions=1024)
    assert result.text == "greedy" and result.device == "cpu" and result.dtype == "float32"
    configured = result.row("configured")
    assert result.best == "configured" and configured.hidden_states == pair.hidden_state_indices
    others = [r for r in result.rows if r.reading != "configured" and not r.diagnostic]
    assert {tuple(r.hidden_states) for r in others} == {(2, 4, 6), (0, 2, 4), (1, 3, 5)}
    for row in [r for r in others if "SpecForge" not in r.reading]:  # the lm_head norm barely matters here
        assert row.verdict == "worse" and row.p_value < 0.01, row
        assert row.losses > row.wins and (row.delta_top1 < -0.01 or row.delta_accepted < -0.02), row


def test_sign_test() -> None:
    from eagle_convert.probe.run import sign_test

    assert sign_test(0, 0) == 1.0 and sign_test(5, 5) == 1.0
    assert sign_test(0, 10) == pytest.approx(2 / 1024) == sign_test(10, 0)
    assert sign_test(2, 8) == pytest.approx(2 * (1 + 10 + 45) / 1024)
    assert 0 < sign_test(50, 207) < 1e-20  # large counts stay finite


def test_generation_packs_prompts_exactly(random_target: Path) -> None:
    """Generating for several prompts in packed passes gives each prompt what generating it alone gives."""
    from eagle_convert.probe.target import Target

    target = Target(random_target)
    prompts = [[5], [17, 3, 250], [99, 1]]
    seen: list[tuple[str, int, int]] = []
    together = target.generate(prompts, 4, lambda what, done, total: seen.append((what, done, total)))
    assert together == [target.generate([p], 4)[0] for p in prompts]
    assert [len(s) for s in together] == [5, 7, 6]
    sampled = target.generate(prompts, 4, sample_seed=0)
    assert sampled == target.generate(prompts, 4, sample_seed=0) and sampled != together  # seeded, and not greedy
    assert seen[0] == ("target: generating probe text", 0, 4) and seen[-1][1:] == (4, 4)  # counted in steps


def test_probe_reports_progress_device_and_dtype(clean: Path, random_target: Path) -> None:
    seen: dict[str, list[tuple[int, int]]] = {}
    probe_target._TEXTS.clear()  # an earlier test generated this text: generate it again
    result = run_probe(
        clean,
        random_target,
        steps=1,
        min_positions=64,
        progress=lambda what, done, total: seen.setdefault(what, []).append((done, total)),
    )
    assert set(seen) == {"target: generating probe text", "probe: draft chains"}
    for ticks in seen.values():
        assert ticks[-1][0] == ticks[-1][1] > 0
    assert (result.device, result.dtype, result.text) == ("cpu", "float32", "greedy")


@pytest.mark.slow
def test_bfloat16_probe_agrees_with_float32() -> None:
    """The probe in bfloat16 (on the CPU here) reaches the same verdict as in float32 on the trained pair."""
    from eagle_convert.reference.compute import resolve
    from fixtures.trained_pair import trained_pair

    pair = trained_pair()
    ids = __import__("safetensors.torch", fromlist=["x"]).load_file(pair.token_ids_path)["token_ids"][:4].tolist()
    full = run_probe(pair.draft_dir, pair.target_dir, token_ids=ids)
    half = run_probe(pair.draft_dir, pair.target_dir, token_ids=ids, compute=resolve("cpu", "bfloat16"))
    assert half.dtype == "bfloat16" and half.best == full.best == "configured"
    for a, b in zip(full.rows, half.rows, strict=True):
        assert abs(a.top1 - b.top1) < 0.05, (a, b)


def test_device_and_dtype_choices() -> None:
    from eagle_convert.reference.compute import resolve

    auto = resolve("auto")
    assert auto.device.type == ("cuda" if torch.cuda.is_available() else "cpu") and auto.dtype == torch.float32
    assert resolve("cpu", "float16").dtype == torch.float16
    with pytest.raises(EagleConvertError, match="unknown dtype"):
        resolve("cpu", "int8")
    with pytest.raises(EagleConvertError, match="unknown device"):
        resolve("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(EagleConvertError, match="sees no CUDA device") as caught:
            resolve("cuda:0")
        assert caught.value.exit_code == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cli_refuses_cuda_without_a_gpu(clean: Path, random_target: Path, tmp_path: Path) -> None:
    verify = run_cli("verify", str(clean), "--level", "forward", "--device", "cuda")
    out = tmp_path / "out"
    normalize = run_cli(
        "normalize",
        str(clean),
        str(out),
        "--aux-convention",
        "auto",
        "--target",
        str(random_target),
        "--device",
        "cuda",
    )
    for result in (verify, normalize):
        assert result.returncode == 2
        assert result.stderr.startswith("Error: ") and "sees no CUDA device" in result.stderr
        assert "Traceback" not in result.stderr
    assert not out.exists()


def test_progress_bars_on_a_terminal(clean: Path, random_target: Path) -> None:
    """On a terminal, verify --level target shows the probe's long parts as progress bars on stderr, then the report
    on stdout (and on a pipe, as in every other test here, nothing of the bars)."""
    import os
    import pty
    import subprocess
    import sys
    import threading

    err_main, err_child = pty.openpty()
    out_main, out_child = pty.openpty()
    args = ["verify", str(clean), "--level", "target", "--target", str(random_target), "--probe-steps", "1"]
    args += ["--probe-positions", "64"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "eagle_convert", *args, "--exit-zero", "--no-hash"],
        stdout=out_child,
        stderr=err_child,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "160", "TERM": "xterm"},
    )
    os.close(err_child)
    os.close(out_child)
    chunks: dict[int, list[bytes]] = {err_main: [], out_main: []}

    def drain(fd: int) -> None:
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the child closed its end
                return
            if not data:
                return
            chunks[fd].append(data)

    readers = [threading.Thread(target=drain, args=(fd,)) for fd in chunks]
    for reader in readers:
        reader.start()
    assert proc.wait(timeout=300) == 0
    for reader in readers:
        reader.join(timeout=10)
    os.close(err_main)
    os.close(out_main)
    err, out = (b"".join(chunks[fd]).decode("utf-8", "replace") for fd in (err_main, out_main))
    assert "generating probe text" in err and "probe: draft chains" in err and "steps" in err
    assert "Acceptance probe" in out and "probe: draft chains" not in out  # the report on stdout, the bars on stderr


def test_target_level_runs_an_mla_draft_against_a_deepseek_target(tmp_path: Path) -> None:
    """The Kimi/DeepSeek path end to end: a random 12-layer DeepseekV3 target written by transformers (MLA, YaRN,
    sigmoid-routed MoE), a SpecForge MLA draft normalized against it, and the probe over packed passes."""
    from fixtures.deepseek_target import YARN, save_random_target, tiny

    target = tmp_path / "target"
    save_random_target(tiny(num_hidden_layers=12, vocab_size=256, rope_scaling=YARN), target)
    src = write_layout(tmp_path / "src", LAYOUTS["specforge-mla"])
    normalize_checkpoint(src, tmp_path / "draft", target=target)
    ids = [list(range(5, 45)), list(range(100, 120)), list(range(200, 230))]
    report = verify_checkpoint(tmp_path / "draft", target=target, level="target", token_ids=ids, probe_steps=2)
    REPORT.validate(report.to_dict())
    assert not [f for f in report.findings if f.rule_id == "EC702"], report.findings
    probe = report.to_dict()["probe"]
    assert probe is not None and probe["positions"] == 38 + 18 + 28 and probe["text"] == "given"
    main = [r for r in probe["rows"] if not r["diagnostic"] and "SpecForge" not in r["reading"]]
    assert {r["reading"]: r["hidden_states"] for r in main} == {
        "configured": [2, 6, 9],  # SpecForge's output-of ids [1, 5, 8]
        "ids read as output-of (one layer later)": [3, 7, 10],
        "ids one layer earlier": [1, 5, 8],
        "norm_output true": [2, 6, 9],
    }


def test_probe_runs_against_a_qwen3_moe_target(clean: Path, tmp_path: Path) -> None:
    """A Qwen3-MoE target (the Qwen3-30B-A3B / 235B-A22B architecture) written by transformers, at the fixtures'
    sizes (12 layers, hidden 64, vocab 256): the probe runs it with its experts and reports every reading."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    raw = {k: v for k, v in TARGETS["target-llama"].items() if k not in ("architectures", "model_type")}
    torch.manual_seed(0)
    moe = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": True}
    Qwen3MoeForCausalLM(Qwen3MoeConfig(**raw, head_dim=16, **moe)).save_pretrained(tmp_path / "target")
    result = run_probe(clean, tmp_path / "target", token_ids=[list(range(3, 40)), list(range(50, 70))], steps=2)
    assert result.positions == 35 + 18 and result.row("configured").hidden_states == [2, 6, 9]
    assert len([r for r in result.rows if not r.diagnostic]) == 4 and all(0.0 <= r.top1 <= 1.0 for r in result.rows)
