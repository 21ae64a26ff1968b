"""``normalize``: its checked request, the plan (config and tensor actions) from what the draft means (``semantics``),
the per-engine profiles, the atomic streaming writer, and verify's verdict per release on what it wrote
(``verdicts``)."""

from __future__ import annotations

__all__ = ["normalize_checkpoint"]


def __getattr__(name: str) -> object:
    # lazy: `import eagle_convert.normalize.writer` must not pull in the planner
    if name == "normalize_checkpoint":
        from eagle_convert.normalize.plan import normalize_checkpoint

        return normalize_checkpoint
    raise AttributeError(name)
