"""One read of a draft's tensors for every level of a verify: each shard opened once, each tensor read once.

``verify --level tensors`` streams the tensors through :class:`TensorReader` and drops each after its checks; when a
forward level follows, the reader keeps what it read, so the reference forward loads the draft without reading
the shards again.
"""

from __future__ import annotations

from contextlib import ExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eagle_convert.read.checkpoint import Checkpoint


class TensorReader:
    """A safetensors checkpoint's tensors by stored name. Each shard is opened once (on first use) and stays open
    until :meth:`close`; with ``keep``, each tensor read is kept and handed out again instead of re-read."""

    def __init__(self, ckpt: Checkpoint, *, keep: bool = False) -> None:
        self.ckpt = ckpt
        self.keep = keep
        self._stack = ExitStack()
        self._shards: dict[str, Any] = {}
        self._kept: dict[str, Any] = {}

    def get(self, name: str) -> Any:
        """The tensor stored as ``name`` (a torch.Tensor)."""
        if name in self._kept:
            return self._kept[name]
        shard = self.ckpt.tensors[name].shard
        handle = self._shards.get(shard)
        if handle is None:
            from safetensors import safe_open

            handle = self._stack.enter_context(safe_open(str(self.ckpt.root / shard), framework="pt"))
            self._shards[shard] = handle
        tensor = handle.get_tensor(name)
        if self.keep:
            self._kept[name] = tensor
        return tensor

    def close(self) -> None:
        """Close the shards and drop the kept tensors (whoever holds them keeps them)."""
        self._stack.close()
        self._shards.clear()
        self._kept.clear()

    def __enter__(self) -> TensorReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
