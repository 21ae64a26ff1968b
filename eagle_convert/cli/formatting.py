"""How ``--help`` reads: arguments by their names (``PATH``, ``[CODE]...``), never typer's type labels (``<path>``,
``<list[str]>``) or braces (``{PATH}``), and the command list with each command's whole short help.

typer's documented way to change help is a command or group class (``Typer(cls=...)``, ``command(cls=...)``);
:func:`apply` sets these on every registered command, so the command modules stay as they are.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

# typer's label of a value's type (shown where an option has no metavar) -> the word people read in CLI help
_TYPE_WORDS = {"str": "TEXT", "int": "N", "int range": "N", "float": "X", "float range": "X", "path": "PATH"}
_TYPE_LABEL = re.compile(r"<([^<>]+)>$")


def _is_argument(param: Any) -> bool:
    return getattr(param, "param_type_name", None) == "argument"


def _argument_name(param: Any) -> tuple[str, bool]:
    """An argument's bare name (``PATH``) and whether it repeats."""
    name = (param.metavar or param.name or "").upper().strip("[]").removesuffix("...").strip("[]")
    return name, param.nargs != 1


def _usage(param: Any) -> str:
    name, many = _argument_name(param)
    shown = name if param.required else f"[{name}]"
    return shown + ("..." if many else "")


def _option_name(name: str) -> str:
    """``--token <str>`` -> ``--token TEXT``; ``--probe-steps <int range>`` -> ``--probe-steps N``."""
    label = _TYPE_LABEL.search(name)
    if label is None:
        return name
    inner = label.group(1)
    word = _TYPE_WORDS.get(inner) or (_TYPE_WORDS.get(inner[5:-1], "TEXT") + "..." if inner.startswith("list[") else "")
    return (name[: label.start()] + word).rstrip()


def _format_params(command: Any, ctx: Any, formatter: Any) -> None:
    """The Arguments and Options sections, named as the usage line names them; an option declared with typer's
    ``rich_help_panel=`` is listed in a section of that name, after Options, in the order the panels first appear.

    The help stays plain (``rich_markup_mode=None``): typer draws panels only in its rich markup mode, which reads
    ``[error]`` or ``[tool.eagle-convert]`` in a help text as markup and drops it, so the panels are drawn here."""
    sections: dict[str, list[tuple[str, str]]] = {"Arguments": [], "Options": []}
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        if _is_argument(param):
            name, many = _argument_name(param)
            sections["Arguments"].append((name + ("..." if many else ""), record[1]))
        else:
            panel = getattr(param, "rich_help_panel", None) or "Options"
            sections.setdefault(panel, []).append((_option_name(record[0]), record[1]))
    for title, rows in sections.items():
        if rows:
            with formatter.section(title):
                formatter.write_dl(rows)


class Command(TyperCommand):
    """A command whose help names arguments as the usage line does and options by plain metavars."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            pieces += [_usage(param)] if _is_argument(param) else param.get_usage_pieces(ctx)
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        _format_params(self, ctx, formatter)


class Group(TyperGroup):
    """The root: its options as :class:`Command` shows them, and every command's short help whole (wrapped, never
    cut with "...")."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        _format_params(self, ctx, formatter)
        self.format_commands(ctx, formatter)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def url_paragraph(url: str) -> str:
    """``url`` as a paragraph of a help text that is never re-wrapped (the parser's ``\\b`` marker), so it stays
    whole and a terminal can open it; wrapped, it would break at a hyphen (``eagle-`` / ``convert``)."""
    return f"\n\n\b\n{url}"


def plain_help(text: str) -> str:
    """A help text as one line of prose (docs/cli.md's table cells): without the ``\\b`` markers and line breaks."""
    return " ".join(text.replace("\b", "").split())


def exit_codes_epilog(codes: Iterable[int]) -> str:
    """The exit codes a command can give, a line each, kept as lines (the parser's ``\b`` marker)."""
    from eagle_convert.errors import EXIT_MEANINGS

    lines = [f"{code:>5}  {EXIT_MEANINGS[code]}" for code in codes]
    return "\b\nExit codes:\n" + "\n".join(lines)


def apply(app: typer.Typer, short_help: dict[str, str], exit_codes: dict[str, tuple[int, ...]]) -> None:
    """Give every registered command the :class:`Command` help, its line in the root's command list, and its exit
    codes at the end of its --help."""
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):  # typer's default: a command that chose no class of its own
            info.cls = Command
        if info.short_help is None and info.name in short_help:
            info.short_help = short_help[info.name]
        if info.epilog is None and info.name in exit_codes:
            info.epilog = exit_codes_epilog(exit_codes[info.name])
