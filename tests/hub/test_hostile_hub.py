"""Hostile input and hostile servers on the Hub side (issue 29): the real CLI against a loopback Hub that lies.

Each case runs `eagle-convert` itself (in this process through ``main``, or in a subprocess where the environment
is what matters) against tests/hubserver.FakeHub, and checks what a user would see: exit 2, one ``Error:`` line and
one ``Hint:`` line, no secret anywhere in what was printed or written, and nothing left beside OUT.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from eagle_convert.cli.main import main
from eagle_convert.errors import HubError
from eagle_convert.read import hub_store
from eagle_convert.read.output_place import STAGING_MARKER
from eagle_convert.read.redact import redact
from fixtures.generate import write_layout, write_malformed
from fixtures.layouts import LAYOUTS
from tests import cli_process
from tests.conftest import ROOT
from tests.hubserver import FakeHub, Fault, isolate_hf_env

TOKEN = "hf_hostile_loopback_token_value"
PASSWORD = "hunter2-endpoint-password"
SHARD_1 = "model-00001-of-00002.safetensors"
SHARD_2 = "model-00002-of-00002.safetensors"


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    import huggingface_hub.constants

    isolate_hf_env(monkeypatch, tmp_path / "hf-home")
    server = FakeHub(tmp_path / "hub-store", token=TOKEN).start()
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", server.endpoint)
    monkeypatch.setattr(  # as tests/hub/test_hub.py: any URL huggingface_hub derives from HF_ENDPOINT points here too
        huggingface_hub.constants,
        "HUGGINGFACE_CO_URL_TEMPLATE",
        server.endpoint + "/{repo_id}/resolve/{revision}/{filename}",
    )
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setattr(hub_store, "BASE_WAIT_S", 0.01)  # retries stay, their waits shrink
    yield server
    server.stop()


@pytest.fixture()
def draft(tmp_path: Path) -> dict[str, bytes]:
    """A two-shard draft the strict reader accepts, as the files a repo holds."""
    folder = write_layout(tmp_path / "draft-src", LAYOUTS["specforge-mha"], shards=2)
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.fixture()
def dest(tmp_path: Path) -> Path:
    """OUT's parent: a folder of its own, so that everything a pull leaves beside OUT shows in its listing."""
    folder = tmp_path / "dest"
    folder.mkdir()
    return folder


def _cli(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capfd.readouterr()
    code = main(list(args))
    out, err = capfd.readouterr()
    return code, out, err


def _subprocess(hub: FakeHub, *args: str, endpoint: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "HF_ENDPOINT": endpoint or hub.endpoint, "COLUMNS": "200", **env}
    if "HF_TOKEN" not in env:
        full.pop("HF_TOKEN", None)
    return cli_process.run(
        [sys.executable, "-m", "eagle_convert", *args], capture_output=True, text=True, cwd=ROOT, env=full, timeout=120
    )


def _one_error(err: str) -> str:
    """The ``Error:`` line of a run that failed as designed: exactly one, a ``Hint:`` after it, no traceback."""
    lines = err.splitlines()
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1 and "Traceback" not in err and "internal error" not in err, err
    assert lines[lines.index(errors[0]) + 1].startswith("Hint: "), err
    return errors[0]


def _tree(folder: Path) -> dict[str, bytes | None]:
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))
    }


def _downloads(hub: FakeHub) -> list[str]:
    return [r.path for r in hub.requests if r.method == "GET" and "/resolve/" in r.path]


# ---- credentials printed --------------------------------------------------------------------------------------------


def test_a_password_in_hf_endpoint_is_refused_before_any_request(
    hub: FakeHub, draft: dict[str, bytes], dest: Path
) -> None:
    hub.add_repo("org/ok", draft)
    endpoint = hub.endpoint.replace("http://", f"http://user:{PASSWORD}@")
    for args in (["inspect", "org/ok"], ["pull", "org/ok", str(dest / "out")], ["verify", "org/ok", "--json"]):
        result = _subprocess(hub, *args, endpoint=endpoint)
        assert result.returncode == 2, (args, result.stderr)
        line = _one_error(result.stderr)
        assert "HF_ENDPOINT" in line and "***@127.0.0.1" in line, line
        assert PASSWORD not in result.stdout + result.stderr
    assert not hub.requests  # refused before any request: the password never left this machine
    assert not list(dest.iterdir())


def test_push_refuses_a_password_in_hf_endpoint_before_verify(
    hub: FakeHub,
    draft: dict[str, bytes],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.endpoint.replace("http://", f"http://u:{PASSWORD}@"))
    code, out, err = _cli(capfd, "push", str(tmp_path / "draft-src"), "org/new", "--token", TOKEN)
    assert code == 2 and "HF_ENDPOINT" in _one_error(err)
    assert PASSWORD not in out + err and TOKEN not in out + err and not hub.requests


def test_the_token_is_never_printed_when_the_server_repeats_it(
    hub: FakeHub, draft: dict[str, bytes], dest: Path
) -> None:
    """The server answers 500 with the request's Authorization header (and a terminal escape) in its message, its
    X-Error-Message and an X-HF-Warning header that huggingface_hub logs: retried, then one redacted Error line."""
    hub.add_repo("org/ok", draft)
    hub.faults.append(Fault("/api/models/org/ok", "echo-auth", count=50))
    failed = _subprocess(hub, "inspect", "org/ok", HF_TOKEN=TOKEN)
    assert failed.returncode == 2, failed.stderr
    assert "500" in _one_error(failed.stderr)
    assert [r.fault for r in hub.requests] == ["echo-auth"] * hub_store.MAX_TRIES  # retried, then given up
    assert TOKEN not in failed.stdout + failed.stderr and "\x1b" not in failed.stderr
    assert "Bearer ***" in failed.stderr  # what the server said is still shown, redacted

    hub.faults[:] = [Fault(f"*/resolve/*/{SHARD_2}", "echo-auth", count=2)]  # two retries, then the file
    pulled = _subprocess(hub, "pull", "org/ok", str(dest / "out"), "--json", "--token", TOKEN)
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["files"] and TOKEN not in pulled.stdout + pulled.stderr
    assert not any(TOKEN.encode() in (data or b"") for data in _tree(dest).values())


def test_redact_covers_userinfo_authorization_bearer_and_hub_tokens() -> None:
    text = (
        "GET http://user:pw@127.0.0.1:9/x with {'authorization': 'Bearer abc.def'} and Authorization: Basic dXM6cHc= "
        "then bearer tok-123 and hf_abcdefghijklmnopqrstuvwxyz0123 and my-own-secret"
    )
    shown = redact(text, ["my-own-secret"])
    for secret in ("user:pw", "abc.def", "dXM6cHc=", "tok-123", "hf_abcdefghij", "my-own-secret"):
        assert secret not in shown, (secret, shown)
    assert "http://***@127.0.0.1:9/x" in shown


# ---- a Hub repo that lies ------------------------------------------------------------------------------------------

HOSTILE_NAMES = [
    ("[m]odel-00001-of-00002.safetensors", "glob character"),  # as a pattern: the real shard
    ("*", "glob character"),  # as a pattern: every file
    ("model?.safetensors", "glob character"),
    ("notes\n.json", "control or invisible"),
    ("clear\x1b[2J.safetensors", "control or invisible"),
    ("../escape.json", "out of the repo"),
    ("/abs.json", "out of the repo"),
]


@pytest.mark.parametrize(("name", "why"), HOSTILE_NAMES, ids=[repr(n) for n, _ in HOSTILE_NAMES])
def test_a_listed_name_that_is_a_glob_a_path_or_a_control_sequence_is_refused(
    hub: FakeHub, draft: dict[str, bytes], dest: Path, capfd: pytest.CaptureFixture[str], name: str, why: str
) -> None:
    if name.startswith(("/", "..")):  # no commit can hold these: the listing itself lies
        hub.add_repo("org/lies", draft)
        hub.extra_siblings["org/lies"] = [{"rfilename": name, "size": 2, "blobId": "0" * 40}]
    else:
        hub.add_repo("org/lies", {**draft, name: draft[SHARD_1]})
    before = _tree(dest.parent)
    code, out, err = _cli(capfd, "pull", "org/lies", str(dest / "out"))
    assert code == 2, err
    line = _one_error(err)
    assert line.startswith("Error: org/lies: the repo lists a file named ") and why in line, line
    assert repr(name) in line  # escaped: the name cannot clear the screen or forge a line
    assert "\x1b" not in err and not out
    assert _tree(dest.parent) == before and not _downloads(hub)  # refused from the listing: nothing fetched

    code, _, err = _cli(capfd, "inspect", "org/lies")
    assert code == 2 and repr(name) in _one_error(err)


def test_a_commit_id_that_is_a_path_is_refused(
    hub: FakeHub, draft: dict[str, bytes], dest: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    hub.add_repo("org/lies", draft)
    hub.info_overrides["org/lies"] = {"sha": "../../../../escaped-pull"}
    # the staging folder's name would have climbed to the session's base folder: its listing (names only: it holds
    # every other test's files) and this test's own tree stay as they were
    base = dest.parent.parent
    before, mine = sorted(os.listdir(base)), _tree(dest.parent)
    code, _, err = _cli(capfd, "pull", "org/lies", str(dest / "out"))
    assert code == 2 and "not a hex commit id" in _one_error(err)
    assert sorted(os.listdir(base)) == before and _tree(dest.parent) == mine and not _downloads(hub)


# ---- a pull that fails part way -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["drop", "500", "truncate"])
def test_a_transfer_that_fails_part_way_keeps_only_checked_files_to_resume(
    hub: FakeHub, draft: dict[str, bytes], dest: Path, capfd: pytest.CaptureFixture[str], kind: str
) -> None:
    """The documented contract (docs/hub.md): an interrupted pull resumes from `.OUT.pull-<sha>`. That folder is all
    that is left, it holds only files whose size and hash were checked (no partial file, no client cache), and the
    rerun fetches only what is missing and leaves nothing beside OUT."""
    sha = hub.add_repo("org/flaky", draft)
    hub.faults.append(Fault(f"*/resolve/*/{SHARD_2}", kind, count=50, method="GET"))
    code, _, err = _cli(capfd, "pull", "org/flaky", str(dest / "out"))
    assert code == 2 and "run the same pull again to resume" in err, err
    _one_error(err)
    staging = f".out.pull-{sha[:16]}"
    assert sorted(p.name for p in dest.iterdir()) == [staging]  # no OUT, half or whole
    kept = _tree(dest / staging)
    assert kept.pop(STAGING_MARKER) is not None  # marked as the tool's: a rerun may take it up, nothing else
    assert sorted(kept) == ["config.json", SHARD_1]  # fetched in name order: those before SHARD_2, each checked
    assert all(kept[n] == draft[n] for n in kept)

    hub.faults.clear()
    before = len(hub.requests)
    code, _, err = _cli(capfd, "pull", "org/flaky", str(dest / "out"))
    assert code == 0, err
    fetched = [r.path.rsplit("/", 1)[1] for r in hub.requests[before:] if "/resolve/" in r.path]
    assert fetched == [SHARD_2, "model.safetensors.index.json"]  # what was kept is not fetched again
    assert sorted(p.name for p in dest.iterdir()) == ["out"] and _tree(dest / "out") == draft


@pytest.mark.parametrize("kind", ["corrupt", "grow"])
def test_a_file_that_is_not_what_the_listing_says_leaves_nothing(
    hub: FakeHub, draft: dict[str, bytes], dest: Path, capfd: pytest.CaptureFixture[str], kind: str
) -> None:
    hub.add_repo("org/lies", draft)
    hub.faults.append(Fault(f"*/resolve/*/{SHARD_2}", kind, method="GET"))
    code, _, err = _cli(capfd, "pull", "org/lies", str(dest / "out"))
    line = _one_error(err)
    assert code == 2 and SHARD_2 in line and ("does not match" in line or "more than" in line), line
    assert not list(dest.iterdir())


def test_a_checkpoint_the_strict_reader_refuses_leaves_nothing(
    hub: FakeHub, tmp_path: Path, dest: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    src = write_malformed(tmp_path / "malformed", "index-parent-shard")
    hub.add_repo("org/lies", {p.name: p.read_bytes() for p in src.iterdir()})
    code, _, err = _cli(capfd, "pull", "org/lies", str(dest / "deeper" / "out"))
    assert code == 2 and "not a plain file name" in _one_error(err)
    assert not list(dest.iterdir())  # neither the staging folder nor the folder made for OUT


# ---- outputs --------------------------------------------------------------------------------------------------------


def test_an_out_that_is_a_file_or_under_one_is_refused_before_any_request(
    hub: FakeHub, draft: dict[str, bytes], dest: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    hub.add_repo("org/ok", draft)
    (dest / "file").write_text("mine\n")
    cases = [
        (["pull", "org/ok", str(dest / "file")], "is a regular file"),
        (["pull", "org/ok", str(dest / "file"), "--force"], "is a regular file"),
        (["pull", "org/ok", str(dest / "file" / "out")], "is a file, not a directory"),
        (["pull", "org/ok", str(dest / "file" / "a" / "out"), "--force"], "is a file, not a directory"),
    ]
    for args, words in cases:
        code, out, err = _cli(capfd, *args)
        assert code == 2 and words in _one_error(err) and not out, (args, err)
    assert _tree(dest) == {"file": b"mine\n"} and not hub.requests


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_an_out_in_a_read_only_directory_is_refused_before_any_request(
    hub: FakeHub, draft: dict[str, bytes], dest: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    hub.add_repo("org/ok", draft)
    (dest / "ro").mkdir()
    (dest / "ro").chmod(0o555)
    try:
        for args in (["pull", "org/ok", str(dest / "ro" / "out")], ["pull", "org/ok", str(dest / "ro" / "a" / "out")]):
            code, _, err = _cli(capfd, *args)
            assert code == 2 and "cannot write into" in _one_error(err), err
        assert not hub.requests
    finally:
        (dest / "ro").chmod(0o755)
    assert sorted(p.name for p in dest.iterdir()) == ["ro"] and not list((dest / "ro").iterdir())


def test_a_folder_the_user_cannot_write_is_refused_before_any_request(
    hub: FakeHub,
    draft: dict[str, bytes],
    dest: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check the test above makes with modes, as any user meets it (root included): access(2) says no."""
    hub.add_repo("org/ok", draft)
    (dest / "existing").mkdir()
    real_access = os.access

    def access(path: str | os.PathLike[str], mode: int) -> bool:  # read-only by mode, for root as for anyone
        return real_access(path, mode) and not (mode & os.W_OK and Path(path).is_relative_to(dest))

    monkeypatch.setattr(os, "access", access)
    for args, words in (
        (["pull", "org/ok", str(dest / "new" / "out")], "cannot write into"),
        (["pull", "org/ok", str(dest / "existing"), "--force"], "cannot write into"),
    ):
        code, _, err = _cli(capfd, *args)
        assert code == 2 and words in _one_error(err), err
    assert not hub.requests and sorted(p.name for p in dest.iterdir()) == ["existing"]


def test_a_read_only_filesystem_is_one_error_and_leaves_nothing(
    hub: FakeHub,
    draft: dict[str, bytes],
    dest: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What root meets too: the folder is writable by mode, but the filesystem refuses (EROFS) when pull writes."""
    import errno

    hub.add_repo("org/ok", draft)
    real_mkdir = Path.mkdir

    def read_only(self: Path, *args: object, **kwargs: object) -> None:
        if self.is_relative_to(dest) and self != dest:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", read_only)
    code, _, err = _cli(capfd, "pull", "org/ok", str(dest / "out"))
    assert code == 2 and "Read-only file system" in _one_error(err), err
    assert not list(dest.iterdir())


# ---- every request capped and on a deadline -------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/models/org/ok", "*/resolve/*/config.json"])
def test_a_dripping_server_is_cut_off_at_the_deadline(
    hub: FakeHub,
    draft: dict[str, bytes],
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    hub.add_repo("org/ok", draft)
    monkeypatch.setattr(hub_store, "DEADLINE_S", 1.0)
    hub.faults.append(Fault(path, "drip", count=50))
    start = time.monotonic()
    code, _, err = _cli(capfd, "inspect", "org/ok")
    assert code == 2 and "no complete answer within 1 s" in _one_error(err), err
    assert time.monotonic() - start < 5  # the deadline plus one read, not the minute the server would drip


def test_an_endless_listing_is_refused_at_the_cap(
    hub: FakeHub, draft: dict[str, bytes], capfd: pytest.CaptureFixture[str]
) -> None:
    hub.add_repo("org/ok", draft)
    hub.faults.append(Fault("/api/models/org/ok", "endless"))
    code, _, err = _cli(capfd, "inspect", "org/ok")
    assert code == 2 and f"more than the {hub_store.MAX_LISTING} bytes" in _one_error(err), err
    sent = hub.requests[0].bytes_sent
    assert sent < hub_store.MAX_LISTING + (64 << 20), sent  # read no further than the cap (and what was in flight)


def test_normalize_of_a_repo_checks_its_output_before_any_request(
    hub: FakeHub, draft: dict[str, bytes], dest: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """`normalize REPO OUT` pulls into a staging folder beside OUT: OUT under a file or existing (no --force) is
    refused before the pull (before: an internal FileExistsError), and a failed run leaves nothing beside OUT."""
    hub.add_repo("org/ok", draft)
    (dest / "file").write_text("mine\n")
    (dest / "existing").mkdir()
    for out, words in (
        (dest / "file" / "out", "is a file, not a directory"),
        (dest / "existing", "already exists"),
    ):
        code, _, err = _cli(capfd, "normalize", "org/ok", str(out), "--profile", "vllm")
        assert code == 2 and words in _one_error(err), err
    assert not hub.requests
    hub.add_repo("org/no-weights", {"config.json": draft["config.json"]})
    code, _, err = _cli(capfd, "normalize", "org/no-weights", str(dest / "new" / "deeper" / "out"), "--profile", "vllm")
    assert code == 2 and "no safetensors weights" in _one_error(err)
    assert sorted(p.name for p in dest.iterdir()) == ["existing", "file"]


@pytest.mark.parametrize("kind", ["drip", "endless"])
def test_push_answers_are_capped_and_on_a_deadline(
    hub: FakeHub, fx: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """push talks through huggingface_hub's HfApi, whose own client has no timeout: every API answer it reads is cut
    at the deadline (a drip) or the cap (an endless body), one HubError, nothing committed."""
    from eagle_convert.hub.publish import push_checkpoint
    from eagle_convert.normalize.plan import normalize_checkpoint

    target = fx / "targets" / "target-llama"
    local = tmp_path / "clean"
    normalize_checkpoint(fx / "layouts-sharded" / "specforge-mha-eagle3.1", local, target=target)
    monkeypatch.setattr(hub_store, "DEADLINE_S", 1.0)
    hub.faults.append(Fault("/api/models/org/pub", kind))
    start = time.monotonic()
    with pytest.raises(HubError) as error:
        push_checkpoint(local, "org/pub", target=target)
    words = "no complete answer within 1 s" if kind == "drip" else f"more than the {hub_store.MAX_LISTING} bytes"
    assert words in error.value.message and time.monotonic() - start < 30
    assert not [c for c in hub.commits("org/pub") if c.files]  # create_repo's empty initial commit only


# ---- issue 38: nothing lost to a pull, and what it commits is what it checked ---------------------------------------


def test_a_users_folder_at_the_pull_staging_name_is_refused_and_left_alone(
    hub: FakeHub, draft: dict[str, bytes], dest: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Before: any folder at ``.OUT.pull-<sha>`` was taken for a resume and emptied of every file the repo lacks."""
    sha = hub.add_repo("org/ok", draft)
    users = dest / f".out.pull-{sha[:16]}"
    users.mkdir()
    (users / "precious.txt").write_text("mine")
    (users / "config.json").write_text("{}")
    code, _, err = _cli(capfd, "pull", "org/ok", str(dest / "out"))
    assert code == 2 and "not made by eagle-convert" in _one_error(err), err
    assert _tree(users) == {"config.json": b"{}", "precious.txt": b"mine"}
    assert sorted(p.name for p in dest.iterdir()) == [users.name]


def test_pull_force_replaces_only_a_checkpoint(
    hub: FakeHub, draft: dict[str, bytes], dest: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    hub.add_repo("org/ok", draft)
    out = dest / "out"
    out.mkdir()
    (out / "precious.txt").write_text("mine")
    (out / "keep").mkdir()
    code, _, err = _cli(capfd, "pull", "org/ok", str(out), "--force")
    line = _one_error(err)
    assert code == 2 and "precious.txt" in line and "keep/" in line and not _downloads(hub), err
    assert _tree(out) == {"keep": None, "precious.txt": b"mine"}
    (out / "precious.txt").unlink()
    (out / "keep").rmdir()
    (out / "config.json").write_text("{}")  # a checkpoint's files only: replaced
    code, _, err = _cli(capfd, "pull", "org/ok", str(out), "--force")
    assert code == 0, err
    assert _tree(out) == draft and sorted(p.name for p in dest.iterdir()) == ["out"]


def test_pull_syncs_every_file_to_disk_before_the_rename(
    hub: FakeHub,
    draft: dict[str, bytes],
    dest: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As normalize does: every pulled file is fsynced, then its folder, before OUT is renamed into place."""
    hub.add_repo("org/ok", draft)
    events: list[str] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd: int) -> None:
        events.append("fsync " + Path(os.readlink(f"/proc/self/fd/{fd}")).name)
        real_fsync(fd)

    def rename(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> None:
        events.append(f"rename {Path(a).name} {Path(b).name}")
        real_rename(a, b)

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to name what each fsync syncs")
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    code, _, err = _cli(capfd, "pull", "org/ok", str(dest / "out"))
    assert code == 0, err
    commit = next(i for i, e in enumerate(events) if e.startswith("rename ") and e.endswith(" out"))
    synced = {e.split(" ", 1)[1] for e in events[:commit] if e.startswith("fsync ")}
    assert set(draft) <= synced, events


def test_a_staged_file_changed_after_its_check_never_lands(
    hub: FakeHub,
    draft: dict[str, bytes],
    dest: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another process writes into the staging folder after a file's hash was checked (same size, other bytes):
    the pull stops, nothing is at OUT, no staging left. Before, the changed bytes were committed as checked."""
    from eagle_convert.read import hub_pull

    hub.add_repo("org/ok", draft)
    real_download = hub_pull._download

    def download_then_tamper(store: hub_store.HubStore, name: str, staging: Path) -> object:
        done = real_download(store, name, staging)
        if name == SHARD_2:  # the same size, its last bytes flipped: written beside it and renamed over it
            data = (staging / name).read_bytes()
            (staging / "other").write_bytes(data[:-4] + bytes(b ^ 0xFF for b in data[-4:]))
            os.replace(staging / "other", staging / name)
        return done

    monkeypatch.setattr(hub_pull, "_download", download_then_tamper)
    code, _, err = _cli(capfd, "pull", "org/ok", str(dest / "out"))
    line = _one_error(err)
    assert code == 2 and SHARD_2 in line and "changed while it was read" in line, err
    assert list(dest.iterdir()) == []
