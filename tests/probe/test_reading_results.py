"""What a person reads: the probe table at any width, what each acceptance length is, fix marks that agree with
normalize, the producer of a normalized draft, whole error sentences, and output without padding or empty tables."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from eagle_convert.cli.main import main
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.probe.result import ProbeRow
from eagle_convert.render import console, engine_tables
from eagle_convert.render.probe_table import probe_table
from eagle_convert.render.progress import PlainProgress, progress_bar
from eagle_convert.rules.registry import RULES
from eagle_convert.verify.run import verify_checkpoint
from fixtures.broken import CORPUS, write_broken
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS
from fixtures.probe_result import PROBE_RESULT
from tests.conftest import run_cli


def _printed(renderable: Any, width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, no_color=True, highlight=False).print(renderable)
    return out.getvalue()


# ---- the probe table -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [40, 60, 80, 100, 120, 160, 200, 240])
def test_the_probe_table_never_cuts_a_verdict_or_a_reading(width: int) -> None:
    text = _printed(probe_table(PROBE_RESULT, width), width)
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    rows = [line.split() for line in text.splitlines()]
    for row in PROBE_RESULT.rows:  # the verdict whole, on the row's first line
        first = row.reading.split()[0]
        assert any(r and r[0] == first and row.verdict.split()[-1] == r[-1] for r in rows), (row.reading, text)
    words = set(text.split())
    assert all(w in words for row in PROBE_RESULT.rows for w in row.reading.split())


def test_the_probe_table_says_what_each_number_is() -> None:
    wide, narrow = _printed(probe_table(PROBE_RESULT, 200), 200), _printed(probe_table(PROBE_RESULT, 80), 80)
    flat = " ".join(wide.split())
    assert "3-step greedy chains; diagnostics: 1 step" in flat
    assert "diagnostics (1-step chains):" in wide  # the diagnostic rows under their own heading
    assert "<1e-300 (402/917)" in wide and "0e+00" not in wide  # underflow, and the counts the sign test was on
    assert (
        "Δ accepted [95% CI]" in flat and "sign test over the positions where the two rows differ in accepted" in flat
    )
    assert "too narrow for" in " ".join(narrow.split()) and "hs[5, 14, 26]" in narrow  # the states under the name


def test_p_values_read_as_numbers_and_underflow_says_so() -> None:
    shown = [ProbeRow("r", [1], False, 0.5, 1.5, p_value=p).p_text for p in (1.0, 0.2164, 0.0037, 2.1e-55, 1e-320, 0.0)]
    assert shown == ["1", "0.2", "0.004", "2e-55", "<1e-300", "<1e-300"]


def test_the_engine_run_says_which_text_each_acceptance_length_is_on() -> None:
    from eagle_convert.real_engine.base import EngineObservation
    from eagle_convert.real_engine.record import InProcessRun

    outputs = [[1] * 64] * 4
    seen = EngineObservation(Path("d"), "vllm", "0.32.0", "v1", None, None, {"norm_output": False}, 190, 570, 75,
                             [57, 15, 2], outputs, outputs, None, 10.0, 5.0, 2000.0)  # fmt: skip
    run = InProcessRun(seen, [4, 13, 25], "fed", probe_acceptance_length=1.395, probe_same_text=True)
    out = io.StringIO()
    engine_tables.render_engine_run(run, Console(file=out, width=300, no_color=True), PROBE_RESULT)
    lines = {line.split("  ")[1].strip(): line for line in out.getvalue().splitlines() if line.startswith("  ")}
    assert "the engine on its 4 prompts, 256 new tokens" in lines["mean acceptance length"]
    assert "1.395: the reference forward on the same prompts and new tokens" in lines["the probe on the same run"]
    assert "1.508 (configured row): measured on other text (4160 positions" in lines["the probe table above"]


# ---- fixes: the record, the message and normalize agree ------------------------------------------------------------


@pytest.mark.parametrize("case", ["target-class-architecture", "unknown-architecture"])
def test_ec011_ec012_are_fixable_and_normalize_fixes_them(
    fx: Path, tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = write_broken(tmp_path / case, next(c for c in CORPUS if c.name == case))
    target = fx / "targets" / "target-llama"
    before = verify_checkpoint(broken, target=target, engine="all", compute_hashes=False)
    rule_ids = {f.rule_id for f in before.findings} & {"EC011", "EC012"}
    assert rule_ids
    for rule_id in rule_ids:
        assert RULES[rule_id].fixable and "eagle-convert normalize SRC OUT" in RULES[rule_id].fix
        assert main(["rule", rule_id]) == 0 and "fixable: yes" in capsys.readouterr().out
    for f in before.findings:  # a message that says normalize fixes it belongs to a fixable rule
        if "`eagle-convert normalize` fixes it" in f.message:
            assert RULES[f.rule_id].fixable, f
    normalize_checkpoint(broken, tmp_path / "out", target=target)
    after = verify_checkpoint(tmp_path / "out", target=target, engine="all", compute_hashes=False)
    assert not {f.rule_id for f in after.findings} & {"EC011", "EC012"}, after.findings
    code = main(["verify", str(broken), "--target", str(target), "--engine", "all", "--no-hash"])
    out, err = capsys.readouterr()
    assert code == 1 and any(f"{r} [*]" in out + err for r in rule_ids)


# ---- the producer of a normalized draft ----------------------------------------------------------------------------

NORMALIZABLE = sorted(
    n
    for n, lay in LAYOUTS.items()
    if lay.expect.producer != "eagle1" and not lay.expect.moe and lay.expect.convention != "ambiguous"
)


@pytest.mark.parametrize("name", NORMALIZABLE)
def test_a_normalized_draft_inspects_as_canonical_with_high_confidence(fx: Path, tmp_path: Path, name: str) -> None:
    target = fx / "targets" / ("target-kimi" if LAYOUTS[name].attention == "mla" else "target-llama")
    source = inspect_checkpoint(fx / "layouts" / name, target=target).to_dict()["format"]["producer"]
    for profile in ("portable", "sglang", "vllm"):
        out = tmp_path / profile
        normalize_checkpoint(fx / "layouts" / name, out, target=target, profile=profile)
        fmt = inspect_checkpoint(out, target=target).to_dict()["format"]
        assert (fmt["producer"], fmt["confidence"]) == ("canonical", "high"), (profile, fmt)
        origin = source if source != "canonical" else LAYOUTS[name].config["eagle_convert"]["source_producer"]
        assert fmt["evidence"][0].startswith(f"normalized from {origin} by eagle-convert"), fmt["evidence"]


def test_a_normalized_torchspec_draft_that_keeps_its_version_keys_is_canonical(fx: Path, tmp_path: Path) -> None:
    """TorchSpec's _torchspec_version (config) and torchspec_version (shard metadata) are kept, as every unknown
    key is; the provenance block normalize writes decides the producer."""
    import json

    from safetensors.torch import load_file, save_file

    src = tmp_path / "torchspec"
    write_layout(src, LAYOUTS["torchspec-mha"])
    for shard in src.glob("*.safetensors"):
        save_file(load_file(shard), shard, metadata={"torchspec_version": "0.2.0"})
    assert inspect_checkpoint(src).to_dict()["format"]["producer"] == "torchspec"
    normalize_checkpoint(src, tmp_path / "out", target=fx / "targets" / "target-llama")
    assert "_torchspec_version" in json.loads((tmp_path / "out" / "config.json").read_text())
    fmt = inspect_checkpoint(tmp_path / "out").to_dict()["format"]
    assert (fmt["producer"], fmt["confidence"]) == ("canonical", "high"), fmt
    assert "normalized from torchspec" in fmt["evidence"][0]
    assert any("also matches torchspec" in line for line in fmt["evidence"])


# ---- whole sentences -----------------------------------------------------------------------------------------------


def test_a_json_error_says_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text('{"architectures": ["Llama')
    assert main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Unterminated string starting at: line 1 column 20 (char 19)" in err, err


def test_offline_a_missing_path_says_no_local_path_exists() -> None:
    """As online: a mistyped owner/name-shaped path is read as a Hub repo id, and the error says both."""
    result = run_cli("inspect", "no-such-folder/my-draft", env={"HF_HUB_OFFLINE": "1"})
    first = result.stderr.splitlines()[0]
    assert result.returncode == 2 and "HF_HUB_OFFLINE" in first and "no local path" in first, result.stderr


# ---- output for pipes and logs -------------------------------------------------------------------------------------


def test_output_to_a_pipe_has_no_trailing_blanks(fx: Path) -> None:
    for args in (
        ["inspect", str(fx / "layouts" / "specforge-mha")],
        ["verify", str(fx / "layouts" / "speculators-mha")],
    ):
        result = run_cli(*args, env={"COLUMNS": ""})
        text = result.stdout + result.stderr
        assert text.strip() and not [line for line in text.splitlines() if line != line.rstrip()], args


def test_no_trailing_blanks_keeps_partial_lines_until_flushed() -> None:
    out = io.StringIO()
    stream = console.NoTrailingBlanks(out)
    stream.write("a   \nb  ")
    assert out.getvalue() == "a\n"
    stream.write("c \n")
    stream.flush()
    assert out.getvalue() == "a\nb  c\n"


def test_normalize_prints_no_empty_tables(fx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = fx / "targets" / "target-llama"
    normalize_checkpoint(fx / "layouts" / "specforge-mha", tmp_path / "once", target=target)
    assert main(["normalize", str(tmp_path / "once"), str(tmp_path / "twice"), "--target", str(target)]) == 0
    out = capsys.readouterr().out
    assert "(0 changed): every tensor keeps its name and bytes" in out
    assert not re.search(r"Tensors: \d+ \(0 changed\)\s*\n\s*[┏┌]", out), out


def test_verify_lists_the_rules_that_did_not_run_and_why(fx: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(fx / "layouts" / "speculators-mha"), "--no-hash"]) in (0, 1)
    out = capsys.readouterr().out  # the report on stdout, as every command's
    skipped = re.search(r"Rules not run: (\d+) of (\d+)", out)
    assert skipped and int(skipped.group(2)) == len(RULES), out
    assert re.search(r"needs --level target +EC711", out) and re.search(r"needs --target +EC503", out)
    assert main(["verify", str(fx / "layouts" / "speculators-mha"), "--no-hash", "--select", "EC1"]) in (0, 1)
    assert re.search(r"not selected \(--select/--ignore\) +\d+ rule\(s\)", capsys.readouterr().out)


def test_the_byte_progress_learns_its_total(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int | None]] = []
    monkeypatch.setattr(PlainProgress, "bytes", lambda self, what, done, total: seen.append((done, total)))
    with progress_bar(enabled=True) as progress:
        assert progress is not None
        progress(10)
        progress.total(100)
        progress(90)
    assert seen == [(10, None), (100, 100)]


def test_the_probe_table_ends_with_a_one_line_conclusion() -> None:
    """The probe's verdict in one line after its table (issue 40): the configured reading holds, is beaten (by
    what), or is not beaten yet with the positions that would settle it."""
    from dataclasses import replace

    from eagle_convert.render.probe_table import probe_conclusion

    undecided = probe_conclusion(PROBE_RESULT)  # one inconclusive comparison, ~31200 positions to settle it
    assert undecided.startswith("Conclusion: the configured reading (configured: accept len ")
    assert "1 comparison(s) are inconclusive; ~31200 positions would settle it" in undecided
    settled = [replace(r, verdict="no better") if r.verdict == "inconclusive" else r for r in PROBE_RESULT.rows]
    assert probe_conclusion(replace(PROBE_RESULT, rows=settled, decided=True)).endswith(
        "holds: no other reading does decisively better"
    )
    beaten = replace(PROBE_RESULT, best="ids one layer earlier")
    line = probe_conclusion(beaten)
    assert "is beaten by ids one layer earlier (accept len " in line and "\n" not in line
