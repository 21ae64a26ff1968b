"""The CI integrations: `verify A B` (several checkpoints, each reported, the worst exit code), the pre-commit hook
under the real `pre-commit`, and the GitHub Action's script with a fake step summary and output file."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft4Validator, Draft202012Validator
from referencing import Registry, Resource

from eagle_convert.cli.verify_cmd import checkpoint_paths
from eagle_convert.normalize.plan import normalize_checkpoint
from fixtures.broken import CORPUS, write_broken
from tests.conftest import ROOT, SCHEMAS, run_cli

BAD = next(c for c in CORPUS if c.name == "no-lm-head")  # EC401 at the static level, for every engine


def _validator(name: str) -> Draft202012Validator:
    """The schema ``name`` with the report schema it refers to resolvable by its $id."""
    report = json.loads((SCHEMAS / "verify-report.schema.json").read_text(encoding="utf-8"))
    registry: Registry = Registry().with_resource(report["$id"], Resource.from_contents(report))
    return Draft202012Validator(json.loads((SCHEMAS / name).read_text(encoding="utf-8")), registry=registry)


@pytest.fixture(scope="module")
def drafts(fx: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """drafts/good (a normalized draft that passes), drafts/bad (EC401), drafts/config-only (its config rules pass),
    drafts/empty (nothing to check)."""
    root = tmp_path_factory.mktemp("ci") / "drafts"
    normalize_checkpoint(fx / "layouts" / "specforge-mha", root / "good", target=fx / "targets" / "target-llama")
    broken = write_broken(root.parent / "corpus" / BAD.name, BAD)
    shutil.copytree(broken, root / "bad")
    (root / "config-only").mkdir()
    shutil.copy(root / "good" / "config.json", root / "config-only" / "config.json")
    (root / "empty").mkdir()
    return root


# ---- verify A B ----------------------------------------------------------------------------------------------------


def test_files_stand_for_their_checkpoint_and_each_checkpoint_is_verified_once(drafts: Path) -> None:
    good, bad = drafts / "good", drafts / "bad"
    given = [good / "config.json", bad, good / "model.safetensors", good, Path("owner/name"), drafts / "missing"]
    assert checkpoint_paths(given) == [good, bad, Path("owner/name"), drafts / "missing"]


def test_several_paths_give_a_json_array_and_the_worst_exit_code(drafts: Path) -> None:
    both = run_cli("verify", str(drafts / "good"), str(drafts / "bad" / "config.json"), "--json", "--no-hash")
    assert both.returncode == 1, both.stderr
    doc = json.loads(both.stdout)
    _validator("verify-reports.schema.json").validate(doc)
    assert [(r["checkpoint"]["path"], r["status"]) for r in doc] == [
        (str(drafts / "good"), "pass"),
        (str(drafts / "bad"), "fail"),
    ]
    assert [f["rule_id"] for f in doc[1]["findings"]] == ["EC401"]
    assert "2 checkpoints: 1 passed, 1 failed, 0 could not be verified" in both.stderr

    one = run_cli("verify", str(drafts / "good" / "config.json"), "--json", "--no-hash")  # one path: one object
    assert one.returncode == 0 and isinstance(json.loads(one.stdout), dict)
    assert json.loads(one.stdout)["checkpoint"]["path"] == str(drafts / "good")


@pytest.mark.parametrize(
    ("names", "code"),
    [
        (("good", "good/config.json"), 0),
        (("good", "config-only"), 0),
        (("good", "empty"), 2),  # a stray folder among several: a usage error before any work (issue 40)
        (("config-only", "bad"), 1),
        (("bad", "missing", "good"), 2),
    ],
)
def test_the_exit_code_is_the_worst_of_the_runs(drafts: Path, names: tuple[str, ...], code: int) -> None:
    result = run_cli("verify", *(str(drafts / n) for n in names), "--format", "concise", "--no-hash")
    assert result.returncode == code, result.stdout + result.stderr
    if "empty" in names:  # refused before any draft is verified: no summary at all
        assert result.stdout == "" and f"{drafts / 'empty'}: no config.json" in result.stderr
    elif len({n.split("/")[0] for n in names}) > 1:  # several checkpoints: each summary line names its own
        summaries = [line for line in result.stdout.splitlines() if " error(s), " in line]
        assert summaries and all(line.startswith(f"{drafts}/") for line in summaries), result.stdout
    if "missing" in names:  # the others are still verified, and the error is said once, for its path
        assert f"Error: {drafts / 'missing'}: no such file or directory" in result.stderr
        assert result.stdout.count("PASS") == 1 and "EC401" in result.stdout


def test_sarif_and_junit_combine_the_runs(drafts: Path, tmp_path: Path) -> None:
    sarif_file = tmp_path / "verify.sarif"
    paths = [str(drafts / "good"), str(drafts / "bad"), str(drafts / "missing")]
    result = run_cli("verify", *paths, "--format", "sarif", "--output", str(sarif_file))
    assert result.returncode == 2, result.stderr
    log = json.loads(sarif_file.read_text(encoding="utf-8"))
    Draft4Validator(json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))).validate(log)
    (run,) = log["runs"]  # code scanning takes one run per tool
    assert set(run["originalUriBaseIds"]) == {"CHECKPOINT1", "CHECKPOINT2", "CHECKPOINT3"}
    assert run["originalUriBaseIds"]["CHECKPOINT2"]["uri"].endswith("/drafts/bad/")
    (finding,) = run["results"]
    assert finding["ruleId"] == "EC401"
    location = finding["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location["uriBaseId"] == "CHECKPOINT2"
    assert run["artifacts"][location["index"]]["location"] == {"uri": "config.json", "uriBaseId": "CHECKPOINT2"}
    assert run["invocations"][0]["executionSuccessful"] is False
    assert [c["status"] for c in run["properties"]["checkpoints"]] == ["pass", "fail", "error"]

    junit = run_cli("verify", *paths[:2], "--format", "junit")
    assert junit.returncode == 1
    root = ET.fromstring(junit.stdout)
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == paths[:2]
    assert root.get("failures") == "1" and root.get("tests") == str(sum(int(s.get("tests", 0)) for s in suites))


# ---- the GitHub Action ---------------------------------------------------------------------------------------------


def _action_env(tmp_path: Path, **inputs: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_", "COLUMNS"))}
    (tmp_path / "summary.md").write_text("")
    (tmp_path / "output.txt").write_text("")
    return {
        **env,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",  # this venv's eagle-convert
        "GITHUB_ACTIONS": "true",
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "GITHUB_OUTPUT": str(tmp_path / "output.txt"),
        "INPUT_INSTALL": "false",  # the action installs into a fresh venv; here the tool under test is on PATH
        **{f"INPUT_{k.upper()}": v for k, v in inputs.items()},
    }


def _run_action(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "scripts" / "github-action.sh")], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_action_script_writes_sarif_summary_and_outputs_and_exits_with_the_gate(
    drafts: Path, tmp_path: Path
) -> None:
    (drafts.parent / "out").mkdir(exist_ok=True)
    stray = _run_action(drafts.parent, _action_env(tmp_path, paths="drafts/*", extra_args="--no-hash"))
    assert stray.returncode == 2 and "drafts/empty: no config.json and no weight files" in stray.stderr  # issue 40
    paths = "drafts/good drafts/bad drafts/config-only"
    env = _action_env(tmp_path, paths=paths, extra_args="--no-hash", sarif_file="out/gate.sarif")
    result = _run_action(drafts.parent, env)
    assert result.returncode == 1, result.stdout + result.stderr  # good 0, bad 1, config-only 0: worst 1
    outputs = dict(line.split("=", 1) for line in (tmp_path / "output.txt").read_text().splitlines())
    assert outputs == {"exit-code": str(result.returncode), "sarif-file": "out/gate.sarif"}
    log = json.loads((drafts.parent / "out" / "gate.sarif").read_text(encoding="utf-8"))
    assert [r["ruleId"] for r in log["runs"][0]["results"]] == ["EC401"]
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert summary.count("## eagle-convert verify") == 3 and "EC401" in summary  # one section a checkpoint
    assert "::error file=drafts/bad/config.json,title=EC401" in result.stdout  # the annotations


def test_the_action_passes_a_good_draft(drafts: Path, tmp_path: Path) -> None:
    env = _action_env(tmp_path, paths="drafts/good\n", engines="vllm@0.33-v1", sarif_file=str(tmp_path / "g.sarif"))
    result = _run_action(drafts.parent, env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "exit-code=0" in (tmp_path / "output.txt").read_text()
    assert "✅ passed" in (tmp_path / "summary.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_action_installs_the_core_from_its_own_revision(drafts: Path, tmp_path: Path) -> None:
    """Without INPUT_INSTALL=false: a virtualenv in RUNNER_TEMP and `pip install` of the action's own checkout."""
    action = tmp_path / "action"  # what `uses: eagle-convert/eagle-convert@REV` checks out, less the tests
    action.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "action.yml"):
        shutil.copy(ROOT / name, action / name)
    for tree in ("eagle_convert", "scripts"):
        shutil.copytree(ROOT / tree, action / tree, ignore=shutil.ignore_patterns("__pycache__"))
    env = _action_env(tmp_path, paths="drafts/good drafts/bad", sarif_file=str(tmp_path / "a.sarif"))
    env.pop("INPUT_INSTALL")
    env.update(GITHUB_ACTION_PATH=str(action), RUNNER_TEMP=str(tmp_path / "runner"), PATH=os.defpath)
    env.pop("VIRTUAL_ENV", None)
    env["INPUT_PYTHON"] = sys.executable  # any Python >= 3.11 makes the tool's own virtualenv
    result = subprocess.run(
        [str(action / "scripts" / "github-action.sh")],
        cwd=drafts.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "runner" / "eagle-convert-venv" / "bin" / "eagle-convert").is_file()
    venv_python = tmp_path / "runner" / "eagle-convert-venv" / "bin" / "python"
    torch = subprocess.run([str(venv_python), "-c", "import torch"], capture_output=True)
    assert torch.returncode != 0  # the static level installs the core only
    assert "exit-code=1" in (tmp_path / "output.txt").read_text()


def test_action_yml_passes_every_input_to_the_script() -> None:
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    assert action["runs"]["using"] == "composite"
    verify, upload = action["runs"]["steps"]
    script = (ROOT / "scripts" / "github-action.sh").read_text(encoding="utf-8")
    assert verify["run"].strip("'\"").endswith("scripts/github-action.sh")
    for name in action["inputs"]:
        if name == "upload-sarif":
            assert f"inputs.{name}" in upload["if"]
            continue
        variable = "INPUT_" + name.upper().replace("-", "_")
        assert verify["env"][variable] == f"${{{{ inputs.{name} }}}}", name
        assert variable in script, name
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@")
    assert "steps.verify.outputs.sarif-file" in upload["with"]["sarif_file"]
    assert "!cancelled()" in upload["if"]  # after a failing gate too
    assert set(action["outputs"]) == {"exit-code", "sarif-file"}


# ---- pre-commit ----------------------------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=600)


def _hook_repository(tmp_path: Path) -> tuple[Path, str]:
    """This working tree's package and hook definition as a git repository of its own (pre-commit clones a rev)."""
    repo = tmp_path / "hook-repo"
    repo.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", ".pre-commit-hooks.yaml"):
        shutil.copy(ROOT / name, repo / name)
    shutil.copytree(ROOT / "eagle_convert", repo / "eagle_convert", ignore=shutil.ignore_patterns("__pycache__"))
    assert _git(repo, "init", "--quiet").returncode == 0
    _git(repo, "add", "-A")
    assert _git(repo, "commit", "--quiet", "-m", "hook").returncode == 0
    return repo, _git(repo, "rev-parse", "HEAD").stdout.strip()


@pytest.mark.slow
def test_the_pre_commit_hook_passes_a_good_draft_and_stops_a_bad_one(drafts: Path, tmp_path: Path) -> None:
    """The real `pre-commit` installs the hook from a repository (its own venv, the torch-free core from PyPI) and
    runs it on the files each commit changes."""
    pre_commit = shutil.which("pre-commit", path=str(Path(sys.executable).parent))
    assert pre_commit, "pre-commit is in the test extra"
    hook_repo, rev = _hook_repository(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    assert _git(work, "init", "--quiet").returncode == 0
    config = {"repos": [{"repo": str(hook_repo), "rev": rev, "hooks": [{"id": "eagle-convert-verify"}]}]}
    (work / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    shutil.copytree(drafts / "good", work / "drafts" / "good")
    shutil.copytree(drafts / "bad", work / "drafts" / "bad")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "PATH": os.environ["PATH"]}
    installed = subprocess.run([pre_commit, "install"], cwd=work, env=env, capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr

    def commit(*paths: str) -> subprocess.CompletedProcess[str]:
        _git(work, "add", *paths)
        return subprocess.run(
            ["git", "commit", "-m", "drafts"],
            cwd=work,
            env={**env, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
                 "GIT_COMMITTER_EMAIL": "t@e"},
            capture_output=True,
            text=True,
            timeout=900,
        )  # fmt: skip

    good = commit(".pre-commit-config.yaml", "drafts/good")
    assert good.returncode == 0, good.stdout + good.stderr
    assert re.search(r"eagle-convert verify\.+Passed", good.stdout + good.stderr), good.stdout + good.stderr

    bad = commit("drafts/bad")
    out = bad.stdout + bad.stderr
    assert bad.returncode != 0 and "Failed" in out, out
    assert f"{Path('drafts') / 'bad' / 'config.json'}:/draft_vocab_size: EC401" in out  # the finding, by its id
    assert out.count("EC401") == 1  # config.json and the shard both changed: the draft is verified once
    assert _git(work, "log", "--oneline").stdout.count("\n") == 1  # only the good commit went in
