"""Control characters and escape sequences in input never reach a terminal or a CI log (issue 29).

A real draft whose directory name, config strings and tensor names carry a forged ``Error:`` line, a screen clear, a
title-setting OSC, C1 controls, DEL, Unicode line separators, bidi overrides, GitHub workflow commands and lone
surrogates, run through the real CLI: every human and line format shows them escaped (each finding one line, tables
still aligned, only colour codes with --color always), and JSON, SARIF and JUnit parse and keep them.
"""

from __future__ import annotations

import io
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from rich.cells import cell_len

from eagle_convert.cli.main import main
from eagle_convert.render.console import stdout_console
from eagle_convert.render.engine_tables import render_engine_run
from fixtures.generate import write_specs
from fixtures.layouts import LAYOUTS
from fixtures.tensors import Spec, write_json

FORGED = "\nError: forged"  # a line of its own that reads as the tool's
CLEAR, TITLE, RED = "\x1b[2J", "\x1b]0;pwned\x07", "\x1b[31m"
# Each a string from input, as a hostile file, directory or server writes it.
LINK = "[link=mailto:a]"  # rich markup (unclosed: a file name holds no "/"): text, never an OSC 8 hyperlink
HOSTILE_DIR = f"draft{FORGED}{CLEAR}{TITLE}\x9b2J\u202e{LINK}\udcff"  # \udcff: a file name's undecodable byte 0xff
HOSTILE_OUT = f"out{FORGED}\r\x7f\u2028{CLEAR}"
ARCHITECTURE = f"{TITLE}Eagle3{RED}\u2029"
MODEL_TYPE = f"llama{CLEAR}\u2066"
TENSORS = (
    f"evil{RED}{FORGED}.weight",
    f"gh%0A::error::forged\r\n::error title=x::forged{CLEAR}.weight",
    "bidi\u202egnp.exe\u2069\x85\x08\x0b.weight",
)
LONE = "\ud800.lone"  # a lone surrogate, as a JSON escape can write one
COMMANDS = {"error", "warning", "notice"}
FORMATS = ("human", "json", "sarif", "junit", "github", "concise")
COLOUR_ENV = ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")

# What no line of human, concise, GitHub or Markdown output may hold: C0 but the newline (nothing here lays out
# tabs), DEL, C1, the Unicode separators, bidi embeddings/overrides/isolates and lone surrogates.
UNSAFE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
SGR = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with no settings above it, no colour or CI variables, and a console 200 columns wide
    (long messages wrap)."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'drafts'\n")
    monkeypatch.chdir(tmp_path)
    for name in (*COLOUR_ENV, "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


def _draft(parent: Path, name: str = HOSTILE_DIR, *, tensors: tuple[str, ...] = TENSORS) -> Path:
    """A SpecForge draft in a directory called ``name``, its architectures and model_type hostile, with extra
    tensors so named (a lone surrogate written as the JSON escape ``\\ud800``, as json.dumps writes it)."""
    layout = LAYOUTS["specforge-mha"]
    out = parent / name
    out.mkdir(parents=True)
    write_json(out / "config.json", {**layout.config, "architectures": [ARCHITECTURE], "model_type": MODEL_TYPE})
    placeholder = "@" * len("\\ud800")  # as many bytes as the escape that replaces it: no offset moves
    extra = [Spec(n.replace("\ud800", placeholder), "BF16", (2,)) for n in tensors]
    write_specs(out, layout.tensors() + extra)
    weights = out / "model.safetensors"
    weights.write_bytes(weights.read_bytes().replace(placeholder.encode(), b"\\ud800"))
    return out


@contextmanager
def _streams() -> Iterator[tuple[io.BytesIO, io.BytesIO]]:
    """stdout and stderr as strict UTF-8 byte streams, as a terminal or a CI log takes them: a lone surrogate that
    reached one would raise, not pass."""
    out, err = io.BytesIO(), io.BytesIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (io.TextIOWrapper(b, encoding="utf-8", errors="strict") for b in (out, err))
    try:
        yield out, err
    finally:
        for wrapper in (sys.stdout, sys.stderr):
            wrapper.detach()  # flushed, and the bytes left open to read
        sys.stdout, sys.stderr = saved


def _cli(*args: object) -> tuple[int, str, str]:
    with _streams() as (out, err):
        code = main([str(a) for a in args])
    stdout, stderr = out.getvalue().decode("utf-8"), err.getvalue().decode("utf-8")  # strict: valid UTF-8 only
    assert "internal error" not in stderr and "Traceback" not in stderr, stderr
    return code, stdout, stderr


def _assert_safe(text: str, *, colour: bool = False) -> None:
    """No control character, separator, bidi control or surrogate; with colour, escape sequences that set colours
    (SGR) only. No line is a forged one."""
    if colour:
        assert SGR.search(text), "expected colour codes"
        text = SGR.sub("", text)
    assert not UNSAFE.search(text), [line for line in text.splitlines() if UNSAFE.search(line)][:3]
    assert not any(line.lstrip("│ ").startswith(("Error: forged", "::error::forged")) for line in text.splitlines())


def _parses(fmt: str, text: str) -> None:
    if fmt == "junit":
        ET.fromstring(text)
    elif fmt in ("json", "sarif", "human"):  # human: the JSON report goes to --output
        json.loads(text)
    else:
        _assert_safe(text)


def _aligned(text: str) -> bool:
    """Every boxed table in ``text`` has rows of one width (escapes measured before layout)."""
    tables: list[set[int]] = [set()]
    for line in text.splitlines():
        if line.startswith(("┏", "┃", "┡", "│", "└")):
            tables[-1].add(cell_len(line))
        if line.startswith("└"):
            tables.append(set())
    return len(tables) > 1 and all(len(widths) <= 1 for widths in tables)


# ---- human output ---------------------------------------------------------------------------------------------


def test_inspect_shows_every_hostile_string_escaped_and_aligned(here: Path) -> None:
    draft = _draft(here)
    code, out, err = _cli("inspect", draft, "-v")
    assert code == 0 and err == ""
    _assert_safe(out)
    for shown in ("\\x0aError:", "forged\\x1b[2J\\x1b]0;pwned\\x07\\x9b2J\\u202e", "\\x1b]0;pwned\\x07Eagle3"):
        assert shown in out  # the directory (its title wraps at words) and the architecture, escaped
    assert "evil\\x1b[31m\\x0aError:" in out  # the every-tensor table
    assert _aligned(out)


def test_inspect_json_keeps_every_string_as_it_is(here: Path) -> None:
    draft = _draft(here)
    code, out, _ = _cli("inspect", draft, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["path"] == str(draft) and doc["architectures"] == [ARCHITECTURE]
    names = {t["name"] for t in doc["tensors"]["items"]}
    assert set(TENSORS) <= names
    assert not UNSAFE.search(out.replace("\n", ""))  # all as JSON escapes: safe on a terminal too


def test_verify_human_output_is_escaped_and_aligned(here: Path) -> None:
    draft = _draft(here)
    code, out, err = _cli("verify", draft, "--no-hash", "-v")
    assert code == 1 and err == ""  # the report on stdout, as every command's
    _assert_safe(out)
    assert "evil\\x1b[31m\\x0aError:" in out
    assert _aligned(out)  # the findings table's long messages wrap at 200 columns


def test_verify_of_two_checkpoints_names_each_escaped(here: Path) -> None:
    first, second = _draft(here / "one"), _draft(here / "two", tensors=())
    code, out, err = _cli("verify", first, second, "--no-hash")
    assert code == 1 and err == ""
    _assert_safe(out)
    assert sum(line.startswith("== ") for line in out.splitlines()) == 2


def test_normalize_shows_hostile_paths_and_config_escaped(here: Path) -> None:
    draft = _draft(here, tensors=())
    for extra in (("--dry-run",), ()):
        code, out, err = _cli("normalize", draft, here / HOSTILE_OUT, "--target-family", "llama", *extra)
        assert code == 0, err
        _assert_safe(out + err)
        assert "out\\x0aError: forged\\x0d\\x7f\\u2028\\x1b[2J" in out


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_forced_colour_sends_colour_codes_and_nothing_else(here: Path, command: str) -> None:
    draft = _draft(here)
    extra = ("--no-hash",) if command == "verify" else ()
    _code, out, err = _cli(command, draft, "--color", "always", *extra)
    _assert_safe(out + err, colour=True)
    assert f"\\u202e{LINK}\\udcff" in out + err  # the markup is text


def test_a_servers_strings_in_the_engine_table_are_escaped(here: Path) -> None:
    """What a served engine answers (its version, the draft it serves, its metric names) is input too."""
    from eagle_convert.real_engine.attached import AttachedRun, CounterMove, ServerInfo
    from eagle_convert.real_engine.record import ServedRun

    info = ServerInfo("http://127.0.0.1:1/\x1b]8;;http://evil\x1b\\", "vllm", f"0.33{FORGED}{CLEAR}", "t", None, True,
                      f"eagle3{FORGED}", None, 3, ["/metrics"])  # fmt: skip
    measured = AttachedRun(
        info, 2, 4, 1, [[1] * 4] * 2, 4, 12, 2, [2, 0, 0], 1.5, [0.5], f"metrics{RED}",
        [CounterMove(f"c{CLEAR}", 1.0, 2.0)], f"served\x9b2J{FORGED}", "\u202eeton", 1.0,
    )  # fmt: skip
    run = ServedRun(measured, probe_not_run=f"the\u2028server{TITLE}")
    with _streams() as (out, _err):
        render_engine_run(run, stdout_console())
    text = out.getvalue().decode("utf-8")
    _assert_safe(text)
    assert "0.33\\x0aError: forged\\x1b[2J" in text and "served\\x9b2J\\x0aError: forged" in text


# ---- verify's machine and line formats ---------------------------------------------------------------------------


def _findings(draft: Path) -> int:
    _code, out, _ = _cli("verify", draft, "--no-hash", "--format", "json")
    return len(json.loads(out)["findings"])


def _shown(draft: Path) -> int:
    """The findings as concise lines show them: one that several releases share, once (render/grouping.py)."""
    from dataclasses import fields

    from eagle_convert.render.grouping import by_release
    from eagle_convert.rules.finding import Finding

    _code, out, _ = _cli("verify", draft, "--no-hash", "--format", "json")
    keys = [f.name for f in fields(Finding)]
    return len(by_release([Finding(**{k: f[k] for k in keys}) for f in json.loads(out)["findings"]]))


@pytest.mark.parametrize("count", [1, 2], ids=["one-checkpoint", "two-checkpoints"])
def test_concise_and_github_are_one_line_per_finding(here: Path, count: int) -> None:
    drafts = [_draft(here / str(n)) for n in range(count)]
    findings = sum(_findings(d) for d in drafts)
    _code, concise, _ = _cli("verify", *drafts, "--no-hash", "--format", "concise")
    _assert_safe(concise)
    shown = sum(_shown(d) for d in drafts)
    assert shown < findings and len(concise.splitlines()) == shown + count  # then one summary line per checkpoint
    _code, github, _ = _cli("verify", *drafts, "--no-hash", "--format", "github")
    _assert_safe(github)
    lines = github.splitlines()
    assert len(lines) == findings and {line[2:].split(" ", 1)[0] for line in lines} <= COMMANDS
    assert "gh%250A::error::forged%0D%0A::error title=x::forged\\x1b[2J.weight" in github  # GitHub's own escapes


@pytest.mark.parametrize("count", [1, 2], ids=["one-checkpoint", "two-checkpoints"])
def test_the_markdown_summary_is_escaped(here: Path, monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    summary = here / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    drafts = [_draft(here / str(n)) for n in range(count)]
    findings = sum(_findings(d) for d in drafts)
    summary.unlink()  # _findings wrote it too
    code, _out, _err = _cli("verify", *drafts, "--no-hash", "--format", "json")
    assert code == 1
    text = summary.read_text(encoding="utf-8")
    _assert_safe(text)
    rows = [line for line in text.splitlines() if line.startswith("| EC")]
    assert len(rows) == findings  # one table row per finding
    assert all(line.count("|") - line.count("\\|") == 6 for line in rows)


@pytest.mark.parametrize("count", [1, 2], ids=["one-checkpoint", "two-checkpoints"])
@pytest.mark.parametrize("fmt", ["json", "sarif", "junit"])
def test_machine_formats_parse_and_keep_the_strings(here: Path, fmt: str, count: int) -> None:
    drafts = [_draft(here / str(n)) for n in range(count)]
    code, out, _ = _cli("verify", *drafts, "--no-hash", "--format", fmt)
    assert code == 1
    assert not UNSAFE.search(out.replace("\n", ""))  # JSON escapes; XML's U+FFFD or one_line's escapes
    if fmt == "junit":
        root = ET.fromstring(out)
        assert int(root.get("failures", "0")) >= count
        return
    doc = json.loads(out)
    if fmt == "json":
        reports = doc if count > 1 else [doc]
        messages = [f["message"] for r in reports for f in r["findings"]]
    else:
        messages = [r["message"]["text"] for r in doc["runs"][0]["results"]]
    for name in TENSORS:
        assert sum(name in m for m in messages) >= count, name  # as the draft has it, not escaped


def test_every_report_file_is_utf_8_with_a_file_names_undecodable_byte(here: Path) -> None:
    """The directory's name ends in the undecodable byte 0xff (``\\udcff`` once decoded), which UTF-8 cannot write."""
    draft = _draft(here)
    for fmt in FORMATS:
        report = here / f"report.{fmt}"
        code, _out, _err = _cli("verify", draft, "--no-hash", "--format", fmt, "--output", report)
        assert code == 1
        _parses(fmt, report.read_bytes().decode("utf-8"))


@pytest.mark.parametrize(
    "args",
    [("inspect",), ("inspect", "--json"), *(("verify", "--no-hash", "--format", fmt) for fmt in FORMATS)],
    ids=lambda args: "-".join(args).replace("--", ""),
)
def test_a_lone_surrogate_tensor_name_is_refused_or_escaped_never_an_internal_error(
    here: Path, args: tuple[str, ...]
) -> None:
    draft = _draft(here, tensors=(LONE,))
    code, out, err = _cli(args[0], draft, *args[1:])  # no internal error: _cli checks
    fmt = "json" if "--json" in args else args[-1] if "--format" in args else "human"
    if code == 2:  # the reader refuses the name (serde_json does): one Error line and its Hint
        assert [line.split(":")[0] for line in err.splitlines()] == ["Error", "Hint"], err
    if fmt in ("json", "sarif"):  # read back as the draft has it
        assert code == 2 or LONE in json.dumps(json.loads(out), ensure_ascii=False)
    elif fmt == "junit":  # XML cannot carry it: the finding's line shows it escaped
        ET.fromstring(out)
        assert code == 2 or "\\ud800.lone" in out
    else:
        _assert_safe(out + err)
        assert code == 2 or "\\ud800.lone" in out + err
