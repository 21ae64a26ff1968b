"""The CLI in a process of its own, as a user's CI starts it, without paying Python's start and torch's import each
time: the quick path's long tail was some 2,000 short tests, most of them one or more CLI processes at about 0.5 s
each (1.7 s more where the command imports torch).

:func:`run` takes what ``subprocess.run`` takes. A command that is ``[sys.executable, "-m", "eagle_convert", ...]``,
its output captured, runs in a child forked from a zygote of this test process (multiprocessing's forkserver, one
per test worker) that imported the command tree and torch once. The child is still a process of its own: its own
argv, environment (replaced whole, as ``env=`` does), working directory, stdin from /dev/null, stdout and stderr to
files (not a terminal, as a pipe is not), its exit code that of the console entry (``eagle_convert.cli.entry.run``,
what ``python -m eagle_convert`` runs: the same signal handling, 128 + N after signal N), and Python's at-exit work
done before it ends. Only the interpreter's start and the imports before the command's first line are shared.

Everything else (another interpreter flag such as ``-X importtime``, ``-c`` scripts, ``input=``, output not captured,
a ``preexec_fn``) is ``subprocess.run`` itself; so are the tests of the start itself (an install without torch, a
signal while the command tree loads), which never come here. ``EAGLE_CONVERT_TEST_FORK=0`` runs every command as
``subprocess.run``: the suite passes either way.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

FORK_ENV = "EAGLE_CONVERT_TEST_FORK"  # 0: every CLI command as subprocess.run
# What the zygote imports once: the command tree and what a run of it imports (no module of it reads the environment
# as it loads; typer.core's TYPER_USE_RICH is the one library setting read then), torch with numpy. Never
# huggingface_hub or transformers, which read HF_* variables as they load, nor typer.rich_utils (GITHUB_ACTIONS,
# FORCE_COLOR), nor render.json_output (tests/json_documents.py records what it writes as it is first imported): a
# child imports those itself, under its own environment.
PRELOAD = [
    "tests.cli_process",
    "eagle_convert.cli.entry",
    "eagle_convert.cli.main",
    "eagle_convert.inspect_api",
    "eagle_convert.verify.run",
    "eagle_convert.render.verify_tables",
    "eagle_convert.render.inspect_tables",
    "eagle_convert.render.normalize_tables",
    "eagle_convert.normalize.plan",
    "eagle_convert.real_engine",
    "eagle_convert.cli.settings",
    "eagle_convert.reference.draft_reader",
    "eagle_convert.render.console",
    "eagle_convert.render.formats",
    "eagle_convert.render.progress",
    "eagle_convert.verify.static",
    "eagle_convert.verify.tensors",
    "typer._adapters",
    "typer._click.decorators",
    "rich.console",
    "rich.table",
    "rich.progress",
    "jsonschema",
    "pydantic.main",
    "packaging.requirements",
    "packaging.tags",
    "tomllib",
    "zoneinfo",
    "sysconfig",
    "xml.etree.ElementTree",
    "numpy",
    "torch",
    "safetensors",
]
_TAKEN = {"capture_output", "text", "cwd", "env", "timeout", "check", "encoding", "errors"}

_context: Any = None


def _zygote() -> Any:
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _context = context
    return _context


def _forkable(command: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    return (
        os.environ.get(FORK_ENV, "1") != "0"
        and list(command[:3]) == [sys.executable, "-m", "eagle_convert"]
        and kwargs.get("capture_output") is True
        and set(kwargs) <= _TAKEN
    )


def run(command: Sequence[Any], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(command, **kwargs)``, the CLI forked from the zygote where it can be (above)."""
    if not _forkable(command, kwargs):
        return subprocess.run(command, **kwargs)
    text = bool(kwargs.get("text") or kwargs.get("encoding") or kwargs.get("errors"))
    env = {str(k): str(v) for k, v in (os.environ if kwargs.get("env") is None else kwargs["env"]).items()}
    cwd = os.fspath(kwargs.get("cwd") or os.getcwd())
    argv = [str(os.fspath(a)) for a in command[3:]]  # plain str: a subclass would carry its attributes along
    timeout = kwargs.get("timeout")
    with tempfile.TemporaryDirectory(prefix="eagle-convert-cli-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        out.touch()
        err.touch()
        child = _zygote().Process(target=_child, args=(argv, env, cwd, str(out), str(err)), daemon=False)
        child.start()
        child.join(timeout)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(list(command), timeout or 0, out.read_bytes(), err.read_bytes())
        stdout, stderr = out.read_bytes(), err.read_bytes()
    code = child.exitcode
    if text:
        encoding, errors = kwargs.get("encoding") or "utf-8", kwargs.get("errors") or "strict"
        done: subprocess.CompletedProcess[Any] = subprocess.CompletedProcess(
            list(command), code, stdout.decode(encoding, errors), stderr.decode(encoding, errors)
        )
    else:
        done = subprocess.CompletedProcess(list(command), code, stdout, stderr)
    if kwargs.get("check"):
        done.check_returncode()
    return done


def _child(argv: list[str], env: dict[str, str], cwd: str, out: str, err: str) -> None:
    """In the forked child: become ``python -m eagle_convert ARGV`` with this environment and these files."""
    import atexit
    import io
    import traceback

    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    # fresh streams on the new descriptors, as a Python started on them makes them (the tests run in a UTF-8 locale)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="strict")
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )
    sys.argv = [_main_path(), *argv]  # what `python -m eagle_convert` puts first
    from eagle_convert.cli.entry import run as entry

    code: int
    try:
        entry()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - what Python itself does with an uncaught exception: the traceback, exit 1
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code & 0xFF)


def _main_path() -> str:
    import importlib.util

    spec = importlib.util.find_spec("eagle_convert.__main__")
    return str(spec.origin) if spec is not None and spec.origin else "-m"
