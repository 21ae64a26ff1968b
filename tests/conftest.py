from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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


BLOCK_TORCH = """
import importlib.abc, sys
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
sys.meta_path.insert(0, _Block())
from eagle_convert.cli.main import main
code = main(sys.argv[1:])
assert "torch" not in sys.modules
sys.exit(code)
"""


def run_cli_without_torch(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a subprocess where importing torch fails (and a late import would fail the run)."""
    return subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "160"},
        timeout=120,
    )


def hf_forward(model: Any, ids: Any) -> tuple[list[Any], Any, Any]:
    """transformers' hidden_states (N+1, the last after the final norm), logits, and the last layer's raw output."""
    import torch

    seen: list[Any] = []

    def hook(_module: Any, _inputs: Any, output: Any) -> None:
        seen.append(output[0] if isinstance(output, tuple) else output)

    handle = model.model.layers[-1].register_forward_hook(hook)
    try:
        with torch.no_grad():
            out = model(ids[None], output_hidden_states=True)
    finally:
        handle.remove()
    return [h[0] for h in out.hidden_states], out.logits[0], seen[0][0]
