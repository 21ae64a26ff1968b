"""Hugging Face Hub repos as checkpoints: headers over HTTP range requests, `pull`, and a verify-gated `push`.

A repo id (``owner/name[@revision]``) is resolved once to a commit sha, and every read pins that sha. Reading a
draft remotely fetches ``config.json``, the index and, per shard, the 8-byte length and the JSON header, which the
project's strict parser validates as it does for local files: weights are never downloaded by ``inspect`` or
static ``verify``. huggingface_hub provides the endpoint (``HF_ENDPOINT``, refused when it holds a password), the
token (``--token``, ``HF_TOKEN`` or the login) and the HTTP session; the token is never printed.

The server is not trusted: every request (the file listing, a config, a header, a download) reads at most what it
asked for (the listing at most ``MAX_LISTING``) and ends at a total deadline, retries included; the listing's names,
sizes, hashes and commit id are checked before any is used (a name that leaves the repo, holds control characters
or a glob character is refused); what the server says back is redacted before it is shown.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from eagle_convert.errors import HubError, HubTransferError, InputError
from eagle_convert.read.checkpoint import Checkpoint, is_plain_name, open_store
from eagle_convert.read.jsonstrict import parse_json_object
from eagle_convert.read.redact import has_userinfo, printable, redact, redact_url
from eagle_convert.read.regular import MAX_SMALL_FILE  # config.json and index files: the same cap as on disk
from eagle_convert.read.safetensors_header import SafetensorsHeader, header_length, parse_header
from eagle_convert.read.source_files import Fingerprint

T = TypeVar("T")

REPO_REF = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w./-]+))?$")
RETRY_STATUS = (429, 500, 502, 503, 504)


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
    """huggingface_hub with the submodules this module uses loaded (imported late: inspect of a path needs none),
    its log lines passed through :func:`redact` and :func:`printable` (see :class:`_ClientLogFilter`)."""
    import huggingface_hub
    import huggingface_hub.constants
    import huggingface_hub.errors
    import huggingface_hub.utils

    _filter_client_logs()
    _bound_client(huggingface_hub)
    return huggingface_hub


def _bound_client(hf: Any) -> None:
    """The client huggingface_hub sends every request through (push's ``create_repo``/``repo_info``/``create_commit``
    included, which it sends with no timeout at all), bounded: each read waits at most READ_TIMEOUT_S, and an API
    answer (``/api/...``) is read up to MAX_LISTING bytes within DEADLINE_S of its headers; past either it is a
    HubError. Done on the live client (whichever factory made it), once. Downloads stream through :func:`_request`,
    which bounds them by their listed size."""
    import httpx2

    session = hf.utils.get_session()
    hooks = session.event_hooks
    if _bound_answer in hooks.get("response", []):
        return
    session.timeout = httpx2.Timeout(READ_TIMEOUT_S)
    session.event_hooks = {**hooks, "response": [*hooks.get("response", []), _bound_answer]}


def _bound_answer(response: Any) -> None:
    if response.request.url.path.startswith("/api/"):
        source = redact_url(str(response.request.url.copy_with(query=None)))
        response.stream = _bounded_stream()(response.stream, source)


@functools.cache
def _bounded_stream() -> type:
    import httpx2

    class Bounded(httpx2.SyncByteStream):
        """An answer's byte stream, cut at MAX_LISTING bytes and at its deadline (a dripping server ends there)."""

        def __init__(self, stream: Any, source: str) -> None:
            self.stream, self.source, self.deadline = stream, source, time.monotonic() + DEADLINE_S

        def __iter__(self) -> Iterator[bytes]:
            return _capped(self.stream, MAX_LISTING, self.deadline, DEADLINE_S, self.source)

        def close(self) -> None:
            self.stream.close()

    return Bounded


def hub_endpoint() -> str:
    """``HF_ENDPOINT`` as huggingface_hub reads it, refused before any request when it holds a user name or password:
    the client would send them and print them in its retry and error messages."""
    endpoint: str = hf_client().constants.ENDPOINT
    try:
        userinfo = has_userinfo(endpoint)
    except ValueError:
        raise HubError(f"HF_ENDPOINT {printable(redact(endpoint))!r} is not a URL", hint=ENDPOINT_HINT) from None
    if userinfo:
        raise HubError(
            f"HF_ENDPOINT {redact_url(endpoint)} holds a user name or password; refused before any request",
            hint=ENDPOINT_HINT,
        )
    return endpoint


ENDPOINT_HINT = "set HF_ENDPOINT to the bare URL (https://host[:port]) and pass the token with --token or HF_TOKEN"


def remember_token(token: str | None) -> None:
    """Add ``token`` (an explicit ``--token``) and the one huggingface_hub finds itself (``HF_TOKEN``, the login) to
    what the client's log lines redact (the log filter only reads this set: it calls nothing that could log)."""
    _TOKENS.update(t for t in (token, hf_client().utils.get_token()) if t)


_TOKENS: set[str] = set()


def known_secrets(token: str | None = None) -> list[str | None]:
    """Every token a Hub message must not show: ``token``, those passed before, and huggingface_hub's own."""
    return [token, *_TOKENS, hf_client().utils.get_token()]


class _ClientLogFilter(logging.Filter):
    """huggingface_hub logs retry notices naming the URL, and the text of a server's ``X-HF-Warning`` header: each
    line is redacted (userinfo, tokens, Authorization values) and its control characters escaped."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = printable(redact(record.getMessage(), _TOKENS))
        record.args = None
        return True


_LOG_FILTER = _ClientLogFilter()


def _filter_client_logs() -> None:
    """The filter on every huggingface_hub logger that exists (records are filtered where they are made, whoever
    handles them) and on the handlers of its root logger (loggers made later log through those)."""
    root = logging.getLogger("huggingface_hub")
    loggers = [root]
    loggers += [
        lg
        for name, lg in list(logging.Logger.manager.loggerDict.items())
        if name.startswith("huggingface_hub.") and isinstance(lg, logging.Logger)
    ]
    for target in [*loggers, *root.handlers]:
        if _LOG_FILTER not in target.filters:
            target.addFilter(_LOG_FILTER)


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


def translate_error(exc: Exception, ref: str, token: str | None = None) -> HubError:
    """One line for the user, never a secret: huggingface_hub's messages carry the URL, the request id and what the
    server said, which may repeat the token (redacted, with any URL's userinfo)."""
    if isinstance(exc, HubError):
        return exc
    errors = hf_client().errors
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    first = redact(first, known_secrets(token))
    if isinstance(exc, errors.RevisionNotFoundError):
        return HubError(f"revision not found: {first}", path=ref)
    local = _no_local_path(ref)
    if isinstance(exc, errors.RepositoryNotFoundError):
        return HubError(f"repository not found, or private and the token cannot read it{local}", path=ref)
    if isinstance(exc, errors.HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        return (HubTransferError if status in RETRY_STATUS else HubError)(
            f"the Hub answered an error: {first}", path=ref
        )
    return HubTransferError(
        f"cannot reach the Hub ({type(exc).__name__}: {first}){local}",
        path=ref,
        hint="check the local path for a typo; for the Hub, check the network and HF_ENDPOINT (write hf://owner/name "
        "to name the Hub explicitly)",
    )


# ---- one request: retried, capped, within a total deadline ---------------------------------------------------------

MAX_TRIES = 4  # one request and up to three retries, on 429/5xx and connection faults
BASE_WAIT_S = 0.5  # the first wait between tries; doubled each time, at most MAX_WAIT_S
MAX_WAIT_S = 4.0
READ_TIMEOUT_S = 30.0  # a connection silent for this long is a failed try
DEADLINE_S = 120.0  # the whole of one listing, config or header read, retries included
MIN_RATE = 256 << 10  # bytes/s: a download's deadline is DEADLINE_S plus its listed size at this rate
MAX_LISTING = MAX_SMALL_FILE  # the repo's file listing (JSON): refused unread past this
MAX_ERROR_BODY = 64 << 10  # an error answer is read this far for its message


def _deadline_error(seconds: float, source: str) -> HubError:
    return HubTransferError(
        f"no complete answer within {seconds:.0f} s (the total for this request, retries included)",
        path=source,
        hint="check the network and HF_ENDPOINT; a server that answers this slowly is cut off",
    )


def _body(response: Any, limit: int, deadline: float, seconds: float, source: str) -> Iterator[bytes]:
    """The body of a streamed ``response`` as it arrives: at most ``limit`` bytes, and nothing after ``deadline``
    (each read waits at most the request's read timeout, so a dripping server ends there too)."""
    return _capped(response.iter_bytes(), limit, deadline, seconds, source)


def _capped(chunks: Iterable[bytes], limit: int, deadline: float, seconds: float, source: str) -> Iterator[bytes]:
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise HubError(
                f"the server sent more than the {limit} bytes expected; refused unread past that", path=source
            )
        if time.monotonic() > deadline:
            raise _deadline_error(seconds, source)
        yield chunk


def _retry_wait(response: Any, wait: float) -> float:
    after = response.headers.get("Retry-After", "") if response is not None else ""
    return min(float(after), MAX_WAIT_S) if after.isdigit() else wait


def _request(
    url: str, headers: dict[str, str], seconds: float, source: str, token: str | None, read: Callable[[Any, float], T]
) -> T:
    """GET ``url`` and hand the streamed response to ``read(response, deadline)``: tried again on 429/5xx and on a
    connection fault (a dropped or truncated answer included), all within ``seconds``. An error answer is read up to
    ``MAX_ERROR_BODY`` for huggingface_hub's typed error; no answer is ever read whole unbounded."""
    hf = hf_client()
    import httpx2

    deadline = time.monotonic() + seconds
    wait = BASE_WAIT_S
    for attempt in range(1, MAX_TRIES + 1):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _deadline_error(seconds, source)
        retry = None
        try:
            with hf.utils.get_session().stream(
                "GET", url, headers=headers, timeout=min(READ_TIMEOUT_S, remaining), follow_redirects=True
            ) as response:
                if response.status_code in RETRY_STATUS and attempt < MAX_TRIES:
                    retry = response
                elif response.status_code >= 400:
                    body = b"".join(_body(response, MAX_ERROR_BODY, deadline, seconds, source))
                    hf.utils.hf_raise_for_status(
                        httpx2.Response(
                            response.status_code, headers=response.headers, content=body, request=response.request
                        )
                    )
                else:
                    return read(response, deadline)
        except HubError:  # an answer refused by ``read`` or ``_body``
            raise
        except hf.errors.HfHubHTTPError as exc:  # an OSError too: caught before the one below
            raise translate_error(exc, source, token) from None
        except httpx2.TransportError as exc:  # refused, reset, timed out, or an answer cut short
            if attempt == MAX_TRIES:
                raise translate_error(exc, source, token) from None
        except OSError:  # writing the download here: the caller's to report
            raise
        except Exception as exc:  # noqa: BLE001 - every client error becomes one typed line
            raise translate_error(exc, source, token) from None
        time.sleep(max(0.0, min(_retry_wait(retry, wait), deadline - time.monotonic())))
        wait = min(wait * 2, MAX_WAIT_S)
    raise _deadline_error(seconds, source)  # not reached: the last try returns or raises


# ---- what a listing may hold ---------------------------------------------------------------------------------------

_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a git commit or object id (sha1, or sha256 repos)
_SHA256 = re.compile(r"[0-9a-f]{64}")
_GLOB = frozenset("*?[]")  # what download clients read as a pattern in a file name


def _listed_name(name: object, ref: str) -> str | None:
    """``name`` when it is a top-level file, None for a file in a folder (never part of a checkpoint); a HubError
    for a name that leaves the repo or cannot be shown on one line, or one a client would read as a glob pattern."""
    if not isinstance(name, str) or not name:
        raise HubError(f"the repo lists a file name of type {type(name).__name__}", path=ref, hint=NAME_HINT)
    parts = name.split("/")
    if not name.isprintable():
        why = "which holds control or invisible characters"
    elif "\\" in name or any(part in ("", ".", "..") for part in parts) or not is_plain_name(parts[0]):
        why = "a path that leads out of the repo"
    elif len(parts) > 1:
        return None
    elif _GLOB & set(name):
        why = f"which holds a glob character ({' '.join(sorted(_GLOB & set(name)))})"
    else:
        return name
    raise HubError(f"the repo lists a file named {name[:200]!r}, {why}; refused", path=ref, hint=NAME_HINT)


NAME_HINT = (
    "nothing was downloaded: a file name must be plain, printable and free of glob characters to be fetched; check "
    "that HF_ENDPOINT is the Hub, or rename the file in the repo"
)


def _listed_int(value: object, what: str, ref: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HubError(f"the repo lists {what} {printable(repr(value))[:80]}, not a size in bytes", path=ref)
    return value


def _listed_hash(value: object, pattern: re.Pattern[str], what: str, ref: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise HubError(f"the repo lists {what} {printable(repr(value))[:80]}, not a hex digest", path=ref)
    return value


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
    endpoint: str = ""

    def __post_init__(self) -> None:
        ref = self.ref
        self.endpoint = hub_endpoint()
        remember_token(self.token)
        _offline_check(ref)
        path = f"/revision/{quote(self.revision, safe='')}" if self.revision else ""
        url = f"{self.endpoint}/api/models/{self.repo_id}{path}?blobs=true"
        data = _request(url, self._headers(), DEADLINE_S, ref, self.token, self._read_listing)
        info = parse_json_object(data, HubError, "the Hub's file listing", ref)
        sha = info.get("sha")
        if not isinstance(sha, str) or not _SHA.fullmatch(sha):
            raise HubError(f"the Hub answered commit id {printable(repr(sha))[:80]}, not a hex commit id", path=ref)
        self.sha = sha
        siblings = info.get("siblings") or []
        if not isinstance(siblings, list):
            raise HubError("the Hub's file listing has no list of files", path=ref)
        for s in siblings:
            if not isinstance(s, dict):
                raise HubError("the Hub's file listing holds an entry that is not an object", path=ref)
            name = _listed_name(s.get("rfilename"), ref)
            if name is None:
                continue  # only top-level files belong to a checkpoint
            lfs = s.get("lfs")
            lfs = lfs if isinstance(lfs, dict) else {}
            self.files[name] = RemoteFile(
                name,
                _listed_int(s.get("size", 0), f"size of {name!r}", ref),
                _listed_hash(lfs.get("sha256"), _SHA256, f"sha256 of {name!r}", ref),
                _listed_hash(s.get("blobId"), _SHA, f"git object id of {name!r}", ref),
            )

    def _read_listing(self, response: Any, deadline: float) -> bytes:
        return b"".join(_body(response, MAX_LISTING, deadline, DEADLINE_S, self.ref))

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

    def _url(self, name: str) -> str:
        return f"{self.endpoint}/{self.repo_id}/resolve/{self.sha}/{quote(name)}"

    def _headers(self, **extra: str) -> dict[str, str]:
        return {**hf_client().utils.build_hf_headers(token=self.token), "Accept-Encoding": "identity", **extra}

    def _get(self, name: str, start: int, end: int) -> bytes:
        """Bytes [start, end] of ``name``, checked: a 206 with the exact Content-Range, and every byte present."""
        size = self._file(name).size
        source = self.location(name)
        whole = start == 0 and end == size - 1
        want = end - start + 1

        def read(response: Any, deadline: float) -> bytes:
            if response.status_code == 206:
                expected = f"bytes {start}-{end}/{size}"
                got = response.headers.get("Content-Range", "")
                if got.replace(" ", "") != expected.replace(" ", ""):
                    raise HubError(
                        f"the server answered range {printable(got)[:80]!r} to a request for {expected!r}", path=source
                    )
            elif not (response.status_code == 200 and whole):
                raise HubError(f"the server ignored the byte range (HTTP {response.status_code})", path=source)
            return b"".join(_body(response, want, deadline, DEADLINE_S, source))

        data = _request(
            self._url(name), self._headers(Range=f"bytes={start}-{end}"), DEADLINE_S, source, self.token, read
        )
        if len(data) != want:
            raise HubError(f"the server sent {len(data)} of {want} bytes (truncated response)", path=source)
        self.bytes_read += len(data)
        return data

    def download(self, name: str, dest: Path) -> tuple[str, Fingerprint]:
        """Stream ``name`` into the new file ``dest`` (a link there is replaced, never followed), checked as it
        comes: no more than its listed size, then its size and hash (LFS sha256, or the git object id) as listed,
        and synced to disk. Returns its sha256 and the fingerprint of the file as written (whoever reads it later
        checks it is still that file); on any failure ``dest`` is removed."""
        remote = self._file(name)
        source = self.location(name)
        seconds = DEADLINE_S + remote.size / MIN_RATE

        def read(response: Any, deadline: float) -> tuple[str, Fingerprint]:
            if response.status_code != 200:
                raise HubError(f"the server answered HTTP {response.status_code} to a download", path=source)
            sha256, blob = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % remote.size, usedforsecurity=False)
            dest.unlink(missing_ok=True)
            with dest.open("xb") as f:
                for chunk in _body(response, remote.size, deadline, seconds, source):
                    f.write(chunk)
                    sha256.update(chunk)
                    blob.update(chunk)
                got = f.tell()
                f.flush()
                os.fsync(f.fileno())
                written = Fingerprint.of(os.fstat(f.fileno()))
            if got != remote.size:
                raise HubError(f"the server sent {got} of the {remote.size} bytes the Hub lists", path=source)
            if remote.sha256 and sha256.hexdigest() != remote.sha256:
                raise HubError("the download does not match the Hub's sha256", path=source)
            if not remote.sha256 and remote.blob_id and blob.hexdigest() != remote.blob_id:
                raise HubError("the download does not match the Hub's git object id", path=source)
            return sha256.hexdigest(), written

        try:
            return _request(self._url(name), self._headers(), seconds, source, self.token, read)
        except BaseException:
            dest.unlink(missing_ok=True)
            raise

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
