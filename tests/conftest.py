from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.generate import generate_all

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def fx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every generated fixture checkpoint, written once per test session."""
    out = tmp_path_factory.mktemp("fixtures")
    generate_all(out)
    return out


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed CLI in a subprocess exactly as a user's CI would."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "eagle_convert", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=ROOT,
        timeout=120,
    )
