"""normalize takes one typed, frozen request, validated whole before any checkpoint file is opened (STYLE.md rule 14);
the flat keywords callers always passed build the same request."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from eagle_convert.errors import EXIT_BAD_INPUT, UsageError
from eagle_convert.normalize import plan
from eagle_convert.normalize.request import NormalizeRequest
from eagle_convert.read.config import TargetConfig

USAGE_ERRORS: list[tuple[dict[str, Any], str]] = [
    ({"profile": "nope"}, "unknown profile"),
    ({"target": "t", "target_family": "llama"}, "exclusive"),
    ({"target_family": "nope"}, "unknown target family"),
    ({"aux_convention": "sideways"}, "unknown aux-layer convention"),
    ({"aux_convention": "auto"}, "pass --target"),
    ({"token_ids": [[1, 2, 3]]}, "--token-ids only apply to --aux-convention auto"),
    ({"prompts": ["hello"], "aux_convention": "input-to"}, "--prompts only apply"),
    ({"aux_convention": "auto", "target": "t", "token_ids": [[1, 2, 3]], "prompts": ["x"]}, "exclusive"),
    ({"device": "tpu"}, "unknown device"),
    ({"dtype": "float8"}, "unknown dtype"),
    ({"max_shard_size": 0}, "not a size"),
    ({"max_shard": 10}, "unknown normalize option(s) max_shard"),
    ({"probe_positions": 3}, "--probe-positions 3 is out of range"),  # the CLI's range, in the library too
]


@pytest.mark.parametrize(("options", "message"), USAGE_ERRORS)
def test_usage_errors_come_before_any_file_is_opened(
    options: dict[str, Any], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[object] = []
    monkeypatch.setattr(plan, "open_checkpoint", lambda *a, **k: opened.append(a))
    monkeypatch.setattr(TargetConfig, "from_path", classmethod(lambda cls, *a: opened.append(a)))
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
        plan.normalize_checkpoint(tmp_path / "draft", tmp_path / "out", **options)
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert not opened


def test_request_is_frozen_and_flat_keywords_build_it() -> None:
    request = NormalizeRequest.build(profile="vllm", target="t", token_ids=[[1, 2]], aux_convention="auto")
    assert request == NormalizeRequest(profile="vllm", target=Path("t"), token_ids=((1, 2),), aux_convention="auto")
    assert request.validate() is request and request.measures and request.declared_convention is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.profile = "sglang"  # type: ignore[misc]


def test_a_request_and_its_flat_keywords_normalize_alike(fx: Path, tmp_path: Path) -> None:
    src = fx / "layouts" / "specforge-mha"
    flat = plan.normalize_checkpoint(src, tmp_path / "a", profile="vllm", target_family="llama", dry_run=True)
    typed = plan.normalize_checkpoint(
        src, tmp_path / "b", NormalizeRequest(profile="vllm", target_family="llama", dry_run=True)
    )
    assert flat.to_dict() | {"out": ""} == typed.to_dict() | {"out": ""}
    with pytest.raises(UsageError, match="not both"):
        plan.normalize_checkpoint(src, tmp_path / "c", NormalizeRequest(), profile="vllm")


def test_cli_usage_error_before_the_draft_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--token-ids without --aux-convention auto: exit 2 naming the flag, although the draft does not even exist."""
    from eagle_convert.cli.main import main

    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps([[1, 2, 3]]))
    code = main(["normalize", str(tmp_path / "missing"), str(tmp_path / "out"), "--token-ids", str(tokens)])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT
    assert err.startswith("Error: --token-ids only apply to --aux-convention auto"), err
    assert "Hint:" in err
