"""Golden files of the human (rich) output: what a person sees from inspect, verify, rules and rule CODE on the
deterministic fixtures, at a pinned width with colour off, both streams as written, compared exactly.

After a deliberate change to the output, regenerate them (and review the diff) with

    EAGLE_CONVERT_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/verify/test_golden.py

tests/golden/README.md says the same.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from eagle_convert.cli.main import main
from fixtures.broken import CORPUS, write_broken
from fixtures.generate import write_layout, write_targets
from fixtures.layouts import LAYOUTS

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE_ENV = "EAGLE_CONVERT_UPDATE_GOLDEN"
REGENERATE = f"{UPDATE_ENV}=1 .venv/bin/python -m pytest tests/verify/test_golden.py"
WIDTH = "100"
PLACEHOLDER = "<fixtures>"

# golden file name -> command line; paths are relative to the fixture directory (the working directory of the run)
CASES: dict[str, list[str]] = {
    "inspect-specforge-mha": ["inspect", "specforge-mha", "--target", "targets/target-llama"],
    "inspect-speculators-mha": ["inspect", "speculators-mha"],
    "inspect-missing-down-proj": ["inspect", "missing-down-proj"],
    "verify-specforge-mha-vllm-0.33-v1": [
        *("verify", "specforge-mha", "--target", "targets/target-llama", "--engine", "vllm@0.33-v1", "--no-hash"),
    ],
    "verify-speculators-mha": ["verify", "speculators-mha", "--no-hash"],
    "verify-missing-down-proj": ["verify", "missing-down-proj", "--target", "targets/target-llama", "--no-hash"],
    # one finding two releases share: one row naming both (the JSON keeps one entry per release)
    "verify-d2t-equal-vocab": ["verify", "d2t-equal-vocab", "--no-hash"],
    "rules": ["rules"],
    "rule-EC104": ["rule", "EC104"],
}


@pytest.fixture(scope="module")
def drafts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The drafts of CASES, each written once by the fixture generators (deterministic bytes)."""
    root = tmp_path_factory.mktemp("golden")
    write_targets(root / "targets")
    for name in ("specforge-mha", "speculators-mha"):
        write_layout(root / name, LAYOUTS[name])
    for name in ("missing-down-proj", "d2t-equal-vocab"):
        write_broken(root / name, next(c for c in CORPUS if c.name == name))
    return root


def _normalise(text: str, root: Path) -> str:
    """The fixture directory as a placeholder (absolute paths would differ per machine), no trailing blanks."""
    for spelling in {str(root.resolve()), str(root)}:
        text = text.replace(spelling, PLACEHOLDER)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def run(args: list[str], root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """One command as a person at a 100-column terminal without colour sees it: exit code, stdout, stderr."""
    monkeypatch.chdir(root)
    monkeypatch.setenv("COLUMNS", WIDTH)
    monkeypatch.setenv("NO_COLOR", "1")
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    capsys.readouterr()
    code = main(args)
    out, err = capsys.readouterr()
    shown = f"$ eagle-convert {' '.join(args)}\n[exit code {code}]\n--- stdout ---\n{out}--- stderr ---\n{err}"
    return _normalise(shown, root)


@pytest.mark.parametrize("name", sorted(CASES))
def test_human_output_matches_the_golden_file(
    name: str, drafts: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    actual = run(CASES[name], drafts, capsys, monkeypatch)
    path = GOLDEN / f"{name}.txt"
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"no golden file {path.relative_to(GOLDEN.parent.parent)}; create it with `{REGENERATE}`")
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                fromfile=f"tests/golden/{name}.txt (expected)",
                tofile=f"eagle-convert {' '.join(CASES[name])} (actual)",
            )
        )
        pytest.fail(
            f"the output of `eagle-convert {' '.join(CASES[name])}` changed:\n{diff}\n"
            f"if the change is intended, regenerate the golden files with `{REGENERATE}` and review the diff"
        )


# golden file name -> console width: the acceptance probe's table (fixtures/probe_result.py) as verify prints it
PROBE_TABLES = {"probe-table-80": 80, "probe-table-200": 200}


@pytest.mark.parametrize("name", sorted(PROBE_TABLES))
def test_probe_table_matches_the_golden_file(name: str) -> None:
    """The probe table at a narrow and a wide console: at 80 columns columns are left out, never the verdict."""
    from io import StringIO

    from rich.console import Console

    from eagle_convert.render.probe_table import probe_table
    from fixtures.probe_result import PROBE_RESULT

    width = PROBE_TABLES[name]
    out = StringIO()
    Console(file=out, width=width, no_color=True, highlight=False).print(probe_table(PROBE_RESULT, width))
    actual = (
        f"probe table at {width} columns\n" + "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"
    )
    path = GOLDEN / f"{name}.txt"
    if os.environ.get(UPDATE_ENV) == "1":
        path.write_text(actual, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"no golden file {path.relative_to(GOLDEN.parent.parent)}; create it with `{REGENERATE}`")
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), path.name, "actual"))
        pytest.fail(f"the probe table at {width} columns changed:\n{diff}\nif intended, regenerate with `{REGENERATE}`")


def test_every_golden_file_has_a_case() -> None:
    """A golden file whose case was removed is stale: delete it (or regenerate all of them)."""
    assert {p.stem for p in GOLDEN.glob("*.txt")} <= set(CASES) | set(PROBE_TABLES)


def test_the_golden_run_is_stable(
    drafts: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs give the same text: nothing in a golden file depends on time, order of a set, or the machine."""
    for name in ("verify-specforge-mha-vllm-0.33-v1", "inspect-specforge-mha"):
        first = run(CASES[name], drafts, capsys, monkeypatch)
        assert run(CASES[name], drafts, capsys, monkeypatch) == first
        assert str(drafts) not in first
