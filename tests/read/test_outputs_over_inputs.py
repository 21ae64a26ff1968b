"""No output over an input by any path, --force only over a checkpoint, and only the tool's own staging removed.

Issue 38, category 1: every output (``normalize``'s OUT, ``verify --output``, ``pull``'s OUT) is compared with every
input (the draft, ``--target``, ``--token-ids``, ``--prompts``, the pickle source) by identity, before any work:
exit 2, one ``Error:`` line, nothing written and every input byte-identical. Bind mounts are made where the test
may mount (root on Linux) and skipped elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from eagle_convert.read.output_place import STAGING_MARKER
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS
from tests.conftest import run_cli

DRAFT_LAYOUT = "specforge-mha"


def _tree(path: Path) -> dict[str, str]:
    """Every file under ``path`` (links as their target's text) with its sha256: what must not change."""
    out = {}
    for p in sorted(path.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(path))] = "-> " + os.readlink(p)
        elif p.is_file():
            out[str(p.relative_to(path))] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p.relative_to(path)) + "/"] = ""
    return out


def _refused(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2 and one Error line (and its Hint) holding every needle; the line."""
    assert result.returncode == 2, (result.returncode, result.stdout[-400:], result.stderr)
    assert result.stderr.startswith("Error: ") and "Traceback" not in result.stderr, result.stderr
    line = result.stderr.splitlines()[0]
    for needle in needles:
        assert needle in line, (needle, line)
    return line


@pytest.fixture
def draft(tmp_path: Path) -> Path:
    return write_layout(tmp_path / "draft", LAYOUTS[DRAFT_LAYOUT])


@pytest.fixture
def target(fx: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "target"
    shutil.copytree(fx / "targets" / "target-llama", folder)
    (folder / "tokenizer_config.json").write_text("{}")  # a model folder holds more than a draft's files
    return folder


@contextmanager
def bound(source: Path, at: Path) -> Iterator[Path]:
    """``source`` bind-mounted at ``at`` (the same folder by another path), unmounted after."""
    at.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "--bind", str(source), str(at)], capture_output=True, text=True)
    if done.returncode != 0:
        at.rmdir()
        pytest.skip(f"cannot bind-mount here: {done.stderr.strip()}")
    try:
        yield at
    finally:
        if subprocess.run(["umount", str(at)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(at)], check=True)


# ---- the target, the user's files, the pickle source -----------------------------------------------------------------


def test_the_target_folder_is_never_replaced_or_written_into(draft: Path, target: Path, tmp_path: Path) -> None:
    before = _tree(target)
    cases = [
        ([str(target), "--target", str(target), "--force"], "the output is the input"),  # measured: TGT replaced
        ([str(target / "draft-out"), "--target", str(target)], "the output is inside the input"),  # measured: written
        ([str(target / "config.json"), "--target", str(target / "config.json"), "--force"], "is the input"),
        ([str(tmp_path), "--target", str(target), "--force"], "the output contains the input"),
    ]
    for args, needle in cases:
        _refused(run_cli("normalize", str(draft), *args), needle)
        assert _tree(target) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft", "target"]


@pytest.mark.parametrize("option", ["--token-ids", "--prompts"])
def test_the_files_read_into_the_request_are_inputs_too(draft: Path, target: Path, tmp_path: Path, option: str) -> None:
    folder = tmp_path / "texts"
    folder.mkdir()
    text = folder / ("ids.json" if option == "--token-ids" else "prompts.txt")
    text.write_text(json.dumps([[1, 2, 3, 4]]) if option == "--token-ids" else "Hello there\n")
    before = _tree(folder)
    auto = ["--aux-convention", "auto", "--target", str(target), option]
    for out, needle in ((text, "the output is the input"), (folder, "the output contains the input")):
        _refused(run_cli("normalize", str(draft), str(out), *auto, str(text), "--force"), needle, str(text))
        assert _tree(folder) == before


def test_a_pickle_draft_is_never_replaced_by_its_conversion(tmp_path: Path) -> None:
    import torch

    src = write_layout(tmp_path / "psrc", LAYOUTS["eagle-mha"])
    state = load_file(src / "model.safetensors")
    (src / "model.safetensors").unlink()
    torch.save(state, src / "pytorch_model.bin")
    before = _tree(src)
    for out in (src, src / "converted"):  # measured: PSRC PSRC --force deleted the source
        line = _refused(
            run_cli("normalize", str(src), str(out), "--allow-pickle", "--force", "--target-family", "llama"),
            "the input",
        )
        assert str(src) in line
        assert _tree(src) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["psrc"]  # no staging folder either


# ---- the same folder by another path: bind mounts --------------------------------------------------------------------


def test_a_bind_mount_of_the_draft_is_the_draft(draft: Path, tmp_path: Path) -> None:
    before = _tree(draft)
    with bound(draft, tmp_path / "mnt" / "same") as same:
        cases = [
            (["normalize", str(same), str(draft), "--force", "--target-family", "llama"], "the output is the input"),
            (["normalize", str(draft), str(same), "--force", "--target-family", "llama"], "the output is the input"),
            (["normalize", str(draft), str(same / "out"), "--target-family", "llama"], "is inside the input"),
            (["normalize", str(same), str(draft / "out"), "--target-family", "llama"], "is inside the input"),
            (["verify", str(draft), "--no-hash", "--json", "--output", str(same / "r.json")], "is inside the input"),
            (["verify", str(same), "--no-hash", "--json", "--output", str(draft / "r.json")], "is inside the input"),
        ]
        for args, needle in cases:
            _refused(run_cli(*args), needle)
            assert _tree(draft) == before
    assert _tree(draft) == before


def test_a_bind_mount_of_a_folder_above_or_inside_the_draft(draft: Path, target: Path, tmp_path: Path) -> None:
    """Binds the chain of parents cannot see: a folder above the draft (the output reached through it lies in the
    draft), and a folder inside the draft or the target (only the kernel's mount table places it)."""
    (draft / "notes").mkdir()
    (target / "extra").mkdir()
    before, target_before = _tree(draft), _tree(target)
    with (
        bound(tmp_path, tmp_path.parent / f"{tmp_path.name}-above") as above,
        bound(draft / "notes", tmp_path.parent / f"{tmp_path.name}-inside") as inside,
        bound(target / "extra", tmp_path.parent / f"{tmp_path.name}-target") as in_target,
    ):
        cases = [
            (str(above / "draft" / "out"), []),
            (str(inside / "out"), []),
            (str(in_target / "out"), ["--target", str(target)]),
        ]
        for out, extra in cases:
            args = extra or ["--target-family", "llama"]
            _refused(run_cli("normalize", str(draft), out, *args), "is inside the input")
        _refused(run_cli("verify", str(draft), "--no-hash", "--json", "--output", str(inside / "r.json")), "inside")
        assert _tree(draft) == before and _tree(target) == target_before


# ---- --force replaces a checkpoint, nothing else -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"precious.txt": "mine", "keep/": None}, ["precious.txt", "keep/"]),  # the measured case
        ({".git/": None}, [".git/"]),
        ({"notes.md": "mine"}, ["notes.md"]),
        ({"link-to-elsewhere": "->"}, ["link-to-elsewhere"]),
        ({"extra.safetensors/": None}, ["extra.safetensors/"]),  # a folder with a weight file's name
    ],
)
def test_force_never_deletes_what_no_checkpoint_holds(
    draft: Path, tmp_path: Path, extra: dict[str, str | None], named: list[str]
) -> None:
    out = tmp_path / "out"
    assert run_cli("normalize", str(draft), str(out), "--target-family", "llama").returncode == 0
    for name, text in extra.items():
        if name.endswith("/"):
            (out / name).mkdir()
            (out / name / "inside.txt").write_text("mine")
        elif text == "->":
            (out / name).symlink_to(draft)
        else:
            (out / name).write_text(str(text))
    before = _tree(out)
    line = _refused(run_cli("normalize", str(draft), str(out), "--force", "--target-family", "llama"), "--force")
    assert all(name in line for name in named), line
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft", "out"]


def test_force_replaces_a_checkpoint_and_an_empty_folder(draft: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run_cli("normalize", str(draft), str(out), "--target-family", "llama").returncode == 0
    (out / "tokenizer.json").write_text("{}")  # what pull --tokenizer adds beside a draft
    (out / "old-shard.safetensors").write_bytes(b"stale")
    again = run_cli("normalize", str(draft), str(out), "--force", "--target-family", "llama")
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_cli("normalize", str(draft), str(empty), "--force", "--target-family", "llama").returncode == 0
    assert (empty / "config.json").is_file()


# ---- staging folders: only the tool's own -------------------------------------------------------------------------


def test_a_users_folder_named_like_the_staging_folder_is_left_alone(draft: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    users = [tmp_path / ".out.partial-0123456789abcdef", tmp_path / ".out.partial-ffffffffffffffff"]
    for folder in users:
        folder.mkdir()
        (folder / "precious.txt").write_text("mine")
    stale = tmp_path / ".out.partial-aaaaaaaaaaaaaaaa"  # what a killed run of the tool leaves: marked
    stale.mkdir()
    (stale / STAGING_MARKER).write_text("")
    (stale / "model.safetensors").write_bytes(b"half")
    done = run_cli("normalize", str(draft), str(out), "--target-family", "llama")
    assert done.returncode == 0, done.stderr
    assert all((folder / "precious.txt").read_text() == "mine" for folder in users)
    assert not stale.exists()
    assert not (out / STAGING_MARKER).exists()  # the marker never reaches the output


def test_a_staging_folder_is_removed_with_its_marker_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process killed while it removes a staging folder leaves it marked (the next run removes it), and a folder
    killed between its making and its marking is empty: both count as leftovers; a user's non-empty one does not."""
    from eagle_convert.read import output_place as op

    staging = op.make_staging(tmp_path / "out", "partial")
    for name in ("a.safetensors", "b.safetensors", "config.json"):
        (staging / name).write_bytes(b"x")
    order: list[str] = []
    real = op.remove_tree
    monkeypatch.setattr(op, "remove_tree", lambda p: order.append(p.name) or real(p))
    assert op.drop_staging(staging) and not staging.exists()
    assert order[-1] == staging.name and op.STAGING_MARKER not in order[:-1]  # the marker went with the folder
    empty, users = tmp_path / ".out.partial-0123456789abcdef", tmp_path / ".out.partial-fedcba9876543210"
    empty.mkdir()
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    assert op.is_leftover_staging(empty) and not op.is_leftover_staging(users)


def test_an_interrupt_just_after_the_staging_folder_is_made_still_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interrupt lands when mkdir has made the folder but before make_staging goes on (the signal test's moment
    "staging folder made" left .out.partial-* once in CI): the folder stays registered, and the run's clean-up on its
    way out removes it."""
    from eagle_convert.read import output_place as op

    real = os.mkdir

    def made_then_interrupted(path: Any, *args: Any) -> None:
        real(path, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(op.os, "mkdir", made_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        op.make_staging(tmp_path / "out", "partial")
    monkeypatch.setattr(op.os, "mkdir", real)
    assert [p.name.startswith(".out.partial-") for p in tmp_path.iterdir()] == [True]
    assert op.remove_leftover_staging() == [] and list(tmp_path.iterdir()) == []
