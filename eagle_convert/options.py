"""Each option of a request, declared once: on the request's dataclass field.

A field declared with :func:`option` carries its type (a ``Literal`` is its choices), its default, its help text and
its flag; a field whose type is a dataclass (or a union of them) is a group of options (:func:`group`). Everything
else is derived from the declarations, so nothing is written twice: the command line's options, defaults, help and
shell completion (``cli/options.py``), the flat keywords a library caller may pass (:func:`build`), which options a
request sets (:func:`given`) and the check of every value (:func:`check`), which a request's ``validate()`` runs
first. Nothing here imports typer or torch.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

from eagle_convert.errors import UsageError, check_choice

T = TypeVar("T")
_KEY = "eagle_convert.option"


@dataclass(frozen=True)
class Option:
    """What a field says of itself as an option (see :func:`option`)."""

    help: str
    name: str | None = None  # the flat keyword and command-line parameter, when not the field's own name
    flag: str | None = None  # the command-line flag, when not --name; the option's name in messages
    cli: bool = True  # False: a library keyword only (the flag still names it in messages)
    panel: str | None = None  # the section of --help it is listed in
    metavar: str | None = None
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None  # the values of an open string (a Literal's are its own)
    check: Callable[[str], str] | None = None  # the library's own check of a value (its message, its exit code)
    label: str | None = None  # what an unknown value's message calls the option (default: the flag's words)
    setting: str | None = None  # the [tool.eagle-convert] key that gives the command line's default
    negate: bool = False  # the flag turns the field off (--no-hash)
    repeat: bool = False  # a tuple given once per item (--engine-arg), else as one comma-separated value
    parse: Callable[[Any], Any] | None = None  # a flat keyword's value -> the field's (rule lists, token ids)
    cli_type: type | None = None  # the command line's type when not the field's (a FILE read into the field)
    from_cli: Callable[[Any], Any] | None = None  # the command line's value -> the flat keyword's (a file read)
    complete: Callable[[str], list[str]] | None = None  # shell completion, where the choices do not say it
    show_default: bool = True


@dataclass(frozen=True)
class Group:
    """A field whose dataclass holds options of its own: where the command line lists them, and what it says of
    when they apply (``--level forward/target``), ahead of each one's help."""

    panel: str | None = None
    when: str | None = None
    more: Mapping[str, str] = field(default_factory=dict)  # field name -> a sentence this use adds to its help


def option(default: Any = dataclasses.MISSING, *, help: str, repr: bool = True, **kw: Any) -> Any:
    """A dataclass field that is an option: its default, then :class:`Option`'s keywords (``repr=False``: a
    secret the request's repr leaves out)."""
    return field(default=default, repr=repr, metadata={_KEY: Option(help=help, **kw)})


def group(default: Any = None, **kw: Any) -> Any:
    """A dataclass field holding a group of options (:class:`Group`'s keywords)."""
    return field(default=default, metadata={_KEY: Group(**kw)})


@dataclass(frozen=True)
class Declared:
    """One option as a command or a request's check sees it: the field, its declaration and the group use that
    holds it (the panel and the help with the group's words)."""

    field: dataclasses.Field[Any]
    option: Option
    kind: Any  # the field's type, resolved
    owner: type  # the dataclass that declares the field
    use: Group | None = None

    @property
    def name(self) -> str:
        return self.option.name or self.field.name

    @property
    def flag(self) -> str:
        return self.option.flag or "--" + self.name.replace("_", "-")

    @property
    def panel(self) -> str | None:
        return self.option.panel or (self.use.panel if self.use else None)

    @property
    def help(self) -> str:
        text = self.option.help
        if self.use is not None and self.use.when:
            text = f"{self.use.when}: {text}"
        more = self.use.more.get(self.field.name) if self.use is not None else None
        return f"{text} {more}" if more else text

    @property
    def default(self) -> Any:
        if self.field.default is not dataclasses.MISSING:
            return self.field.default
        if self.field.default_factory is not dataclasses.MISSING:
            return self.field.default_factory()
        return None

    @property
    def choices(self) -> tuple[str, ...] | None:
        return self.option.choices or literal_values(self.kind)

    @property
    def optional(self) -> bool:
        return type(None) in typing.get_args(self.kind)

    @property
    def label(self) -> str:
        return self.option.label or self.flag.lstrip("-").replace("-", " ")


def literal_values(kind: Any) -> tuple[str, ...] | None:
    """The values of ``Literal[...]`` or ``Literal[...] | None``; None for any other type."""
    if typing.get_origin(kind) is Literal:
        return typing.get_args(kind)
    if _is_union(kind):
        for arm in typing.get_args(kind):
            if typing.get_origin(arm) is Literal:
                return typing.get_args(arm)
    return None


def _is_union(kind: Any) -> bool:
    return typing.get_origin(kind) in (Union, types.UnionType)


def groups_of(kind: Any) -> tuple[type, ...]:
    """The dataclasses a group field holds: its type, or each dataclass of its union."""
    arms = typing.get_args(kind) if _is_union(kind) else (kind,)
    return tuple(a for a in arms if dataclasses.is_dataclass(a) and isinstance(a, type))


def declared(cls: type, *, unions: bool = True, use: Group | None = None) -> Iterator[Declared]:
    """Every option of ``cls`` in declaration order, its groups' in place (a union's members each in turn, when
    ``unions``); an option two members share (``--engine-tokens``) once."""
    hints = typing.get_type_hints(cls)
    seen: set[str] = set()
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_KEY)
        if isinstance(meta, Group):
            members = groups_of(hints[f.name])
            if len(members) > 1 and not unions:
                continue
            for member in members:
                for d in declared(member, unions=unions, use=meta):
                    if d.name not in seen:
                        seen.add(d.name)
                        yield d
        elif isinstance(meta, Option):
            d = Declared(f, meta, hints[f.name], cls, use)
            if d.name not in seen:
                seen.add(d.name)
                yield d


def build(cls: type[T], flat: Mapping[str, Any], what: str) -> T:
    """The request of flat keywords, named as the command line names the options (``probe_steps=4`` sets
    ``probe.steps``); a field holding one group is built from the same keywords, a union of groups is given whole.
    An unknown keyword is a UsageError naming it."""
    left = dict(flat)
    made = _build(cls, left)
    if left:
        known = sorted(_flat_names(cls))
        raise UsageError(f"unknown {what} option(s) {', '.join(sorted(left))}", hint=f"known: {', '.join(known)}")
    return made


def _build(cls: type[T], left: dict[str, Any]) -> T:
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]  # a dataclass, as every request
        meta = f.metadata.get(_KEY)
        members = groups_of(hints[f.name]) if isinstance(meta, Group) else ()
        if len(members) == 1:
            kwargs[f.name] = _build(members[0], left)
            continue
        name = meta.name if isinstance(meta, Option) and meta.name else f.name
        if name in left:
            value = left.pop(name)
            if value is not None or f.default is None:  # None where the default is not: the default
                kwargs[f.name] = _parse(value, meta, hints[f.name])
    return cls(**kwargs)


def _flat_names(cls: type) -> Iterator[str]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_KEY)
        members = groups_of(hints[f.name]) if isinstance(meta, Group) else ()
        if len(members) == 1:
            yield from _flat_names(members[0])
        else:
            yield meta.name if isinstance(meta, Option) and meta.name else f.name


def _parse(value: Any, meta: Any, kind: Any) -> Any:
    if value is None:
        return None
    if isinstance(meta, Option) and meta.parse is not None:
        return meta.parse(value)
    arms = typing.get_args(kind) if _is_union(kind) else (kind,)
    if Path in arms:
        return Path(value)
    if any(typing.get_origin(a) is tuple for a in arms) and not isinstance(value, tuple):
        return tuple(value)
    return value


def given(request: Any) -> dict[str, bool]:
    """Each option of ``request`` (a group: its own, not its groups') by its flag: whether it is set away from its
    default (two fields of one flag, as ``--token-ids`` given as ids or as a file: either)."""
    out: dict[str, bool] = {}
    for d in declared(type(request), unions=False):
        if d.owner is type(request):
            out[d.flag] = out.get(d.flag, False) or getattr(request, d.field.name) != d.default
    return out


def check(request: Any) -> None:
    """Every declared value of ``request`` and of its groups: a choice among its choices (or the library's own
    check), a number in its range. A UsageError names the option (exit 2)."""
    for d in declared(type(request), unions=False):
        value = getattr(request, d.field.name) if d.owner is type(request) else None
        if value is not None:
            _check_value(d, value)
    for f in dataclasses.fields(request):
        value = getattr(request, f.name)
        if isinstance(f.metadata.get(_KEY), Group) and dataclasses.is_dataclass(value) and not isinstance(value, type):
            check(value)


def _check_value(d: Declared, value: Any) -> None:
    if d.option.check is not None:
        d.option.check(value)
    elif d.choices is not None:
        check_choice(d.label, value, d.choices)
    low, high = d.option.min, d.option.max
    if isinstance(value, int | float) and not isinstance(value, bool) and (low is not None or high is not None):
        if (low is not None and value < low) or (high is not None and value > high):
            span = f"{_num(low)} to {_num(high)}" if low is not None and high is not None else f"at least {_num(low)}"
            raise UsageError(f"{d.flag} {value} is out of range", hint=f"give {span}")


def _num(x: float | None) -> str:
    return f"{x:g}" if x is not None else ""
