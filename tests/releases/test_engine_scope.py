"""Engine scope: with one engine selected, no finding message and no fix text names the other engine.

Every fixture draft is inspected and statically verified under ``--engine sglang@0.5.23`` and under
``--engine vllm@0.33``: all generated layouts, every broken-corpus variant that still loads, and every vendored real
config, as a config-only checkpoint and (inspect only: hashing the sparse real-size shards is slow) with
header-only weights of its real shapes.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from eagle_convert.errors import EagleConvertError
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import fix_fields
from eagle_convert.verify.run import verify_checkpoint
from fixtures.broken import CORPUS, write_broken
from fixtures.generate import write_layout, write_targets
from fixtures.layouts import LAYOUTS
from fixtures.real import real_config_paths, write_real_checkpoint

# selection -> the engine name that must not appear
SELECTIONS = {"sglang@0.5.23": "vllm", "vllm@0.33": "sglang"}
Draft = tuple[str, Path, Path | None, bool]  # name, checkpoint dir, target dir, also verify it


def _target_for(attention: str, targets: Path) -> Path:
    return targets / ("target-kimi" if attention == "mla" else "target-llama")


@pytest.fixture(scope="module")
def drafts(tmp_path_factory: pytest.TempPathFactory) -> list[Draft]:
    """Every fixture draft, once per module."""
    root = tmp_path_factory.mktemp("scope")
    targets = root / "targets"
    write_targets(targets)
    out: list[Draft] = []
    for name, layout in LAYOUTS.items():
        path = write_layout(root / "layouts" / name, layout, sparse=True)
        out.append((f"layout:{name}", path, _target_for(layout.attention, targets), True))
        out.append((f"layout:{name} (no target)", path, None, True))
    broken_root = root / "broken"
    for case in CORPUS:
        path = write_broken(broken_root / case.name, case)
        target = broken_root / "targets" / case.target if case.target else None
        out.append((f"broken:{case.name}", path, target, True))
    for config in real_config_paths():
        only = root / "real-config-only" / config.parent.name / config.stem
        only.mkdir(parents=True)
        shutil.copyfile(config, only / "config.json")
        out.append((f"real:{config.name} (config only)", only, None, False))
        shaped = write_real_checkpoint(config, root / "real" / config.parent.name / config.stem)
        out.append((f"real:{config.name}", shaped, None, False))
    return out


def _mentions(findings: list[Finding], other: str) -> list[str]:
    pattern = re.compile(re.escape(other), re.IGNORECASE)
    bad = []
    for f in findings:
        fix = fix_fields(f.rule_id)["fix"]
        for what, text in (("message", f.message), ("fix", fix)):
            if pattern.search(text):
                bad.append(f"{f.rule_id} {what}: {text}")
    return bad


@pytest.mark.parametrize("selection", sorted(SELECTIONS))
def test_no_finding_names_the_unselected_engine(drafts: list[Draft], selection: str) -> None:
    other = SELECTIONS[selection]
    leaks: dict[str, list[str]] = {}
    inspected = verified = 0
    for name, path, target, also_verify in drafts:
        try:
            report = inspect_checkpoint(path, target=target, engine=selection)
        except EagleConvertError:
            continue  # a variant that does not load: nothing to report on
        inspected += 1
        bad = _mentions(report.findings, other)
        try:
            checked = verify_checkpoint(path, target=target, engine=selection, level="static") if also_verify else None
        except EagleConvertError:
            checked = None  # unloadable for verify: inspect covered it above
        if checked is not None:
            verified += 1
            bad += _mentions(checked.findings, other)
        if bad:
            leaks[name] = bad
    assert inspected > 100 and verified > 100, (inspected, verified)
    assert not leaks, "\n".join(f"{name}: {line}" for name, lines in leaks.items() for line in lines)


@pytest.mark.parametrize("selection", sorted(SELECTIONS))
def test_engine_specific_findings_name_the_selected_release(tmp_path: Path, selection: str) -> None:
    """A finding about what a release does names that release (not a bare engine name it did not select)."""
    case = next(c for c in CORPUS if c.name == "model-prefix")  # EC010: each release's reading of wrapped names
    path = write_broken(tmp_path / case.name, case)
    report = inspect_checkpoint(path, engine=selection)
    wrapped = [f for f in report.findings if f.rule_id == "EC010"]
    assert len(wrapped) == 1 and selection in wrapped[0].message, [f.message for f in wrapped]
