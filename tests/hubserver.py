"""An in-process fake of the Hugging Face Hub HTTP API, for tests.

`FakeHub` serves, on 127.0.0.1, the endpoints that `huggingface_hub` (2.x, httpx2-based) calls for
`create_repo`, `model_info`/`repo_info`, `list_repo_tree`, `get_paths_info`, `list_repo_refs`,
`list_repo_commits`, `create_commit` (preupload + NDJSON commit, `parent_commit`, `create_pr`),
`hf_hub_download`/`snapshot_download` (HEAD + GET `/{repo}/resolve/{rev}/{file}`) and plain ranged GETs.

Storage lives under `root`: content-addressed blobs (`blobs/<sha256>`) and, per repo, `repo.json`
(visibility, refs) plus one JSON file per commit (`commits/<sha>.json`, the full tree as path -> sha256).
Every commit is kept, so any commit sha resolves to that commit's files. A `FakeHub` pointed at an existing
`root` reloads it.

What the client is told:

* preupload answers `"uploadMode": "regular"` for every file, so contents travel inline (base64) in the
  NDJSON commit and no LFS/S3 upload happens.
* no `X-Xet-Hash` header or `Link: <...>; rel="xet-auth"` is ever sent, so downloads stay plain HTTP.
* files matching `lfs_patterns` (by default `*.safetensors` and the usual weight formats) or of at least
  10 MiB are reported as LFS files: `lfs` {sha256/oid, size, pointerSize} in listings, `ETag`/`X-Linked-Etag` =
  sha256 and `X-Linked-Size` on resolve. Other files get the git blob sha1 as `ETag`.

Deliberate simplifications: `create_repo` makes an initial commit with an empty tree (the real Hub adds a
`.gitattributes`), while `FakeHub.add_repo` on a new repo makes exactly one commit; there are no tags, no
pagination (every listing fits in one page) and no gated repos.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, quote, unquote, urlsplit

__all__ = ["Commit", "FakeHub", "Fault", "HubError", "RequestLog", "git_blob_sha1", "isolate_hf_env"]

REPO_TYPE_PLURALS = {"model": "models", "dataset": "datasets", "space": "spaces"}
_PLURAL_TO_TYPE = {plural: singular for singular, plural in REPO_TYPE_PLURALS.items()}
# URL prefix of a repo on the website (models have none).
_URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}

DEFAULT_LFS_PATTERNS: tuple[str, ...] = (
    "*.safetensors",
    "*.bin",
    "*.pt",
    "*.pth",
    "*.ckpt",
    "*.gguf",
    "*.h5",
    "*.msgpack",
    "*.onnx",
    "*.npy",
    "*.npz",
    "*.pkl",
    "*.zip",
    "*.tar.gz",
)
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024  # the Hub refuses regular git blobs above 10 MiB

FAULT_KINDS = ("429", "500", "truncate", "bad-range", "drop", "echo-auth", "drip", "endless", "corrupt", "grow")
# answered before routing, whatever the path names
_EARLY_FAULTS = ("429", "500", "drop", "echo-auth", "drip", "endless")

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
_HEX_PREFIX_RE = re.compile(r"^[0-9a-f]{7,39}$")
_RANGE_RE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)


# --------------------------------------------------------------------------------------------------------------------
# Public data types


@dataclass
class Fault:
    """A fault to inject into responses whose (percent-decoded) path matches `path_glob` (fnmatch, `*` spans `/`).

    kind:
      * ``"429"``: answer 429 Too Many Requests with ``Retry-After: 1`` (any method).
      * ``"500"``: answer 500 Internal Server Error (any method).
      * ``"truncate"``: send the full ``Content-Length`` but only half the body, then close the connection. Only
        triggers on responses with a non-empty body (never on HEAD).
      * ``"bad-range"``: answer a valid single ``Range`` request with 206 and a ``Content-Range`` naming a range other
        than the one asked for (shifted by one byte, or a wrong total when the whole file was asked for); the body
        holds the bytes that header names. Only triggers on requests carrying a ``Range`` header to a resolve URL.

    Hostile servers (tests/hub/test_hostile_hub.py):

      * ``"drop"``: close the connection without answering (any method).
      * ``"echo-auth"``: answer 500 whose error message, ``X-Error-Message`` and ``X-HF-Warning`` headers repeat the
        request's ``Authorization`` header and hold a terminal escape sequence (any method).
      * ``"drip"``: answer 200 announcing a 1 MB body and send it one byte every 50 ms until the client hangs up.
      * ``"endless"``: answer 200 with a chunked body of JSON-looking bytes that never ends until the client hangs up.
      * ``"corrupt"``: a whole-file GET of a resolve URL gets the file with its last byte changed (same length).
      * ``"grow"``: a whole-file GET of a resolve URL gets the file followed by 1 MiB more (Content-Length says so).

    Each trigger decrements `count` and bumps `hits`; a fault whose count reaches 0 is removed from `FakeHub.faults`.
    `method` (e.g. ``"GET"``) restricts the fault to one HTTP method.
    """

    path_glob: str
    kind: str
    count: int = 1
    method: str | None = None
    hits: int = 0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of {FAULT_KINDS}")
        if self.count < 1:
            raise ValueError("fault count must be >= 1")


@dataclass
class RequestLog:
    """One request as the server saw it. `headers` keys are lower-cased; `path` is percent-decoded."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    range: str | None
    status: int = 0
    bytes_sent: int = 0
    fault: str | None = None


@dataclass(frozen=True)
class Commit:
    """A commit and the full tree (path -> bytes) at that commit."""

    sha: str
    parent: str | None
    summary: str
    files: dict[str, bytes]
    description: str = ""
    date: str = ""


class HubError(Exception):
    """An error answered as JSON ``{"error": message}`` with the Hub's ``X-Error-Code``/``X-Error-Message`` headers."""

    def __init__(
        self, status: int, message: str, *, code: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = dict(headers or {})


# --------------------------------------------------------------------------------------------------------------------
# Helpers


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob holding `data`."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _validate_repo_path(path: str) -> str:
    """A file path inside a repo: relative, `/`-separated, no empty, `.` or `..` segment, not under `.git/`."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path or "\0" in path:
        raise HubError(400, f"Invalid path in repo: {path!r}")
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts) or parts[0] == ".git":
        raise HubError(400, f"Invalid path in repo: {path!r}")
    return path


def _validate_repo_id(repo_id: str) -> tuple[str, str]:
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(_NAME_RE.match(p) and ".." not in p for p in parts):
        raise ValueError(f"invalid repo id {repo_id!r}: expected 'namespace/name'")
    return parts[0], parts[1]


def _parse_range(header: str, size: int) -> tuple[int, int] | str | None:
    """(start, end) inclusive for a satisfiable single range, "unsatisfiable", or None to ignore the header."""
    match = _RANGE_RE.match(header)
    if match is None:
        return None  # malformed or multi-range: RFC 9110 lets a server ignore Range and answer 200
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:
        suffix = int(last)
        if suffix == 0 or size == 0:
            return "unsatisfiable"
        return max(0, size - suffix), size - 1
    start = int(first)
    end = int(last) if last else size - 1
    if last and end < start:
        return None
    if start >= size:
        return "unsatisfiable"
    return start, min(end, size - 1)


def _wrong_range(start: int, end: int, size: int) -> tuple[int, int, int]:
    """A Content-Range (start, end, total) that differs from the one asked for."""
    if end + 1 < size:
        return start + 1, end + 1, size
    if start > 0:
        return start - 1, end - 1, size
    return start, end, size + 1


# --------------------------------------------------------------------------------------------------------------------
# Storage


@dataclass
class _CommitRecord:
    sha: str
    parent: str | None
    summary: str
    description: str
    date: str
    tree: dict[str, str]  # path -> sha256 of the content

    def to_json(self) -> dict[str, Any]:
        return {
            "sha": self.sha,
            "parent": self.parent,
            "summary": self.summary,
            "description": self.description,
            "date": self.date,
            "tree": self.tree,
        }


@dataclass
class _Repo:
    repo_type: str
    repo_id: str
    private: bool
    created: str
    refs: dict[str, str] = field(default_factory=dict)  # "main" / "refs/pr/1" -> commit sha
    commits: dict[str, _CommitRecord] = field(default_factory=dict)  # insertion order = creation order
    next_pr: int = 1

    @property
    def url_path(self) -> str:
        return _URL_PREFIX[self.repo_type] + self.repo_id


class FakeHub:
    """In-process Hugging Face Hub-compatible HTTP server; see the module docstring.

    `token`: when set, private repos and writes require ``Authorization: Bearer <token>``, and any other bearer
    token is refused with 401 "Invalid credentials in Authorization header" (as the Hub does). When None, writes
    are open and private repos accept any bearer token.
    """

    def __init__(
        self,
        root: Path,
        *,
        token: str | None = None,
        username: str = "fake-user",
        lfs_patterns: tuple[str, ...] = DEFAULT_LFS_PATTERNS,
    ) -> None:
        self.root = Path(root)
        self.token = token
        self.username = username
        self.lfs_patterns = tuple(lfs_patterns)
        self.requests: list[RequestLog] = []
        self.faults: list[Fault] = []
        # a repo that lies (tests/hub/test_hostile_hub.py): repo id -> raw entries added to its listing's `siblings`
        # (names no commit can hold: `../x`, `/x`), and repo id -> keys replacing those of its listing (`sha`)
        self.extra_siblings: dict[str, list[dict[str, Any]]] = {}
        self.info_overrides: dict[str, dict[str, Any]] = {}
        self._lock = threading.RLock()
        self._repos: dict[tuple[str, str], _Repo] = {}
        self._blob_meta: dict[str, tuple[int, str]] = {}  # sha256 -> (size, git sha1)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        (self.root / "blobs").mkdir(parents=True, exist_ok=True)
        (self.root / "repos").mkdir(parents=True, exist_ok=True)
        self._load()

    # ---- lifecycle ------------------------------------------------------------------------------------------------

    def start(self) -> FakeHub:
        if self._server is not None:
            return self
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="FakeHub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        server.shutdown()
        server.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:  # keep-alive connections would otherwise still be served
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if thread is not None:
            thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeHub is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # ---- test-facing API ------------------------------------------------------------------------------------------

    def add_repo(
        self,
        repo_id: str,
        files: dict[str, bytes] | Path,
        *,
        private: bool = False,
        repo_type: str = "model",
        branch: str = "main",
        summary: str | None = None,
    ) -> str:
        """Commit `files` as the whole tree of `branch` (creating the repo, `private` or not, if needed).

        `files` is a mapping path -> bytes, or a directory whose files (recursively) become the tree.
        Returns the new commit's sha. `private` only applies when the repo is created (see `set_private`).
        """
        if isinstance(files, Path):
            tree_bytes = {
                p.relative_to(files).as_posix(): p.read_bytes() for p in sorted(files.rglob("*")) if p.is_file()
            }
        else:
            tree_bytes = dict(files)
        for path in tree_bytes:
            try:
                _validate_repo_path(path)
            except HubError as exc:
                raise ValueError(exc.message) from None
        with self._lock:
            repo = self._repos.get((repo_type, repo_id))
            if repo is None:
                repo = self._create_repo(repo_type, repo_id, private=private, initial_commit=False)
            parent = repo.refs.get(branch)
            tree = {path: self._store_blob(data) for path, data in tree_bytes.items()}
            record = self._commit(repo, parent, tree, summary or f"add_repo: {len(tree)} file(s)", "")
            repo.refs[branch] = record.sha
            self._save_repo(repo)
            return record.sha

    def commits(self, repo_id: str, *, repo_type: str = "model", revision: str | None = None) -> list[Commit]:
        """Oldest first. Without `revision`: every commit of the repo (PR commits included), in creation order;
        with it: the ancestry of that revision."""
        with self._lock:
            repo = self._get_repo(repo_type, repo_id)
            if revision is None:
                records = list(repo.commits.values())
            else:
                records = list(reversed(self._ancestry(repo, self._resolve_rev(repo, revision))))
            return [
                Commit(
                    sha=r.sha,
                    parent=r.parent,
                    summary=r.summary,
                    files={path: self._read_blob(blob) for path, blob in r.tree.items()},
                    description=r.description,
                    date=r.date,
                )
                for r in records
            ]

    def head(self, repo_id: str, ref: str = "main", *, repo_type: str = "model") -> str:
        with self._lock:
            return self._resolve_rev(self._get_repo(repo_type, repo_id), ref)

    def refs(self, repo_id: str, *, repo_type: str = "model") -> dict[str, str]:
        with self._lock:
            return dict(self._get_repo(repo_type, repo_id).refs)

    def set_private(self, repo_id: str, private: bool, *, repo_type: str = "model") -> None:
        with self._lock:
            repo = self._get_repo(repo_type, repo_id)
            repo.private = private
            self._save_repo(repo)

    # ---- storage internals ----------------------------------------------------------------------------------------

    def _repo_dir(self, repo_type: str, repo_id: str) -> Path:
        return self.root / "repos" / REPO_TYPE_PLURALS[repo_type] / repo_id

    def _load(self) -> None:
        for meta_path in sorted((self.root / "repos").glob("*/*/*/repo.json")):
            meta = json.loads(meta_path.read_text())
            repo = _Repo(
                repo_type=meta["repo_type"],
                repo_id=meta["repo_id"],
                private=meta["private"],
                created=meta["created"],
                refs=meta["refs"],
                next_pr=meta["next_pr"],
            )
            for sha in meta["commit_order"]:
                data = json.loads((meta_path.parent / "commits" / f"{sha}.json").read_text())
                repo.commits[sha] = _CommitRecord(**data)
            self._repos[(repo.repo_type, repo.repo_id)] = repo

    def _save_repo(self, repo: _Repo) -> None:
        folder = self._repo_dir(repo.repo_type, repo.repo_id)
        folder.mkdir(parents=True, exist_ok=True)
        meta = {
            "repo_type": repo.repo_type,
            "repo_id": repo.repo_id,
            "private": repo.private,
            "created": repo.created,
            "refs": repo.refs,
            "next_pr": repo.next_pr,
            "commit_order": list(repo.commits),
        }
        tmp = folder / "repo.json.tmp"
        tmp.write_text(json.dumps(meta, indent=1))
        os.replace(tmp, folder / "repo.json")

    def _store_blob(self, data: bytes) -> str:
        sha256 = hashlib.sha256(data).hexdigest()
        path = self.root / "blobs" / sha256
        if not path.exists():
            tmp = path.with_name(f"{sha256}.{threading.get_ident()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        self._blob_meta.setdefault(sha256, (len(data), git_blob_sha1(data)))
        return sha256

    def _read_blob(self, sha256: str) -> bytes:
        return (self.root / "blobs" / sha256).read_bytes()

    def _meta(self, sha256: str) -> tuple[int, str]:
        meta = self._blob_meta.get(sha256)
        if meta is None:
            data = self._read_blob(sha256)
            meta = self._blob_meta[sha256] = (len(data), git_blob_sha1(data))
        return meta

    def _is_lfs(self, path: str, size: int) -> bool:
        name = path.rsplit("/", 1)[-1]
        return size >= LFS_SIZE_THRESHOLD or any(fnmatch.fnmatchcase(name, pat) for pat in self.lfs_patterns)

    def _create_repo(self, repo_type: str, repo_id: str, *, private: bool, initial_commit: bool) -> _Repo:
        _validate_repo_id(repo_id)
        repo = _Repo(repo_type=repo_type, repo_id=repo_id, private=private, created=_now())
        self._repos[(repo_type, repo_id)] = repo
        if initial_commit:
            repo.refs["main"] = self._commit(repo, None, {}, "initial commit", "").sha
        self._save_repo(repo)
        return repo

    def _commit(
        self, repo: _Repo, parent: str | None, tree: dict[str, str], summary: str, description: str
    ) -> _CommitRecord:
        date = _now()
        payload = json.dumps([parent, sorted(tree.items()), summary, description, date, os.urandom(8).hex()])
        record = _CommitRecord(
            sha=hashlib.sha1(payload.encode()).hexdigest(),
            parent=parent,
            summary=summary,
            description=description,
            date=date,
            tree=dict(sorted(tree.items())),
        )
        commits_dir = self._repo_dir(repo.repo_type, repo.repo_id) / "commits"
        commits_dir.mkdir(parents=True, exist_ok=True)
        (commits_dir / f"{record.sha}.json").write_text(json.dumps(record.to_json(), indent=1))
        repo.commits[record.sha] = record
        return record

    def _get_repo(self, repo_type: str, repo_id: str) -> _Repo:
        repo = self._repos.get((repo_type, repo_id))
        if repo is None:
            raise HubError(404, "Repository not found", code="RepoNotFound")
        return repo

    def _resolve_rev(self, repo: _Repo, rev: str) -> str:
        if rev.startswith("refs/heads/"):
            rev = rev[len("refs/heads/") :]
        if rev in repo.refs:
            return repo.refs[rev]
        if _SHA_RE.match(rev) and rev in repo.commits:
            return rev
        if _HEX_PREFIX_RE.match(rev):
            matches = [sha for sha in repo.commits if sha.startswith(rev)]
            if len(matches) == 1:
                return matches[0]
        raise HubError(404, f"Invalid rev id: {rev}", code="RevisionNotFound")

    def _ancestry(self, repo: _Repo, sha: str) -> list[_CommitRecord]:
        """Newest first."""
        out: list[_CommitRecord] = []
        cur: str | None = sha
        while cur is not None:
            record = repo.commits[cur]
            out.append(record)
            cur = record.parent
        return out

    def _take_fault(self, kinds: tuple[str, ...], method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.kind not in kinds or (fault.method is not None and fault.method.upper() != method):
                    continue
                if not fnmatch.fnmatchcase(path, fault.path_glob):
                    continue
                fault.count -= 1
                fault.hits += 1
                if fault.count <= 0:
                    self.faults.remove(fault)
                return fault
        return None

    # ---- JSON shapes ----------------------------------------------------------------------------------------------

    def _directories(self, tree: dict[str, str]) -> set[str]:
        dirs: set[str] = set()
        for path in tree:
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:i]))
        return dirs

    def _dir_oid(self, tree: dict[str, str], directory: str) -> str:
        prefix = directory + "/"
        listing = sorted((p, b) for p, b in tree.items() if p.startswith(prefix))
        return hashlib.sha1(json.dumps(listing).encode()).hexdigest()

    def _file_entry(self, path: str, sha256: str, *, tree_shape: bool) -> dict[str, Any]:
        size, git_sha = self._meta(sha256)
        lfs = self._is_lfs(path, size)
        pointer = _lfs_pointer(sha256, size)
        oid = git_blob_sha1(pointer) if lfs else git_sha
        if tree_shape:  # /tree and /paths-info
            entry: dict[str, Any] = {"type": "file", "oid": oid, "size": size, "path": path}
            if lfs:
                entry["lfs"] = {"oid": sha256, "size": size, "pointerSize": len(pointer)}
        else:  # siblings of /api/models/{repo}?blobs=true
            entry = {"rfilename": path, "size": size, "blobId": oid}
            if lfs:
                entry["lfs"] = {"sha256": sha256, "size": size, "pointerSize": len(pointer)}
        return entry

    def _last_commits(self, repo: _Repo, sha: str, paths: list[str]) -> dict[str, _CommitRecord]:
        """For each file or directory path of commit `sha`: the newest ancestor commit that changed it."""
        out: dict[str, _CommitRecord] = {}
        pending = set(paths)
        for record in self._ancestry(repo, sha):
            if not pending:
                break
            parent_tree = repo.commits[record.parent].tree if record.parent else {}
            changed = {p for p in set(record.tree) | set(parent_tree) if record.tree.get(p) != parent_tree.get(p)}
            for path in list(pending):
                if path in changed or any(c.startswith(path + "/") for c in changed):
                    out[path] = record
                    pending.discard(path)
        return out

    def _tree_entries(self, repo: _Repo, sha: str, paths: list[str], *, expand: bool) -> list[dict[str, Any]]:
        tree = repo.commits[sha].tree
        entries = []
        for path in paths:
            if path in tree:
                entries.append(self._file_entry(path, tree[path], tree_shape=True))
            else:
                entries.append({"type": "directory", "oid": self._dir_oid(tree, path), "size": 0, "path": path})
        if expand:
            last = self._last_commits(repo, sha, paths)
            for entry in entries:
                record = last.get(entry["path"])
                if record is not None:
                    entry["lastCommit"] = {"id": record.sha, "title": record.summary, "date": record.date}
                if entry["type"] == "file":
                    entry["securityFileStatus"] = {
                        "status": "safe",
                        "avScan": {"virusFound": False, "virusNames": None},
                        "pickleImportScan": None,
                    }
        return entries

    def _repo_info(self, repo: _Repo, sha: str, *, blobs: bool) -> dict[str, Any]:
        record = repo.commits[sha]
        if blobs:
            siblings = [self._file_entry(p, b, tree_shape=False) for p, b in record.tree.items()]
        else:
            siblings = [{"rfilename": p} for p in record.tree]
        info: dict[str, Any] = {
            "_id": hashlib.sha1(f"{repo.repo_type}/{repo.repo_id}".encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": sha,
            "lastModified": record.date,
            "createdAt": repo.created,
            "private": repo.private,
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": siblings,
        }
        if repo.repo_type == "model":
            info["modelId"] = repo.repo_id
        if blobs:
            info["usedStorage"] = sum(self._meta(b)[0] for b in set(record.tree.values()))
        info["siblings"] += self.extra_siblings.get(repo.repo_id, [])
        return {**info, **self.info_overrides.get(repo.repo_id, {})}


# --------------------------------------------------------------------------------------------------------------------
# HTTP layer


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, hub: FakeHub) -> None:
        self.hub = hub
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up (as a refusing client does)
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeHub/1.0"
    timeout = 60  # idle keep-alive connections are dropped after this
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.server.hub._lock:
            self.server.hub._connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.hub._lock:
                self.server.hub._connections.discard(self.connection)

    # ---- plumbing -------------------------------------------------------------------------------------------------

    @property
    def hub(self) -> FakeHub:
        return self.server.hub

    def _dispatch(self) -> None:
        split = urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        self._log = RequestLog(
            method=self.command,
            path=unquote(split.path),
            query=dict(parse_qsl(split.query, keep_blank_values=True)),
            headers=headers,
            range=headers.get("range"),
        )
        # Logged before anything is answered (status/bytes_sent are filled in before the response is written), so a
        # client that has its response always finds its request in `hub.requests`.
        with self.hub._lock:
            self.hub.requests.append(self._log)
        try:
            body = self._read_body()
            fault = self.hub._take_fault(_EARLY_FAULTS, self.command, self._log.path)
            if fault is not None:
                self._log.fault = fault.kind
                if fault.kind in ("drop", "drip", "endless"):
                    return self._misbehave(fault.kind)
                if fault.kind == "echo-auth":
                    echo = f"{self._log.headers.get('authorization')} \x1b[2J\x1b]0;pwned\x07"
                    raise HubError(
                        500, f"cannot serve a request with {echo}", headers={"X-HF-Warning": f"echo; {echo}"}
                    )
                if fault.kind == "429":
                    raise HubError(429, "Too Many Requests (injected fault)", headers={"Retry-After": "1"})
                raise HubError(500, "Internal Server Error (injected fault)")
            self._route(split.path, body)
        except HubError as exc:
            self._send_error(exc)
        except Exception as exc:  # noqa: BLE001 - a server bug must reach the test as a readable 500
            self._send_error(HubError(500, f"FakeHub crashed: {exc!r}\n{traceback.format_exc()}"))

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = _dispatch

    def _misbehave(self, kind: str) -> None:
        """The hostile answers that are no HTTP error: a dropped connection, a dripping or an endless body. Each
        ends when the client hangs up (or after a minute of dripping, or 6 GB of endless body)."""
        self.close_connection = True
        if kind == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self._log.status = 200
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header(*(("Content-Length", "1000000") if kind == "drip" else ("Transfer-Encoding", "chunked")))
        self.end_headers()
        chunk = b" " if kind == "drip" else b"%x\r\n%s\r\n" % (60_000, b'{"a": ' * 10_000)
        try:
            for _ in range(1200 if kind == "drip" else 100_000):
                self.wfile.write(chunk)
                self.wfile.flush()
                self._log.bytes_sent += len(chunk)
                if kind == "drip":
                    time.sleep(0.05)
        except OSError:  # the client hung up, as it should
            pass

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _base_headers(self) -> dict[str, str]:
        request_id = self._log.headers.get("x-amzn-trace-id") or self._log.headers.get("x-request-id")
        return {"X-Request-Id": request_id} if request_id else {}

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        truncate = None
        if self.command != "HEAD" and body:
            truncate = self.hub._take_fault(("truncate",), self.command, self._log.path)
        out = b"" if self.command == "HEAD" else body
        if truncate is not None:
            self._log.fault = "truncate"
            out = body[: len(body) // 2]
            self.close_connection = True
        self._log.status = status
        self._log.bytes_sent = len(out)
        self.send_response(status)
        for key, value in {**self._base_headers(), **headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if out:
            self.wfile.write(out)
            self.wfile.flush()

    def _send_json(self, obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(obj).encode()
        self._send(status, {"Content-Type": "application/json; charset=utf-8", **(headers or {})}, body)

    def _send_error(self, exc: HubError) -> None:
        headers = dict(exc.headers)
        headers["X-Error-Message"] = exc.message.splitlines()[0][:500]
        if exc.code is not None:
            headers["X-Error-Code"] = exc.code
        self._send_json({"error": exc.message}, status=exc.status, headers=headers)

    # ---- auth -----------------------------------------------------------------------------------------------------

    def _authenticated(self) -> bool:
        auth = self._log.headers.get("authorization")
        if auth is None:
            return False
        scheme, _, presented = auth.partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise HubError(401, "Invalid credentials in Authorization header")
        if self.hub.token is not None and presented.strip() != self.hub.token:
            raise HubError(401, "Invalid credentials in Authorization header")
        return True

    def _check_read(self, repo: _Repo) -> None:
        if not self._authenticated() and repo.private:
            raise HubError(401, "Repository not found", code="RepoNotFound")

    def _check_write(self, repo: _Repo | None) -> None:
        authed = self._authenticated()
        if not authed and (self.hub.token is not None or (repo is not None and repo.private)):
            code = "RepoNotFound" if repo is not None and repo.private else None
            raise HubError(401, "Invalid username or password.", code=code)

    # ---- routing --------------------------------------------------------------------------------------------------

    @staticmethod
    def _split_rev(segments: list[str]) -> tuple[str, list[str]]:
        """First revision in raw URL segments: one %-encoded segment, or an unencoded `refs/<kind>/<name>`."""
        if not segments:
            raise HubError(400, "Missing revision")
        first = unquote(segments[0])
        if first == "refs" and len(segments) >= 3:
            return "/".join(unquote(s) for s in segments[:3]), segments[3:]
        return first, segments[1:]

    def _route(self, raw_path: str, body: bytes) -> None:
        segs = raw_path.split("/")[1:]
        method = self.command
        if segs[:1] == ["api"]:
            rest = segs[1:]
            if rest == ["repos", "create"] and method == "POST":
                return self._create_repo(body)
            if rest == ["validate-yaml"] and method == "POST":
                return self._send_json({"errors": [], "warnings": []})
            if rest == ["whoami-v2"] and method == "GET":
                return self._whoami()
            if len(rest) >= 3 and rest[0] in _PLURAL_TO_TYPE:
                return self._repo_api(_PLURAL_TO_TYPE[rest[0]], unquote(rest[1]), unquote(rest[2]), rest[3:], body)
        else:
            repo_type = "model"
            if len(segs) >= 5 and segs[0] in ("datasets", "spaces") and segs[3] == "resolve":
                repo_type, segs = _PLURAL_TO_TYPE[segs[0]], segs[1:]
            if len(segs) >= 4 and segs[2] == "resolve" and method in ("GET", "HEAD"):
                rev, file_segs = self._split_rev(segs[3:])
                filename = "/".join(unquote(s) for s in file_segs)
                return self._resolve(repo_type, f"{unquote(segs[0])}/{unquote(segs[1])}", rev, filename)
        raise HubError(404, f"FakeHub does not implement {method} {raw_path}")

    def _repo_api(self, repo_type: str, namespace: str, name: str, rest: list[str], body: bytes) -> None:
        repo = self.hub._get_repo(repo_type, f"{namespace}/{name}")
        method = self.command
        action = rest[0] if rest else ""
        if method == "GET" and action in ("", "revision"):
            self._check_read(repo)
            rev = self._split_rev(rest[1:])[0] if action == "revision" else "main"
            with self.hub._lock:
                sha = self.hub._resolve_rev(repo, rev)
                info = self.hub._repo_info(repo, sha, blobs=self._log.query.get("blobs", "").lower() in ("1", "true"))
            return self._send_json(info)
        if method == "GET" and action == "tree":
            self._check_read(repo)
            rev, path_segs = self._split_rev(rest[1:])
            return self._list_tree(repo, rev, "/".join(unquote(s) for s in path_segs).strip("/"))
        if method == "POST" and action == "paths-info":
            self._check_read(repo)
            return self._paths_info(repo, self._split_rev(rest[1:])[0], body)
        if method == "GET" and action == "refs":
            self._check_read(repo)
            return self._refs(repo)
        if method == "GET" and action == "commits":
            self._check_read(repo)
            return self._list_commits(repo, self._split_rev(rest[1:])[0])
        if method == "POST" and action == "preupload":
            self._check_write(repo)
            return self._preupload(repo, self._split_rev(rest[1:])[0], body)
        if method == "POST" and action == "commit":
            self._check_write(repo)
            return self._create_commit(repo, self._split_rev(rest[1:])[0], body)
        raise HubError(404, f"FakeHub does not implement {method} /api/.../{'/'.join(rest)}")

    # ---- endpoints ------------------------------------------------------------------------------------------------

    def _whoami(self) -> None:
        if not self._authenticated():
            raise HubError(401, "Invalid credentials in Authorization header")
        self._send_json(
            {
                "type": "user",
                "id": hashlib.sha1(self.hub.username.encode()).hexdigest()[:24],
                "name": self.hub.username,
                "fullname": self.hub.username,
                "orgs": [],
                "auth": {"type": "access_token", "accessToken": {"displayName": "fakehub", "role": "write"}},
            }
        )

    def _create_repo(self, body: bytes) -> None:
        payload = json.loads(body or b"{}")
        self._check_write(None)
        repo_type = payload.get("type") or "model"
        if repo_type not in REPO_TYPE_PLURALS:
            raise HubError(400, f"Invalid repo type: {repo_type}")
        repo_id = f"{payload.get('organization') or self.hub.username}/{payload.get('name')}"
        try:
            _validate_repo_id(repo_id)
        except ValueError as exc:
            raise HubError(400, str(exc)) from None
        private = payload.get("visibility") == "private" or bool(payload.get("private"))
        with self.hub._lock:
            existing = self.hub._repos.get((repo_type, repo_id))
            if existing is None:
                repo = self.hub._create_repo(repo_type, repo_id, private=private, initial_commit=True)
        if existing is not None:
            url = f"{self.hub.endpoint}/{existing.url_path}"
            return self._send_json({"error": f"You already created this {repo_type} repo", "url": url}, status=409)
        self._send_json({"url": f"{self.hub.endpoint}/{repo.url_path}", "name": repo_id, "id": repo_id})

    def _resolve(self, repo_type: str, repo_id: str, rev: str, filename: str) -> None:
        repo = self.hub._get_repo(repo_type, repo_id)
        self._check_read(repo)
        with self.hub._lock:
            sha = self.hub._resolve_rev(repo, rev)
            blob = repo.commits[sha].tree.get(filename)
            if blob is None:
                raise HubError(404, "Entry not found", code="EntryNotFound", headers={"X-Repo-Commit": sha})
            size, git_sha = self.hub._meta(blob)
        lfs = self.hub._is_lfs(filename, size)
        name = filename.rsplit("/", 1)[-1]
        headers = {
            "Content-Type": "application/octet-stream",
            "Content-Disposition": f"inline; filename*=UTF-8''{quote(name)}; filename=\"{name}\";",
            "ETag": f'"{blob if lfs else git_sha}"',
            "X-Repo-Commit": sha,
            "Accept-Ranges": "bytes",
        }
        if lfs:
            headers["X-Linked-Etag"] = f'"{blob}"'
            headers["X-Linked-Size"] = str(size)
        range_header = self._log.range
        parsed = _parse_range(range_header, size) if range_header else None
        if parsed == "unsatisfiable":
            headers["Content-Range"] = f"bytes */{size}"
            return self._send(416, headers, b"")
        data = self.hub._read_blob(blob) if self.command == "GET" else b""
        if parsed is None and self.command == "GET" and data:
            lie = self.hub._take_fault(("corrupt", "grow"), self.command, self._log.path)
            if lie is not None:
                self._log.fault = lie.kind
                data = data[:-1] + bytes([data[-1] ^ 1]) if lie.kind == "corrupt" else data + b"\0" * (1 << 20)
        if parsed is None:
            if self.command == "HEAD":  # advertise the full length without reading the blob
                return self._send_head(200, headers, size)
            return self._send(200, headers, data)
        start, end = parsed  # type: ignore[misc]
        total = size
        if self.hub._take_fault(("bad-range",), self.command, self._log.path) is not None:
            self._log.fault = "bad-range"
            start, end, total = _wrong_range(start, end, size)
        headers["Content-Range"] = f"bytes {start}-{end}/{total}"
        if self.command == "HEAD":
            return self._send_head(206, headers, end - start + 1)
        self._send(206, headers, data[start : end + 1])

    def _send_head(self, status: int, headers: dict[str, str], length: int) -> None:
        self._log.status = status
        self.send_response(status)
        for key, value in {**self._base_headers(), **headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def _list_tree(self, repo: _Repo, rev: str, path: str) -> None:
        expand = self._log.query.get("expand", "").lower() in ("1", "true")
        recursive = self._log.query.get("recursive", "").lower() in ("1", "true")
        with self.hub._lock:
            sha = self.hub._resolve_rev(repo, rev)
            tree = repo.commits[sha].tree
            dirs = self.hub._directories(tree)
            if path and path not in dirs:
                raise HubError(404, f"Entry not found: {path}", code="EntryNotFound", headers={"X-Repo-Commit": sha})
            prefix = path + "/" if path else ""
            candidates = [p for p in sorted(set(tree) | dirs) if p.startswith(prefix)]
            if not recursive:
                candidates = [p for p in candidates if "/" not in p[len(prefix) :]]
            # directories first, like the Hub
            candidates.sort(key=lambda p: (p not in dirs, p))
            entries = self.hub._tree_entries(repo, sha, candidates, expand=expand)
        self._send_json(entries, headers={"X-Repo-Commit": sha})

    def _paths_info(self, repo: _Repo, rev: str, body: bytes) -> None:
        if self._log.headers.get("content-type", "").startswith("application/json"):
            payload = json.loads(body or b"{}")
            paths, expand = payload.get("paths", []), bool(payload.get("expand"))
        else:
            form = parse_qs(body.decode(), keep_blank_values=True)
            paths = form.get("paths", [])
            expand = (form.get("expand") or ["false"])[-1].lower() in ("1", "true")
        with self.hub._lock:
            sha = self.hub._resolve_rev(repo, rev)
            tree = repo.commits[sha].tree
            dirs = self.hub._directories(tree)
            wanted = [p.strip("/") for p in paths if p.strip("/") in tree or p.strip("/") in dirs]
            entries = self.hub._tree_entries(repo, sha, wanted, expand=expand)
        self._send_json(entries, headers={"X-Repo-Commit": sha})

    def _refs(self, repo: _Repo) -> None:
        with self.hub._lock:
            branches = [
                {"name": n, "ref": f"refs/heads/{n}", "targetCommit": s}
                for n, s in repo.refs.items()
                if not n.startswith("refs/")
            ]
            prs = [{"name": n, "ref": n, "targetCommit": s} for n, s in repo.refs.items() if n.startswith("refs/pr/")]
        self._send_json({"branches": branches, "converts": [], "tags": [], "pullRequests": prs})

    def _list_commits(self, repo: _Repo, rev: str) -> None:
        with self.hub._lock:
            records = self.hub._ancestry(repo, self.hub._resolve_rev(repo, rev))
        author = {"user": self.hub.username, "avatar": None}
        self._send_json(
            [
                {"id": r.sha, "title": r.summary, "message": r.description, "authors": [author], "date": r.date}
                for r in records
            ]
        )

    def _preupload(self, repo: _Repo, rev: str, body: bytes) -> None:
        payload = json.loads(body or b"{}")
        files = payload.get("files")
        if not isinstance(files, list):
            raise HubError(400, "Invalid preupload payload: 'files' must be a list")
        with self.hub._lock:
            try:
                sha: str | None = self.hub._resolve_rev(repo, rev)
            except HubError:
                if self._log.query.get("create_pr") != "1":
                    raise
                sha = None
            tree = repo.commits[sha].tree if sha else {}
            answer = []
            for item in files:
                path = _validate_repo_path(item.get("path"))
                existing = tree.get(path)
                # The client compares this oid with the git sha1 of its content (regular mode) to skip no-op adds.
                oid = self.hub._meta(existing)[1] if existing is not None else None
                answer.append({"path": path, "uploadMode": "regular", "shouldIgnore": False, "oid": oid})
        self._send_json({"files": answer, "commitOid": sha})

    def _create_commit(self, repo: _Repo, rev: str, body: bytes) -> None:
        try:
            items = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise HubError(400, f"Invalid NDJSON commit payload: {exc}") from None
        if not items or items[0].get("key") != "header":
            raise HubError(400, "Invalid commit payload: the first line must be the header")
        header = items[0].get("value") or {}
        summary = header.get("summary") or ""
        if not summary:
            raise HubError(400, "Commit summary is required")
        create_pr = self._log.query.get("create_pr") == "1"
        with self.hub._lock:
            branch = rev[len("refs/heads/") :] if rev.startswith("refs/heads/") else rev
            if branch not in repo.refs:
                if _SHA_RE.match(branch) or _HEX_PREFIX_RE.match(branch):
                    raise HubError(400, f"Invalid rev id: {rev} (commits go to a branch or a PR ref)")
                raise HubError(404, f"Invalid rev id: {rev}", code="RevisionNotFound")
            head = repo.refs[branch]
            parent_commit = header.get("parentCommit")
            if parent_commit and not head.startswith(parent_commit):
                raise HubError(412, "A commit has happened since. Please refresh and try again.")
            tree = dict(repo.commits[head].tree)
            for item in items[1:]:
                self._apply_operation(tree, item)
            record = self.hub._commit(repo, head, tree, summary, header.get("description") or "")
            commit_url = f"{self.hub.endpoint}/{repo.url_path}/commit/{record.sha}"
            pr_url = None
            if create_pr:
                num = repo.next_pr
                repo.next_pr += 1
                repo.refs[f"refs/pr/{num}"] = record.sha
                pr_url = f"{self.hub.endpoint}/{repo.url_path}/discussions/{num}"
            else:
                repo.refs[branch] = record.sha
            self.hub._save_repo(repo)
        self._send_json(
            {
                "success": True,
                "commitOid": record.sha,
                "commitUrl": commit_url,
                "commitMessage": summary,
                "hookOutput": "",
                "pullRequestUrl": pr_url,
            }
        )

    def _apply_operation(self, tree: dict[str, str], item: dict[str, Any]) -> None:
        key, value = item.get("key"), item.get("value") or {}
        path = value.get("path")
        if key == "file":
            content = value.get("content", "")
            if value.get("encoding", "base64") == "base64":
                data = base64.b64decode(content, validate=True)
            else:
                data = content.encode()
            tree[_validate_repo_path(path)] = self.hub._store_blob(data)
        elif key == "lfsFile":
            oid = value.get("oid", "")
            if not (self.hub.root / "blobs" / oid).is_file() or not re.fullmatch(r"[0-9a-f]{64}", oid):
                raise HubError(422, f"LFS object {oid} was never uploaded (FakeHub only takes inline contents)")
            tree[_validate_repo_path(path)] = oid
        elif key == "deletedFile":
            if path not in tree:
                raise HubError(404, f"A file with this name doesn't exist: {path}", code="EntryNotFound")
            del tree[path]
        elif key == "deletedFolder":
            prefix = str(path).rstrip("/") + "/"
            doomed = [p for p in tree if p.startswith(prefix)]
            if not doomed:
                raise HubError(404, f"A folder with this name doesn't exist: {path}", code="EntryNotFound")
            for p in doomed:
                del tree[p]
        else:
            raise HubError(400, f"Unknown commit operation {key!r}")


# --------------------------------------------------------------------------------------------------------------------
# Client-side isolation


def isolate_hf_env(monkeypatch: Any, hf_home: Path) -> None:
    """Point huggingface_hub at a private `hf_home` and keep it off the network (pytest `monkeypatch`).

    Sets the env vars, patches the constants huggingface_hub read at import time (cache dirs, token path,
    offline/telemetry/progress-bar switches), and installs an HTTP client whose requests to any host other than
    127.0.0.1/localhost raise. Undone when `monkeypatch` is.
    """
    import importlib

    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.utils import _detect_agent, _http

    hf_home = Path(hf_home)
    hf_home.mkdir(parents=True, exist_ok=True)
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    for var in ("HF_OIDC_RESOURCE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_XET_CACHE", "HF_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")

    for name, value in {
        "HF_HOME": str(hf_home),
        "HF_HUB_CACHE": str(hf_home / "hub"),
        "HUGGINGFACE_HUB_CACHE": str(hf_home / "hub"),
        "HF_ASSETS_CACHE": str(hf_home / "assets"),
        "HF_XET_CACHE": str(hf_home / "xet"),
        "HF_TOKEN_PATH": str(hf_home / "token"),
        "HF_STORED_TOKENS_PATH": str(hf_home / "stored_tokens"),
        "AGENT_HARNESSES_PATH": str(hf_home / ".agent_harnesses.json"),
        "HF_HUB_OFFLINE": False,
        "HF_HUB_DISABLE_TELEMETRY": True,  # also skips the agent-registry fetch from huggingface.co in user agents
        "HF_HUB_DISABLE_PROGRESS_BARS": True,
    }.items():
        monkeypatch.setattr(constants, name, value, raising=False)
    # `huggingface_hub.utils.tqdm` the attribute is the tqdm class; the module copied the flag at import time.
    monkeypatch.setattr(importlib.import_module("huggingface_hub.utils.tqdm"), "HF_HUB_DISABLE_PROGRESS_BARS", True)
    monkeypatch.setattr(_detect_agent, "_registry", _detect_agent._EMPTY_REGISTRY)

    def _local_only(request: httpx2.Request) -> None:
        if request.url.host not in ("127.0.0.1", "localhost"):
            raise RuntimeError(f"test tried to reach {request.url} (only 127.0.0.1 is allowed)")

    def _factory() -> httpx2.Client:
        return httpx2.Client(
            event_hooks={"request": [_http.hf_request_event_hook, _local_only]}, follow_redirects=True, timeout=None
        )

    _http.close_session()
    # setattr (not set_client_factory) so that undoing monkeypatch restores the previous factory; the guarded
    # client created meanwhile is dropped on undo and the next get_session() builds a regular one.
    monkeypatch.setattr(_http, "_GLOBAL_CLIENT_FACTORY", _factory)
    monkeypatch.setattr(_http, "_GLOBAL_CLIENT", None)
