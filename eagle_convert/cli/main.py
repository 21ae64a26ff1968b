"""The `eagle-convert` entry point: builds the command tree and renders errors once."""

from __future__ import annotations

import os
import sys

import typer

from eagle_convert import __version__
from eagle_convert.cli import engines_cmd, hub_cmds, inspect_cmd, normalize_cmd, rules_cmd, verify_cmd
from eagle_convert.errors import EagleConvertError

DEBUG_ENV = "EAGLE_CONVERT_DEBUG"
EXIT_INTERNAL = 2  # the contract: 2 = bad input, usage or internal error

app = typer.Typer(
    name="eagle-convert",
    help="Inspect, normalize and verify EAGLE3 speculative-decoding draft checkpoints.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"eagle-convert {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Inspect, normalize and verify EAGLE3 speculative-decoding draft checkpoints."""


inspect_cmd.register(app)
normalize_cmd.register(app)
verify_cmd.register(app)
rules_cmd.register(app)
hub_cmds.register(app)
engines_cmd.register(app)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; typed errors become `Error:`/`Hint:` lines on stderr and their exit code."""
    from eagle_convert.console import render_error

    try:
        app(args=argv, prog_name="eagle-convert")  # standalone: typer reports usage errors itself (exit 2)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except EagleConvertError as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        render_error(exc.message, exc.hint)
        return exc.exit_code
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        render_error(
            f"internal error: {type(exc).__name__}: {exc}",
            f"this is a bug in eagle-convert; rerun with {DEBUG_ENV}=1 for the traceback and report it",
        )
        return EXIT_INTERNAL
    return 0


def run() -> None:
    sys.exit(main())
