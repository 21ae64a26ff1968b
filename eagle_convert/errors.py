"""The one error hierarchy of eagle-convert.

Library code raises these; the CLI renders them once (``Error: ...`` / ``Hint: ...`` on stderr) and exits with
``exit_code``. Every message names the file it is about and the cause, on one line.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_BAD_INPUT = 2
EXIT_NOTHING_TO_CHECK = 3


class EagleConvertError(Exception):
    """Base class: a message that names the file and the cause, and a hint that says what to do."""

    exit_code = EXIT_BAD_INPUT
    default_hint: str | None = None

    def __init__(self, message: str, *, path: str | Path | None = None, hint: str | None = None) -> None:
        self.path = str(path) if path is not None else None
        self.cause = message
        self.hint = hint if hint is not None else self.default_hint
        super().__init__(self.message)

    @property
    def message(self) -> str:
        text = " ".join(self.cause.split())  # always one line
        return f"{self.path}: {text}" if self.path else text


class InputError(EagleConvertError):
    """The input is malformed or unsafe to read (exit 2)."""


class HeaderError(InputError):
    """A safetensors file whose header or data layout is invalid."""

    default_hint = "the file is corrupt or was not written by a safetensors writer; re-export or re-download it"


class ShardIndexError(InputError):
    """A sharded checkpoint whose index disagrees with its shards or names unsafe paths."""

    default_hint = "re-export the checkpoint, or regenerate model.safetensors.index.json from the shards"


class ConfigError(InputError):
    """A config.json that is missing, not valid JSON, or has fields of the wrong type."""

    default_hint = "fix config.json (it must be one JSON object with the draft's settings)"


class UnsafePathError(InputError):
    """A path that would make the tool read or write outside the directory it was given."""

    default_hint = "shard and file names must be plain names inside the checkpoint directory"


class OutputExistsError(InputError):
    """The output path already exists and replacing it was not asked for."""

    default_hint = "choose another output path, or pass --force to replace it"


class DiskFullError(InputError):
    """The disk (or the user's quota) filled up while writing the output; nothing was written."""

    default_hint = "free some space on that filesystem (or write elsewhere) and run the command again"


class NormalizeRefused(InputError):
    """A draft `normalize` will not convert without guessing (ambiguous ids, flags that disagree with weights...)."""

    default_hint = "nothing was written; fix the source or pass the flag the message names"


class UsageError(EagleConvertError):
    """A command-line usage problem the parser cannot see (exit 2)."""

    default_hint = "run the command with --help to see its options"


def check_choice(what: str, value: str, choices: Collection[str]) -> str:
    """``value`` when it is one of ``choices``; a :class:`UsageError` naming ``what`` and the choices otherwise."""
    if value not in choices:
        raise UsageError(f"unknown {what} {value!r}; choose from {', '.join(choices)}")
    return value


class NothingToCheckError(EagleConvertError):
    """The path holds neither a config nor weights (exit 3)."""

    exit_code = EXIT_NOTHING_TO_CHECK
    default_hint = "point at a draft checkpoint directory (config.json plus *.safetensors)"


REFERENCE_INSTALL = "pip install 'eagle-convert[reference]'"


class ExtraMissing(UsageError):
    """A feature needs an optional dependency the core install lacks (exit 2); the message names the install line."""

    default_hint = (
        "the core install reads configs and safetensors headers only; the reference extra adds torch and numpy "
        "(install torch first from https://download.pytorch.org/whl/cpu for the small CPU build)"
    )


def require_torch(feature: str) -> None:
    """Raise :class:`ExtraMissing` naming ``feature`` and the install line when torch cannot be imported here.

    Checked before the work starts, so a run without torch stops at once with one line instead of an ImportError
    deep inside the reference models."""
    import importlib.util

    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # an import hook that refuses torch, or a broken half-installed one
        found = False
    if not found:
        raise ExtraMissing(f"{feature} needs torch, which is not installed: {REFERENCE_INSTALL}")
