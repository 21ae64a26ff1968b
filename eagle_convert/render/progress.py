"""Progress on stderr for long work: a rich bar on a terminal, plain periodic lines otherwise (a CI log, a file)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from rich.console import Console

from eagle_convert.render.cells import human_bytes
from eagle_convert.verify.report import TENSOR_VALUES

PLAIN_INTERVAL = 10.0  # seconds between plain progress lines when stderr is not a terminal
# What each piece of long work reported as (what, done, total) counts (probe/target.py's GENERATING counts steps,
# probe/run.py's chains count chains); anything else counts target layers.
_UNITS = {TENSOR_VALUES: "tensors", "target: generating probe text": "steps", "probe: draft chains": "chains"}


class PlainProgress:
    """Progress as plain lines on a stream that is not a terminal (a CI log, a file): a line every ``interval``
    seconds while a piece of work runs, and its last line when it ends; work quicker than that prints nothing."""

    def __init__(self, stream: TextIO, interval: float = PLAIN_INTERVAL) -> None:
        self.stream, self.interval = stream, interval
        self.started: dict[str, float] = {}
        self.printed: set[str] = set()
        self.last = time.monotonic()

    def line(self, what: str, text: str, *, last: bool) -> None:
        now = time.monotonic()
        start = self.started.setdefault(what, now)
        if now - self.last >= self.interval or (last and what in self.printed):
            self.last = now
            self.printed.add(what)
            self.stream.write(f"{what}: {text} ({_clock(now - start)} elapsed)\n")
            self.stream.flush()

    def steps(self, what: str, done: int, total: int) -> None:
        self.line(what, f"{done}/{total} {_UNITS.get(what, 'layers')}", last=done >= total)

    def bytes(self, what: str, done: int, total: int | None) -> None:
        of = f" of {human_bytes(total)} ({done / total:.0%})" if total else ""
        self.line(what, f"{human_bytes(done)}{of}", last=total is not None and done >= total)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


class ByteProgress:
    """The callback ``progress_bar`` yields: ``progress(n)`` advances it by n bytes; ``progress.total(n)`` sets the
    bytes there are when the work learns it only once it starts (normalize plans before it writes)."""

    def __init__(self, advance: Callable[[int], None], total: Callable[[int], None]) -> None:
        self._advance, self._total = advance, total

    def __call__(self, n: int) -> None:
        self._advance(n)

    def total(self, n: int) -> None:
        self._total(n)


@contextmanager
def progress_bar(enabled: bool, label: str = "writing", total: int | None = None) -> Iterator[ByteProgress | None]:
    """Bytes progress on stderr, ``total`` bytes when known (or once ``.total(n)`` says): a bar on a terminal, plain
    periodic lines otherwise (the first after ``PLAIN_INTERVAL`` seconds, so quick work prints nothing)."""
    if not enabled:
        yield None
        return
    if not sys.stderr.isatty():
        plain, done, size = PlainProgress(sys.stderr), [0], [total]

        def advance(n: int) -> None:
            done[0] += n
            plain.bytes(label, done[0], size[0])

        yield ByteProgress(advance, lambda n: size.__setitem__(0, n))
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    with Progress(
        label,
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=Console(file=sys.stderr),
        transient=True,
    ) as bar:
        task = bar.add_task("write", total=total, visible=total is not None)  # shown once its total is known
        yield ByteProgress(lambda n: bar.advance(task, n), lambda n: bar.update(task, total=n, visible=True))


@contextmanager
def steps_bar(enabled: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    """Progress on stderr for long computations reported as ``(what, done, total)``: on a terminal one bar per
    ``what`` with elapsed and remaining time; otherwise plain lines (start, end, and every ``PLAIN_INTERVAL`` s)."""
    if not enabled:
        yield None
        return
    if not sys.stderr.isatty():
        yield PlainProgress(sys.stderr).steps
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

    tasks: dict[str, Any] = {}
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        "{task.fields[unit]}",
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(file=sys.stderr),
        transient=True,
    ) as bar:

        def update(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total, unit=_UNITS.get(what, "layers"))
            bar.update(tasks[what], completed=done, total=total)

        yield update
