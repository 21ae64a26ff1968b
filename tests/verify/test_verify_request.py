"""verify's typed request (issue 30): one frozen request checked whole before any checkpoint is opened.

The CLI cases run the real CLI in a subprocess under an audit hook that records every file and folder the process
opens or lists; a usage error must be exit 2 with nothing of the draft (nor, where the mistake is not about the
target, of the target) opened.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from eagle_convert.errors import UsageError
from eagle_convert.verify.request import (
    ComputeRequest,
    InProcessEngine,
    ProbeRequest,
    VerifyRequest,
)
from fixtures.smollm2 import TARGET_CONFIG
from tests.conftest import ROOT

DRAFT = ROOT / "fixtures" / "smollm2-eagle3"

AUDITED = """
import os, sys
seen = []
def hook(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
        seen.append(os.path.abspath(os.fsdecode(args[0])))
sys.addaudithook(hook)
from eagle_convert.cli.main import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    f.write("\\n".join(seen))
sys.exit(code)
"""


def _audited(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    log = tmp_path / "opened.txt"
    done = subprocess.run(
        [sys.executable, "-c", AUDITED, str(log), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    return done, log.read_text().splitlines() if log.exists() else []


@pytest.fixture()
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the committed SmolLM2 draft's config and header, and a target with its config and a weights file."""
    draft = tmp_path / "draft"
    draft.mkdir()
    for name in ("config.json",):
        (draft / name).write_bytes((DRAFT / name).read_bytes())
    raw = b'{"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    (draft / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(4))
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(TARGET_CONFIG))
    (target / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(4))
    return draft, target


CASES = {
    "url-shape": (["--engine-url", "localhost:8000", "--target", "{target}"], "not an http(s)://HOST:PORT address"),
    "url-level": (["--engine-url", "http://127.0.0.1:9", "--target", "{target}", "--level", "tensors"], "--level"),
    "url-without-target": (["--engine-url", "http://127.0.0.1:9"], "needs --target"),
    "url-with-engine-arg": (
        ["--engine-url", "http://127.0.0.1:9", "--target", "{target}", "--engine-arg", "x=1"],
        "--engine-arg",
    ),
    "json-and-sarif": (["--json", "--format", "sarif"], "--json and --format sarif"),
    "probe-option-at-static": (["--probe-steps", "5"], "--probe-steps"),
    "engine-arg-at-static": (["--engine-arg", "max_model_len=64"], "--level engine only"),
    "target-level-without-target": (["--level", "target"], "pass --target"),
    "unknown-rule": (["--select", "ZZ9"], "no rule id starts with ZZ9"),
    "missing-prompts": (["--level", "target", "--target", "{target}", "--prompts", "{tmp}/none.txt"], "none.txt"),
    "missing-token-ids": (["--level", "target", "--target", "{target}", "--token-ids", "{tmp}/none.json"], "none"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_usage_errors_exit_2_before_any_file_is_read(case: str, pair: tuple[Path, Path], tmp_path: Path) -> None:
    draft, target = pair
    args, needle = CASES[case]
    filled = [a.format(target=target, tmp=tmp_path) for a in args]
    done, seen = _audited(tmp_path, "verify", str(draft), *filled)
    assert done.returncode == 2, (done.returncode, done.stdout[-1500:], done.stderr[-1500:])
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and needle in errors[0] and "\nHint: " in done.stderr, done.stderr
    assert not [p for p in seen if p.startswith(str(draft))], "the draft was opened before the usage error"
    assert not [p for p in seen if p.startswith(str(target))], "the target was opened before the usage error"
    assert done.stdout == ""  # no report: the run never started


def test_token_ids_past_the_vocabulary_read_the_target_config_only(pair: tuple[Path, Path], tmp_path: Path) -> None:
    draft, target = pair
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps([[1, 2, TARGET_CONFIG["vocab_size"] + 5]]))
    done, seen = _audited(
        tmp_path, "verify", str(draft), "--level", "target", "--target", str(target), "--token-ids", str(ids)
    )
    assert done.returncode == 2 and "past the target's vocabulary" in done.stderr, done.stderr
    assert not [p for p in seen if p.startswith(str(draft))]
    assert [p for p in seen if p.startswith(str(target))] == [str(target / "config.json")] or all(
        p == str(target / "config.json") or p == str(target) for p in seen if p.startswith(str(target))
    )


def test_the_request_is_frozen_and_built_from_flat_options() -> None:
    request = VerifyRequest.build(
        target="t", level="target", token_ids=[[1, 2]], probe_steps=4, select="ec1,EC2", device="cpu", dtype="float32"
    )
    assert request.target == Path("t") and request.select == ("EC1", "EC2")
    assert request.probe == ProbeRequest(token_ids=((1, 2),), steps=4)
    assert request.compute == ComputeRequest("cpu", "float32")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.level = "static"  # type: ignore[misc]
    assert "secret" not in repr(VerifyRequest(hub_token="secret"))


def test_validate_raises_every_kind_of_usage_error_as_usage_error(tmp_path: Path) -> None:
    from eagle_convert.real_engine.attached import AttachedServer

    bad = [
        VerifyRequest(level="nope"),
        VerifyRequest(fail_level="info"),
        VerifyRequest(select=("XX",)),
        VerifyRequest(probe=ProbeRequest(oracle="other"), level="target", target=tmp_path),
        VerifyRequest(engine_run=AttachedServer("ftp://h:1"), target=tmp_path),
        VerifyRequest(engine_run=InProcessEngine(args=("a=1",))),
        VerifyRequest(probe=ProbeRequest(prompts=tmp_path / "p.txt")),
        VerifyRequest(aux_convention="output_of"),  # a typo passed with no finding at 0421174
    ]
    for request in bad:
        with pytest.raises(UsageError):
            request.validate()


def test_engine_url_implies_the_engine_level(tmp_path: Path) -> None:
    from eagle_convert.real_engine.attached import AttachedServer

    (tmp_path / "config.json").write_text(json.dumps(TARGET_CONFIG))
    checked = VerifyRequest(engine_run=AttachedServer("http://127.0.0.1:9/"), target=tmp_path).validate()
    assert checked.level == "engine" and checked.server is not None and checked.server.url == "http://127.0.0.1:9"
    assert checked.target is not None and checked.target.vocab_size == TARGET_CONFIG["vocab_size"]


@pytest.mark.parametrize(
    ("engine", "served"),
    [(None, None), ("vllm", "vllm"), ("vllm@0.28", "vllm"), ("trtllm@1.2", "trtllm"), ("sglang,vllm", None)],
)
def test_engine_means_the_releases_and_the_server_is_theirs(tmp_path: Path, engine: str | None, served: str) -> None:
    """--engine has one meaning, the releases it selects, with --engine-url too: the server is measured as their one
    engine where they are one engine's (no detection), else detected. e05b79f took ``--engine vllm`` as the server's
    engine but ``--engine vllm@0.28`` (the same engine) as a selection only, and the library's request never."""
    from eagle_convert.real_engine.attached import AttachedServer

    (tmp_path / "config.json").write_text(json.dumps(TARGET_CONFIG))
    server = AttachedServer("http://127.0.0.1:9/")
    checked = VerifyRequest(engine_run=server, target=tmp_path, engine=engine).validate()
    assert checked.server is not None and checked.server.engine == served


def test_validate_checks_every_declared_value(tmp_path: Path) -> None:
    """One validate() checks every field: a value outside its choices or range is a UsageError from the library as
    from the command line (at 0421174 the device, the dtype, the probe's steps and positions and the server's
    concurrency and timeout passed the library's validate unchecked)."""
    from eagle_convert.real_engine.attached import AttachedServer

    (tmp_path / "config.json").write_text(json.dumps(TARGET_CONFIG))
    target = {"level": "target", "target": tmp_path}
    bad = {
        "device": VerifyRequest(compute=ComputeRequest(device="tpu")),
        "dtype": VerifyRequest(compute=ComputeRequest(dtype="float8")),
        "--probe-steps": VerifyRequest(probe=ProbeRequest(steps=0), **target),
        "--probe-positions": VerifyRequest(probe=ProbeRequest(positions=3), **target),
        "--engine-concurrency": VerifyRequest(
            engine_run=AttachedServer("http://127.0.0.1:9", concurrency=0), target=tmp_path
        ),
        "--engine-timeout": VerifyRequest(
            engine_run=AttachedServer("http://127.0.0.1:9", timeout=0.0), target=tmp_path
        ),
        "probe text": VerifyRequest(probe=ProbeRequest(text="beam"), **target),  # type: ignore[arg-type]
    }
    for needle, request in bad.items():
        with pytest.raises(UsageError, match=needle):
            request.validate()


def test_every_declared_choice_and_range_is_checked() -> None:
    """Each option declared with choices or a range (eagle_convert/options.py) is refused outside them, field by
    field, with nothing else wrong in the request."""
    from eagle_convert.options import check, declared

    checked = 0
    for d in declared(VerifyRequest, unions=False):
        wrong = "not-a-choice" if d.choices is not None else (d.option.min - 1 if d.option.min is not None else None)
        if wrong is None:
            continue
        group = next((g for g in (ProbeRequest(), ComputeRequest()) if type(g) is d.owner), None)
        request = (
            dataclasses.replace(VerifyRequest(), **{d.field.name: wrong})
            if group is None
            else dataclasses.replace(
                VerifyRequest(),
                **{
                    "probe" if isinstance(group, ProbeRequest) else "compute": dataclasses.replace(
                        group, **{d.field.name: wrong}
                    )
                },
            )
        )
        with pytest.raises(UsageError):
            check(request)
        checked += 1
    assert checked >= 9  # level, fail level, aux convention, oracle, probe text, steps, positions, device, dtype


def test_unknown_flat_keyword_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown verify option"):
        VerifyRequest.build(probe_step=4)


def test_engine_tokens_reach_the_settings_of_either_engine_run(tmp_path: Path) -> None:
    """The in-process engine's and the attached run's settings both carry --engine-tokens (issue 41); out of range
    is a usage error for either, in the library as on the command line."""
    from eagle_convert.real_engine.attached import AttachedServer

    (tmp_path / "config.json").write_text(json.dumps(TARGET_CONFIG))
    served = VerifyRequest(engine_run=AttachedServer("http://127.0.0.1:9", new_tokens=128), target=tmp_path)
    settings = served.validate().engine_settings
    assert settings is not None and settings.new_tokens == 128
    for run in (AttachedServer("http://127.0.0.1:9", new_tokens=0), InProcessEngine(new_tokens=5000)):
        with pytest.raises(UsageError, match="--engine-tokens"):
            VerifyRequest(engine_run=run, target=tmp_path, level="engine").validate()
    with pytest.raises(UsageError, match="--level target does not run"):
        VerifyRequest(engine_run=InProcessEngine(new_tokens=16), target=tmp_path, level="target").validate()


def test_the_engine_level_looks_for_the_environment_of_the_engine_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--engine sglang --level engine runs SGLang: the fail-fast check before any work looks for SGLang's environment
    (.venv-sglang), not vLLM's, and the settings carry the engine decided once (validate)."""
    pytest.importorskip("torch")
    from eagle_convert.engines import BY_NAME
    from eagle_convert.errors import EngineNotInstalledError
    from eagle_convert.real_engine import base, env

    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(
        json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 8,
                    "hidden_size": 64, "vocab_size": 256})
    )  # fmt: skip
    (target / "model.safetensors").write_bytes(b"")  # only looked for here: validate reads no weight
    sglang = tmp_path / "work" / str(BY_NAME["sglang"].environment) / "bin" / "python"
    sglang.parent.mkdir(parents=True)
    sglang.write_text("#!/bin/sh\n")
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setattr(base, "PACKAGE_ROOT", tmp_path / "no-checkout")  # neither environment beside the package
    monkeypatch.setenv(env.HOME_ENV, str(tmp_path / "no-home"))
    monkeypatch.delenv(base.ENGINE_PYTHON_ENV, raising=False)
    checked = VerifyRequest(target=target, engine="sglang", level="engine").validate()
    assert checked.engine_settings is not None and checked.engine_settings.engine == "sglang"
    with pytest.raises(EngineNotInstalledError):  # vLLM's environment is not there: its run is refused up front
        VerifyRequest(target=target, engine="vllm", level="engine").validate()


def test_a_target_given_as_its_config_json_has_the_weights_beside_it(tmp_path: Path) -> None:
    """Whether the target has weights is decided once, on its folder (TargetConfig.has_weights): ``--target
    DIR/config.json`` with shards beside it runs the target level as ``--target DIR`` does (e05b79f refused it:
    "--target has no safetensors weights"), and a config with none beside it is refused either way."""
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(TARGET_CONFIG))
    for given in (target, target / "config.json"):
        with pytest.raises(UsageError, match="has no safetensors weights"):
            VerifyRequest(target=given, level="target").validate()
    (target / "model.safetensors").write_bytes(b"")  # only looked for here: validate reads no weight
    for given in (target, target / "config.json"):
        checked = VerifyRequest(target=given, level="target").validate()
        assert checked.target is not None and checked.target.has_weights
        assert checked.target.directory == target
