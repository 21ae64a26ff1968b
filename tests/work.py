"""Counting work, not seconds (issue 38): what the linear-cost tests measure a run with.

- :func:`lines_run`: the Python lines a call executes (``sys.settrace`` line events, a loop's every turn included,
  PEP 626), in every frame it enters: the same count on every machine and every run. A quadratic Python loop shows
  as a quadratic count; work done inside one C call (a regular expression, ``x in some_list``) does not, so those
  are counted by the instruments below.
- :class:`Taken`: a list that counts every item any loop takes from it.
- :class:`CountedName`: a ``str`` that counts the equality comparisons made with it.

Each takes a ``budget``: past it the count raises :class:`OverBudget` (a BaseException, so no ``except Exception``
in the code under test swallows it), and a quadratic loop fails the test at once instead of running for minutes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class OverBudget(BaseException):
    """The work counted passed the budget the test allowed."""


def lines_run(call: Callable[[], Any], budget: int | None = None) -> int:
    """The Python lines ``call()`` executes; OverBudget as soon as they pass ``budget``."""
    count = 0

    def trace(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
            if budget is not None and count > budget:
                sys.settrace(None)
                raise OverBudget(f"over {budget:,} lines")
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        call()
    finally:
        sys.settrace(previous)
    return count


class Taken(list[T]):
    """A list that counts the items taken from it by iteration (``for``, comprehensions, ``sorted``, ``Counter``)."""

    def __init__(self, items: Iterable[T], budget: int | None = None) -> None:
        super().__init__(items)
        self.taken, self.budget = 0, budget

    def __iter__(self) -> Iterator[T]:
        for item in super().__iter__():
            self.taken += 1
            if self.budget is not None and self.taken > self.budget:
                raise OverBudget(f"over {self.budget:,} items taken")
            yield item


class CountedName(str):
    """A string that counts, in the class attribute ``compared``, every ``==`` made with it (hashing is str's, so a
    set or dict lookup compares only on a hash match)."""

    compared = 0
    budget: int | None = None

    def __eq__(self, other: object) -> bool:
        cls = type(self)
        cls.compared += 1
        if cls.budget is not None and cls.compared > cls.budget:
            raise OverBudget(f"over {cls.budget:,} comparisons")
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__
