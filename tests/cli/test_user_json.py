"""The JSON a user writes (`--token-ids`, `[tool.eagle-convert]`, the header of saved hidden states) is checked
against its schema in eagle_convert/schemas/, and a mistake names the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from jsonschema import Draft4Validator, Draft202012Validator
from safetensors.torch import save_file

from eagle_convert.cli.settings import load_settings
from eagle_convert.errors import InputError, UsageError
from eagle_convert.probe.text import read_token_ids
from eagle_convert.schemas import SETTINGS, load, violation
from eagle_convert.verify.forward import saved_states
from eagle_convert.verify.request import FAIL_LEVELS
from tests.conftest import SCHEMAS


@pytest.mark.parametrize("path", sorted(SCHEMAS.glob("*.json")), ids=lambda p: p.name)
def test_every_shipped_schema_is_a_valid_schema(path: Path) -> None:
    schema = json.loads(path.read_text(encoding="utf-8"))
    (Draft4Validator if "draft-04" in schema["$schema"] else Draft202012Validator).check_schema(schema)


def test_the_settings_schema_is_the_table_verify_reads() -> None:
    properties = load(SETTINGS)["properties"]
    assert list(properties) == ["engine", "fail-level", "select", "ignore"]
    assert tuple(properties["fail-level"]["enum"]) == FAIL_LEVELS


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("[[1, 2, 3], [4, -5]]", "token ids[1][1]: -5 is less than the minimum of 0"),
        ('[[1, 2], [3, "4"]]', "token ids[1][1]: expected integer, found a string"),
        ("[[1, 2], [true]]", "token ids[1][0]: expected integer, found a boolean"),
        ("[1, 2, 3]", "token ids[0]: expected array, found an integer"),
        ('{"ids": [[1]]}', "token ids: expected array, found an object"),
        ("[]", "token ids: expected at least 1 item(s), found 0"),
        ("[[1], []]", "token ids[1]: expected at least 1 item(s), found 0"),
    ],
)
def test_token_ids_name_the_item_that_is_wrong(tmp_path: Path, content: str, said: str) -> None:
    path = tmp_path / "ids.json"
    path.write_text(content)
    with pytest.raises(InputError) as caught:
        read_token_ids(path)
    assert caught.value.message == f"{path}: {said}"
    assert caught.value.hint is not None and "token-ids.schema.json" in caught.value.hint


def test_token_ids_that_fit_are_returned(tmp_path: Path) -> None:
    path = tmp_path / "ids.json"
    path.write_text("[[1, 2, 3], [0]]")
    assert read_token_ids(path) == [[1, 2, 3], [0]]


def test_a_huge_wrong_value_is_named_not_printed() -> None:
    wrong = violation([list(range(100_000)), "x" * 100_000], "token-ids")
    assert wrong is not None and wrong.where() == "[1]" and len(wrong.reason) < 100


@pytest.mark.parametrize(
    ("table", "said", "hint"),
    [
        ('select = ["EC1", 3]', "[tool.eagle-convert] select[1] must be a list of rule ids or prefixes", "write it"),
        ("engine = 3", "[tool.eagle-convert] engine must be what --engine takes: expected string", 'engine = "'),
        ('fail-level = "warn"', "fail-level = 'warn' is not one of error, warning", "set fail-level to one of"),
        ('failLevel = "error"', "unknown key 'failLevel' in [tool.eagle-convert]", "the keys are engine, fail-level"),
    ],
)
def test_settings_name_the_key(tmp_path: Path, table: str, said: str, hint: str) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[tool.eagle-convert]\n{table}\n")
    with pytest.raises(UsageError) as caught:
        load_settings(tmp_path)
    assert said in caught.value.message and caught.value.message.startswith(str(tmp_path / "pyproject.toml"))
    assert caught.value.hint is not None and hint in caught.value.hint, caught.value.hint


def test_settings_that_fit_are_returned(tmp_path: Path) -> None:
    table = 'engine = "sglang"\nfail-level = "warning"\nselect = ["EC1"]\nignore = "EC306"\n'
    (tmp_path / "pyproject.toml").write_text(f"[tool.eagle-convert]\n{table}")
    assert load_settings(tmp_path) == {
        "engine": "sglang",
        "fail-level": "warning",
        "select": ["EC1"],
        "ignore": "EC306",
    }


@pytest.mark.parametrize(
    ("tensors", "said"),
    [
        ({"token_ids": torch.zeros(4, dtype=torch.int64)}, "saved hidden states: 'hidden_states' is a required"),
        (
            {"token_ids": torch.zeros(4, dtype=torch.int64), "hidden_states": torch.zeros(4, 8)},
            "saved hidden states.hidden_states.shape: expected at least 3 item(s), found 2",
        ),
        (
            {"token_ids": torch.zeros(4), "hidden_states": torch.zeros(3, 4, 8)},
            "saved hidden states.token_ids.dtype: 'F32' is not one of 'I64'",
        ),
        (
            {"token_ids": torch.zeros(4, dtype=torch.int32), "hidden_states": torch.zeros(3, 5, 8)},
            "saved hidden states: hidden_states holds 5 positions, token_ids 4",
        ),
    ],
)
def test_saved_hidden_states_are_checked_on_their_header(tmp_path: Path, tensors: dict[str, Any], said: str) -> None:
    path = tmp_path / "states.safetensors"
    save_file(tensors, str(path))
    with pytest.raises(InputError) as caught:
        saved_states(cast(Any, None), path)  # refused before the target is used
    assert caught.value.message.startswith(f"{path}: {said}"), caught.value.message
