"""The real huggingface_hub client against tests/hubserver.FakeHub (no network beyond 127.0.0.1)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import (
    CommitOperationAdd,
    CommitOperationDelete,
    HfApi,
    get_hf_file_metadata,
    hf_hub_download,
    hf_hub_url,
    snapshot_download,
)
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.hf_api import RepoFile, RepoFolder
from huggingface_hub.utils import build_hf_headers, get_session

from tests.hubserver import FakeHub, Fault, git_blob_sha1, isolate_hf_env

TOKEN = "hf_test"
REPO = "tester/draft"
CONFIG = json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64}).encode()
WEIGHTS = hashlib.sha256(b"seed").digest() * (1024 * 1024 // 32)  # 1 MiB, not all zeros
NOTES = b"some notes\n"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    isolate_hf_env(monkeypatch, tmp_path / "hf_home")
    fake = FakeHub(tmp_path / "hub", token=TOKEN).start()
    yield fake
    fake.stop()


@pytest.fixture
def api(hub: FakeHub) -> HfApi:
    return HfApi(endpoint=hub.endpoint, token=TOKEN)


@pytest.fixture
def populated(hub: FakeHub, api: HfApi) -> str:
    """REPO created and filled through the client; returns the commit sha."""
    api.create_repo(REPO, exist_ok=True)
    info = api.create_commit(
        REPO,
        operations=[
            CommitOperationAdd("config.json", CONFIG),
            CommitOperationAdd("model.safetensors", WEIGHTS),
            CommitOperationAdd("sub/notes.txt", NOTES),
        ],
        commit_message="upload draft",
    )
    return info.oid


def _files_under(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and ".cache" not in p.relative_to(folder).parts
    }


def test_create_repo_and_commit(hub: FakeHub, api: HfApi) -> None:
    url = api.create_repo(REPO, exist_ok=True)
    assert url.repo_id == REPO and url.startswith(hub.endpoint)
    assert api.create_repo(REPO, exist_ok=True).repo_id == REPO  # 409 + exist_ok
    with pytest.raises(HfHubHTTPError) as err:
        api.create_repo(REPO)
    assert err.value.response.status_code == 409

    info = api.create_commit(
        REPO,
        operations=[
            CommitOperationAdd("config.json", CONFIG),
            CommitOperationAdd("model.safetensors", WEIGHTS),
            CommitOperationAdd("sub/notes.txt", NOTES),
        ],
        commit_message="upload draft",
        commit_description="three files",
    )
    assert info.oid == hub.head(REPO)
    assert info.commit_url == f"{hub.endpoint}/{REPO}/commit/{info.oid}"
    assert info.pr_url is None
    commits = hub.commits(REPO)
    assert [c.summary for c in commits] == ["initial commit", "upload draft"]
    assert commits[-1].parent == commits[0].sha and commits[-1].description == "three files"
    assert commits[-1].files == {"config.json": CONFIG, "model.safetensors": WEIGHTS, "sub/notes.txt": NOTES}

    paths = [(r.method, r.path) for r in hub.requests]
    assert ("POST", f"/api/models/{REPO}/preupload/main") in paths
    commit_req = next(r for r in hub.requests if r.path == f"/api/models/{REPO}/commit/main")
    assert commit_req.headers["content-type"] == "application/x-ndjson"
    assert commit_req.headers["authorization"] == f"Bearer {TOKEN}"
    assert not any("lfs" in r.path or "xet" in r.path for r in hub.requests)  # everything went inline

    # unchanged files are skipped by the client thanks to preupload's oid; deletions work
    second = api.create_commit(
        REPO,
        operations=[CommitOperationAdd("config.json", CONFIG), CommitOperationDelete("sub/notes.txt")],
        commit_message="drop notes",
    )
    assert set(hub.commits(REPO)[-1].files) == {"config.json", "model.safetensors"}
    assert second.oid == hub.head(REPO)


def test_model_info_files_metadata(hub: FakeHub, api: HfApi, populated: str) -> None:
    info = api.model_info(REPO, files_metadata=True)
    assert info.id == REPO and info.sha == populated and info.private is False
    siblings = {s.rfilename: s for s in info.siblings or []}
    assert set(siblings) == {"config.json", "model.safetensors", "sub/notes.txt"}
    assert siblings["config.json"].size == len(CONFIG)
    assert siblings["config.json"].blob_id == git_blob_sha1(CONFIG)
    assert siblings["config.json"].lfs is None
    weights = siblings["model.safetensors"]
    assert weights.size == len(WEIGHTS) == 1024 * 1024
    assert weights.lfs is not None
    assert weights.lfs.sha256 == hashlib.sha256(WEIGHTS).hexdigest()
    assert weights.lfs.size == len(WEIGHTS)

    plain = api.repo_info(REPO, revision=populated)
    assert plain.sha == populated
    assert {s.rfilename for s in plain.siblings or []} == set(siblings)
    assert all(s.size is None for s in plain.siblings or [])

    with pytest.raises(RevisionNotFoundError):
        api.model_info(REPO, revision="no-such-branch")
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("tester/missing")


def test_revision_sha_resolves_to_that_commit(hub: FakeHub, api: HfApi, tmp_path: Path) -> None:
    first = hub.add_repo(REPO, {"config.json": b"{}", "old.txt": b"old"})
    second = hub.add_repo(REPO, {"config.json": CONFIG})
    assert [c.sha for c in hub.commits(REPO)] == [first, second]
    assert {s.rfilename for s in api.model_info(REPO, revision=first).siblings or []} == {"config.json", "old.txt"}
    assert {s.rfilename for s in api.model_info(REPO).siblings or []} == {"config.json"}
    old = hf_hub_download(REPO, "config.json", revision=first, endpoint=hub.endpoint, local_dir=tmp_path / "a")
    assert Path(old).read_bytes() == b"{}"
    assert api.model_info(REPO, revision=first[:10]).sha == first  # short sha


def test_list_repo_tree_and_paths_info(hub: FakeHub, api: HfApi, populated: str) -> None:
    entries = list(api.list_repo_tree(REPO, revision=populated, recursive=True, expand=True))
    by_path = {e.path: e for e in entries}
    assert set(by_path) == {"sub", "config.json", "model.safetensors", "sub/notes.txt"}
    assert isinstance(by_path["sub"], RepoFolder)
    weights = by_path["model.safetensors"]
    assert isinstance(weights, RepoFile)
    assert weights.size == len(WEIGHTS)
    assert weights.lfs is not None and weights.lfs.sha256 == hashlib.sha256(WEIGHTS).hexdigest()
    assert weights.xet_hash is None
    assert weights.last_commit is not None and weights.last_commit.oid == populated
    config = by_path["config.json"]
    assert isinstance(config, RepoFile)
    assert config.blob_id == git_blob_sha1(CONFIG) and config.lfs is None and config.size == len(CONFIG)

    top = {e.path for e in api.list_repo_tree(REPO)}
    assert top == {"sub", "config.json", "model.safetensors"}
    assert {e.path for e in api.list_repo_tree(REPO, "sub")} == {"sub/notes.txt"}

    infos = api.get_paths_info(REPO, ["config.json", "sub", "missing.bin"], revision=populated)
    assert {type(i).__name__: i.path for i in infos} == {"RepoFile": "config.json", "RepoFolder": "sub"}

    refs = api.list_repo_refs(REPO)
    assert [(b.name, b.target_commit) for b in refs.branches] == [("main", populated)]
    assert [c.commit_id for c in api.list_repo_commits(REPO)] == [c.sha for c in reversed(hub.commits(REPO))]


def test_hf_hub_download_to_local_dir(hub: FakeHub, populated: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    for name, expected in (("model.safetensors", WEIGHTS), ("config.json", CONFIG), ("sub/notes.txt", NOTES)):
        path = hf_hub_download(REPO, name, revision="main", endpoint=hub.endpoint, local_dir=out, token=TOKEN)
        assert Path(path) == out / name
        assert Path(path).read_bytes() == expected
    heads = [r for r in hub.requests if r.method == "HEAD"]
    gets = [r for r in hub.requests if r.method == "GET" and "/resolve/" in r.path]
    assert len(heads) == 3 and len(gets) == 3
    assert all(r.status == 200 for r in heads + gets)
    assert sum(r.bytes_sent for r in gets) == len(WEIGHTS) + len(CONFIG) + len(NOTES)
    assert not any("xet" in r.path for r in hub.requests)

    # pinned to a sha and already there: no download at all
    n = len(hub.requests)
    hf_hub_download(REPO, "model.safetensors", revision=populated, endpoint=hub.endpoint, local_dir=out)
    assert len(hub.requests) == n

    # the regular cache (under the temporary HF_HOME) works too
    cached = hf_hub_download(REPO, "config.json", endpoint=hub.endpoint)
    assert Path(cached).read_bytes() == CONFIG
    assert str(tmp_path / "hf_home") in cached


def test_file_metadata_headers(hub: FakeHub, populated: str) -> None:
    weights = get_hf_file_metadata(hf_hub_url(REPO, "model.safetensors", endpoint=hub.endpoint))
    assert weights.etag == hashlib.sha256(WEIGHTS).hexdigest()
    assert weights.size == len(WEIGHTS) and weights.commit_hash == populated
    assert weights.xet_file_data is None
    config = get_hf_file_metadata(hf_hub_url(REPO, "config.json", endpoint=hub.endpoint))
    assert config.etag == git_blob_sha1(CONFIG) and config.size == len(CONFIG)
    head = next(r for r in hub.requests if r.method == "HEAD")
    assert head.bytes_sent == 0
    with pytest.raises(HfHubHTTPError) as err:
        get_hf_file_metadata(hf_hub_url(REPO, "nope.json", endpoint=hub.endpoint))
    assert err.value.response.status_code == 404
    assert err.value.response.headers["X-Repo-Commit"] == populated


def test_snapshot_download_allow_patterns(hub: FakeHub, populated: str, tmp_path: Path) -> None:
    out = snapshot_download(
        REPO, revision="main", allow_patterns=["*.json"], local_dir=tmp_path / "snap", endpoint=hub.endpoint
    )
    assert _files_under(Path(out)) == {"config.json": CONFIG}
    resolved = [r.path for r in hub.requests if "/resolve/" in r.path]
    assert resolved and all(p.endswith("/config.json") for p in resolved)

    full = snapshot_download(REPO, revision=populated, local_dir=tmp_path / "full", endpoint=hub.endpoint)
    assert _files_under(Path(full)) == {"config.json": CONFIG, "model.safetensors": WEIGHTS, "sub/notes.txt": NOTES}


def test_range_get_through_session(hub: FakeHub, populated: str) -> None:
    url = hf_hub_url(REPO, "model.safetensors", revision=populated, endpoint=hub.endpoint)
    session = get_session()
    response = session.get(url, headers={**build_hf_headers(token=TOKEN), "Range": "bytes=8-39"})
    assert response.status_code == 206
    assert response.content == WEIGHTS[8:40]
    assert response.headers["Content-Range"] == f"bytes 8-39/{len(WEIGHTS)}"
    assert response.headers["Content-Length"] == "32"
    assert response.headers["Accept-Ranges"] == "bytes"
    assert response.headers["ETag"] == f'"{hashlib.sha256(WEIGHTS).hexdigest()}"'
    assert response.headers["X-Repo-Commit"] == populated

    tail = session.get(url, headers={"Range": "bytes=-5"})
    assert tail.status_code == 206 and tail.content == WEIGHTS[-5:]
    clipped = session.get(url, headers={"Range": f"bytes={len(WEIGHTS) - 3}-{len(WEIGHTS) + 100}"})
    assert clipped.status_code == 206 and clipped.content == WEIGHTS[-3:]
    beyond = session.get(url, headers={"Range": f"bytes={len(WEIGHTS)}-"})
    assert beyond.status_code == 416 and beyond.headers["Content-Range"] == f"bytes */{len(WEIGHTS)}"
    log = [r for r in hub.requests if r.range]
    assert [r.status for r in log] == [206, 206, 206, 416] and log[0].bytes_sent == 32


def test_parent_commit_mismatch_rejected(hub: FakeHub, api: HfApi, populated: str) -> None:
    first = hub.commits(REPO)[0].sha
    with pytest.raises(HfHubHTTPError) as err:
        api.create_commit(
            REPO, operations=[CommitOperationAdd("x.txt", b"x")], commit_message="stale", parent_commit=first
        )
    assert err.value.response.status_code == 412
    assert "A commit has happened since" in str(err.value)
    assert hub.head(REPO) == populated

    ok = api.create_commit(
        REPO, operations=[CommitOperationAdd("x.txt", b"x")], commit_message="fresh", parent_commit=populated
    )
    assert hub.head(REPO) == ok.oid and hub.commits(REPO)[-1].parent == populated


def test_create_pr_leaves_main_unchanged(hub: FakeHub, api: HfApi, populated: str, tmp_path: Path) -> None:
    info = api.create_commit(
        REPO, operations=[CommitOperationAdd("config.json", b'{"fixed": true}')], commit_message="fix", create_pr=True
    )
    assert info.pr_num == 1 and info.pr_revision == "refs/pr/1"
    assert info.pr_url == f"{hub.endpoint}/{REPO}/discussions/1"
    assert hub.head(REPO) == populated
    assert hub.refs(REPO) == {"main": populated, "refs/pr/1": info.oid}
    assert api.model_info(REPO).sha == populated
    assert api.model_info(REPO, revision="refs/pr/1").sha == info.oid
    path = hf_hub_download(REPO, "config.json", revision="refs/pr/1", endpoint=hub.endpoint, local_dir=tmp_path / "pr")
    assert Path(path).read_bytes() == b'{"fixed": true}'
    refs = api.list_repo_refs(REPO, include_pull_requests=True)
    assert [(r.ref, r.target_commit) for r in refs.pull_requests or []] == [("refs/pr/1", info.oid)]

    again = api.create_commit(
        REPO, operations=[CommitOperationAdd("y.txt", b"y")], commit_message="more", revision="refs/pr/1"
    )
    assert hub.refs(REPO)["refs/pr/1"] == again.oid and hub.head(REPO) == populated


def test_private_repo_needs_token(hub: FakeHub, api: HfApi, tmp_path: Path) -> None:
    hub.add_repo("tester/secret", {"config.json": CONFIG, "model.safetensors": WEIGHTS}, private=True)
    anon = HfApi(endpoint=hub.endpoint, token=False)
    with pytest.raises(RepositoryNotFoundError) as err:
        anon.model_info("tester/secret")
    assert err.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("tester/secret", "config.json", endpoint=hub.endpoint, local_dir=tmp_path / "a")
    with pytest.raises(RepositoryNotFoundError):
        snapshot_download("tester/secret", endpoint=hub.endpoint, local_dir=tmp_path / "b")
    with pytest.raises(HfHubHTTPError) as bad:
        HfApi(endpoint=hub.endpoint, token="hf_wrong").model_info("tester/secret")
    assert bad.value.response.status_code == 401 and not isinstance(bad.value, RepositoryNotFoundError)
    assert "Invalid credentials" in str(bad.value)
    with pytest.raises(HfHubHTTPError) as denied:  # writes need the token too
        anon.create_repo("tester/other")
    assert denied.value.response.status_code == 401

    assert api.model_info("tester/secret").private is True
    got = hf_hub_download("tester/secret", "config.json", endpoint=hub.endpoint, local_dir=tmp_path / "c", token=TOKEN)
    assert Path(got).read_bytes() == CONFIG
    api.create_repo("tester/made-private", private=True)
    with pytest.raises(RepositoryNotFoundError):
        anon.model_info("tester/made-private")


def test_fault_429_is_retried(hub: FakeHub, populated: str, tmp_path: Path) -> None:
    hub.faults.append(Fault("*/resolve/*/config.json", "429", method="GET"))
    path = hf_hub_download(REPO, "config.json", endpoint=hub.endpoint, local_dir=tmp_path / "o")
    assert Path(path).read_bytes() == CONFIG
    gets = [r for r in hub.requests if r.method == "GET" and r.path.endswith("/config.json")]
    assert [(r.status, r.fault) for r in gets] == [(429, "429"), (200, None)]
    assert hub.faults == []


def test_fault_500_is_an_error(hub: FakeHub, api: HfApi, populated: str, tmp_path: Path) -> None:
    hub.faults.append(Fault(f"/api/models/{REPO}", "500"))
    with pytest.raises(HfHubHTTPError) as err:
        api.model_info(REPO)
    assert err.value.response.status_code == 500
    assert api.model_info(REPO).sha == populated  # consumed

    hub.faults.append(Fault("*/resolve/*/config.json", "500", method="GET"))
    with pytest.raises(HfHubHTTPError) as download_err:
        hf_hub_download(REPO, "config.json", endpoint=hub.endpoint, local_dir=tmp_path / "o")
    assert download_err.value.response.status_code == 500
    assert not (tmp_path / "o" / "config.json").exists()


def test_fault_truncate(hub: FakeHub, populated: str, tmp_path: Path) -> None:
    url = hf_hub_url(REPO, "model.safetensors", endpoint=hub.endpoint)
    hub.faults.append(Fault("*/model.safetensors", "truncate"))
    with pytest.raises(httpx2.RemoteProtocolError):
        get_session().get(url)
    assert hub.requests[-1].bytes_sent == len(WEIGHTS) // 2 and hub.requests[-1].fault == "truncate"

    # hf_hub_download sees the broken stream (RemoteProtocolError) and retries; it reads in 10 MiB chunks, so with
    # nothing written yet the retry is a fresh full GET rather than a ranged resume
    hub.faults.append(Fault("*/model.safetensors", "truncate"))
    before = len(hub.requests)
    path = hf_hub_download(REPO, "model.safetensors", endpoint=hub.endpoint, local_dir=tmp_path / "o")
    assert Path(path).read_bytes() == WEIGHTS
    gets = [r for r in hub.requests[before:] if r.method == "GET"]
    assert [(r.status, r.fault, r.bytes_sent) for r in gets] == [
        (200, "truncate", len(WEIGHTS) // 2),
        (200, None, len(WEIGHTS)),
    ]


def test_fault_truncate_resumes_with_range(
    hub: FakeHub, populated: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With chunks smaller than what arrived, the client keeps them and asks for the rest with `Range: bytes=N-`."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 64 * 1024)
    hub.faults.append(Fault("*/model.safetensors", "truncate", method="GET"))
    before = len(hub.requests)
    path = hf_hub_download(REPO, "model.safetensors", endpoint=hub.endpoint, local_dir=tmp_path / "o")
    assert Path(path).read_bytes() == WEIGHTS
    gets = [r for r in hub.requests[before:] if r.method == "GET"]
    half = len(WEIGHTS) // 2
    assert [(r.range, r.status, r.bytes_sent) for r in gets] == [(None, 200, half), (f"bytes={half}-", 206, half)]


def test_fault_bad_range(hub: FakeHub, populated: str) -> None:
    url = hf_hub_url(REPO, "model.safetensors", endpoint=hub.endpoint)
    hub.faults.append(Fault("*/model.safetensors", "bad-range"))
    response = get_session().get(url, headers={"Range": "bytes=0-7"})
    assert response.status_code == 206
    assert response.headers["Content-Range"] != f"bytes 0-7/{len(WEIGHTS)}"
    assert response.content != WEIGHTS[0:8]
    whole = f"bytes=0-{len(WEIGHTS) - 1}"
    hub.faults.append(Fault("*/model.safetensors", "bad-range"))
    lying_total = get_session().get(url, headers={"Range": whole})
    assert lying_total.headers["Content-Range"] == f"bytes 0-{len(WEIGHTS) - 1}/{len(WEIGHTS) + 1}"
    assert (
        get_session().get(url, headers={"Range": "bytes=0-7"}).headers["Content-Range"] == f"bytes 0-7/{len(WEIGHTS)}"
    )


def test_add_repo_from_folder_and_reload(hub: FakeHub, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "nested").mkdir(parents=True)
    (src / "a.json").write_bytes(b"{}")
    (src / "nested" / "b.safetensors").write_bytes(b"\x08" + bytes(15))
    sha = hub.add_repo("tester/folder", src)
    assert hub.commits("tester/folder")[0].files == {"a.json": b"{}", "nested/b.safetensors": b"\x08" + bytes(15)}
    with pytest.raises(ValueError):
        hub.add_repo("tester/folder", {"../escape": b""})
    reloaded = FakeHub(hub.root)
    assert reloaded.head("tester/folder") == sha
    assert reloaded.commits("tester/folder")[0].files["a.json"] == b"{}"
    assert os.environ["HF_HUB_DISABLE_TELEMETRY"] == "1"
