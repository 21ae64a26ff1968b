"""Where output goes and what shape it has (issue 30, item 5): every command's report on stdout and its progress,
notices and Error:/Hint: lines on stderr; ``--json`` one line off a terminal; one finding shape and one set of version
keys in inspect and verify; a finding several releases share printed once with its releases; ``verify -h`` in
panels; help that names URLs and commands, never a path in the repository."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from eagle_convert.cli.main import main
from eagle_convert.render.grouping import by_release
from eagle_convert.rules.finding import Finding
from eagle_convert.version import PROJECT_URL, __version__
from fixtures.broken import CORPUS, write_broken
from tests.conftest import SCHEMAS


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with a pyproject.toml that says nothing, and a wide unwrapped console."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'drafts'\n")
    monkeypatch.chdir(tmp_path)
    for name in ("NO_COLOR", "FORCE_COLOR", "EAGLE_CONVERT_DEBUG", "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# ---- 1. the report on stdout, progress and errors on stderr ----------------------------------------------------------


def test_verify_writes_its_human_report_to_stdout(here: Path, fx: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`verify D | less` showed nothing: the report went to stderr."""
    code, out, err = cli(capsys, "verify", str(fx / "layouts" / "specforge-mha"), "--no-hash")
    assert code == 1 and err == ""
    assert "EC104" in out and "FAIL 1 error(s)" in out and out.startswith("verify ")
    code, out, err = cli(capsys, "verify", str(fx / "layouts" / "specforge-mha"), "--no-hash", "-q")
    assert code == 1 and err == "" and out.startswith("FAIL 1 error(s)")  # -q: the verdict, on stdout too


def test_several_checkpoints_head_and_tally_on_stdout_and_an_error_on_stderr(
    here: Path, fx: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad, missing = fx / "layouts" / "canonical-mha", fx / "layouts" / "specforge-mha", here / "missing"
    code, out, err = cli(capsys, "verify", str(good), str(bad), str(missing), "--no-hash")
    assert code == 2
    assert f"== {good}\n" in out and f"== {bad}\n" in out and f"== {missing}\n" in out
    assert out.rstrip().endswith("3 checkpoints: 1 passed, 1 failed, 1 could not be verified")
    assert err.startswith(f"Error: {missing}: no such file or directory") and "Hint: " in err
    assert "Error:" not in out and "== " not in err
    code, out, err = cli(capsys, "verify", str(good), str(bad), "--no-hash", "--json")  # the tally beside JSON
    assert code == 1 and len(json.loads(out)) == 2
    assert err == "2 checkpoints: 1 passed, 1 failed, 0 could not be verified\n"


def test_every_command_reports_on_stdout(here: Path, fx: Path, capsys: pytest.CaptureFixture[str]) -> None:
    draft = str(fx / "layouts" / "canonical-mha")
    for args in (
        ("inspect", draft),
        ("normalize", draft, str(here / "out"), "--dry-run", "--target-family", "llama"),
        ("rules",),
        ("rule", "EC104"),
        ("engines",),
        ("engines", "vllm@0.33"),
        ("push", draft, "owner/draft", "--dry-run"),
    ):
        code, out, err = cli(capsys, *args)
        assert code == 0 and out.strip() and err == "", (args, out[-2000:], err)


def test_in_github_actions_the_annotations_follow_the_report_on_stdout(
    here: Path, fx: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    code, out, err = cli(capsys, "verify", str(fx / "layouts" / "specforge-mha"), "--no-hash")
    assert code == 1 and err == ""
    annotations = [line for line in out.splitlines() if line.startswith("::")]
    assert len(annotations) == 1 and annotations[0].startswith("::error ") and "EC104" in annotations[0]
    assert "FAIL 1 error(s)" in out and out.startswith("verify ")  # the report too, on the same stream


def test_errors_go_to_stderr_and_nothing_else(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("inspect", "verify"):
        code, out, err = cli(capsys, command, str(here / "missing"))
        assert code == 2 and out == "", (command, out)
        assert [line.split(":")[0] for line in err.splitlines()] == ["Error", "Hint"], (command, err)


# ---- 2. --json: one line when stdout is not a terminal ---------------------------------------------------------------


def test_json_is_one_line_off_a_terminal_for_every_command(
    here: Path, fx: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draft, other = str(fx / "layouts" / "canonical-mha"), str(fx / "layouts" / "specforge-mha")
    for args in (
        ("inspect", draft),
        ("inspect", str(here / "missing")),  # the error object too
        ("normalize", draft, str(here / "out"), "--dry-run", "--target-family", "llama"),
        ("verify", draft, "--no-hash"),
        ("verify", draft, other, "--no-hash"),
        ("rules",),
        ("rule", "EC104"),
        ("engines",),
        ("push", draft, "owner/draft", "--dry-run"),
    ):
        _, out, _ = cli(capsys, *args, "--json")
        assert out.endswith("\n") and out.count("\n") == 1, (args, out[:300])
        json.loads(out)


def test_json_is_indented_at_a_terminal_by_one_shared_helper(
    here: Path, fx: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One place decides (render/json_output.stdout_indent): told it is a terminal, every command indents."""
    from eagle_convert.render import json_output

    draft, other = str(fx / "layouts" / "canonical-mha"), str(fx / "layouts" / "specforge-mha")
    shared = json_output.stdout_indent
    monkeypatch.setattr(json_output, "stdout_indent", lambda: 2)
    for args in (("inspect", draft), ("verify", draft, "--no-hash"), ("verify", draft, other, "--no-hash"), ("rules",)):
        _, out, _ = cli(capsys, *args, "--json")
        assert out.count("\n") > 10 and out.startswith(("{\n  ", "[\n  ")), (args, out[:100])
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert shared() == 2
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    assert shared() is None


# ---- 3. one finding shape and one set of version keys in inspect and verify ------------------------------------------


def _schema(name: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads((SCHEMAS / name).read_text(encoding="utf-8")))


def test_inspect_and_verify_share_version_keys_and_finding_shape(
    here: Path, fx: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draft = str(fx / "layouts" / "specforge-mha")
    _, out, _ = cli(capsys, "inspect", draft, "--json")
    inspected = json.loads(out)
    _, out, _ = cli(capsys, "verify", draft, "--json", "--no-hash")
    verified = json.loads(out)
    _schema("inspect-report.schema.json").validate(inspected)
    _schema("verify-report.schema.json").validate(verified)
    for doc in (inspected, verified):  # the old keys of each stay (a public contract), the other's are added
        assert (doc["tool"], doc["version"], doc["tool_version"]) == ("eagle-convert", __version__, __version__)
    keys = {"rule_id", "severity", "message", "file", "pointer", "subject", "engine", "expected", "actual"}
    assert inspected["findings"] and verified["findings"]
    for finding in inspected["findings"] + verified["findings"]:
        assert keys <= set(finding), finding
    assert {k for f in inspected["findings"] for k in f} == {k for f in verified["findings"] for k in f}
    ec104 = next(f for f in verified["findings"] if f["rule_id"] == "EC104")
    assert ec104["engine"] == "vllm@0.33-v1" and ec104["subject"] and ec104["pointer"]
    # the same finding is located the same way in both: file and pointer from one place (gate/located.py)
    inspected_ec104 = next(
        f for f in inspected["findings"] if f["rule_id"] == "EC104" and f["engine"] == "vllm@0.33-v1"
    )
    assert (inspected_ec104["file"], inspected_ec104["pointer"]) == (ec104["file"], ec104["pointer"]) != (None, None)


def test_normalize_and_the_error_object_have_the_version_keys_too(
    here: Path, fx: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = cli(capsys, "inspect", str(here / "missing"), "--json")
    error = json.loads(out)
    _schema("error.schema.json").validate(error)
    draft = str(fx / "layouts" / "specforge-mha")
    _, out, _ = cli(capsys, "normalize", draft, str(here / "out"), "--dry-run", "--target-family", "llama", "--json")
    plan = json.loads(out)
    _schema("normalize-report.schema.json").validate(plan)
    for doc in (error, plan):
        assert (doc["tool"], doc["version"], doc["tool_version"]) == ("eagle-convert", __version__, __version__)


# ---- 4. a finding several releases share, printed once --------------------------------------------------------------


def _gate(release: str, message: str = "refuses the checkpoint's d2t at load", pointer: str = "d2t") -> Finding:
    return Finding("EC412", "error", f"{release} {message}", file="model.safetensors", pointer=pointer,
                   subject=pointer, engine=release)  # fmt: skip


def test_findings_that_differ_only_in_their_release_are_one() -> None:
    shared = [_gate("vllm@0.33"), _gate("vllm@0.33-v1"), _gate("vllm@0.28")]
    (one,) = by_release(shared)
    assert one.message == "vllm@0.33, vllm@0.33-v1, vllm@0.28 refuses the checkpoint's d2t at load"
    assert one.engine is None and (one.rule_id, one.pointer) == ("EC412", "d2t")
    # a release that is the head of another's name is not that release; other text or place: apart
    apart = [_gate("vllm@0.33", "says vllm@0.33-v1 is fine"), _gate("vllm@0.28", "says vllm@0.33-v1 is fine")]
    assert [f.message for f in by_release(apart)] == ["vllm@0.33, vllm@0.28 says vllm@0.33-v1 is fine"]
    assert len(by_release([_gate("vllm@0.33"), _gate("vllm@0.28", "drops it")])) == 2
    assert len(by_release([_gate("vllm@0.33"), _gate("vllm@0.28", pointer="t2d")])) == 2
    plain = Finding("EC401", "error", "vocab mismatch")
    assert by_release([plain, plain]) == [plain, plain]  # no release of its own: never merged
    assert by_release([_gate("vllm@0.33")]) == [_gate("vllm@0.33")]


def test_a_shared_finding_is_one_row_and_one_concise_line_but_every_json_entry(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draft = here / "d2t-equal-vocab"
    write_broken(draft, next(c for c in CORPUS if c.name == "d2t-equal-vocab"))
    _, out, _ = cli(capsys, "verify", str(draft), "--no-hash", "--engine", "vllm@0.33,vllm@0.33-v1")
    rows = [line for line in out.splitlines() if line.startswith("│ EC412")]
    assert len(rows) == 1 and "vllm@0.33, vllm@0.33-v1 refuses the checkpoint's d2t" in out, out
    _, out, _ = cli(capsys, "verify", str(draft), "--no-hash", "--engine", "vllm@0.33,vllm@0.33-v1", "--format",
                    "concise")  # fmt: skip
    (line,) = [line for line in out.splitlines() if "EC412" in line]
    assert ": EC412 [*] error vllm@0.33, vllm@0.33-v1 refuses the checkpoint's d2t at load" in line
    _, out, _ = cli(capsys, "verify", str(draft), "--no-hash", "--engine", "vllm@0.33,vllm@0.33-v1", "--json")
    refused = [f for f in json.loads(out)["findings"] if f["rule_id"] == "EC412"]
    assert [f["engine"] for f in refused] == ["vllm@0.33", "vllm@0.33-v1"]  # machine formats: one per finding


# ---- 5. verify -h in panels, the help still plain --------------------------------------------------------------------

PANELS = {
    "What to check": ("--target", "--engine", "--level", "--fail-level", "--select", "--aux-convention"),
    "Output": ("--format", "--json", "--output", "--exit-zero", "--no-hash", "--quiet", "--color"),
    "Probe (--level forward, target)": ("--token-ids", "--prompts", "--probe-steps", "--device", "--dtype"),
    "Engine (--level engine)": ("--engine-python", "--engine-arg", "--engine-config"),
    "Server (--engine-url: the engine level on a running server)": ("--engine-url", "--engine-url-token"),
    "Hub": ("--token",),
}


def _sections(text: str) -> dict[str, str]:
    """A help text's sections by title (a line ``Title:`` at the margin), each its text."""
    parts = re.split(r"^(\S[^\n]*):\n", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_verify_help_groups_its_options_in_panels_and_keeps_brackets(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text, _ = cli(capsys, "verify", "-h")
    sections = _sections(text)
    assert code == 0 and list(sections)[:3] == ["Arguments", "Options", "What to check"], list(sections)
    assert list(sections)[2:] == list(PANELS)
    for panel, options in PANELS.items():
        for option in options:
            assert re.search(rf"^  (-\w, )?{re.escape(option)}\b", sections[panel], re.MULTILINE), (panel, option)
    assert sections["Options"].split() == ["-h,", "--help", "Show", "this", "message", "and", "exit."]
    assert "Lowest severity that fails [error]." in sections["What to check"]  # plain help: brackets are text
    assert "[tool.eagle-convert] engine" in " ".join(sections["What to check"].split())
    code, text, _ = cli(capsys, "inspect", "-h")  # a command without panels: one Options section, as before
    assert code == 0 and [s for s in _sections(text) if s not in ("Arguments", "Options", "Usage")] == []


# ---- 6. help names URLs and commands, never a path in the repository ----------------------------------------------


@pytest.mark.parametrize(
    "command", ["", "inspect", "normalize", "verify", "rules", "rule", "pull", "push", "engines", "engine-env"]
)
def test_help_names_no_repository_path(here: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    code, text, _ = cli(capsys, *command.split(), "--help")
    assert code == 0
    prose = re.sub(rf"{re.escape(PROJECT_URL)}\S*", "URL", " ".join(text.split()))
    for path in ("docs/", "scripts/", "eagle_convert/schemas", "tests/", "fixtures/"):
        assert path not in prose, (command, path, prose)


def test_piped_output_never_breaks_a_path_or_a_bracket(
    here: Path, fx: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off a terminal, with no COLUMNS: a table's title and caption are whole lines (issue 40: normalize's header
    was cut mid-path at the table's width, the probe legend between `[` and `]`)."""
    import io

    from eagle_convert.render import console as render
    from eagle_convert.render.probe_table import probe_table
    from fixtures.probe_result import PROBE_RESULT

    monkeypatch.delenv("COLUMNS")
    out = here / "a" / "long" / "path" / "for" / "the" / "normalized" / "draft" / ("x" * 60) / "out"
    target = fx / "targets" / "target-llama"
    code, text, _ = cli(capsys, "normalize", str(fx / "layouts" / "specforge-mha"), str(out), "--target", str(target))
    assert code == 0 and f" -> {out}\n" in text, text
    stream = io.StringIO()
    piped = render._console(stream)
    piped.print(probe_table(PROBE_RESULT, piped.width))
    piped.file.flush()
    lines = stream.getvalue().splitlines()
    caption = [line for line in lines if "[ ]: 95% intervals" in line]
    assert len(caption) == 1 and caption[0].startswith("each row reads the draft's config one way")
    assert all(line.count("[") == line.count("]") for line in lines), lines
