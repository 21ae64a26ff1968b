"""A fresh clone passes on its own: no tracked file reaches outside the repository, and the suite runs from a clone
made in an empty directory (.ci/run runs all of scripts/test that way)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PARENTS = re.compile(r"Path\(__file__\)\.resolve\(\)((?:\.parent)+)")
PARENTS_INDEX = re.compile(r"Path\(__file__\)\.resolve\(\)\.parents\[(\d+)\]")
SHELL_UP = re.compile(r"""\$\(dirname "\$0"\)((?:/\.\.)+)""")
# Places on the machines this project was developed and tested on; none may appear in a tracked file.
OUTSIDE = re.compile(r"/work/|/home/\w|\.\./shared|\bshared/fixtures")
TEXT_SUFFIXES = {".py", ".sh", ".toml", ".cfg", ".yaml", ".yml", ".txt", ".md", ".json", ""}


def tracked_files() -> list[Path]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / n for n in names if (ROOT / n).suffix in TEXT_SUFFIXES and (ROOT / n).is_file()]


def test_no_tracked_file_reaches_outside_the_repository() -> None:
    bad = []
    for path in tracked_files():
        rel = path.relative_to(ROOT)
        if rel.parts[0] == "fixtures" and rel.parts[1:2] == ("real-configs",):
            continue  # vendored upstream configs: data, never paths this project opens
        text = path.read_text(encoding="utf-8", errors="replace")
        depth = len(rel.parts) - 1  # directories between the repository root and the file
        for m in PARENTS.finditer(text):  # the k-th .parent of a file at depth d is inside the repo while k <= d + 1
            if m.group(1).count(".parent") > depth + 1:
                bad.append(f"{rel}: {m.group(0)}")
        for m in PARENTS_INDEX.finditer(text):  # parents[i] is the (i+1)-th .parent
            if int(m.group(1)) + 1 > depth + 1:
                bad.append(f"{rel}: {m.group(0)}")
        for m in SHELL_UP.finditer(text):
            if m.group(1).count("..") > depth:
                bad.append(f"{rel}: {m.group(0)}")
        if rel.parts[0] != "tests" or rel.name != "test_self_contained.py":
            bad += [f"{rel}: {m.group(0)}" for m in OUTSIDE.finditer(text)]
    assert not bad, bad


def test_the_scan_catches_what_broke_fresh_clones_before(tmp_path: Path) -> None:
    """The test that once needed ../shared/fixtures/real-configs, as fixtures/real.py spelled it."""
    old = "SHARED = Path(__file__).resolve()" + ".parent" * 3 + ' / "shared" / "fixtures" / "real-configs"'
    m = PARENTS.search(old)
    assert m is not None and m.group(1).count(".parent") == 3 > len(Path("fixtures/real.py").parts)
    assert OUTSIDE.search('"../shared/fixtures/real-configs"')


def test_ci_runs_the_readme_test_command_on_a_clone_in_an_empty_directory() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    assert "mktemp -d" in script and "git clone" in script
    assert re.search(r"^scripts/test \"\$@\"$", script, re.M)  # the README's command, from inside the clone


@pytest.mark.slow
def test_a_fresh_clone_in_an_empty_directory_collects_and_passes_what_reached_outside(tmp_path: Path) -> None:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    empty = tmp_path / "empty"
    empty.mkdir()
    clone = empty / "eagle-convert"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], check=True)
    env = {**os.environ, "PYTHONPATH": str(clone)}
    where = subprocess.run(
        [sys.executable, "-c", "import eagle_convert, fixtures; print(eagle_convert.__file__, fixtures.__file__)"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(Path(p).is_relative_to(clone) for p in where), where  # the clone's code, not this checkout's
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/draft/test_real_configs.py", "-x"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
