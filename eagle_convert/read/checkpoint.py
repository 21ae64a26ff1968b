"""Open a draft checkpoint: config.json plus one safetensors file or a sharded index, headers only.

A checkpoint is a directory (or a single ``.safetensors`` file, or a bare ``config.json``). Nothing here imports
torch or reads tensor bytes. Pickle weight files are listed, never opened.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from eagle_convert.errors import ConfigError, InputError, NothingToCheckError, ShardIndexError, UnsafePathError
from eagle_convert.read.jsonstrict import parse_json_object
from eagle_convert.read.regular import read_regular
from eagle_convert.read.safetensors_header import LIMIT_HINT, MAX_TENSORS, SafetensorsHeader, TensorInfo, read_header
from eagle_convert.read.source_files import Fingerprint
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import finding

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
SAFETENSORS_SUFFIX = ".safetensors"
INDEX_SUFFIX = ".safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
TOKENIZER_FILES = (  # what `pull --tokenizer` fetches beside a draft
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "generation_config.json",
)


def is_checkpoint_file(name: str) -> bool:
    """A name a checkpoint's files have (config, safetensors or pickle weights, an index, tokenizer files): what
    ``normalize`` and ``pull`` write, and all that ``--force`` may replace."""
    return (
        name == CONFIG_NAME
        or name in TOKENIZER_FILES
        or name.endswith((SAFETENSORS_SUFFIX, INDEX_SUFFIX, ".bin.index.json", *PICKLE_SUFFIXES))
    )


# The most shards an index may name: the largest released checkpoints have a few hundred (Llama 3.1 405B: 191).
MAX_SHARDS = 10_000
NAME_MAX = 255  # bytes in a file name (UTF-8), on every filesystem a checkpoint lives on


@dataclass(frozen=True)
class ShardInfo:
    name: str
    size: int
    tensor_count: int
    metadata: dict[str, str]
    fingerprint: Fingerprint | None = None  # the file as its header was read (None: read from the Hub)


class Store(Protocol):
    """Where a checkpoint's files are: a local directory, or a Hub repo at a pinned revision (hub.py)."""

    def names(self) -> list[str]: ...  # the files at the top level
    def is_file(self, name: str) -> bool: ...
    def location(self, name: str) -> str: ...  # how errors name the file
    def read_bytes(self, name: str) -> bytes: ...  # a small file (config, index)
    def header(self, name: str) -> SafetensorsHeader: ...  # a validated safetensors header (bytes never read)


class LocalStore:
    """A checkpoint directory on disk. Every file must resolve inside it (symlinks included)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def names(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir())

    def is_file(self, name: str) -> bool:
        path = self.root / name
        _resolved(path, self.root)  # a symlink loop is named as one, not as a missing file
        return path.is_file()

    def location(self, name: str) -> str:
        return str(self.root / name)

    def read_bytes(self, name: str) -> bytes:
        path = self.root / name
        _ensure_inside(self.root, path)
        try:
            return read_regular(path)
        except OSError as exc:
            raise InputError(f"cannot read file: {exc.strerror or exc}", path=path) from None

    def header(self, name: str) -> SafetensorsHeader:
        path = self.root / name
        _ensure_inside(self.root, path)
        return read_header(path, shard=name)


@dataclass(frozen=True)
class Checkpoint:
    """What is on disk, validated. ``tensors`` maps name -> header record, in file order."""

    path: Path
    root: Path
    config: dict[str, Any] | None
    config_path: Path | None
    index_path: Path | None
    shards: tuple[ShardInfo, ...]
    tensors: Mapping[str, TensorInfo]
    pickle_files: tuple[str, ...]
    notes: tuple[Finding, ...] = field(default=())
    revision: str | None = None  # the resolved commit sha of a Hub repo; None on disk
    store: Store | None = None  # where the files are read from (None for a single file or a bare config)

    @property
    def weight_format(self) -> str:
        if self.shards:
            return "safetensors"
        return "pickle" if self.pickle_files else "none"

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


def open_checkpoint(path: str | Path) -> Checkpoint:
    """Open and validate the checkpoint at ``path``; raise a typed :class:`InputError` on anything malformed."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise InputError("no such file or directory", path=path, hint="check the path (or the repo id)")
    if path.is_symlink() and not path.exists():  # a link to nothing, or one that loops
        _resolved(path, path.parent)
        raise InputError("is a symbolic link to a file that does not exist", path=path, hint="check the link's target")
    if path.is_file():
        return _open_file(path)
    if not path.is_dir():
        raise InputError("not a regular file or directory", path=path)
    return _open_dir(path)


def _open_file(path: Path) -> Checkpoint:
    root = path.parent
    if path.name.endswith(SAFETENSORS_SUFFIX):
        config_path = root / CONFIG_NAME
        if not config_path.is_file():
            raise ConfigError(
                f"no {CONFIG_NAME} next to the weights",
                path=path,
                hint=f"put the draft's {CONFIG_NAME} in {root}, or pass the directory",
            )
        header = read_header(path)
        return Checkpoint(
            path,
            root,
            _read_local_config(config_path),
            config_path,
            None,
            (_shard_info(header),),
            _tensor_map([header], path),
            (),
        )
    if path.suffix == ".json":
        return Checkpoint(path, root, _read_local_config(path), path, None, (), {}, ())
    if path.name.endswith(PICKLE_SUFFIXES):
        config_path = root / CONFIG_NAME
        config = _read_local_config(config_path) if config_path.is_file() else None
        return Checkpoint(path, root, config, config_path if config else None, None, (), {}, (path.name,))
    raise InputError(
        "not a checkpoint file",
        path=path,
        hint="pass a checkpoint directory, a .safetensors file, or a config.json",
    )


def _open_dir(root: Path) -> Checkpoint:
    return open_store(LocalStore(root), root)


def holds_checkpoint(directory: Path) -> bool:
    """Whether a local directory holds anything a checkpoint is read from (a config or weight files), by its names
    alone: what :func:`open_store` refuses with NothingToCheckError when it does not."""
    return _checkpoint_names(LocalStore(directory).names())


def _checkpoint_names(names: Collection[str]) -> bool:
    return any(
        n == CONFIG_NAME or n.endswith((SAFETENSORS_SUFFIX, INDEX_SUFFIX, *PICKLE_SUFFIXES, ".bin.index.json"))
        for n in names
    )


def open_store(store: Store, path: Path, revision: str | None = None) -> Checkpoint:
    """Open and validate the checkpoint held by ``store`` (``path`` names it in reports)."""
    names = store.names()
    safetensors = [n for n in names if n.endswith(SAFETENSORS_SUFFIX)]
    indexes = [n for n in names if n.endswith(INDEX_SUFFIX)]
    pickles = tuple(n for n in names if n.endswith(PICKLE_SUFFIXES) or n.endswith(".bin.index.json"))
    has_config = CONFIG_NAME in names

    if not _checkpoint_names(names):
        raise NothingToCheckError(f"no {CONFIG_NAME} and no weight files here", path=path)
    if not has_config:
        raise ConfigError(f"{CONFIG_NAME} is missing", path=path, hint=f"a draft checkpoint needs its {CONFIG_NAME}")
    config = _read_config(store, CONFIG_NAME)
    index_name, headers, tensors, notes = _read_weights(store, path, safetensors, indexes)
    if headers and pickles:
        notes.append(finding("EC003", f"pickle files {list(pickles)} ignored: safetensors present", severity="info"))
    return Checkpoint(
        path,
        path,
        config,
        path / CONFIG_NAME,
        path / index_name if index_name else None,
        tuple(_shard_info(h) for h in headers),
        tensors,
        pickles,
        tuple(notes),
        revision,
        store,
    )


def _read_weights(
    store: Store, path: Path, safetensors: list[str], indexes: list[str]
) -> tuple[str | None, list[SafetensorsHeader], dict[str, TensorInfo], list[Finding]]:
    """(index read, shard headers, name -> tensor record, notes): the index when there is one, else every shard."""
    notes: list[Finding] = []
    index_name: str | None = None
    if indexes:
        index_name = INDEX_NAME if INDEX_NAME in indexes else indexes[0]
        if len(indexes) > 1:
            notes.append(finding("EC014", f"several index files; read {index_name}"))
        headers, tensors = _read_sharded(store, index_name)
        named = {h.path.name for h in headers}
        notes.extend(
            finding("EC014", f"{name} is not named by {index_name}; engines that follow the index skip it")
            for name in safetensors
            if name not in named
        )
    else:
        headers = _read_headers(store, safetensors, path)
        tensors = _tensor_map(headers, path)
        if len(headers) > 1:
            notes.append(
                finding(
                    "EC014",
                    f"{len(headers)} safetensors files and no index: all were read as shards, as the engines do",
                    severity="info",
                )
            )
    return index_name, headers, dict(tensors), notes


def open_weights(directory: str | Path) -> Mapping[str, TensorInfo]:
    """The safetensors tensors of a model directory (a target's), validated as a draft's are, config not read."""
    root = Path(directory)
    store = LocalStore(root)
    names = store.names()
    safetensors = [n for n in names if n.endswith(SAFETENSORS_SUFFIX)]
    indexes = [n for n in names if n.endswith(INDEX_SUFFIX)]
    if not safetensors and not indexes:
        raise InputError("no safetensors weights here", path=root, hint="point at the model's checkpoint directory")
    return _read_weights(store, root, safetensors, indexes)[2]


def _read_local_config(path: Path) -> dict[str, Any]:
    return _read_config(LocalStore(path.parent), path.name)


def _read_config(store: Store, name: str) -> dict[str, Any]:
    what = CONFIG_NAME if name == CONFIG_NAME else "config"
    return parse_json_object(store.read_bytes(name), ConfigError, what, store.location(name))


def _read_sharded(store: Store, index_name: str) -> tuple[list[SafetensorsHeader], dict[str, TensorInfo]]:
    """Read every shard the index names and check the index against the headers."""
    index_path = store.location(index_name)
    index = parse_json_object(store.read_bytes(index_name), ShardIndexError, "index", index_path)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ShardIndexError("weight_map must be an object mapping tensor names to shard file names", path=index_path)
    shard_names = list(dict.fromkeys(weight_map.values()))  # in order of first mention; a set: linear in the map
    _check_shard_count(shard_names, index_path)
    for name in shard_names:
        _check_shard_name(name, index_path)
    for name in shard_names:
        if not store.is_file(name):
            raise ShardIndexError(f"shard {name!r} named by the index does not exist", path=index_path)
    headers = _read_headers(store, shard_names, index_path)

    tensors = _tensor_map(headers, index_path)
    for header in headers:
        for t in header.tensors:
            mapped = weight_map.get(t.name)
            if mapped is None:
                raise ShardIndexError(f"tensor {t.name!r} in {t.shard} is missing from weight_map", path=index_path)
            if mapped != t.shard:
                raise ShardIndexError(
                    f"tensor {t.name!r} is in {t.shard} but weight_map says {mapped}", path=index_path
                )
    absent = [n for n in weight_map if n not in tensors]
    if absent:
        raise ShardIndexError(
            f"weight_map names {len(absent)} tensor(s) no shard holds, e.g. {absent[0]!r} in {weight_map[absent[0]]}",
            path=index_path,
        )
    _check_total_size(index, sum(t.nbytes for t in tensors.values()), index_path)
    return headers, tensors


def _read_headers(store: Store, names: list[str], source: str | Path) -> list[SafetensorsHeader]:
    """The header of each shard in ``names``, at most MAX_SHARDS of them holding at most MAX_TENSORS tensors in all
    (counted as they are read: memory stays bounded by the limits, whatever the index or the directory holds)."""
    _check_shard_count(names, source)
    headers, count = [], 0
    for name in names:
        header = store.header(name)
        count += len(header.tensors)
        if count > MAX_TENSORS:
            raise ShardIndexError(
                f"the shards hold over {MAX_TENSORS:,} tensors (the limit) by {name}", path=source, hint=LIMIT_HINT
            )
        headers.append(header)
    return headers


def _check_shard_count(names: list[str], source: str | Path) -> None:
    if len(names) > MAX_SHARDS:
        says = "names" if str(source).endswith(INDEX_SUFFIX) else "holds"
        raise ShardIndexError(
            f"{says} {len(names):,} shards, over the {MAX_SHARDS:,} limit", path=source, hint=LIMIT_HINT
        )


def _check_total_size(index: dict[str, Any], actual: int, index_path: str) -> None:
    metadata = index.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ShardIndexError("metadata must be an object", path=index_path)
    if "total_size" not in metadata:
        return
    total = metadata["total_size"]
    if isinstance(total, float) and total.is_integer():
        total = int(total)
    if not isinstance(total, int) or isinstance(total, bool):
        raise ShardIndexError(f"metadata.total_size {total!r} is not an integer", path=index_path)
    if total != actual:
        raise ShardIndexError(
            f"metadata.total_size is {total} but the shards hold {actual} bytes of tensors", path=index_path
        )


def is_plain_name(name: str) -> bool:
    """A bare file name: nothing that could point into another directory on any platform."""
    return (
        bool(name)
        and name not in (".", "..")
        and "/" not in name
        and "\\" not in name
        and "\x00" not in name
        and not os.path.isabs(name)
        and not (len(name) > 1 and name[1] == ":")  # Windows drive letter
    )


def _check_shard_name(name: str, index_path: str) -> None:
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > NAME_MAX:
        raise ShardIndexError(
            f"index names shard {name[:60]!r}... of {size:,} bytes, longer than a file name can be ({NAME_MAX})",
            path=index_path,
        )
    if not is_plain_name(name):
        raise UnsafePathError(f"index names shard {name!r}, which is not a plain file name", path=index_path)
    if not name.endswith(SAFETENSORS_SUFFIX):
        raise ShardIndexError(f"index names shard {name!r}, which is not a .safetensors file", path=index_path)


def _ensure_inside(root: Path, path: Path) -> None:
    """Refuse a file that resolves outside ``root`` (symlinks included).

    The one exception is a Hugging Face cache snapshot, whose files are symlinks into the same repo's ``blobs/``.
    """
    real_root = _resolved(root, root)
    real = _resolved(path, root)
    if real.is_relative_to(real_root):
        return
    repo_dir = real_root.parent.parent
    if real_root.parent.name == "snapshots" and real.is_relative_to(repo_dir / "blobs"):
        return
    raise UnsafePathError(f"{path.name} resolves to {real}, outside the checkpoint directory", path=root)


def resolved(path: Path, hint: str | None = None, outcome: str = "not read") -> Path:
    """``path`` with every symlink followed; an InputError naming ``path`` when a link loops or cannot be read (a
    bare ``Path.resolve()`` raises RuntimeError for a loop in Python < 3.13: an internal error)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError) as exc:  # Python < 3.13 raises RuntimeError for a loop, later ones OSError
        loop = isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP
        cause = "is a symbolic link that loops" if loop else f"cannot be resolved: {getattr(exc, 'strerror', exc)}"
        raise InputError(f"{cause}: {outcome}", path=path, hint=hint or "replace the link with the real file") from None


def _resolved(path: Path, root: Path) -> Path:
    return resolved(path, f"replace it with the real file, or a link to one inside {root}")


def _shard_info(header: SafetensorsHeader) -> ShardInfo:
    return ShardInfo(header.path.name, header.file_size, len(header.tensors), header.metadata, header.fingerprint)


def _tensor_map(headers: list[SafetensorsHeader], source: str | Path) -> dict[str, TensorInfo]:
    tensors: dict[str, TensorInfo] = {}
    for header in headers:
        for t in header.tensors:
            if t.name in tensors:
                raise ShardIndexError(
                    f"tensor {t.name!r} is in two shards ({tensors[t.name].shard} and {t.shard})", path=source
                )
            tensors[t.name] = t
    return tensors
