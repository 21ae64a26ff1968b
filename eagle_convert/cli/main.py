"""The `eagle-convert` entry point: builds the command tree and renders errors once."""

from __future__ import annotations

import os
import sys
import traceback

import typer

from eagle_convert.cli import (
    engine_env_cmd,
    engines_cmd,
    formatting,
    hub_cmds,
    inspect_cmd,
    normalize_cmd,
    rules_cmd,
    verify_cmd,
)
from eagle_convert.cli.options import COLOR_ENV, OUTPUT, color_option, quiet_option, verbose_option
from eagle_convert.errors import (
    EXIT_BAD_INPUT,
    EXIT_FINDINGS,
    EXIT_INTERRUPTED,
    EXIT_NOTHING_TO_CHECK,
    EXIT_OK,
    EXIT_TERMINATED,
    EagleConvertError,
)
from eagle_convert.version import __version__

DEBUG_ENV = "EAGLE_CONVERT_DEBUG"
EXIT_INTERNAL = 2  # the contract: 2 = bad input, usage or internal error

app = typer.Typer(
    name="eagle-convert",
    help="Inspect, normalize and verify EAGLE3 speculative-decoding draft checkpoints.",
    no_args_is_help=True,
    cls=formatting.Group,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,  # plain help: brackets in help texts are text, and nothing is cut at 80 columns
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"eagle-convert {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "-V", "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    _quiet: bool = quiet_option(),
    _verbose: bool = verbose_option(),
    _color: str = color_option(),
) -> None:
    """Inspect, normalize and verify EAGLE3 speculative-decoding draft checkpoints."""


inspect_cmd.register(app)
normalize_cmd.register(app)
verify_cmd.register(app)
rules_cmd.register(app)
hub_cmds.register(app)
engines_cmd.register(app)
engine_env_cmd.register(app)

# each command's line in `eagle-convert --help`, whole (typer would cut the docstring's first sentence at ~50 columns)
SHORT_HELP = {
    "inspect": "Tell what a draft checkpoint is (layout, flags, aux-layer ids, what each engine reads).",
    "normalize": "Rewrite a draft into the canonical form every engine reads as it was trained.",
    "verify": "The pre-deploy gate: every rule, a report for people or CI, and an exit code.",
    "rules": "List every rule verify can report.",
    "rule": "Explain one rule and how to fix its findings.",
    "pull": "Download a draft from the Hub: only what it needs, sizes and sha256 checked.",
    "push": "Publish a draft to the Hub only if it passes verify.",
    "engines": "List the modelled engine releases (--engine) and the code each was read from.",
    "engine-env": "Build or find the engine environment that --level engine runs in.",
}
# the exit codes each command can give (errors.EXIT_MEANINGS says what each means), at the end of its --help
_ANY = (EXIT_OK, EXIT_BAD_INPUT, EXIT_NOTHING_TO_CHECK, EXIT_INTERRUPTED, EXIT_TERMINATED)
_GATED = (EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT, EXIT_NOTHING_TO_CHECK, EXIT_INTERRUPTED, EXIT_TERMINATED)
_PLAIN = (EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED)
EXIT_CODES = {
    "inspect": _ANY,
    "normalize": _ANY,
    "verify": _GATED,
    "push": _GATED,
    "pull": _PLAIN,
    "rules": _PLAIN,
    "rule": _PLAIN,
    "engines": _PLAIN,
    "engine-env": _PLAIN,
}
formatting.apply(app, SHORT_HELP, EXIT_CODES)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; typed errors and usage errors become `Error:`/`Hint:` lines on stderr and their exit code.

    With EAGLE_CONVERT_DEBUG set, the traceback comes first; the exit code is the same as without it."""
    OUTPUT.verbosity = 0
    colors = {name: os.environ.get(name) for name in COLOR_ENV}  # --color changes them for this run only
    try:
        return _run(argv)
    finally:
        for name, value in colors.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _run(argv: list[str] | None) -> int:
    try:
        code = app(args=argv, prog_name="eagle-convert", standalone_mode=False)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except EagleConvertError as exc:
        _traceback()
        _render_error(exc.message, exc.hint)
        return exc.exit_code
    except typer.Abort:
        _render_error("aborted", None)
        return 1
    except Exception as exc:  # noqa: BLE001 - the boundary: anything unexpected is one Error line and exit 2
        usage = _usage_error(exc)
        if usage is not None:
            return usage
        _traceback()
        _render_error(
            f"internal error: {type(exc).__name__}: {exc}",
            f"this is a bug in eagle-convert; rerun with {DEBUG_ENV}=1 for the traceback and report it",
        )
        return EXIT_INTERNAL
    return code if isinstance(code, int) else 0


def _traceback() -> None:
    """With EAGLE_CONVERT_DEBUG set, the traceback of the exception being handled, on stderr."""
    if os.environ.get(DEBUG_ENV):
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()


def _render_error(message: str, hint: str | None) -> None:
    from eagle_convert.render.console import render_error  # imported on error only: a --json run never loads rich

    render_error(message, hint)


def _usage_error(exc: Exception) -> int | None:
    """The parser's usage errors (unknown option, bad choice, missing argument) as `Error:`/`Hint:` lines.

    typer raises its parser's exceptions when not standalone; they carry ``format_message()``, ``exit_code`` and
    the failing command's context (``ctx``), which is all that is read here."""
    format_message = getattr(exc, "format_message", None)
    exit_code = getattr(exc, "exit_code", None)
    if not callable(format_message) or not isinstance(exit_code, int):
        return None
    ctx = getattr(exc, "ctx", None)
    message = str(format_message())
    if type(exc).__name__ == "NoArgsIsHelpError":  # `eagle-convert` alone: the help, on stderr, exit 2
        sys.stderr.write(message + "\n")
        return exit_code
    command = ctx.command_path if ctx is not None else "eagle-convert"
    _render_error(_one_line(message), f"run `{command} --help` to see its arguments and options")
    return exit_code


def _one_line(message: str) -> str:
    """A parser message on one line, without the validation library's "Value error," prefix."""
    return " ".join(message.replace("Value error, ", "").split())


def run() -> None:
    """The console entry, as ``eagle_convert.cli.entry.run`` (which the console script calls without loading this
    module first, so that a signal while it loads is handled too)."""
    from eagle_convert.cli.entry import run as entry_run

    entry_run()
