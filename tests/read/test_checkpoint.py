"""Opening checkpoints: single files, shards, indexes, unsafe paths, pickle listing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eagle_convert.errors import (
    ConfigError,
    HeaderError,
    InputError,
    NothingToCheckError,
    ShardIndexError,
    UnsafePathError,
)
from eagle_convert.read.checkpoint import open_checkpoint
from fixtures.generate import MALFORMED, write_layout, write_malformed
from fixtures.layouts import LAYOUTS


def test_single_file_and_sharded_read_the_same_tensors(fx: Path) -> None:
    single = open_checkpoint(fx / "layouts" / "specforge-mha")
    sharded = open_checkpoint(fx / "layouts-sharded" / "specforge-mha")
    assert single.index_path is None and sharded.index_path is not None
    assert len(sharded.shards) == 3
    assert {n: (t.dtype, t.shape, t.nbytes) for n, t in single.tensors.items()} == {
        n: (t.dtype, t.shape, t.nbytes) for n, t in sharded.tensors.items()
    }
    assert single.total_bytes == sharded.total_bytes == sum(t.nbytes for t in single.tensors.values())


def test_a_safetensors_file_path_uses_the_config_beside_it(fx: Path) -> None:
    ckpt = open_checkpoint(fx / "layouts" / "specforge-mha" / "model.safetensors")
    assert ckpt.config is not None and ckpt.config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert "fc.weight" in ckpt.tensors


def test_config_only(fx: Path) -> None:
    ckpt = open_checkpoint(fx / "layouts" / "specforge-mha" / "config.json")
    assert ckpt.weight_format == "none" and not ckpt.tensors


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("config-missing", ConfigError),
        ("config-invalid-json", ConfigError),
        ("config-duplicate-key", ConfigError),
        ("index-missing-shard", ShardIndexError),
        ("index-parent-shard", UnsafePathError),
        ("index-absolute-shard", UnsafePathError),
        ("tensor-in-two-shards", ShardIndexError),
        ("total-size-mismatch", ShardIndexError),
        ("symlink-escape", UnsafePathError),
        ("hole", HeaderError),
    ],
)
def test_malformed_checkpoints_raise_typed_errors(tmp_path: Path, name: str, error: type[InputError]) -> None:
    d = write_malformed(tmp_path / name, name)
    before = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file() and not p.is_symlink()}
    with pytest.raises(error) as info:
        open_checkpoint(d)
    assert MALFORMED[name][2] in info.value.message
    assert info.value.exit_code == 2 and info.value.hint
    assert {p.name: p.read_bytes() for p in d.iterdir() if p.is_file() and not p.is_symlink()} == before


def test_weight_map_naming_a_tensor_no_shard_holds(tmp_path: Path) -> None:
    d = write_layout(tmp_path / "c", LAYOUTS["specforge-mha"], shards=3)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    index["weight_map"]["ghost.weight"] = "model-00001-of-00003.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ShardIndexError, match="no shard holds"):
        open_checkpoint(d)


def test_tensor_missing_from_weight_map(tmp_path: Path) -> None:
    d = write_layout(tmp_path / "c", LAYOUTS["specforge-mha"], shards=3)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    del index["weight_map"]["fc.weight"]
    del index["metadata"]
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ShardIndexError, match="missing from weight_map"):
        open_checkpoint(d)


def test_stray_shard_is_a_note_not_an_error(tmp_path: Path) -> None:
    d = write_layout(tmp_path / "c", LAYOUTS["specforge-mha"], shards=3)
    shutil.copyfile(d / "model-00001-of-00003.safetensors", d / "old-model.safetensors")
    ckpt = open_checkpoint(d)
    assert [n.rule_id for n in ckpt.notes] == ["EC014"]
    assert "old-model.safetensors" in ckpt.notes[0].message


def test_several_files_without_index_are_read_as_shards(tmp_path: Path) -> None:
    d = write_layout(tmp_path / "c", LAYOUTS["specforge-mha"], shards=3)
    (d / "model.safetensors.index.json").unlink()
    ckpt = open_checkpoint(d)
    assert len(ckpt.shards) == 3 and "fc.weight" in ckpt.tensors
    assert ckpt.notes[0].severity == "info"


def test_hugging_face_cache_snapshot_symlinks_are_allowed(tmp_path: Path) -> None:
    src = write_layout(tmp_path / "src", LAYOUTS["specforge-mha"])
    repo = tmp_path / "hub" / "models--org--draft"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    for f in src.iterdir():
        blob = repo / "blobs" / f"blob-{f.name}"
        shutil.copyfile(f, blob)
        (snap / f.name).symlink_to(Path("..", "..", "blobs", blob.name))
    ckpt = open_checkpoint(snap)
    assert "fc.weight" in ckpt.tensors


def test_symlinked_config_outside_the_directory_is_refused(tmp_path: Path) -> None:
    d = write_layout(tmp_path / "c", LAYOUTS["specforge-mha"])
    outside = tmp_path / "elsewhere.json"
    shutil.move(d / "config.json", outside)
    (d / "config.json").symlink_to(outside)
    with pytest.raises(UnsafePathError):
        open_checkpoint(d)


def test_empty_directory_is_nothing_to_check(tmp_path: Path) -> None:
    with pytest.raises(NothingToCheckError) as info:
        open_checkpoint(tmp_path)
    assert info.value.exit_code == 3


def test_pickle_weights_are_listed_not_opened(fx: Path) -> None:
    ckpt = open_checkpoint(fx / "pickle" / "eagle-official-bin")
    assert ckpt.pickle_files == ("pytorch_model.bin",)
    assert ckpt.weight_format == "pickle" and not ckpt.tensors
    assert not (fx / "pickle" / "UNPICKLED").exists()
