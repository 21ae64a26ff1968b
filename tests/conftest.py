from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fixtures.generate import generate_all

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "eagle_convert" / "schemas"  # package data: the wheel ships them (tests/cli/test_install.py)


# ---- progress of long tests: a line when a slow test starts, and one a minute while any test runs long ------------

HEARTBEAT_S = float(os.environ.get("EAGLE_CONVERT_TEST_HEARTBEAT_S", "60"))  # a test still running after this
# long says so, and again every HEARTBEAT_S


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Unless -q: a slow test announces itself, and any test that runs past HEARTBEAT_S prints how long it has run
    (the suite's long silences were minutes), then its time when it ends."""
    import threading
    import time
    from contextlib import nullcontext

    reporter = item.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or item.config.get_verbosity() < 0:
        yield
        return
    start, done = time.monotonic(), threading.Event()
    if item.get_closest_marker("slow") is not None:
        reporter.write_line(f"slow test started: {item.nodeid}")

    capture = item.config.pluginmanager.get_plugin("capturemanager")

    def beat() -> None:
        while not done.wait(HEARTBEAT_S):
            with capture.global_and_fixture_disabled() if capture else nullcontext():  # past the output capture
                reporter.write_line(_still_running(item.nodeid, time.monotonic() - start))

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        elapsed = time.monotonic() - start
        if elapsed >= HEARTBEAT_S or item.get_closest_marker("slow") is not None:
            reporter.write_line(_took(item.nodeid, elapsed))


def _still_running(nodeid: str, elapsed: float) -> str:
    minutes, seconds = divmod(int(elapsed), 60)
    return f"  ... {nodeid} still running ({minutes}:{seconds:02d})"


def _took(nodeid: str, elapsed: float) -> str:
    return f"  {nodeid} took {elapsed:.0f} s"


class _WorkersWatch:
    """Under pytest-xdist the tests run in workers, whose output never reaches the run's terminal: this controller
    plugin hears each test start and finish (xdist forwards both) and says, as the hook above does in one process,
    which tests run past HEARTBEAT_S, every HEARTBEAT_S, and how long they took."""

    def __init__(self, reporter: Any) -> None:
        import threading

        self.reporter, self.running, self.lock = reporter, {}, threading.Lock()
        self.stop = threading.Event()
        threading.Thread(target=self._beat, daemon=True).start()

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        import time

        with self.lock:
            self.running[nodeid] = time.monotonic()

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        import time

        with self.lock:
            start = self.running.pop(nodeid, None)
        if start is not None and time.monotonic() - start >= HEARTBEAT_S:
            self.reporter.write_line(_took(nodeid, time.monotonic() - start))

    def pytest_unconfigure(self) -> None:
        self.stop.set()

    def _beat(self) -> None:
        import time

        while not self.stop.wait(HEARTBEAT_S):
            now = time.monotonic()
            with self.lock:
                long = [(n, now - t) for n, t in self.running.items() if now - t >= HEARTBEAT_S]
            for nodeid, elapsed in long:
                self.reporter.write_line(_still_running(nodeid, elapsed))


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """The controller of an xdist run (workers > 0) watches its workers' tests (unless -q)."""
    config = session.config
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    workers = getattr(config.option, "numprocesses", None)
    if reporter is None or config.get_verbosity() < 0 or not workers or "PYTEST_XDIST_WORKER" in os.environ:
        return
    config.pluginmanager.register(_WorkersWatch(reporter), "eagle-convert-workers-watch")


# ---- every JSON document the tool writes during a test validates against its published schema ---------------------


TERMINAL_SIZE = ("COLUMNS", "LINES")
SIZE_ENV = "EAGLE_CONVERT_TEST_TERMINAL_SIZE"


def _worker_sees_the_runs_terminal() -> None:
    """pytest-xdist's workers start with COLUMNS=80 and LINES=24 of their own, which rich reads as the width of every
    console the tests render (tables wrapped at 80 columns): a worker takes the sizes its run started with."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        os.environ[SIZE_ENV] = json.dumps({k: os.environ.get(k) for k in TERMINAL_SIZE})
        return
    for key, value in json.loads(os.environ.get(SIZE_ENV, "{}")).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def pytest_configure(config: pytest.Config) -> None:
    """Record every JSON document eagle-convert writes, in this process and in every Python the tests start
    (tests/json_documents.py, as ``sitecustomize`` on their PYTHONPATH)."""
    import shutil
    import tempfile

    _worker_sees_the_runs_terminal()

    from tests import json_documents

    directory = tempfile.mkdtemp(prefix="eagle-convert-json-")
    site = Path(directory) / "site"
    (site / "records").mkdir(parents=True)
    shutil.copyfile(json_documents.__file__, site / "sitecustomize.py")
    os.environ[json_documents.LOG_ENV] = str(site / "records")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    json_documents.install()
    config.stash[_RECORDS] = (str(site / "records"), {})
    config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))


_RECORDS = pytest.StashKey[tuple[str, dict[str, int]]]()


def schema_of(doc: Any) -> str | None:
    """The published schema a document the tool wrote must validate against (None: a document no schema describes,
    e.g. `rules --json`, `engines --json`; "unknown": a report no classification here recognises)."""
    if isinstance(doc, list):
        return "verify-reports" if doc and all(isinstance(d, dict) and "checkpoint" in d for d in doc) else None
    if not isinstance(doc, dict):
        return None
    if "runs" in doc and "sarif" in str(doc.get("$schema", "")):
        return "sarif-schema-2.1.0"
    if "schema_version" not in doc:
        return None
    if "checkpoint" in doc:
        return "verify-report"
    if doc.get("status") == "error" and "error" in doc:
        return "error"
    if "profile" in doc and "out" in doc:
        return "normalize-report"
    if "aux_layers" in doc:
        return "inspect-report"
    return "unknown"


def schema_problem(doc: Any) -> str | None:
    """Why ``doc`` breaks its published schema, on one line (None: it validates, or no schema describes it)."""
    from jsonschema.exceptions import best_match

    name = schema_of(doc)
    if name is None:
        return None
    if name == "unknown":
        return "a document with schema_version that no published schema describes"
    error = best_match(_validator(name).iter_errors(doc))
    if error is None:
        return None
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path) or "the document"
    message = " ".join(str(error.message).split())[:300]
    return f"breaks eagle_convert/schemas/{_file_name(name)} at {where}: {message}"


def _file_name(name: str) -> str:
    from eagle_convert.schemas import schema_file

    return schema_file(name).name


@functools.cache
def _validator(name: str) -> Any:
    """The published schema ``name``'s validator, every other published schema resolvable by its $id."""
    from jsonschema.validators import validator_for
    from referencing import Registry, Resource

    from eagle_convert.schemas import load, schema_file

    docs = [json.loads(p.read_text(encoding="utf-8")) for p in SCHEMAS.glob("*.json")]
    registry: Registry[Any] = Registry().with_resources(
        (d["$id"], Resource.from_contents(d)) for d in docs if isinstance(d.get("$id"), str)
    )
    schema = load(name) if schema_file(name).is_file() else {}
    return validator_for(schema)(schema, registry=registry)


@pytest.fixture(autouse=True)
def _json_documents_match_their_schemas(request: pytest.FixtureRequest) -> Any:
    """After each test: every JSON document the tool wrote meanwhile (in any process) against its schema."""
    yield
    from tests.json_documents import recorded

    directory, seen = request.config.stash[_RECORDS]
    problems = []
    for entry in recorded(directory, seen):
        problem = schema_problem(json.loads(entry["text"]))
        if problem is not None:
            problems.append(
                f"{entry['test'] or 'a session fixture'} (pid {entry['pid']}) wrote a document that {problem}"
            )
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture(scope="session")
def fx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every generated fixture checkpoint, written once per test session."""
    out = tmp_path_factory.mktemp("fixtures")
    generate_all(out)
    return out


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed CLI in a process of its own as a user's CI would (forked from this worker's zygote:
    tests/cli_process.py)."""
    from tests import cli_process

    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return cli_process.run(
        [sys.executable, "-m", "eagle_convert", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=ROOT,
        timeout=120,
    )


BLOCK_MODULES = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(name + " is blocked in this test")
sys.meta_path.insert(0, _Block())
from eagle_convert.cli.main import main

code = main(sys.argv[1:])
assert not BLOCKED & {{m.split(".")[0] for m in sys.modules}}
sys.exit(code)
"""


def run_cli_without(modules: set[str], *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a subprocess where importing any of ``modules`` fails (and a late import would fail the run): an
    environment without an optional dependency."""
    return subprocess.run(
        [sys.executable, "-c", BLOCK_MODULES.format(blocked=modules), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "160"},
        timeout=120,
    )


def run_cli_without_torch(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a subprocess where importing torch fails (and a late import would fail the run)."""
    return run_cli_without({"torch"}, *args)


def verify_attached(
    fx: Path, url: str, prompts: list[list[int]] | None, tmp_path: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """``verify --engine-url URL --json`` of the specforge-mha fixture against the config-only Llama target, from
    the core install (torch unimportable), with ``prompts`` as --token-ids (None: the tool's own prompts)."""
    draft, target = fx / "layouts" / "specforge-mha", fx / "targets" / "target-llama" / "config.json"
    if prompts is not None:
        ids = tmp_path / "ids.json"
        ids.write_text(json.dumps(prompts))
        args = ("--token-ids", str(ids), *args)
    command = ("verify", str(draft), "--target", str(target), "--engine-url", url, *args, "--json", "--no-hash")
    return run_cli_without_torch(*command)


def one_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, exactly one Error line holding every needle, a Hint, no traceback; the Error line."""
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "Hint: " in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    for needle in needles:
        assert needle in errors[0], (needle, errors[0][:2000])
    return errors[0]


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


def engine_or_skip(engine: str = "vllm") -> Path:
    """The engine environment's Python (``scripts/engine-env [--sglang]``): skipped with the reason when it is
    missing, except in CI (CI=true), where the engine tests must run and a missing environment is a failure."""
    from eagle_convert.errors import EngineNotInstalledError
    from eagle_convert.real_engine.base import engine_python

    try:
        return engine_python(engine=engine)
    except EngineNotInstalledError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the engine tests, but {exc.message}")
        flag = " --sglang" if engine == "sglang" else ""
        pytest.skip(f"{exc.message} (build it with scripts/engine-env{flag})")
