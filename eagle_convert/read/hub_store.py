"""Hugging Face Hub repos as checkpoints: headers over HTTP range requests, `pull`, and a verify-gated `push`.

A repo id (``owner/name[@revision]``) is resolved once to a commit sha, and every read pins that sha. Reading a
draft remotely fetches ``config.json``, the index and, per shard, the 8-byte length and the JSON header, which the
project's strict parser validates as it does for local files: weights are never downloaded by ``inspect`` or
static ``verify``. huggingface_hub provides the endpoint (``HF_ENDPOINT``), the token (``--token``, ``HF_TOKEN`` or
the login) and the HTTP session with retries; the token is never printed.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from eagle_convert.errors import InputError
from eagle_convert.read.checkpoint import Checkpoint, is_plain_name, open_store
from eagle_convert.read.safetensors_header import SafetensorsHeader, header_length, parse_header

REPO_REF = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w./-]+))?$")
MAX_SMALL_FILE = 64 << 20  # config.json and index files larger than this are refused
RETRY_STATUS = (429, 500, 502, 503, 504)


class HubError(InputError):
    default_hint = "check the repo id and revision, the token (--token or HF_TOKEN) and HF_ENDPOINT"


HUB_SCHEME = "hf://"  # an explicit Hub repo id, as huggingface_hub's file system spells it


def _scheme(text: str) -> str:
    """``text`` with its Hub scheme spelled ``hf://``: a path argument passed through ``pathlib.Path`` arrives as
    ``hf:/owner/name`` (Path collapses the double slash), and no local path starts with ``hf:/``."""
    return HUB_SCHEME + text[len("hf:/") :] if text.startswith("hf:/") and not text.startswith(HUB_SCHEME) else text


def parse_repo_ref(text: str) -> tuple[str, str | None] | None:
    """(repo id, revision) when ``text`` names a Hub repo, else None (a local path).

    ``hf://owner/name[@revision]`` always names the Hub. A bare ``owner/name`` does when no local path of that
    name exists and it does not look local: its first part is not an existing local directory (``drafts/my-draft``
    with ``drafts/`` here is a mistyped local path) and it does not end like a file (``.json``, ``.safetensors``)."""
    text = _scheme(text)
    if not text.startswith(HUB_SCHEME) and (Path(text).exists() or looks_local(text)):
        return None
    return hub_repo_ref(text)


def hub_repo_ref(text: str) -> tuple[str, str | None] | None:
    """(repo id, revision) of ``[hf://]owner/name[@revision]``, whatever exists locally (``pull``, ``push``)."""
    m = REPO_REF.match(_scheme(text).removeprefix(HUB_SCHEME))
    return (m.group("repo"), m.group("revision")) if m else None


def looks_local(text: str) -> bool:
    """A path that names a local file or a child of a local directory, whether or not it exists."""
    first = text.split("/", 1)[0]
    return Path(first).is_dir() or text.endswith(LOCAL_SUFFIXES)


LOCAL_SUFFIXES = (".json", ".safetensors", ".bin", ".pt", ".pth")


def hf_client() -> Any:
    """huggingface_hub with the submodules this module uses loaded (imported late: inspect of a path needs none)."""
    import huggingface_hub
    import huggingface_hub.constants
    import huggingface_hub.errors
    import huggingface_hub.utils

    return huggingface_hub


def _offline_check(ref: str) -> None:
    if hf_client().constants.is_offline_mode():
        raise HubError(
            f"HF_HUB_OFFLINE is set, so the Hub repo {ref} cannot be read{_no_local_path(ref)}",
            path=ref,
            hint="check the local path for a typo; for the Hub, unset HF_HUB_OFFLINE, or `eagle-convert pull` it "
            "while online and pass the local copy",
        )


def _no_local_path(ref: str) -> str:
    """What to add to a Hub error when ``ref`` was only read as a repo id because no such local path exists."""
    if ref.startswith(HUB_SCHEME):
        return ""
    return f"; no local path {ref} exists either (a missing owner/name path is read as a Hub repo id)"


def translate_error(exc: Exception, ref: str) -> HubError:
    """One line for the user; never the token (huggingface_hub messages carry the URL and request id only)."""
    errors = hf_client().errors
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, errors.RevisionNotFoundError):
        return HubError(f"revision not found: {first}", path=ref)
    local = _no_local_path(ref)
    if isinstance(exc, errors.RepositoryNotFoundError):
        return HubError(f"repository not found, or private and the token cannot read it{local}", path=ref)
    if isinstance(exc, errors.HfHubHTTPError):
        return HubError(f"the Hub answered an error: {first}", path=ref)
    return HubError(
        f"cannot reach the Hub ({type(exc).__name__}: {first}){local}",
        path=ref,
        hint="check the local path for a typo; for the Hub, check the network and HF_ENDPOINT (write hf://owner/name "
        "to name the Hub explicitly)",
    )


@dataclass
class RemoteFile:
    name: str
    size: int
    sha256: str | None  # LFS files
    blob_id: str | None  # git blob sha1, for files stored in git


@dataclass
class HubStore:
    """A Hub repo at one commit, read through HTTP. Implements checkpoint.Store."""

    repo_id: str
    revision: str | None = None
    token: str | None = None
    sha: str = ""
    files: dict[str, RemoteFile] = field(default_factory=dict)
    fetched: dict[str, bytes] = field(default_factory=dict)  # small files already read (hashed for the manifest)
    bytes_read: int = 0

    def __post_init__(self) -> None:
        ref = self.ref
        _offline_check(ref)
        hf = hf_client()
        try:
            info = hf.HfApi(endpoint=hf.constants.ENDPOINT, token=self.token).model_info(
                self.repo_id, revision=self.revision, files_metadata=True
            )
        except Exception as exc:  # noqa: BLE001 - every client error becomes one typed line
            raise translate_error(exc, ref) from None
        self.sha = info.sha or ""
        for s in info.siblings or []:
            if "/" in s.rfilename:
                continue  # only top-level files belong to a checkpoint
            if not is_plain_name(s.rfilename):
                raise HubError(f"the repo lists a file named {s.rfilename!r}, which is not a plain file name", path=ref)
            lfs = getattr(s, "lfs", None)
            sha256 = lfs.sha256 if lfs is not None else None
            self.files[s.rfilename] = RemoteFile(s.rfilename, int(s.size or 0), sha256, getattr(s, "blob_id", None))

    @property
    def ref(self) -> str:
        return f"{self.repo_id}@{self.revision}" if self.revision else self.repo_id

    # ---- checkpoint.Store -----------------------------------------------------------------------------------------

    def names(self) -> list[str]:
        return sorted(self.files)

    def is_file(self, name: str) -> bool:
        return name in self.files

    def location(self, name: str) -> str:
        return f"{self.repo_id}@{self.sha[:12]}/{name}"

    def read_bytes(self, name: str) -> bytes:
        if name in self.fetched:
            return self.fetched[name]
        size = self._file(name).size
        if size > MAX_SMALL_FILE:
            raise HubError(f"{name} is {size} bytes, too large for a config or index", path=self.location(name))
        data = self._get(name, 0, size - 1) if size else b""
        self.fetched[name] = data
        return data

    def header(self, name: str) -> SafetensorsHeader:
        source = self.location(name)
        size = self._file(name).size
        prefix = self._get(name, 0, 7) if size >= 8 else b""
        n = header_length(prefix, size, source)
        return parse_header(self._get(name, 8, 8 + n - 1), size, source, name)

    # ---- HTTP ---------------------------------------------------------------------------------------------------

    def _file(self, name: str) -> RemoteFile:
        if name not in self.files:
            raise HubError(f"{name} is not in the repo at {self.sha[:12]}", path=self.ref)
        return self.files[name]

    def _get(self, name: str, start: int, end: int) -> bytes:
        """Bytes [start, end] of ``name``, checked: a 206 with the exact Content-Range, and every byte present."""
        hf = hf_client()
        url = f"{hf.constants.ENDPOINT}/{self.repo_id}/resolve/{self.sha}/{quote(name)}"
        size = self._file(name).size
        headers = {
            **hf.utils.build_hf_headers(token=self.token),
            "Range": f"bytes={start}-{end}",
            "Accept-Encoding": "identity",
        }
        source = self.location(name)
        try:
            response = hf.utils.http_backoff(
                "GET",
                url,
                headers=headers,
                retry_on_status_codes=RETRY_STATUS,
                max_retries=3,
                base_wait_time=0.5,
                max_wait_time=4,
                follow_redirects=True,
            )
            hf.utils.hf_raise_for_status(response)
            data: bytes = response.content
        except Exception as exc:  # noqa: BLE001 - every client error becomes one typed line
            raise translate_error(exc, source) from None
        whole = start == 0 and end == size - 1
        if response.status_code == 206:
            expected = f"bytes {start}-{end}/{size}"
            got = response.headers.get("Content-Range", "")
            if got.replace(" ", "") != expected.replace(" ", ""):
                raise HubError(f"the server answered range {got!r} to a request for {expected!r}", path=source)
        elif not (response.status_code == 200 and whole):
            raise HubError(f"the server ignored the byte range (HTTP {response.status_code})", path=source)
        if len(data) != end - start + 1:
            raise HubError(f"the server sent {len(data)} of {end - start + 1} bytes (truncated response)", path=source)
        self.bytes_read += len(data)
        return data

    def digest(self, name: str) -> str:
        """sha256 of a file: the Hub's LFS hash, or the hash of the bytes this store read."""
        remote = self._file(name)
        if remote.sha256:
            return remote.sha256
        return hashlib.sha256(self.read_bytes(name)).hexdigest()


def open_remote(ref: str, token: str | None = None) -> Checkpoint:
    """Open ``owner/name[@revision]`` without downloading weights; the Checkpoint's ``revision`` is the commit sha."""
    parsed = parse_repo_ref(ref)
    if parsed is None:
        raise InputError("not a Hub repo id (owner/name[@revision])", path=ref)
    store = HubStore(parsed[0], parsed[1], token)
    return open_store(store, Path(ref), revision=store.sha)


def open_source(ref: str | Path, token: str | None = None) -> Checkpoint:
    """A local path if it exists, else a Hub repo id, else the local error (no such file)."""
    from eagle_convert.read.checkpoint import open_checkpoint

    text = str(ref)
    if parse_repo_ref(text) is not None:
        return open_remote(text, token)
    return open_checkpoint(ref)
