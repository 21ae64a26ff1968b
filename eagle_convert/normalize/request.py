"""normalize's request: every option of a run, typed and frozen, checked whole before any checkpoint is opened.

The CLI builds one :class:`NormalizeRequest` from its options (it reads the user's ``--token-ids`` and ``--prompts``
files first); a library caller builds the same, or passes the fields flat to ``normalize_checkpoint``.
:meth:`NormalizeRequest.validate` raises every usage error (exit 2, an ``Error:`` and a ``Hint:``) before the draft
is opened. Each option's default is one named constant, which the CLI's options take too. No torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from eagle_convert.draft.aux_layers import CONVENTIONS
from eagle_convert.errors import UsageError, check_choice
from eagle_convert.normalize.profiles import PROFILES
from eagle_convert.read.config import FAMILIES
from eagle_convert.reference.budget import MIN_POSITIONS, PROBE_STEPS
from eagle_convert.reference.compute import DEFAULT_DEVICE, DEFAULT_DTYPE, check_device, check_dtype_choice

AUX_AUTO = "auto"  # --aux-convention auto: measured against the target's hidden states
AUX_CONVENTIONS = (*CONVENTIONS, AUX_AUTO)
DEFAULT_PROFILE = next(iter(PROFILES))  # portable
PROBE_OPTIONS = ("token_ids", "prompts")  # what only --aux-convention auto reads (besides device, dtype, positions)


@dataclass(frozen=True)
class NormalizeRequest:
    """What ``normalize`` is asked to do; ``device``, ``dtype``, ``token_ids``, ``prompts``, ``probe_positions`` and
    ``probe_steps`` are what ``--aux-convention auto`` measures with (as ``verify --level target`` does)."""

    profile: str = DEFAULT_PROFILE
    target: Path | None = None  # the target model's directory or config.json
    target_family: str | None = None  # when no target config is at hand
    aux_convention: str | None = None  # output-of, input-to or auto (None: what the draft's config says)
    dry_run: bool = False
    allow_pickle: bool = False
    force: bool = False
    max_shard_size: int | None = None  # bytes
    device: str = DEFAULT_DEVICE
    dtype: str = DEFAULT_DTYPE  # the reference's auto (reference/compute.py), never the engine's
    token_ids: tuple[tuple[int, ...], ...] | None = None
    prompts: tuple[str, ...] | None = None
    probe_positions: int = MIN_POSITIONS
    probe_steps: int = PROBE_STEPS
    # the user's files read into this request (--token-ids, --prompts): inputs too, which OUT must not be or hold
    read_files: tuple[Path, ...] = ()

    @classmethod
    def build(cls, **options: Any) -> NormalizeRequest:
        """The request of ``normalize_checkpoint``'s flat keywords (as its callers have always passed them); an
        unknown keyword is a UsageError naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise UsageError(f"unknown normalize option(s) {', '.join(unknown)}", hint=f"known: {', '.join(known)}")
        if options.get("target") is not None:
            options["target"] = Path(options["target"])
        if options.get("token_ids") is not None:
            options["token_ids"] = tuple(tuple(s) for s in options["token_ids"])
        if options.get("prompts") is not None:
            options["prompts"] = tuple(options["prompts"])
        if options.get("read_files") is not None:
            options["read_files"] = tuple(Path(p) for p in options["read_files"])
        return cls(**options)

    @property
    def measures(self) -> bool:
        """``--aux-convention auto``: the convention is measured against the target."""
        return self.aux_convention == AUX_AUTO

    @property
    def declared_convention(self) -> str | None:
        """The convention the user declared (auto declares none: it is measured, after detection)."""
        return None if self.measures else self.aux_convention

    def validate(self) -> NormalizeRequest:
        """Raise the first usage error of the request, before any file is opened; the request when it has none."""
        check_choice("profile", self.profile, PROFILES)
        if self.target is not None and self.target_family is not None:
            raise UsageError("--target and --target-family are exclusive", hint="pass one of them")
        if self.target_family is not None:
            check_choice("target family", self.target_family, FAMILIES)
        if self.aux_convention is not None:
            check_choice("aux-layer convention", self.aux_convention, AUX_CONVENTIONS)
        if self.max_shard_size is not None and self.max_shard_size <= 0:
            raise UsageError(f"--max-shard-size {self.max_shard_size} is not a size", hint="give it in bytes, > 0")
        check_device(self.device)
        check_dtype_choice(self.dtype)
        if self.measures and self.target is None:
            raise UsageError(
                "--aux-convention auto measures the draft against the target: pass --target DIR",
                hint="or declare the convention: --aux-convention output-of or input-to",
            )
        given = [name for name in PROBE_OPTIONS if getattr(self, name) is not None]
        if given and not self.measures:
            flags = " and ".join(f"--{name.replace('_', '-')}" for name in given)
            raise UsageError(
                f"{flags} only apply to --aux-convention auto (the text the convention is measured on)",
                hint="drop them, or pass --aux-convention auto --target DIR",
            )
        if self.token_ids is not None and self.prompts is not None:
            raise UsageError(
                "--token-ids and --prompts are exclusive (the probe runs on one text)", hint="pass one of them"
            )
        if self.probe_steps < 1 or self.probe_positions < 1:
            raise UsageError("the probe needs at least one step and one position")
        return self
