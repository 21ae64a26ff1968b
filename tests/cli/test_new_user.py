"""What a new user meets first, with the habits of hf, ruff and pip: help and usage errors, rule explanations and
fixes, output that greps well off a terminal, progress that shows, paths taken for what they look like (issue 14)."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from eagle_convert.cli.main import main
from eagle_convert.hub.publish import push_checkpoint
from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.read.hub_store import parse_repo_ref
from eagle_convert.render import cells, progress
from eagle_convert.rules.registry import RULES
from eagle_convert.verify.report import TENSOR_VALUES
from tests.conftest import ROOT, SCHEMAS

VERIFY_SCHEMA = Draft202012Validator(json.loads((SCHEMAS / "verify-report.schema.json").read_text()))
INSPECT_SCHEMA = Draft202012Validator(json.loads((SCHEMAS / "inspect-report.schema.json").read_text()))
ERROR_SCHEMA = Draft202012Validator(json.loads((SCHEMAS / "error.schema.json").read_text()))
PYTHON_LITERALS = re.compile(r"\b(True|False|None)\b")


@pytest.fixture(autouse=True)
def _piped(monkeypatch: pytest.MonkeyPatch) -> None:
    """As when output goes to a pipe or a file: no COLUMNS, streams that are not terminals (pytest's capture)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def clean(fx: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("clean") / "draft"
    normalize_checkpoint(fx / "layouts" / "specforge-mha", out, target=fx / "targets" / "target-llama")
    return out


# ---- 10, 17: help and usage errors ---------------------------------------------------------------------------


def test_h_is_help_and_help_texts_are_whole(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "verify", "-h")
    assert code == 0 and err == ""
    text = " ".join(out.split())
    assert "([tool.eagle-convert] engine in pyproject.toml sets the default)" in text  # brackets were markup before
    assert "Lowest severity that fails [error]." in text
    assert "reports which target boundaries they are." in text  # was cut at 80 columns
    assert "<bool>" not in out and "╭" not in out
    assert cli(capsys, "-h")[0] == 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["verify", "x", "--level", "nope"], "Invalid value for '--level'"),
        (["verify", "x", "--probe-steps", "0"], "Invalid value for '--probe-steps'"),
        (["verify"], "Missing argument 'PATH'"),
        (["bogus"], "No such command 'bogus'"),
        (["inspect", "x", "--no-such-flag"], "No such option: --no-such-flag"),
        (["verify", "x", "--device", "tpu"], "Invalid value for '--device': unknown device 'tpu'; choose auto, cpu"),
        (["normalize", "x", "y", "--dtype", "int8"], "Invalid value for '--dtype': unknown dtype 'int8'"),
    ],
)
def test_usage_errors_are_error_and_hint_lines(capsys: pytest.CaptureFixture[str], args: list[str], said: str) -> None:
    code, out, err = cli(capsys, *args)
    lines = err.splitlines()
    assert code == 2 and out == ""
    assert len(lines) == 2 and lines[0].startswith("Error: ") and said in lines[0], err
    assert lines[1].startswith("Hint: run `eagle-convert") and "--help" in lines[1]
    assert "Value error" not in err and "╭" not in err and "Usage:" not in err


def test_device_takes_what_the_library_resolves(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--device cuda:N parses (the library resolves it when a level needs it); the choices are the library's."""
    from typer.main import get_command

    from eagle_convert.cli.main import app
    from eagle_convert.cli.options import choices_of
    from eagle_convert.reference.compute import DEVICES, DTYPE_CHOICES
    from eagle_convert.rules.registry import LEVELS

    for device in ("cuda:1", "CUDA", "cpu"):
        code, _, err = cli(capsys, "verify", str(tmp_path / "nope"), "--device", device)
        assert code == 2 and err.startswith(f"Error: {tmp_path / 'nope'}: no such file or directory"), err
    verify = get_command(app).commands["verify"]  # type: ignore[attr-defined]
    choices = {p.name: choices_of(p) for p in verify.params}
    assert choices["device"] == DEVICES and choices["dtype"] == DTYPE_CHOICES and choices["level"] == LEVELS


# ---- 14: rules explain themselves, findings say how to fix them ------------------------------------------------


def test_rule_code_explains_one_rule(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "rule", "EC104")
    assert code == 0 and out.startswith("# EC104 aux-engine-misreads")
    assert "fixable: yes" in out and "fix: run `eagle-convert normalize SRC OUT --target TARGET`" in out
    assert cli(capsys, "rules", "EC104")[1] == out  # ruff's `rule CODE`; `rules CODE` as well
    code, out, _ = cli(capsys, "rule", "ec001", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["id"] == "EC001" and doc["fixable"] is False and "EAGLE3 draft" in doc["fix"]
    code, _, err = cli(capsys, "rule", "EC999")
    assert code == 2 and err.startswith("Error: no rule 'EC999'")


def test_every_fixable_rule_names_normalize_and_ec001_ec002_say_what_to_do() -> None:
    fixable = [r for r in RULES.values() if r.fixable]
    assert {"EC104", "EC010", "EC003"} <= {r.id for r in fixable}
    assert all("`eagle-convert normalize SRC OUT" in r.fix for r in fixable)
    assert RULES["EC001"].fix and RULES["EC002"].fix and not RULES["EC001"].fixable


def test_findings_carry_fixable_and_fix(capsys: pytest.CaptureFixture[str], fx: Path) -> None:
    draft, target = str(fx / "layouts" / "specforge-mha"), str(fx / "targets" / "target-llama")
    v1 = ("--engine", "vllm@0.33-v1")  # the release that misreads SpecForge's eagle_config ids
    code, out, _ = cli(capsys, "verify", draft, "--target", target, "--json", "--no-hash", *v1)
    doc = json.loads(out)
    VERIFY_SCHEMA.validate(doc)
    ec104 = [f for f in doc["findings"] if f["rule_id"] == "EC104"]
    assert code == 1 and ec104 and all(f["fixable"] and "eagle-convert normalize" in f["fix"] for f in ec104)
    code, out, _ = cli(capsys, "inspect", draft, "--target", target, "--json")
    doc = json.loads(out)
    INSPECT_SCHEMA.validate(doc)
    assert all(f["fixable"] is RULES[f["rule_id"]].fixable for f in doc["findings"])
    code, out, _ = cli(capsys, "verify", draft, "--target", target, "--no-hash", *v1)
    assert "EC104 [*]" in out and "fix: run `eagle-convert normalize" in out
    assert "[*] 1 rule(s) fixed by `eagle-convert normalize SRC OUT`: EC104" in out


# ---- 19 and concise output: one line per row off a terminal ----------------------------------------------------


def test_concise_format_is_one_greppable_line_per_finding(capsys: pytest.CaptureFixture[str], fx: Path) -> None:
    draft = fx / "layouts" / "specforge-mha"
    args = ("verify", str(draft), "--target", str(fx / "targets" / "target-llama"), "--engine", "vllm@0.33-v1")
    code, _, _ = cli(capsys, *args)
    code2, concise, _ = cli(capsys, *args, "--format", "concise")
    lines = concise.splitlines()
    assert code == code2 == 1
    assert lines[0] == (
        f"{draft}/config.json:/eagle_config/eagle_aux_hidden_state_layer_ids: EC104 [*] error "
        "vllm@0.33-v1 reads eagle_config ids [1, 5, 8] (as-is) and feeds hs[1, 5, 8]; the weights were trained on "
        "hs[2, 6, 9] (output-of); `eagle-convert normalize` fixes it"
    )
    assert lines[-1].startswith("FAIL 1 error(s), 0 warning(s)") and len(lines) == 2


def test_piped_output_is_never_wrapped_and_speaks_json_literals(capsys: pytest.CaptureFixture[str], fx: Path) -> None:
    code, out, _ = cli(capsys, "inspect", str(fx / "layouts" / "eagle1-mha"))
    ec001 = [line for line in out.splitlines() if line.startswith("│ EC001 ")]  # its own row, on one line
    assert code == 0 and len(ec001) == 1 and ec001[0].rstrip(" │").endswith("(EAGLE-1/2 config)")  # one line
    for name in ("eagle1-mha", "specforge-mla", "modelopt-mha", "speculators-mha"):
        out = cli(capsys, "inspect", str(fx / "layouts" / name))[1]
        assert not PYTHON_LITERALS.search(out), (name, PYTHON_LITERALS.findall(out))
        prose = re.sub(r"vllm@[\w.\-]+|vllm\.", "", out)  # release ids (--engine values) are identifiers
        assert "vllm" not in prose, name  # one spelling in prose: vLLM


# ---- 3: the speculators profile's renames are renames -----------------------------------------------------------


def test_normalize_profile_renames_are_counted_as_changes(
    capsys: pytest.CaptureFixture[str], fx: Path, tmp_path: Path
) -> None:
    src = str(fx / "layouts" / "specforge-mha")
    args = ["normalize", src, str(tmp_path / "out"), "--profile", "speculators", "--dry-run"]
    doc = json.loads(cli(capsys, *args, "--json")[1])
    midlayer = [t for t in doc["tensors"] if (t["source"] or "").startswith("midlayer.")]
    assert len(midlayer) == 10  # 3 norms, q/k/v/o, gate/up/down
    assert all(t["action"] == "rename" and t["target"] == "layers.0." + t["source"][9:] for t in midlayer)
    changed = sum(t["action"] != "keep" for t in doc["tensors"])
    out = cli(capsys, *args)[1]
    assert f"Tensors: {len(doc['tensors'])} ({changed} changed)" in out and changed >= 10


# ---- 4, 6, 11: verify's hints, target and no target ---------------------------------------------------------------


def test_verify_takes_the_aux_convention_its_hint_names(capsys: pytest.CaptureFixture[str], fx: Path) -> None:
    draft = str(fx / "layouts" / "torchspec-mla-eagle3.1-vllm")
    out = cli(capsys, "verify", draft, "--json", "--no-hash")[1]
    ec101 = [f for f in json.loads(out)["findings"] if f["rule_id"] == "EC101"]
    assert ec101 and "--aux-convention" in ec101[0]["message"]
    code, out, err = cli(capsys, "verify", draft, "--aux-convention", "input-to", "--json", "--no-hash")
    assert code in (0, 1) and "EC101" not in {f["rule_id"] for f in json.loads(out)["findings"]}, err


def test_level_target_with_a_config_only_target_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], fx: Path, tmp_path: Path
) -> None:
    target = tmp_path / "target"
    target.mkdir()
    shutil.copy(fx / "targets" / "target-llama" / "config.json", target / "config.json")
    code, out, err = cli(
        capsys, "verify", str(fx / "layouts" / "specforge-mha"), "--level", "target", "--target", str(target)
    )
    assert (
        code == 2 and err.startswith(f"Error: {target}: --level target runs the target model") and "config only" in err
    )
    assert "EC702" not in out + err


def test_without_target_verify_says_what_a_target_adds(
    capsys: pytest.CaptureFixture[str], clean: Path, fx: Path
) -> None:
    code, out, _ = cli(capsys, "verify", str(clean), "--no-hash")
    assert code == 0 and "No --target: EC503, EC504 skipped" in out and "pass --target PATH" in out
    doc = json.loads(cli(capsys, "verify", str(clean), "--json", "--no-hash")[1])
    skipped = {c["rule_id"]: c["reason"] for c in doc["checks"] if c["outcome"] == "skipped"}
    assert skipped["EC503"] == skipped["EC504"] == "needs --target"
    code, out, _ = cli(capsys, "verify", str(clean), "--target", str(fx / "targets" / "target-llama"), "--no-hash")
    assert code == 0 and "No --target" not in out and "PASS" in out


# ---- 13: progress off a terminal ----------------------------------------------------------------------------------


def test_plain_progress_lines_when_stderr_is_not_a_terminal() -> None:
    stream = io.StringIO()
    plain = progress.PlainProgress(stream, interval=0.0)
    plain.steps("target: generating probe text", 5, 12)
    plain.steps("target: generating probe text", 12, 12)
    plain.bytes("hashing", 1024, 4096)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("target: generating probe text: 5/12 steps (0:00 elapsed)")
    assert lines[1].startswith("target: generating probe text: 12/12 steps")
    assert lines[2].startswith("hashing: 1.0 KiB of 4.0 KiB (25%)")
    quiet = io.StringIO()
    progress.PlainProgress(quiet, interval=3600).steps("fast", 3, 3)  # quick work prints nothing
    assert quiet.getvalue() == ""


def test_tensors_level_and_hashing_report_progress_off_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, clean: Path
) -> None:
    monkeypatch.setattr(progress, "PLAIN_INTERVAL", 0.0)
    monkeypatch.setattr(progress.PlainProgress.__init__, "__defaults__", (0.0,))
    code, _, err = cli(capsys, "verify", str(clean), "--level", "tensors")
    assert code == 0
    assert re.search(r"^reading tensor values: (\d+)/\1 tensors", err, re.M), err
    size = sum(p.stat().st_size for p in clean.iterdir())
    assert f"of {cells.human_bytes(size)} (100%)" in err  # a total, not 0/? bytes


def test_steps_bar_off_a_terminal_gives_the_probe_a_callback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a terminal the probe's (what, done, total) callback writes plain lines on stderr (before: None)."""
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setattr(progress.PlainProgress.__init__, "__defaults__", (0.0,))  # a line for every update
    with progress.steps_bar(enabled=False) as off:
        assert off is None  # disabled: the probe reports nothing
    with progress.steps_bar(enabled=True) as update:
        assert callable(update)
        update("target: generating probe text", 4, 12)
        update(TENSOR_VALUES, 7, 7)
    assert stream.getvalue().splitlines() == [
        "target: generating probe text: 4/12 steps (0:00 elapsed)",
        f"{TENSOR_VALUES}: 7/7 tensors (0:00 elapsed)",
    ]


# ---- 15, 16: paths and settings ------------------------------------------------------------------------------------


def test_a_mistyped_local_path_is_a_missing_path(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "drafts").mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a Hub lookup would say so
    code, _, err = cli(capsys, "inspect", "drafts/my-draft")
    assert code == 2 and err.startswith("Error: drafts/my-draft: no such file or directory"), err
    assert parse_repo_ref("drafts/my-draft") is None and parse_repo_ref("draft.safetensors/x.json") is None
    assert parse_repo_ref("hf://drafts/my-draft@v1") == ("drafts/my-draft", "v1")  # the Hub, when asked for
    assert parse_repo_ref("owner/name") == ("owner/name", None)


@pytest.mark.parametrize(
    ("settings", "said", "hint"),
    [
        ('fail_level = "warning"', "unknown key 'fail_level' in [tool.eagle-convert]", "did you mean 'fail-level'?"),
        (
            'engine = "tensorrt"',
            "engine = 'tensorrt': unknown engine 'tensorrt'",
            "choose vllm, sglang, trtllm, tokenspeed, deployed, both, all",
        ),
        ('select = ["EC9"]', "select: no rule id starts with EC9", "eagle-convert rules"),
        ("ignore = 3", "ignore must be a list of rule ids", "write it like"),
    ],
)
def test_pyproject_settings_are_checked(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    clean: Path,
    settings: str,
    said: str,
    hint: str,
) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[tool.eagle-convert]\n{settings}\n")
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, "verify", str(clean), "--no-hash")
    lines = err.splitlines()
    assert code == 2 and lines[0].startswith(f"Error: {tmp_path / 'pyproject.toml'}: ") and said in lines[0], err
    assert lines[1].startswith("Hint: ") and hint in lines[1]


# ---- 17: --json on bad input ---------------------------------------------------------------------------------------


def test_json_commands_write_an_error_object_on_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for command in (
        ["inspect", str(tmp_path / "nope"), "--json"],
        ["normalize", str(tmp_path / "nope"), str(tmp_path / "o"), "--json"],
    ):
        code, out, err = cli(capsys, *command)
        doc = json.loads(out)
        ERROR_SCHEMA.validate(doc)
        assert code == 2 and doc["command"] == command[0] and doc["status"] == "error"
        assert err.splitlines()[0] == "Error: " + doc["error"]["message"]


# ---- 7, 9, 18: what inspect shows ----------------------------------------------------------------------------------


def test_inspect_shows_what_the_draft_is(capsys: pytest.CaptureFixture[str], fx: Path, tmp_path: Path) -> None:
    pickle = cli(capsys, "inspect", str(fx / "pickle" / "eagle-official-bin"))[1]
    assert re.search(r"weights\s+pickle, 1 file\(s\) \(pytorch_model\.bin, not read\)", pickle)
    mla = cli(capsys, "inspect", str(fx / "layouts" / "specforge-mla"))[1]
    assert not re.search(r"^head_dim\s", mla, re.M) and re.search(r"^qk_nope_head_dim\s+8", mla, re.M)
    eagle1 = cli(capsys, "inspect", str(fx / "layouts" / "eagle1-mha"))[1]
    eagle1_doc = json.loads(cli(capsys, "inspect", str(fx / "layouts" / "eagle1-mha"), "--json")[1])
    assert "Aux-layer ids" not in eagle1 and "EC001" in eagle1
    assert not [f for f in eagle1_doc["findings"] if f["rule_id"].startswith("EC1")]
    template = tmp_path / "modelopt-template"
    template.mkdir()
    shutil.copy(
        ROOT / "fixtures/real-configs/modelopt__TEMPLATE_llama_eagle_template_config.json", template / "config.json"
    )
    doc = json.loads(cli(capsys, "inspect", str(template), "--json")[1])
    INSPECT_SCHEMA.validate(doc)
    nulls = {f["subject"] for f in doc["findings"] if f["rule_id"] == "EC502"}
    assert {"hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"} <= nulls
    assert doc["format"]["num_draft_layers"] == 0  # unknown, not an invented 1
    assert re.search(r"^draft layers\s+unknown", cli(capsys, "inspect", str(template))[1], re.M)


# ---- 8, 19: the card preview is the card ---------------------------------------------------------------------------


def test_push_dry_run_prints_the_exact_card(capsys: pytest.CaptureFixture[str], clean: Path, fx: Path) -> None:
    target = str(fx / "targets" / "target-llama")
    report = push_checkpoint(clean, "owner/a-rather-long-draft-name-for-wrapping", target=target, dry_run=True)
    code, out, _ = cli(
        capsys, "push", str(clean), "owner/a-rather-long-draft-name-for-wrapping", "--target", target, "--dry-run"
    )
    assert code == 0 and out.endswith(
        "--- README.md ---\n\n" + report.card + ("" if report.card.endswith("\n") else "\n")
    )
    assert not PYTHON_LITERALS.search(report.card), PYTHON_LITERALS.findall(report.card)
    assert (
        "| fc_norm / norm_output / norm_before_fc / norm_before_residual | false / false / false / false |"
        in report.card
    )


def test_push_takes_the_engine_releases_verify_takes(capsys: pytest.CaptureFixture[str], clean: Path, fx: Path) -> None:
    """push --engine is verify's --engine: releases, comma lists and all; an unknown release is a usage error."""
    target = str(fx / "targets" / "target-llama")
    for spec in ("vllm@0.33-v1", "sglang@0.5.23,vllm@0.28", "all", "both"):
        code, out, err = cli(
            capsys, "push", str(clean), "owner/draft", "--target", target, "--engine", spec, "--dry-run"
        )
        assert code == 0 and "--- README.md ---" in out, (spec, err)
    code, _, err = cli(capsys, "push", str(clean), "owner/draft", "--engine", "vllm@9.9", "--dry-run")
    assert code == 2 and "vllm@9.9" in err and "Traceback" not in err


def test_the_demo_shows_the_training_progress(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """scripts/demo passes a log to trained_pair: the first run's minutes of training print a line every 100 steps."""
    from fixtures import trained_pair as tp

    heard: list[str] = []

    def fake_build(out: Path, log: object = None) -> None:
        assert callable(log)
        log("target step 0: loss 5.545")
        raise OSError("stop here: the plumbing is what is tested")

    monkeypatch.setattr(tp, "build", fake_build)
    with pytest.raises(OSError):
        tp.trained_pair(tmp_path / "pair", log=heard.append)
    assert heard == ["target step 0: loss 5.545"]
    demo = (ROOT / "scripts" / "demo").read_text()
    assert "trained_pair(log=" in demo and "about 2 minutes" not in demo
