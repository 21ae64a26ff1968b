"""Every input dimension costs linear work and bounded memory, and past its documented limit is refused (issue 38).

The dimensions: tensors in a header (zero-size ones included), shards in an index, findings in a report, layer ids in
a config, the length of a tensor or shard name, and the bytes verify hashes. The tests count work (Python lines run,
items taken from the findings, comparisons between shard names, bytes hashed: tests/work.py), never seconds, with a
budget that a quadratic loop overruns at once. The limits themselves are in docs/security.md ("Limits"), where a
test below checks they are the code's.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eagle_convert import errors
from eagle_convert.cli.main import main
from eagle_convert.errors import ConfigError, HeaderError, InputError, ShardIndexError, TooLargeError
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.read import checkpoint, config, digest, regular, safetensors_header
from eagle_convert.read.checkpoint import open_checkpoint
from eagle_convert.render import console, formats, inspect_tables, verify_tables
from eagle_convert.rules.registry import finding
from eagle_convert.verify.report import VerifyReport
from fixtures.header_only import CONFIG
from fixtures.header_only import draft as _draft
from fixtures.header_only import shard as _shard
from tests import cli_process
from tests.conftest import ROOT, one_error
from tests.work import CountedName, OverBudget, Taken, lines_run

DEADLINE_S = 120


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "eagle_convert", *args]
    return cli_process.run(command, capture_output=True, text=True, cwd=ROOT, timeout=DEADLINE_S, check=False)


def _one_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """conftest's one_error, and the line at most a few thousand characters."""
    line = one_error(done, *needles)
    assert len(line) < 5000, len(line)
    return line


# ---- linear work: n and 10 n -------------------------------------------------------------------------------------

SMALL, GROWTH = 200, 10
# The work of the items added from n to 10 n may be at most this many times that of the items added from n to 2 n
# (9 x when each item costs the same: measured 8.7 to 9.2 here). The fixed part (start-up, the config, the rules that
# read no tensor) cancels out; a loop over the items inside a loop over the items makes it about 30.
MARGINAL = 1.1 * (GROWTH - 1)


def _commands(path: Path) -> dict[str, list[str]]:
    return {
        "inspect": ["inspect", str(path)],
        "inspect --json": ["inspect", str(path), "--json"],
        "verify": ["verify", str(path), "--level", "static", "--no-hash"],
        "verify github": ["verify", str(path), "--level", "static", "--no-hash", "--format", "github"],
    }


DIMENSIONS: dict[str, Callable[[Path, int], Path]] = {
    "tensors in a header": lambda out, n: _draft(out, tensors=n),
    "zero-size tensors": lambda out, n: _draft(out, tensors=2 * n, size=0),
    "tensors in 16 shards": lambda out, n: _draft(out, tensors=n, shards=16),
    "shards in an index": lambda out, n: _draft(out, tensors=n, shards=n // 4),
    "aux-layer ids": lambda out, n: _draft(
        out, config={**CONFIG, "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(range(n))}}
    ),
}


@pytest.mark.parametrize("command", list(_commands(Path())))
@pytest.mark.parametrize("dimension", list(DIMENSIONS))
def test_ten_times_the_input_is_at_most_about_ten_times_the_work(
    tmp_path: Path, dimension: str, command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Python lines a command runs, in process, on an input of n, 2 n and 10 n along one dimension (the step
    summary written as in GitHub Actions, for the github format): the 9 n items added last cost at most about 9
    times the n added first."""
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    make = DIMENSIONS[dimension]
    one, two, ten = (_commands(make(tmp_path / str(k), k * SMALL))[command] for k in (1, 2, GROWTH))
    main(one)  # imports and caches warmed, so every count is of the work alone
    base = lines_run(lambda: main(one))
    step = lines_run(lambda: main(two)) - base
    budget = base + int(MARGINAL * step)
    try:
        grown = lines_run(lambda: main(ten), budget=budget)
    except OverBudget:
        pytest.fail(f"{command}: {dimension}: the items from x2 to x{GROWTH} cost over {MARGINAL:g} x those to x2")
    finally:
        capsys.readouterr()
    assert step > 0 and grown > base + step  # the larger inputs were read (not refused)


def _findings(n: int) -> list[Any]:
    """n findings of several rules, fixable and not, as a header of unknown tensors and a bad config give."""
    rules = ("EC008", "EC302", "EC104", "EC401")
    return [
        finding(rules[i % 4], f"tensor extra.{i}.weight: finding {i}", pointer=f"extra.{i}.weight") for i in range(n)
    ]


def test_every_report_format_walks_the_findings_a_bounded_number_of_times() -> None:
    """Each format takes each finding a few times, whatever their number: deciding whether normalize fixes one
    collected every finding's rule id again for each finding (15 s for inspect --json on 20,000 tensors)."""
    n = 2000
    renderers: dict[str, Callable[[VerifyReport], object]] = {
        "json": lambda r: r.to_dict(),
        "concise": formats.to_concise,
        "github": formats.github_annotations,
        "markdown summary": formats.markdown_summary,
        "sarif": formats.to_sarif,
        "junit": formats.to_junit,
        "human": lambda r: verify_tables.render_verify(r, console.EscapingConsole(file=io.StringIO(), width=200)),
    }
    for name, render in renderers.items():
        findings = Taken(_findings(n), budget=40 * n)
        report = VerifyReport("/d/draft", "static", "vllm", "error", "fail", findings)
        try:
            render(report)
        except OverBudget:
            pytest.fail(f"{name}: took over {40 * n:,} findings from a report of {n:,}")
        assert findings.taken >= n, name


def test_inspect_walks_the_findings_a_bounded_number_of_times(tmp_path: Path) -> None:
    n = 2000
    report = inspect_checkpoint(_draft(tmp_path / "d", tensors=n))
    assert len(report.findings) > n  # one EC008 per unknown tensor, and the rest
    from dataclasses import replace

    for name, render in {
        "json": lambda r: r.to_dict(),
        "human": lambda r: inspect_tables.render_inspect(r, console.EscapingConsole(file=io.StringIO(), width=200)),
    }.items():
        findings = Taken(report.findings, budget=40 * n)
        try:
            render(replace(report, findings=findings))
        except OverBudget:
            pytest.fail(f"inspect {name}: took over {40 * n:,} findings from a report of {len(report.findings):,}")


def test_the_human_table_shows_a_bounded_number_of_rows_of_one_rule(tmp_path: Path) -> None:
    """100,000 findings of one rule are not 100,000 rows of a table: ROWS_PER_RULE of them, then one row counting
    the rest; the concise lines and the JSON report keep every one."""
    from eagle_convert.render.grouping import ROWS_PER_RULE

    n = 3 * ROWS_PER_RULE
    report = VerifyReport("/d/draft", "static", "vllm", "error", "fail", [finding("EC008", f"t{i}") for i in range(n)])
    out = io.StringIO()
    verify_tables.render_verify(report, console.EscapingConsole(file=out, width=200))
    rows = [line for line in out.getvalue().splitlines() if "EC008" in line and "│" in line]
    assert len(rows) == ROWS_PER_RULE + 1 and f"and {n - ROWS_PER_RULE:,} more EC008 findings" in rows[-1]
    assert len(formats.to_concise(report).splitlines()) == n + 1 and len(report.to_dict()["findings"]) == n


def test_trailing_blanks_are_dropped_in_one_pass_over_each_line() -> None:
    """What goes to a pipe loses the blanks rich pads lines with, and keeps colour codes after them. (A regular
    expression did this, backtracking over every run of blanks inside a line: quadratic in the run, minutes for
    one wide cell.)"""
    out = io.StringIO()
    stream = console.NoTrailingBlanks(out)
    stream.write("a" + " " * 100_000 + "b   \n")
    stream.write("c  \x1b[0m\x1b[1;31m\n" + " \t \n" + "item   \n")
    assert out.getvalue() == "a" + " " * 100_000 + "b\nc\x1b[0m\x1b[1;31m\n\nitem\n"
    assert console.without_trailing_blanks("x \x1b[0m") == "x\x1b[0m"
    assert console.without_trailing_blanks("x [0m") == "x [0m"  # not a colour code: no ESC


def _index_only(out: Path, shards: int) -> Path:
    """A draft whose index names ``shards`` shards (one tensor each), none of them there."""
    out.mkdir()
    (out / "config.json").write_text(json.dumps(CONFIG))
    weight_map = {f"t{i}": f"model-{i:06d}-of-{shards:06d}.safetensors" for i in range(shards)}
    (out / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return out


def _count_shard_names(monkeypatch: pytest.MonkeyPatch, budget: int) -> None:
    """From here on, the index's shard names are CountedName, counting from 0 up to ``budget`` comparisons."""
    parse = checkpoint.parse_json_object

    def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        doc = parse(*args, **kwargs)
        if isinstance(doc.get("weight_map"), dict):
            doc["weight_map"] = {k: CountedName(v) for k, v in doc["weight_map"].items()}
        return doc

    monkeypatch.setattr(checkpoint, "parse_json_object", counted)
    monkeypatch.setattr(CountedName, "compared", 0)
    monkeypatch.setattr(CountedName, "budget", budget)


def test_shard_names_are_compared_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each shard name in the index is compared a bounded number of times, whatever the number of shards (each was
    checked against a list of the names before it: 5,000,000,000 comparisons for 100,000 shards)."""
    n = 5000
    draft = _index_only(tmp_path / "d", n)
    _count_shard_names(monkeypatch, 4 * n)
    try:
        with pytest.raises(ShardIndexError, match="named by the index does not exist"):  # no shard is there
            open_checkpoint(draft)
    except OverBudget:
        pytest.fail(f"over {4 * n:,} comparisons of {n:,} shard names")
    assert CountedName.compared <= 4 * n


# ---- the limits: refused with exit 2 and one Error line ------------------------------------------------------------


def test_an_index_of_100000_shards_is_refused_before_any_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 100_000
    draft = _index_only(tmp_path / "d", n)
    opened: list[str] = []
    monkeypatch.setattr(checkpoint.LocalStore, "is_file", lambda self, name: bool(opened.append(name)))
    _count_shard_names(monkeypatch, 4 * n)
    try:
        with pytest.raises(ShardIndexError, match=r"names 100,000 shards, over the 10,000 limit"):
            open_checkpoint(draft)
    except OverBudget:
        pytest.fail(f"over {4 * n:,} comparisons of {n:,} shard names")
    assert opened == []


def test_shards_past_the_limit_are_refused_on_the_command_line(tmp_path: Path) -> None:
    n = checkpoint.MAX_SHARDS + 1
    draft = _index_only(tmp_path / "d", n)
    _one_error(_cli("inspect", str(draft)), "index.json", f"names {n:,} shards, over the 10,000 limit")


def test_a_10_mb_tensor_name_is_refused(tmp_path: Path) -> None:
    draft = tmp_path / "d"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps(CONFIG))
    _shard(draft / "model.safetensors", ["a" * 10_000_000])
    done = _cli("inspect", str(draft), "--json")
    _one_error(done, "model.safetensors", "has a name of 10,000,000 characters, over the 4,096 limit")
    assert len(done.stdout) < 5000 and json.loads(done.stdout)["status"] == "error"


def test_a_name_at_the_limit_is_read_and_one_past_it_refused(tmp_path: Path) -> None:
    limit = safetensors_header.MAX_TENSOR_NAME
    _shard(tmp_path / "ok.safetensors", ["a" * limit, "b"])
    assert [len(t.name) for t in safetensors_header.read_header(tmp_path / "ok.safetensors").tensors] == [limit, 1]
    _shard(tmp_path / "long.safetensors", ["a" * (limit + 1)])
    with pytest.raises(HeaderError, match=f"has a name of {limit + 1:,} characters"):
        safetensors_header.read_header(tmp_path / "long.safetensors")


@pytest.mark.parametrize("shards", [1, 3])
def test_tensors_past_the_limit_are_refused_as_the_headers_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shards: int
) -> None:
    """The count of tensors is limited in one header and across shards, checked as each header is read: headers
    after the one that passes the limit are never read."""
    monkeypatch.setattr(safetensors_header, "MAX_TENSORS", 100)
    monkeypatch.setattr(checkpoint, "MAX_TENSORS", 100)
    draft = _draft(tmp_path / "d", tensors=40 * shards + (61 if shards == 1 else 0), shards=shards)
    read: list[str] = []
    header = checkpoint.LocalStore.header
    monkeypatch.setattr(checkpoint.LocalStore, "header", lambda self, name: read.append(name) or header(self, name))
    with pytest.raises(InputError, match=r"tensors.*100 limit|over 100 tensors"):
        open_checkpoint(draft)
    assert len(read) == shards  # the first shard past the limit is the last read


def test_a_million_aux_layer_ids_are_refused(tmp_path: Path) -> None:
    ids = list(range(1_000_000))
    draft = _draft(tmp_path / "d", config={**CONFIG, "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}})
    done = _cli("inspect", str(draft), "--json")
    _one_error(done, "config.json", "eagle_aux_hidden_state_layer_ids lists 1,000,000 layer ids, over the 4,096 limit")
    limit = config.MAX_LAYER_IDS
    assert config.DraftConfig.from_dict({"eagle_aux_hidden_state_layer_ids": list(range(limit))}).top_level_ids
    with pytest.raises(ConfigError, match="over the 4,096 limit"):
        config.DraftConfig.from_dict({"eagle_aux_layer_bands": [[0]] * (limit + 1)})


def test_an_error_quoting_a_huge_value_is_one_short_line(tmp_path: Path) -> None:
    """A message quoting an input (here a million-entry list where the index's total_size belongs) is cut, not
    echoed whole."""
    draft = _draft(tmp_path / "d", tensors=4, shards=2)
    index = json.loads((draft / "model.safetensors.index.json").read_text())
    index["metadata"]["total_size"] = list(range(1_000_000))
    (draft / "model.safetensors.index.json").write_text(json.dumps(index))
    error = _one_error(_cli("inspect", str(draft)), "index.json", "metadata.total_size [0, 1, 2")
    assert error.endswith("(cut at 4,000 characters)")


# ---- hashing: at most MAX_HASHED_BYTES, refused before a byte is read ----------------------------------------------


class _Hashed:
    """hashlib's sha256, counting the bytes hashed (class attribute ``bytes``), OverBudget past ``budget``."""

    bytes = 0
    budget = 1 << 30

    def __init__(self) -> None:
        self.inner = hashlib.sha256()

    def update(self, data: bytes) -> None:
        type(self).bytes += len(data)
        if type(self).bytes > self.budget:
            raise OverBudget(f"over {self.budget:,} bytes hashed")
        self.inner.update(data)

    def hexdigest(self) -> str:
        return self.inner.hexdigest()


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> type[_Hashed]:
    class Hashlib:
        sha256 = _Hashed

    monkeypatch.setattr(digest, "hashlib", Hashlib)
    monkeypatch.setattr(_Hashed, "bytes", 0)
    return _Hashed


def _sparse_draft(out: Path, size: int) -> Path:
    """A draft whose one tensor is ``size`` bytes of holes (a sparse file: no disk used)."""
    out.mkdir()
    (out / "config.json").write_text(json.dumps(CONFIG))
    raw = json.dumps({"big.weight": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}).encode()
    raw += b" " * (-len(raw) % 8)
    with (out / "model.safetensors").open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        try:
            f.truncate(8 + len(raw) + size)
        except OSError as exc:  # a filesystem without files this large
            pytest.skip(f"no {size:,}-byte sparse file here: {exc}")
    return out


def test_verify_refuses_to_hash_an_8_tib_sparse_tensor(
    tmp_path: Path, hashed: type[_Hashed], capsys: pytest.CaptureFixture[str]
) -> None:
    draft = _sparse_draft(tmp_path / "d", 8 << 40)
    try:
        code = main(["verify", str(draft), "--level", "static", "--format", "json"])
    except OverBudget:
        pytest.fail("hashed over 1 GiB of an 8 TiB sparse file")
    out, err = capsys.readouterr()
    assert code == 2 and hashed.bytes == 0
    assert "8.0 TiB, over the 64.0 GiB limit of the sha256 manifest: nothing was hashed" in err and "--no-hash" in err
    assert json.loads(out)["status"] == "error"
    assert main(["verify", str(draft), "--level", "static", "--no-hash", "--format", "json"]) in (0, 1)
    capsys.readouterr()


def test_the_manifest_hashes_each_byte_once_up_to_the_limit(
    tmp_path: Path, hashed: type[_Hashed], monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {"a.bin": b"x" * 5000, "b.bin": b"y" * 3000}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    got = digest.hash_files(tmp_path, list(files))
    assert hashed.bytes == 8000 and [d.sha256 for d in got] == [hashlib.sha256(d).hexdigest() for d in files.values()]
    hashed.bytes = 0
    with pytest.raises(TooLargeError, match=r"hold 0\.0 GiB, over the 0\.0 GiB limit"):
        digest.hash_files(tmp_path, list(files), limit=7999)
    assert hashed.bytes == 0


# ---- the limits are documented where the code has them --------------------------------------------------------------


def test_the_documented_limits_are_the_codes() -> None:
    text = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    section = text[text.index("## Limits") :]
    section = section[: section.index("\n## ", 4)]
    for value in (
        f"{safetensors_header.MAX_HEADER_BYTES:,}",
        f"{safetensors_header.MAX_TENSOR_NAME:,}",
        f"{safetensors_header.MAX_TENSORS:,}",
        f"{checkpoint.MAX_SHARDS:,}",
        f"{checkpoint.NAME_MAX:,}",
        f"{config.MAX_LAYER_IDS:,}",
        f"{digest.MAX_HASHED_BYTES >> 30} GiB",
        f"{errors.MAX_CAUSE:,}",
        f"{regular.MAX_SMALL_FILE >> 20} MiB",
    ):
        assert re.search(rf"\b{re.escape(value)}\b", section), value
