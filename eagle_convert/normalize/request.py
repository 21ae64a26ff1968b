"""normalize's request: every option of a run, typed and frozen, checked whole before any checkpoint is opened.

Each option is declared once, on its field here (eagle_convert/options.py); the normalize command's options are derived
from these fields (it reads the user's ``--token-ids`` and ``--prompts`` files into the request), and
``--device``/``--dtype`` are the option group verify has too (reference/compute.py). A library caller builds the
same request, or passes the fields flat to ``normalize_checkpoint``. :meth:`NormalizeRequest.validate` raises every
usage error (exit 2, an ``Error:`` and a ``Hint:``) before the draft is opened. No torch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle_convert.draft.aux_layers import CONVENTIONS
from eagle_convert.errors import UsageError
from eagle_convert.normalize.profiles import PROFILES
from eagle_convert.options import build, check, group, option
from eagle_convert.probe.text import read_prompts, read_token_ids
from eagle_convert.read.config import FAMILIES
from eagle_convert.reference.budget import MIN_POSITIONS, PROBE_STEPS
from eagle_convert.reference.compute import ComputeRequest

AUX_AUTO = "auto"  # --aux-convention auto: measured against the target's hidden states
AUX_CONVENTIONS = (*CONVENTIONS, AUX_AUTO)
DEFAULT_PROFILE = next(iter(PROFILES))  # portable
PROBE_OPTIONS = ("token_ids", "prompts")  # what only --aux-convention auto reads (besides device, dtype, positions)
_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def shard_size(text: str) -> int:
    """--max-shard-size: '5GB', '500MiB' or a byte count -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise UsageError(f"--max-shard-size {text!r} is not a size", hint="write it like 5GB, 500MiB or 1000000")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _rows(token_ids: Iterable[Iterable[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(row) for row in token_ids)


@dataclass(frozen=True)
class NormalizeRequest:
    """What ``normalize`` is asked to do: each field one option of the normalize command. ``compute``,
    ``token_ids``, ``prompts``, ``probe_positions`` and ``probe_steps`` are what ``--aux-convention auto`` measures
    with (as ``verify --level target`` does)."""

    profile: str = option(
        DEFAULT_PROFILE,
        choices=tuple(PROFILES),
        help="Output form: portable loads right in both engines; sglang, vllm and speculators carry only what that "
        "consumer reads.",
    )
    target: Path | None = option(
        None, metavar="PATH", help="Target model directory or config.json (N, hidden size, family)."
    )
    target_family: str | None = option(None, choices=FAMILIES, help="Target family, when no target config is at hand.")
    aux_convention: str | None = option(  # None: what the draft's config says
        None,
        choices=AUX_CONVENTIONS,
        label="aux-layer convention",
        help="Declare what the source's aux-layer ids mean, or measure it against --target (auto).",
    )
    dry_run: bool = option(False, help="Print the plan; write nothing.")
    allow_pickle: bool = option(False, help="Convert .bin/.pt weights with torch's weights-only loader.")
    force: bool = option(False, help="Replace an existing OUT (atomically) that holds a checkpoint's files only.")
    max_shard_size: int | None = option(  # bytes
        None,
        metavar="SIZE",
        cli_type=str,
        from_cli=shard_size,
        help="Re-split the output into shards of at most SIZE (e.g. 5GB).",
    )
    compute: ComputeRequest = group(ComputeRequest(), when="--aux-convention auto")  # the reference's auto dtype
    token_ids: tuple[tuple[int, ...], ...] | None = option(
        None,
        metavar="FILE",
        cli_type=Path,
        from_cli=read_token_ids,
        parse=_rows,
        help="--aux-convention auto: a JSON list of token-id lists to measure with (as verify --token-ids).",
    )
    prompts: tuple[str, ...] | None = option(
        None,
        metavar="FILE",
        cli_type=Path,
        from_cli=read_prompts,
        parse=tuple,
        help="--aux-convention auto: text prompts, one per line, continued by the target (as verify --prompts).",
    )
    probe_positions: int = option(
        MIN_POSITIONS, min=16, help="--aux-convention auto: positions to score at least (as verify)."
    )
    probe_steps: int = option(PROBE_STEPS, cli=False, min=1, help="--aux-convention auto: draft chain length.")
    # the user's files read into this request (--token-ids, --prompts): inputs too, which OUT must not be or hold
    read_files: tuple[Path, ...] = field(default=())

    @classmethod
    def build(cls, **options: Any) -> NormalizeRequest:
        """The request of ``normalize_checkpoint``'s flat keywords (as its callers have always passed them:
        ``device`` and ``dtype`` set ``compute``); an unknown keyword is a UsageError naming it."""
        return build(cls, options, "normalize")

    @property
    def device(self) -> str:
        return self.compute.device

    @property
    def dtype(self) -> str:
        return self.compute.dtype

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
        check(self)  # every declared value: its choices, its range
        if self.target is not None and self.target_family is not None:
            raise UsageError("--target and --target-family are exclusive", hint="pass one of them")
        if self.max_shard_size is not None and self.max_shard_size <= 0:
            raise UsageError(f"--max-shard-size {self.max_shard_size} is not a size", hint="give it in bytes, > 0")
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
        return self
