"""Tried as a new user would (issue 38, item 7): a clone without its Git LFS objects.

A Git LFS pointer in place of a weight, index, config, token or tokenizer file is named as one, with the fix (``git
lfs pull``; ``lfs: true`` in actions/checkout), wherever such a file is read; before, a pointer as
model.safetensors was reported as ``header length 2336927755350992246 exceeds the 100000000-byte limit`` and a
pointer as a JSON file as invalid JSON.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from eagle_convert.errors import EagleConvertError
from eagle_convert.inspect_api import inspect_checkpoint
from fixtures.generate import write_layout, write_targets
from fixtures.layouts import LAYOUTS
from tests.conftest import one_error, run_cli

POINTER = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    "size 629416\n"
)
LFS_WORDS = ("Git LFS pointer",)


def _pointer_at(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.write_text(POINTER, encoding="ascii")


def _lfs_error(done: subprocess.CompletedProcess[str], file: Path) -> None:
    line = one_error(done, str(file), *LFS_WORDS)
    assert "2336927755350992246" not in line
    assert "git lfs pull" in done.stderr and "lfs: true" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("layout_shards", "name"),
    [
        (1, "model.safetensors"),
        (1, "config.json"),
        (3, "model.safetensors.index.json"),
        (3, "model-00002-of-00003.safetensors"),
    ],
)
@pytest.mark.parametrize("command", ["inspect", "verify", "normalize"])
def test_a_pointer_in_place_of_a_checkpoint_file_is_named_with_the_fix(
    tmp_path: Path, layout_shards: int, name: str, command: str
) -> None:
    draft = write_layout(tmp_path / "draft", LAYOUTS["specforge-mha"], shards=layout_shards)
    _pointer_at(draft / name)
    args = {
        "inspect": ("inspect", str(draft)),
        "verify": ("verify", str(draft), "--no-hash"),
        "normalize": ("normalize", str(draft), str(tmp_path / "out"), "--target-family", "llama"),
    }[command]
    _lfs_error(run_cli(*args), draft / name)
    assert not (tmp_path / "out").exists()
    assert (draft / name).read_text(encoding="ascii") == POINTER


def test_a_pointer_as_the_target_config_is_named(tmp_path: Path) -> None:
    draft = write_layout(tmp_path / "draft", LAYOUTS["specforge-mha"])
    write_targets(tmp_path / "targets")
    target = tmp_path / "targets" / "target-llama"
    _pointer_at(target / "config.json")
    for args in (("inspect", str(draft)), ("verify", str(draft), "--no-hash")):
        _lfs_error(run_cli(*args, "--target", str(target)), target / "config.json")


def test_a_pointer_as_the_target_weights_is_named(tmp_path: Path) -> None:
    """The target's weights are opened (headers checked) before the target level reads a tensor."""
    from eagle_convert.read.checkpoint import open_weights

    folder = tmp_path / "target"
    folder.mkdir()
    _pointer_at(folder / "model.safetensors")
    with pytest.raises(EagleConvertError, match="is a Git LFS pointer"):
        open_weights(folder)


def test_a_pointer_as_a_token_ids_file_is_named(tmp_path: Path) -> None:
    draft = write_layout(tmp_path / "draft", LAYOUTS["specforge-mha"])
    write_targets(tmp_path / "targets")
    ids = tmp_path / "ids.json"
    _pointer_at(ids)
    done = run_cli(
        "verify", str(draft), "--target", str(tmp_path / "targets" / "target-llama"), "--level", "target",
        "--token-ids", str(ids), "--no-hash",
    )  # fmt: skip
    _lfs_error(done, ids)


def test_a_pointer_as_the_tokenizer_is_named(tmp_path: Path) -> None:
    from eagle_convert.probe.text import load_tokenizer

    _pointer_at(tmp_path / "tokenizer.json")
    with pytest.raises(EagleConvertError, match=r"tokenizer\.json: is a Git LFS pointer") as caught:
        load_tokenizer(tmp_path)
    assert "git lfs pull" in (caught.value.hint or "")


def test_a_pointer_as_pickle_weights_is_named_before_unpickling(fx: Path, tmp_path: Path) -> None:
    draft = tmp_path / "draft"
    shutil.copytree(fx / "pickle" / "eagle-official-bin", draft)
    _pointer_at(draft / "pytorch_model.bin")
    done = run_cli("normalize", str(draft), str(tmp_path / "out"), "--allow-pickle", "--target-family", "llama")
    _lfs_error(done, draft / "pytorch_model.bin")


def test_a_hub_file_that_is_a_pointer_is_named() -> None:
    """A Hub repo serves the bytes it stores: a pointer committed as a plain file is caught from its first 8 bytes
    (the header length prefix), as a JSON file from its text."""
    from eagle_convert.read.jsonstrict import parse_json_object
    from eagle_convert.read.safetensors_header import header_length

    with pytest.raises(EagleConvertError, match="Git LFS pointer"):
        header_length(POINTER.encode()[:8], len(POINTER), "owner/draft@abc/model.safetensors")
    with pytest.raises(EagleConvertError, match="Git LFS pointer for the 629416-byte object sha256:4d7a"):
        parse_json_object(POINTER.encode(), EagleConvertError, "config", "owner/draft@abc/config.json")


def test_a_file_that_only_mentions_lfs_is_read_as_it_is(tmp_path: Path) -> None:
    """Only a file that begins as a pointer does is one: a config that mentions the spec line is a config."""
    draft = write_layout(tmp_path / "draft", LAYOUTS["specforge-mha"])
    config = json.loads((draft / "config.json").read_text(encoding="utf-8"))
    config["note"] = POINTER
    (draft / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert inspect_checkpoint(draft).spec.producer == "specforge"
