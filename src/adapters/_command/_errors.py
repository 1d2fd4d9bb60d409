"""What the command line tells apart: a user's mistake (`UsageError`) from everything else."""

from __future__ import annotations

from collections.abc import Iterator


class UsageError(Exception):
    """A mistake in the command line or in what it names (a file, a port): said in one line,
    exit status 2, no traceback."""


def leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions inside ``exc``, through any exception groups (anyio and trio wrap a task's
    failure in one)."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc
