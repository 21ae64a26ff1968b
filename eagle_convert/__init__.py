"""eagle-convert: inspect, normalize and verify EAGLE3 speculative-decoding draft checkpoints."""

from __future__ import annotations

from eagle_convert.version import __version__

__all__ = ["__version__", "inspect_checkpoint", "open_checkpoint"]


def __getattr__(name: str) -> object:
    # Lazy re-exports keep `import eagle_convert` cheap (no rich, no typer, never torch).
    if name == "inspect_checkpoint":
        from eagle_convert.inspect_api import inspect_checkpoint

        return inspect_checkpoint
    if name == "open_checkpoint":
        from eagle_convert.read.checkpoint import open_checkpoint

        return open_checkpoint
    raise AttributeError(name)
