"""Every JSON document eagle-convert writes while the tests run, recorded for tests/conftest.py to check against the
published schemas (eagle_convert/schemas/).

Every document the tool writes (``--json``, ``verify --format json|sarif``, ``--output``, the report a push commits)
is made by one function, ``eagle_convert.render.json_output.dumps``; :func:`install` wraps it as the module is
first imported, so each document is appended to a file under ``$EAGLE_CONVERT_TEST_JSON_LOG`` (one file per
process) with the test that was running (``$PYTEST_CURRENT_TEST``). conftest.py installs it in the test process and
copies this file as ``sitecustomize.py`` onto the ``PYTHONPATH`` of every Python the tests start, so documents
written by a subprocess (``run_cli``, a CI script, a pre-commit hook) are recorded too. Standard library only: it
also runs in the engine environments, where it records nothing unless eagle-convert writes JSON there.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
from typing import Any

LOG_ENV = "EAGLE_CONVERT_TEST_JSON_LOG"  # the directory the documents are recorded in
MODULE = "eagle_convert.render.json_output"  # the module whose dumps() makes every document


def _record(text: str) -> None:
    directory = os.environ.get(LOG_ENV)
    if not directory:
        return
    entry = json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", ""), "pid": os.getpid(), "text": text})
    with open(os.path.join(directory, f"{os.getpid()}.jsonl"), "a", encoding="utf-8") as f:
        f.write(entry + "\n")


def _wrap(module: Any) -> None:
    original = module.dumps
    if getattr(original, "recorded", False):
        return

    def dumps(value: Any, indent: int | None = 2) -> str:
        text: str = original(value, indent)
        _record(text)
        return text

    dumps.recorded = True  # type: ignore[attr-defined]
    dumps.__doc__ = original.__doc__
    module.dumps = dumps


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps ``dumps`` as soon as its module has run, before any other module can import the name."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _wrap(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Record every document this process writes (once; a module already imported is wrapped where it is bound)."""
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder())
    module = sys.modules.get(MODULE)
    if module is not None:
        original = module.dumps
        _wrap(module)
        for other in list(sys.modules.values()):  # modules that imported the name before: rebind them too
            if getattr(other, "dumps", None) is original:
                other.dumps = module.dumps


def recorded(directory: str, seen: dict[str, int]) -> list[dict[str, Any]]:
    """The documents recorded under ``directory`` since the last call (``seen``: bytes read per file, updated)."""
    out = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            f.seek(seen.get(name, 0))
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next call
        seen[name] = seen.get(name, 0) + len(complete)
        out += [json.loads(line) for line in complete.splitlines() if line]
    return out


if __name__ == "sitecustomize" and os.environ.get(LOG_ENV):
    install()
