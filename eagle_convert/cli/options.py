"""The command line's options: derived from the requests' declarations (eagle_convert/options.py: each option
declared once, on its request's field), every choice generated from the library's values (an option takes exactly
what the code behind it takes, so the two cannot drift), and the options several commands share, defined once.

A choice is a plain ``str`` option checked by a callback; its metavar lists the values (the ``--help`` text and
docs/cli.md read it). Nothing here imports torch: ``--device`` and ``--dtype`` are checked by torch-free functions
of the library's ``reference/compute.py``.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import typer

from eagle_convert.draft.aux_layers import CONVENTIONS
from eagle_convert.errors import UsageError
from eagle_convert.options import Declared, build, declared
from eagle_convert.releases import ENGINES_HELP, ENGINES_METAVAR, complete_engines
from eagle_convert.rules.registry import LEVELS
from eagle_convert.verify.request import FAIL_LEVELS

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


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


def takes(request: type, *, panels: Sequence[str] = (), habits_panel: str | None = None) -> Callable[[F], F]:
    """The command takes ``request``'s options as keywords (its ``**options``): the signature typer reads gains one
    parameter per option the request declares, after the command's own, then -q/-v/--color; with ``panels``, listed
    by panel in that order (verify -h)."""

    def wrap(command: F) -> F:
        own = [p for p in inspect.signature(command).parameters.values() if p.kind is not p.VAR_KEYWORD]
        params = [*own, *(_parameter(d) for d in declared(request) if d.option.cli), *_habits(habits_panel)]
        if panels:
            params.sort(key=lambda p: panels.index(p.default.rich_help_panel) if p.default.rich_help_panel else -1)
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        return command

    return wrap


def request_of(cls: type[T], values: dict[str, Any], settings: Mapping[str, Any], what: str, **given: Any) -> T:
    """The request of a command's option values (each taken out of ``values``): an option left out on the command
    line takes its [tool.eagle-convert] setting where it has one, then its default; ``given``: fields made by the
    command (a union of groups: which one, the command decides)."""
    flat = dict(given)
    for d in declared(cls, unions=False):
        if not d.option.cli:
            continue
        value = values.pop(d.name)
        if value is None and d.option.setting is not None:
            value = settings.get(d.option.setting)
        if d.option.negate:
            value = not value
        elif value is not None and d.option.from_cli is not None:
            value = d.option.from_cli(value)
        flat[d.name] = value
    return build(cls, flat, what)


def _parameter(d: Declared) -> inspect.Parameter:
    """One declared option as typer reads it: a ``typer.Option`` for a default, and the type it parses to."""
    o = d.option
    default: Any = None if o.setting is not None or o.repeat else (False if o.negate else d.default)
    panel = d.panel
    if d.choices is not None:
        info = choice(d.choices, default, d.flag, help=d.help, one_of=OneOf(d.choices, o.check), rich_help_panel=panel)
        return _param(d.name, info, str if default is not None else str | None)
    if o.negate or d.kind is bool:
        return _param(d.name, typer.Option(default, d.flag, help=d.help, rich_help_panel=panel), bool)
    base = o.cli_type or next(a for a in (*getattr(d.kind, "__args__", ()), d.kind) if a is not type(None))
    if o.repeat:
        kind: Any = list[str] | None
    elif getattr(base, "__origin__", None) is tuple:
        kind = str | None  # one comma-separated value (--select EC1,EC2)
    else:
        kind = base if default is not None else base | None
    info = typer.Option(
        default,
        d.flag,
        metavar=o.metavar,
        min=o.min,
        max=o.max,
        autocompletion=o.complete,
        show_default=o.show_default,
        help=d.help,
        rich_help_panel=panel,
    )
    return _param(d.name, info, kind)


def _param(name: str, info: Any, kind: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=info, annotation=kind)


def _habits(panel: str | None) -> list[inspect.Parameter]:
    """-q, -v and --color, as every command that renders a report takes them."""
    return [
        _param("_quiet", quiet_option(rich_help_panel=panel), bool),
        _param("_verbose", verbose_option(rich_help_panel=panel), bool),
        _param("_color", color_option(rich_help_panel=panel), str),
    ]


def level_option(help: str, **kwargs: Any) -> Any:
    """``--level`` of a command without a request of its own (push)."""
    return choice(LEVELS, LEVELS[0], "--level", help=help, **kwargs)


def fail_level_option(help: str, **kwargs: Any) -> Any:
    """``--fail-level`` of a command without a request of its own (push)."""
    return choice(FAIL_LEVELS, FAIL_LEVELS[0], "--fail-level", help=help, **kwargs)


def aux_convention_option(help: str, **kwargs: Any) -> Any:
    """``--aux-convention`` of a command without a request of its own (inspect)."""
    return choice(CONVENTIONS, None, "--aux-convention", help=help, **kwargs)


def engine_option(help: str = ENGINES_HELP, **kwargs: Any) -> Any:
    """``--engine``; without it the command takes [tool.eagle-convert] engine, then every deployed release."""
    return typer.Option(None, "--engine", metavar=ENGINES_METAVAR, autocompletion=complete_engines, help=help, **kwargs)


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
