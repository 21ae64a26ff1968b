"""Every choice the command line offers, generated from the library's tuples (an option takes exactly what the code
behind it takes, so the two cannot drift), and the options several commands share, defined once.

A choice is a plain ``str`` option checked by a callback; its metavar lists the values (the ``--help`` text and
docs/cli.md read it). Nothing here imports torch: ``--device`` and ``--dtype`` are checked by torch-free functions
of the library's ``reference/compute.py``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import typer

from eagle_convert import engines
from eagle_convert.draft.aux_layers import CONVENTIONS
from eagle_convert.engines import DTYPE_AUTO as ENGINE_DTYPE_AUTO
from eagle_convert.errors import UsageError
from eagle_convert.normalize.profiles import PROFILES
from eagle_convert.normalize.request import AUX_AUTO, DEFAULT_PROFILE
from eagle_convert.read.config import FAMILIES
from eagle_convert.reference.compute import (
    DEFAULT_DEVICE,
    DEFAULT_DTYPE,
    DEVICES,
    DTYPE_CHOICES,
    REFERENCE_DTYPE_AUTO,
    check_device,
    check_dtype_choice,
)
from eagle_convert.rules.registry import LEVELS
from eagle_convert.verify.request import FAIL_LEVELS


class OneOf:
    """An option callback that lets through ``None`` and the values of ``choices``; anything else is the parser's
    usage error (``Error: Invalid value for '--level': ...`` and a ``Hint:`` line, exit 2)."""

    def __init__(self, choices: Sequence[str], check: Callable[[str], str] | None = None) -> None:
        self.choices = tuple(choices)
        self.check = check

    @property
    def metavar(self) -> str:
        return "[" + "|".join(self.choices) + "]"

    def complete(self, incomplete: str) -> list[str]:
        """Shell completion (``--install-completion``): the values that start with what was typed."""
        return [c for c in self.choices if c.startswith(incomplete)]

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
    return typer.Option(
        default,
        *names,
        metavar=one_of.metavar,
        callback=one_of.validate,
        autocompletion=one_of.complete,
        help=help,
        **kwargs,
    )


def choices_of(param: Any) -> tuple[str, ...] | None:
    """The values a parsed command parameter takes, when it is a :func:`choice` (docs/cli.md lists them)."""
    callback = getattr(param, "callback", None)
    one_of = getattr(getattr(callback, "__wrapped__", callback), "__self__", None)  # typer wraps OneOf.validate
    return one_of.choices if isinstance(one_of, OneOf) else None


def level_option(help: str, **kwargs: Any) -> Any:
    return choice(LEVELS, LEVELS[0], "--level", help=help, **kwargs)


def fail_level_option(help: str, *, default: bool = True, **kwargs: Any) -> Any:
    """``--fail-level``; without a default (``None``), the caller falls back to pyproject.toml, then to the first."""
    return choice(FAIL_LEVELS, FAIL_LEVELS[0] if default else None, "--fail-level", help=help, **kwargs)


def aux_convention_option(help: str, *, auto: bool = False, **kwargs: Any) -> Any:
    return choice((*CONVENTIONS, AUX_AUTO) if auto else CONVENTIONS, None, "--aux-convention", help=help, **kwargs)


def device_option(help: str, **kwargs: Any) -> Any:
    """``--device auto|cpu|cuda|cuda:N``: what ``compute.resolve`` takes, checked by the library while parsing."""
    return choice(DEVICES, DEFAULT_DEVICE, "--device", help=help, one_of=OneOf(DEVICES, check_device), **kwargs)


def dtype_option(help: str, *, engine_level: bool = True, **kwargs: Any) -> Any:
    """``--dtype auto|float32|bfloat16|float16``, default ``compute.DEFAULT_DTYPE`` (the reference's auto: decided
    against the memory at hand before anything is loaded, reference/budget.py), checked by the library while
    parsing. ``engine_level``: the command also hands it to ``--level engine``, where auto is the engine's own
    (real_engine/base.py ENGINE_DTYPE_AUTO), and the help says so."""
    return choice(
        DTYPE_CHOICES,
        DEFAULT_DTYPE,
        "--dtype",
        help=" ".join((help, REFERENCE_DTYPE_AUTO_HELP, *((ENGINE_DTYPE_AUTO_HELP,) if engine_level else ()))),
        one_of=OneOf(DTYPE_CHOICES, check_dtype_choice),
        **kwargs,
    )


REFERENCE_DTYPE_AUTO_HELP = (
    f"{REFERENCE_DTYPE_AUTO} (the reference's auto): float32 where it fits the memory at hand and costs little, else "
    "the model's own dtype; a run that cannot fit stops before loading, saying what would "
    "($EAGLE_CONVERT_MEMORY_LIMIT overrides the memory measured)."
)
ENGINE_DTYPE_AUTO_HELP = (
    f"At --level engine, {ENGINE_DTYPE_AUTO} is the engine's auto: float32 on a CPU (exact against the float32 "
    "reference), the model's own dtype on a GPU."
)


def profile_option(help: str) -> Any:
    return choice(tuple(PROFILES), DEFAULT_PROFILE, "--profile", help=help)


def family_option(help: str) -> Any:
    return choice(FAMILIES, None, "--target-family", help=help)


# --engine: which modelled releases a command checks (verify, inspect, push)
ENGINES_METAVAR = "ENGINE[,ENGINE...]"
ENGINES_HELP = (
    "Engine releases the draft must load right in ([tool.eagle-convert] engine in pyproject.toml sets the default): "
    f"deployed (every release users still deploy, the default), an engine ({', '.join(engines.NAMES)}: its newest "
    f"modelled release), name@release (e.g. vllm@0.33-v1), comma lists, both (newest of "
    f"{' and '.join(engines.DEFAULT_NAMES)}) or all. `eagle-convert engines` lists them."
)


# verify's and push's --engine: a normalized draft's own record stands in for the default
RECORDED_HELP = (
    "Without --engine and its setting, a draft written by `normalize --profile` is checked against the engines its "
    "config.json records (eagle_convert.engines), and the report says so."
)


def engine_option(help: str = ENGINES_HELP, **kwargs: Any) -> Any:
    """``--engine``; without it the command takes [tool.eagle-convert] engine, then every deployed release."""
    return typer.Option(None, "--engine", metavar=ENGINES_METAVAR, autocompletion=complete_engines, help=help, **kwargs)


def complete_engines(incomplete: str) -> list[str]:
    """Shell completion of --engine: the keywords and release names, after any comma already typed."""
    from eagle_convert.releases import RELEASES, SELECTIONS

    head, comma, last = incomplete.rpartition(",")
    words = (*SELECTIONS, *engines.NAMES, *RELEASES)
    return [head + comma + w for w in words if w.startswith(last)]


def chosen_engines(cli: str | None, settings: dict[str, Any]) -> str | None:
    """The command line wins over [tool.eagle-convert] engine; None when neither says (the command's default: the
    engines a normalized draft records, else the deployed releases)."""
    chosen = cli if cli is not None else settings.get("engine")
    return None if chosen is None else str(chosen)


# -q / -v / --color: on the root (`eagle-convert -q verify ...`) and on each command that renders a report
# (`eagle-convert verify ... -q`); the last one given wins. main() resets them for every run.
COLORS = ("auto", "always", "never")
COLOR_ENV = ("NO_COLOR", "FORCE_COLOR")  # what rich reads; --color sets them for this run only


@dataclass
class Output:
    """How much a command prints for people: -1 quiet (errors and the verdict or summary line), 0, 1 verbose."""

    verbosity: int = 0

    @property
    def quiet(self) -> bool:
        return self.verbosity < 0

    @property
    def verbose(self) -> bool:
        return self.verbosity > 0


OUTPUT = Output()


def _set_quiet(value: bool) -> None:
    if value:
        _set_verbosity(-1)


def _set_verbose(value: bool) -> None:
    if value:
        _set_verbosity(1)


def _set_verbosity(level: int) -> None:
    """-q and -v ask for opposite things: given together, neither silently wins (a usage error, exit 2)."""
    if OUTPUT.verbosity == -level:
        raise UsageError("-q/--quiet and -v/--verbose contradict each other", hint="give one of them")
    OUTPUT.verbosity = level


class _Color(OneOf):
    """--color: auto leaves NO_COLOR / FORCE_COLOR as the environment has them (colour on a terminal); always and
    never set them for this run (main() puts them back)."""

    def validate(self, value: str | None) -> str | None:
        value = super().validate(value)
        if value in ("always", "never"):
            os.environ.pop("NO_COLOR" if value == "always" else "FORCE_COLOR", None)
            os.environ["FORCE_COLOR" if value == "always" else "NO_COLOR"] = "1"
        return value


def quiet_option(**kwargs: Any) -> Any:
    return typer.Option(
        False,
        "-q",
        "--quiet",
        callback=_set_quiet,
        expose_value=False,
        help="Print only errors and the verdict or summary line (no tables, no progress).",
        **kwargs,
    )


def verbose_option(**kwargs: Any) -> Any:
    return typer.Option(
        False,
        "-v",
        "--verbose",
        callback=_set_verbose,
        expose_value=False,
        help="Print more: every rule's outcome and why a rule did not run (verify), every tensor (inspect).",
        **kwargs,
    )


def color_option(**kwargs: Any) -> Any:
    one_of = _Color(COLORS)
    return typer.Option(
        COLORS[0],
        "--color",
        metavar=one_of.metavar,
        callback=one_of.validate,
        autocompletion=one_of.complete,
        expose_value=False,
        help="Colour in human output: auto (on a terminal, unless NO_COLOR is set; FORCE_COLOR forces it), always "
        "or never.",
        **kwargs,
    )
