"""What the command line tells apart: a user's mistake (`UsageError`) from everything else."""

from __future__ import annotations

import os
import socket
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


def plain(exc: BaseException) -> str:
    """An OS error without the errno and path noise: 'No such file or directory'."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def unreachable(url: str, exc: OSError) -> str:
    """Why the server at ``url`` could not be reached, in words: not "Unknown error -2"."""
    # anyio says "All connection attempts failed" and keeps the real reason as the cause.
    cause = exc.__cause__
    if not exc.strerror and isinstance(cause, OSError) and cause.strerror:
        exc = cause
    if isinstance(exc, socket.gaierror):  # its errno is getaddrinfo's, not the OS's
        why = f"its host name cannot be resolved ({exc.strerror}; check the name, or give an IP)"
    elif exc.errno:  # asyncio's strerror is "Connect call failed (...)"; the errno says why
        why = os.strerror(exc.errno)
    else:
        why = str(exc) or type(exc).__name__
    return f"cannot reach the server at {url}: {why}"
