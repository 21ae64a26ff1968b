"""``verify``: the pre-deploy gate. ``request`` is the run asked and checked; ``run`` drives the levels; ``static``,
``tensors`` and ``forward`` check; the gate's findings come from :mod:`eagle_convert.gate`; ``report`` is the result."""

from __future__ import annotations

__all__ = ["verify_checkpoint"]


def __getattr__(name: str) -> object:
    if name == "verify_checkpoint":
        from eagle_convert.verify.run import verify_checkpoint

        return verify_checkpoint
    raise AttributeError(name)
