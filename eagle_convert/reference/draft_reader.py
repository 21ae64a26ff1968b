"""One read of a draft's tensors for every level of a verify: each shard opened once, each tensor read once.

``verify --level tensors`` streams the tensors through :class:`TensorReader` and drops each after its checks; when a
forward level follows, the reader keeps what it read, so the reference forward loads the draft without reading
the shards again. The values come through ``reference/tensor_file.py`` (the strict header's offsets, one checked
descriptor a shard), as every reader of values gets them.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from eagle_convert.reference.tensor_file import TensorFile

if TYPE_CHECKING:
    import torch

    from eagle_convert.read.checkpoint import Checkpoint


class TensorReader:
    """A safetensors checkpoint's tensors by stored name. Each shard is opened once (on first use) and stays open
    until :meth:`close`; with ``keep``, each tensor read is kept and handed out again instead of re-read."""

    def __init__(self, ckpt: Checkpoint, *, keep: bool = False) -> None:
        self.ckpt = ckpt
        self.keep = keep
        self._file = TensorFile(ckpt)
        self._kept: dict[str, torch.Tensor] = {}

    def get(self, name: str) -> torch.Tensor:
        """The tensor stored as ``name``."""
        if name in self._kept:
            return self._kept[name]
        tensor = self._file.get_tensor(name)
        if self.keep:
            self._kept[name] = tensor
        return tensor

    def close(self) -> None:
        """Close the shards and drop the kept tensors (whoever holds them keeps them)."""
        self._file.close()
        self._kept.clear()

    def __enter__(self) -> TensorReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
