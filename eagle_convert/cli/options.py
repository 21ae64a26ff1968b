"""Every choice the command line offers, generated from the library's tuples (an option takes exactly what the code
behind it takes, so the two cannot drift), and the options several commands share, defined once.

A choice is a plain ``str`` option checked by a callback; its metavar lists the values (the ``--help`` text and
docs/cli.md read it). Nothing here imports torch: ``--device`` and ``--dtype`` are checked by torch-free functions
of the library's ``reference/compute.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import typer

from eagle_convert.draft.aux_layers import CONVENTIONS
from eagle_convert.errors import UsageError
from eagle_convert.normalize.profiles import PROFILES
from eagle_convert.read.config import FAMILIES
from eagle_convert.reference.compute import DEVICES, DTYPES, check_device, check_dtype
from eagle_convert.rules.registry import LEVELS
from eagle_convert.verify.run import FAIL_LEVELS

AUX_AUTO = "auto"  # normalize --aux-convention auto: measured against the target's hidden states


class OneOf:
    """An option callback that lets through ``None`` and the values of ``choices``; anything else is the parser's
    usage error (``Error: Invalid value for '--level': ...`` and a ``Hint:`` line, exit 2)."""

    def __init__(self, choices: Sequence[str], check: Callable[[str], str] | None = None) -> None:
        self.choices = tuple(choices)
        self.check = check

    @property
    def metavar(self) -> str:
        return "[" + "|".join(self.choices) + "]"

    def validate(self, value: str | None) -> str | None:
        if value is None:
            return None
        if self.check is not None:  # the library's own check: its message, under the option's name
            try:
                return self.check(value)
            except UsageError as exc:
                raise typer.BadParameter(exc.cause) from None
        if value not in self.choices:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(map(repr, self.choices))}.")
        return value


def choice(choices: Sequence[str], default: str | None, *names: str, help: str, **kwargs: Any) -> Any:
    """A ``typer.Option`` taking one of ``choices`` (the parameter is annotated ``str``, or ``str | None``)."""
    one_of = kwargs.pop("one_of", None) or OneOf(choices)
    return typer.Option(default, *names, metavar=one_of.metavar, callback=one_of.validate, help=help, **kwargs)


def choices_of(param: Any) -> tuple[str, ...] | None:
    """The values a parsed command parameter takes, when it is a :func:`choice` (docs/cli.md lists them)."""
    callback = getattr(param, "callback", None)
    one_of = getattr(getattr(callback, "__wrapped__", callback), "__self__", None)  # typer wraps OneOf.validate
    return one_of.choices if isinstance(one_of, OneOf) else None


def level_option(help: str) -> Any:
    return choice(LEVELS, LEVELS[0], "--level", help=help)


def fail_level_option(help: str, *, default: bool = True) -> Any:
    """``--fail-level``; without a default (``None``), the caller falls back to pyproject.toml, then to the first."""
    return choice(FAIL_LEVELS, FAIL_LEVELS[0] if default else None, "--fail-level", help=help)


def aux_convention_option(help: str, *, auto: bool = False) -> Any:
    return choice((*CONVENTIONS, AUX_AUTO) if auto else CONVENTIONS, None, "--aux-convention", help=help)


def device_option(help: str) -> Any:
    """``--device auto|cpu|cuda|cuda:N``: what ``compute.resolve`` takes, checked by the library while parsing."""
    return choice(DEVICES, DEVICES[0], "--device", help=help, one_of=OneOf(DEVICES, check_device))


def dtype_option(help: str) -> Any:
    return choice(DTYPES, DTYPES[0], "--dtype", help=help, one_of=OneOf(DTYPES, check_dtype))


def profile_option(help: str) -> Any:
    return choice(tuple(PROFILES), next(iter(PROFILES)), "--profile", help=help)


def family_option(help: str) -> Any:
    return choice(FAMILIES, None, "--target-family", help=help)
