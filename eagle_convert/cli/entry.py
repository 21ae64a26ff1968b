"""The `eagle-convert` console entry: SIGINT and SIGTERM handled from its first line, before the command tree loads.

The console script (``[project.scripts]``) and ``python -m eagle_convert`` call :func:`run`, which imports nothing
but ``signal`` before it installs its handlers, and only then imports the command tree (typer, rich and every
command: most of a run's first half second). A signal

- while that loads (nothing is open, nothing written): the one line ``interrupted: nothing was written`` and exit at
  once, with no traceback;
- while the command runs: :class:`~eagle_convert.errors.Interrupted` is raised where the run is, so every clean-up
  runs on the way out (a second signal is ignored meanwhile), then every staging folder this run made and did not
  remove yet is removed (``read/output_place.py``), and the same one line (or, if an output was already renamed
  into place, which one) ends the run.

Either way the exit code is 128 + the signal's number: 130 for SIGINT (Ctrl-C), 143 for SIGTERM, as a shell reports
a process the signal ended. Only Python's own start (the interpreter and its ``site`` module, before any line of the
tool runs) is not covered: a signal then is Python's (the process ends at once, or ``site`` fails).
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_SIGNAL_BASE = 128  # exit 128 + N for signal N, as shells report it
NOTHING_WRITTEN = "interrupted: nothing was written"


def run() -> None:
    """Run the CLI with ``sys.argv`` and exit with its code (130 or 143 after SIGINT or SIGTERM)."""
    for signum in SIGNALS:
        signal.signal(signum, _while_loading)
    from eagle_convert.cli.main import main
    from eagle_convert.errors import Interrupted

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        _ignore_signals()  # the clean-up on the way out is not interrupted again
        raise Interrupted(signum)

    try:
        for signum in SIGNALS:
            signal.signal(signum, interrupt)
        code = main()
        _ignore_signals()  # the run is over: a signal now changes nothing
    except Interrupted as exc:
        code = _after_interrupt(exc.signum)
    sys.exit(code)


def _while_loading(signum: int, _frame: FrameType | None) -> None:
    """A signal before the command starts: nothing to clean up, so say so and end here, without a traceback."""
    _say(NOTHING_WRITTEN, flush=False)  # a handler never flushes: the main thread may be inside that buffer
    os._exit(EXIT_SIGNAL_BASE + signum)


def _after_interrupt(signum: int) -> int:
    """Remove what the interrupted run left and say what was written; the exit code."""
    from eagle_convert.read.output_place import remove_leftover_staging, written_outputs

    left = remove_leftover_staging()
    written = written_outputs()
    line = f"interrupted: {', '.join(map(str, written))} had been written" if written else NOTHING_WRITTEN
    if left:
        line += f"; could not remove {', '.join(map(str, left))}"
    _say(line)
    return EXIT_SIGNAL_BASE + signum


def _ignore_signals() -> None:
    """From now on a signal does nothing. A handler that does nothing, not SIG_IGN: a signal already caught but not
    yet handled would otherwise raise "Signal N ignored due to race condition" where the run is."""
    for signum in SIGNALS:
        signal.signal(signum, _no_op)


def _no_op(_signum: int, _frame: FrameType | None) -> None:
    return None


def _say(line: str, *, flush: bool = True) -> None:
    """``line`` on stderr, after whatever the run had written there; nothing when stderr is gone."""
    if flush:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed or broken stderr
            pass
    try:
        os.write(2, (line + "\n").encode("utf-8", "replace"))
    except OSError:
        pass
