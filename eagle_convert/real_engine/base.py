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
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from eagle_convert import engines
from eagle_convert.errors import ENGINE_PYTHON_ENV, EngineNotInstalledError, EngineRunError

DEBUG_ENV = "EAGLE_CONVERT_DEBUG"
# `scripts/engine-env [--sglang]` builds them (eagle_convert/engines.py: each runner's environment)
ENGINE_VENVS = {e.name: e.environment for e in engines.ENGINES if e.environment is not None}
DEFAULT_ENGINE_VENV = ENGINE_VENVS["vllm"]
PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent  # the directory that holds eagle_convert/
# --dtype auto at --level engine: the engine's auto, float32 on a CPU (exact against the float32 reference) and the
# model's own dtype elsewhere (:func:`engine_dtype`). Not the reference's auto (reference/compute.py
# REFERENCE_DTYPE_AUTO), which the same word asks of the reference models.
ENGINE_DTYPE_AUTO = engines.DTYPE_AUTO
DEFAULT_ENGINE_DTYPE = ENGINE_DTYPE_AUTO  # the engine level's one default dtype
DEFAULT_ENGINE_DEVICE = "cpu"
ENGINE_NEW_TOKENS = engines.NEW_TOKENS  # --engine-tokens (eagle_convert/engines.py: light to import for the CLI)


@dataclass(frozen=True)
class EngineSettings:
    """What ``verify --level engine`` runs (see the verify command's options)."""

    engine: str = "vllm"
    python: Path | None = None  # the engine environment's Python (default: .venv-engine)
    token_ids: list[list[int]] | None = None  # prompts as token ids (default: the probe's seeded prompts)
    prompts: list[str] | None = None  # text prompts (--prompts, as read), tokenized with the target's tokenizer.json
    new_tokens: int = ENGINE_NEW_TOKENS
    steps: int = 3
    device: str = DEFAULT_ENGINE_DEVICE
    dtype: str = DEFAULT_ENGINE_DTYPE  # as asked; the engine runs in engine_dtype(dtype, device)
    baseline: bool = True
    # the engine's own settings (--engine-arg / --engine-config), in its Python names; they win over the engine
    # level's defaults, and the engine validates them in the child (engine_args.py)
    engine_args: dict[str, Any] = field(default_factory=dict)


def engine_dtype(dtype: str, device: str) -> str:
    """The dtype the engine runs in: :data:`ENGINE_DTYPE_AUTO` is float32 on a CPU (exact against the float32
    reference) and the model's own dtype (the engine's own ``auto``, passed on) elsewhere; any other value as given."""
    if dtype == ENGINE_DTYPE_AUTO:
        return "float32" if device == "cpu" else ENGINE_DTYPE_AUTO
    return dtype


@dataclass(frozen=True)
class EngineRequest:
    target: Path
    drafts: list[Path]  # one engine per draft, one after the other in the same child process
    prompts: list[list[int]]  # token ids; the engine continues each greedily
    new_tokens: int
    k: int  # draft tokens per step (num_speculative_tokens)
    dtype: str = engine_dtype(DEFAULT_ENGINE_DTYPE, DEFAULT_ENGINE_DEVICE)  # resolved: what the engine is given
    device: str = DEFAULT_ENGINE_DEVICE
    baseline: bool = True  # also run the target alone, to tell whether the draft changed the output
    max_model_len: int = 512
    engine_args: dict[str, Any] = field(default_factory=dict)  # the user's settings, over the defaults above


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
    # SGLang on a CPU runs to its loader and aux capture only (no CPU kernels on the index): then acceptance is not
    # measured (``not_measured`` says why) and the captured layers come from the target's capture set, not fed states
    not_measured: str | None = None
    target_class: str | None = None  # the target model class the engine built
    built: dict[str, Any] | None = None  # the draft module as built: class, num_aux, fc_shape, flags, lm_head, ...
    tensors: dict[str, dict[str, Any]] | None = None  # file tensor -> {"param": built parameter | None, "rows": ...}
    # every setting the engine ran with (the keywords it was built with, each as the engine's config holds it)
    settings: dict[str, Any] | None = None
    # what the run could not observe under these settings, each with why (e.g. a multi-process executor: the capture
    # hooks run in this process only); findings that need it then claim nothing
    not_observed: list[str] = field(default_factory=list)
    # the engine refused to load the draft at start-up (its own error line, whole) while the target alone loads with
    # the same settings: the draft's or its config's fault, not the environment's (EC728); nothing was decoded
    refused: str | None = None


class EngineRunner(Protocol):
    """One engine behind the engine level: vLLM (``vllm_runner``) or SGLang (``sglang_runner``)."""

    name: str

    def run(self, python: Path, request: EngineRequest, workdir: Path) -> list[EngineObservation]:
        """One observation per draft of the request, in order; EngineRunError when the engine fails."""
        ...


def engine_python(explicit: str | Path | None = None, start: Path | None = None, engine: str = "vllm") -> Path:
    """The engine environment's Python (``real_engine/env.py`` says where it is looked for): ``explicit``, else
    $EAGLE_CONVERT_ENGINE_PYTHON, else the engine's venv (``.venv-engine`` for vLLM, ``.venv-sglang`` for SGLang) in
    the current directory or the project's own checkout, else the per-user one `eagle-convert engine-env` builds;
    EngineNotInstalledError when none exists."""
    from eagle_convert.real_engine.env import user_location

    chosen = explicit or os.environ.get(ENGINE_PYTHON_ENV)
    if chosen:
        path = Path(chosen)
        if not path.is_file():
            raise EngineNotInstalledError(f"engine Python {path} does not exist")
        return path
    venv_name = ENGINE_VENVS.get(engine, DEFAULT_ENGINE_VENV)
    places = [(start or Path.cwd()) / venv_name, PACKAGE_ROOT / venv_name, *user_location(engine)]
    for venv in places:
        python = venv / "bin" / "python"
        if python.is_file():
            return python
    looked = ", ".join(str(p) for p in places)
    if engine == "sglang":
        raise EngineNotInstalledError(
            f"no SGLang environment (looked in {looked})",
            hint="build it with `eagle-convert engine-env --sglang` (SGLang's loader and aux capture on a CPU; add "
            f"--cuda on a GPU box to decode), or point --engine-python / {ENGINE_PYTHON_ENV} at a Python with SGLang",
        )
    raise EngineNotInstalledError(f"no engine environment (looked in {looked})")


def run_worker(
    python: Path, module: str, request: dict[str, Any], env: dict[str, str], workdir: Path
) -> dict[str, Any]:
    """Run ``python -m module request.json`` with eagle-convert importable, and return its result JSON.

    The child's output goes to ``engine.log`` in ``workdir`` (with EAGLE_CONVERT_DEBUG=1 also to stderr as it
    runs). When the child fails, EngineRunError leads with the engine's own last error line, whole, and the log is
    kept where the hint says."""
    request_path, result_path = workdir / "request.json", workdir / "result.json"
    request_path.write_text(json.dumps({**request, "result_path": str(result_path)}), encoding="utf-8")
    child_env = {**os.environ, **env}
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")) if p)
    log_path = workdir / "engine.log"
    command = [str(python), "-m", module, str(request_path)]
    with open(log_path, "wb") as log:
        if os.environ.get(DEBUG_ENV):  # stream the log as it is written, and keep it for the cause
            with subprocess.Popen(command, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
                for chunk in iter(proc.stdout.readline if proc.stdout else bytes, b""):
                    log.write(chunk)
                    sys.stderr.buffer.write(chunk)
                    sys.stderr.flush()
            returncode = proc.returncode
        else:
            returncode = subprocess.run(
                command, env=child_env, stdout=log, stderr=subprocess.STDOUT, check=False
            ).returncode
    engine_name = module.rsplit(".", 1)[-1].removesuffix("_worker")
    if result_path.is_file():
        result: dict[str, Any] = json.loads(result_path.read_text(encoding="utf-8"))
        if result.get("settings_error"):  # the engine's argument classes refused a setting, before any loading
            from eagle_convert.real_engine.engine_args import settings_error

            raise settings_error(engine_name, result["settings_error"])
        for run in result.get("runs", ()):  # a refusal behind a wrapper ("see root cause above"): the cause is logged
            refusal = run.get("refused")
            if refusal and "above" in refusal.get("message", "").lower():
                refusal["message"] = last_error_line(log_path.read_text(encoding="utf-8", errors="replace"))
    if returncode != 0 or not result_path.is_file():
        engine = engines.label(engine_name) if engine_name in engines.NAMES else "the engine"
        cause = last_error_line(log_path.read_text(encoding="utf-8", errors="replace"))
        kept = _keep_log(log_path)
        raise EngineRunError(
            f"{engine} failed on the draft (exit {returncode}): {cause}",
            path=request["drafts"][0],
            hint=f"the engine's whole log is {kept}; rerun with {DEBUG_ENV}=1 to see it as the engine runs",
        )
    return result


# "ValueError: ...", "vllm.v1.engine.exceptions.EngineDeadError: ...", "torch.OutOfMemoryError" (no message)
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure)\b(?::.*)?$")
# what engines put before a line: "(EngineCore_DP0 pid=12) ", "ERROR 11-24 07:26:00 [core.py:700] "
_PREFIX = re.compile(r"^(?:\([^)]*\)\s+)?(?:(?:ERROR|WARNING|INFO|CRITICAL)\s+\S+\s+\S+\s+\[[^\]]*\]\s+)?")


def last_error_line(log: str) -> str:
    """The engine's own cause, whole: the last exception line of the log (``ValueError: ...``), skipping wrappers
    that point back at it ("See root cause above"); else the last line that mentions an error; else the last line."""
    lines = [_PREFIX.sub("", ln.strip(), count=1) for ln in log.splitlines() if ln.strip()]
    exceptions = [ln for ln in lines if _EXCEPTION.match(ln)]
    for line in reversed(exceptions):
        if "above" not in line.lower():
            return line
    if exceptions:
        return exceptions[-1]
    for line in reversed(lines):
        if "error" in line.lower():
            return line
    return lines[-1] if lines else "no output"


def _keep_log(log_path: Path) -> Path:
    """A copy of a failed run's log that outlives the scratch directory."""
    handle, kept = tempfile.mkstemp(prefix="eagle-convert-engine-", suffix=".log")
    with os.fdopen(handle, "wb") as out:
        out.write(log_path.read_bytes())
    return Path(kept)


def scratch_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="eagle-convert-engine-")


def acceptance(drafts: int, accepted_tokens: int, per_position: Sequence[int]) -> tuple[float, list[float]]:
    """(mean acceptance length, acceptance rate at each draft position): 1 + accepted/drafts, accepted_i/drafts."""
    if drafts <= 0:
        return 1.0, [0.0 for _ in per_position]
    return 1 + accepted_tokens / drafts, [a / drafts for a in per_position]
