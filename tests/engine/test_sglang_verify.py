"""`verify --level engine --engine sglang@0.5.23` with the released SGLang (its CPU load path, `.venv-sglang`).

The whole command, as a user's CI runs it, on the trained SmolLM2 pair and two copies: SGLang reads the ids, builds
its draft and sets up its capture; the report says what it built and captured and that acceptance was not measured,
and a copy whose states SGLang captures otherwise than trained fails with EC721. The states expected here are the
trained ones (hs[4, 13, 25]) and what SGLang 0.5.23's Llama target does with the copy's ids, from its code
(models/llama.py: every id + 1); the engine model is not consulted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from fixtures.engine_pair import _DROP, _NESTED, Variant, _set
from tests import cli_process
from tests.conftest import ROOT
from tests.engine.test_sglang_conformance import _sglang_or_skip

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SCHEMA = json.loads((ROOT / "eagle_convert" / "schemas" / "verify-report.schema.json").read_text(encoding="utf-8"))
COPIES = {
    # (the copy, the states SGLang 0.5.23 captures for it, exit code)
    "as trained": (Variant("as trained", _set()), [4, 13, 25], 0),
    "eagle_config ids + 1": (
        Variant("ids + 1", _set(eagle_config={**_NESTED, "eagle_aux_hidden_state_layer_ids": [4, 13, 25]})),
        [5, 14, 26],
        1,
    ),
    "top-level ids only": (Variant("top-level only", _set(eagle_config=_DROP)), [2, 15, 27], 1),  # SGLang's defaults
}


def _verify(draft: Path, target: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    from tokenizers import Tokenizer

    prompt = Tokenizer.from_file(str(target / "tokenizer.json")).encode("The capital of France is Paris, and").ids
    token_ids = tmp_path / "ids.json"
    token_ids.write_text(json.dumps([prompt, prompt[3:] + prompt[:3]]), encoding="utf-8")
    args = ["verify", str(draft), "--level", "engine", "--target", str(target), "--token-ids", str(token_ids)]
    args += ["--engine", "sglang@0.5.23", "--engine-python", str(_sglang_or_skip("0.5.23")), "--no-hash", *extra]
    return cli_process.run(
        [sys.executable, "-m", "eagle_convert", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.parametrize("name", list(COPIES))
def test_sglang_reports_what_it_built_and_captured(name: str, tmp_path: Path) -> None:
    from fixtures.engine_pair import engine_pair, variant

    copy, captured, code = COPIES[name]
    target, draft = engine_pair()
    r = _verify(variant(draft, copy, tmp_path / "draft"), target, tmp_path, "--json")
    assert r.returncode == code, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    run = doc["engine_run"]
    assert (run["engine"], run["version"], run["runner"]) == ("sglang", "0.5.23", "load")
    assert run["acceptance_measured"] is False and "not on the package index" in run["not_measured"]
    assert run["target_class"] == "LlamaForCausalLM"
    assert run["hidden_states"] == captured and run["hidden_states_from"] == "captured"
    built = run["built_draft"]
    assert built["class"] == "LlamaForCausalLMEagle3" and built["num_aux"] == 3 and built["fc_shape"] == [576, 1728]
    assert run["dropped_tensors"] == []
    ec721 = [f for f in doc["findings"] if f["rule_id"] == "EC721"]
    if captured == [4, 13, 25]:
        assert ec721 == []
    else:
        assert len(ec721) == 1 and ec721[0]["expected"] == [4, 13, 25] and ec721[0]["actual"] == captured


def test_the_human_report_prints_the_load(tmp_path: Path) -> None:
    from fixtures.engine_pair import engine_pair

    target, draft = engine_pair()
    r = _verify(draft, target, tmp_path)
    assert r.returncode == 0, r.stderr
    out = " ".join((r.stdout + r.stderr).split())  # the human report, its wrapped caption joined
    assert "Engine load: sglang 0.5.23, target LlamaForCausalLM; acceptance not measured" in out
    assert "hs[4, 13, 25]" in out and "LlamaForCausalLMEagle3" in out and "not on the package index" in out
