"""Installing it: a torch-free core, the reference extra for the tensor and forward levels, and a wheel that carries
the schemas and the LICENSE. The slow test builds the wheel and installs it into two fresh virtualenvs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

from eagle_convert.errors import REFERENCE_INSTALL
from eagle_convert.normalize.plan import normalize_checkpoint
from fixtures.generate import write_pickle_draft
from tests.conftest import ROOT, SCHEMAS, run_cli_without_torch
from tests.hubserver import FakeHub

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_torch_is_an_extra_and_the_tests_get_it() -> None:
    project = PYPROJECT["project"]
    names = [d.split(">")[0].split("=")[0].split("[")[0].strip().lower() for d in project["dependencies"]]
    assert "torch" not in names and "numpy" not in names
    reference = project["optional-dependencies"]["reference"]
    assert any(d.startswith("torch") for d in reference) and any(d.startswith("numpy") for d in reference)
    assert "eagle-convert[reference]" in project["optional-dependencies"]["test"]
    assert all("==" not in d for d in reference), "pins go in constraints.txt, never in the package metadata"
    assert set(project["urls"]) == {"Homepage", "Repository", "Issues", "Documentation"}
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text(encoding="utf-8")[:200]


@pytest.mark.parametrize("level", ["tensors", "forward", "target", "engine"])
def test_a_level_that_needs_torch_says_how_to_install_it(fx: Path, level: str) -> None:
    draft = fx / "layouts" / "specforge-mha"
    result = run_cli_without_torch("verify", str(draft), "--level", level, "--target", str(fx / "targets"))
    assert result.returncode == 2, result.stderr
    first = result.stderr.splitlines()[0]
    assert first == f"Error: --level {level} needs torch, which is not installed: {REFERENCE_INSTALL}", first
    assert "Traceback" not in result.stderr


def test_normalize_needs_torch_only_for_what_uses_it(fx: Path, tmp_path: Path) -> None:
    written = run_cli_without_torch(
        "normalize", str(fx / "layouts" / "specforge-mha"), str(tmp_path / "out"), "--target-family", "llama"
    )
    assert written.returncode == 0, written.stderr  # names and config, tensors streamed by safetensors' headers
    assert (tmp_path / "out" / "model.safetensors").is_file()
    auto = run_cli_without_torch(
        "normalize", str(fx / "layouts" / "specforge-mha"), str(tmp_path / "auto"),
        "--aux-convention", "auto", "--target", str(fx / "targets" / "target-llama"),
    )  # fmt: skip
    assert auto.returncode == 2 and "--aux-convention auto needs torch" in auto.stderr.splitlines()[0]
    pickle = write_pickle_draft(tmp_path / "pickle", tmp_path / "MARKER")
    converted = run_cli_without_torch(
        "normalize", str(pickle), str(tmp_path / "p-out"), "--allow-pickle", "--target-family", "llama"
    )
    assert converted.returncode == 2 and REFERENCE_INSTALL in converted.stderr.splitlines()[0], converted.stderr
    assert not (tmp_path / "MARKER").exists()


def test_the_schemas_are_package_data() -> None:
    from eagle_convert.schemas import load, schema_file

    shipped = {p.name for p in SCHEMAS.glob("*.json")}
    assert {"verify-report.schema.json", "token-ids.schema.json", "sarif-schema-2.1.0.json"} <= shipped
    assert PYPROJECT["tool"]["setuptools"]["package-data"]["eagle_convert.schemas"] == ["*.json"]
    assert load("verify-report")["title"] == "eagle-convert verify report"
    assert schema_file("sarif-schema-2.1.0").is_file()


# ---- the wheel, in fresh virtualenvs -------------------------------------------------------------------------------


def _pip(venv: Path, *args: str) -> None:
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    return path


def _tool(venv: Path, *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "eagle-convert"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "160", **(env or {})},
        timeout=600,
    )


def _build_wheel(tmp_path: Path) -> Path:
    """The wheel of this working tree, built from a copy of what the package needs (the checkout stays clean)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "eagle_convert", src / "eagle_convert", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "--quiet"]
    result = subprocess.run([*build, "-w", str(dist), str(src)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = dist.glob("eagle_convert-*.whl")
    return wheel


def _write_random_target(out: Path) -> Path:
    """The fixtures' tiny Llama target with random weights, written by transformers (the test's own venv)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from fixtures.layouts import TARGETS

    raw = {k: v for k, v in TARGETS["target-llama"].items() if k not in ("architectures", "model_type")}
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**raw, tie_word_embeddings=False)).save_pretrained(out)
    return out


@pytest.mark.slow
def test_the_wheel_installs_a_torch_free_core_and_the_reference_extra(fx: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    wheel = _build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"eagle_convert/schemas/{p.name}" for p in SCHEMAS.glob("*.json")} <= set(names)
    package = {  # every file of the package, data included (the engine environments' pins, py.typed)
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "eagle_convert").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert package <= set(names), sorted(package - set(names))
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata and "Project-URL: Issues, https://github.com/" in metadata
    assert "Requires-Dist: torch" in metadata and 'extra == "reference"' in metadata.split("Requires-Dist: torch")[1]

    # The core: no torch, no numpy. Every headers-only command, the Hub helper against a loopback Hub.
    work = tmp_path / "work"
    work.mkdir()
    good = work / "draft"
    normalize_checkpoint(fx / "layouts" / "specforge-mha", good, target=fx / "targets" / "target-llama")
    target_config = fx / "targets" / "target-llama"
    core = _venv(tmp_path / "core")
    _pip(core, str(wheel))
    for module in ("torch", "numpy"):
        probe = subprocess.run([str(core / "bin" / "python"), "-c", f"import {module}"], capture_output=True)
        assert probe.returncode != 0, f"{module} is importable in the core install"
    inspected = _tool(core, "inspect", str(fx / "layouts" / "specforge-mha"), "--json", cwd=work)
    assert inspected.returncode == 0 and json.loads(inspected.stdout)["format"], inspected.stderr
    static = _tool(core, "verify", str(good), "--target", str(target_config), "--json", cwd=work)
    assert static.returncode == 0 and json.loads(static.stdout)["status"] == "pass", static.stderr
    normalized = _tool(core, "normalize", str(fx / "layouts" / "specforge-mha"), "out", "--target-family", "llama",
                       cwd=work)  # fmt: skip
    assert normalized.returncode == 0 and (work / "out" / "model.safetensors").is_file(), normalized.stderr
    assert _tool(core, "rules", cwd=work).returncode == 0 and _tool(core, "engines", cwd=work).returncode == 0
    forward = _tool(core, "verify", str(good), "--level", "target", "--target", str(target_config), cwd=work)
    assert forward.returncode == 2 and REFERENCE_INSTALL in forward.stderr.splitlines()[0], forward.stderr
    (work / "ids.json").write_text("[[1, 2], [3, -4]]")  # the installed schema names the field
    ids = _tool(
        core, "verify", str(good), "--level", "target", "--target", str(target_config), "--token-ids", "ids.json",
        cwd=work,
    )  # fmt: skip
    assert ids.returncode == 2 and "token ids[1][1]: -4 is less than the minimum of 0" in ids.stderr, ids.stderr
    offline = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    pushed = _tool(core, "push", str(good), "owner/draft", "--dry-run", cwd=work, env=offline)
    assert pushed.returncode == 0 and "would upload to owner/draft" in pushed.stdout, pushed.stderr
    hub = FakeHub(tmp_path / "hub-store", token="hf_loopback").start()
    try:
        hub.add_repo("owner/draft", good)
        loopback = {"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": "hf_loopback", "HF_HOME": str(tmp_path / "hf-home"),
                    "HF_HUB_DISABLE_TELEMETRY": "1", "NO_PROXY": "127.0.0.1,localhost"}  # fmt: skip
        listed = _tool(core, "pull", "owner/draft", "pulled", "--dry-run", cwd=work, env=loopback)
        assert listed.returncode == 0 and "would pull owner/draft" in listed.stdout, listed.stderr
        assert not (work / "pulled").exists()
        pulled = _tool(core, "pull", "owner/draft", "pulled", cwd=work, env=loopback)
        assert pulled.returncode == 0 and (work / "pulled" / "config.json").is_file(), pulled.stderr
        assert any(r.method == "GET" and "owner/draft" in r.path for r in hub.requests)  # from the loopback Hub
    finally:
        hub.stop()
    core_done = time.monotonic()

    # The reference extra (the CPU torch pin of constraints.txt): the acceptance probe on a tiny pair.
    target = _write_random_target(tmp_path / "target")
    draft = tmp_path / "probe-draft"
    normalize_checkpoint(fx / "layouts" / "specforge-mha", draft, target=target)
    (work / "probe-ids.json").write_text(json.dumps([list(range(3, 40)), list(range(50, 90))]))
    full = _venv(tmp_path / "reference")
    _pip(full, f"{wheel}[reference]", "-c", str(ROOT / "constraints.txt"))
    version = subprocess.run([str(full / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True)  # fmt: skip
    assert version.stdout.startswith("2.13.0"), version.stderr
    probed = _tool(full, "verify", str(draft), "--target", str(target), "--level", "target", "--json",
                   "--token-ids", "probe-ids.json", "--probe-steps", "2", "--device", "cpu", cwd=work)  # fmt: skip
    assert probed.returncode in (0, 1), probed.stderr[-3000:]
    report = json.loads(probed.stdout)
    assert report["level"] == "target" and report["probe"]["positions"] > 0, report.get("probe")
    sys.stderr.write(
        f"wheel + core venv checks {core_done - started:.0f} s, reference venv {time.monotonic() - core_done:.0f} s\n"
    )
