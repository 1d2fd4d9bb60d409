"""Opening a path a client named only once it is seen to be what the call reads or writes.

Opening is not harmless: a device's driver runs at open (a watchdog arms, a terminal becomes
the server's controlling one, a tape rewinds), and a FIFO's other end wakes. So a path is first
opened with O_PATH, which runs no driver, its type looked at through that descriptor, and
only then opened for I/O, through ``/proc/self/fd`` of that very descriptor: what is opened
is what was looked at, whatever is renamed meanwhile.
"""

from __future__ import annotations

import errno
import os
import stat

from ._beneath import Scope

# How often a write that makes its file tries again when another made it first.
CREATE_TRIES = 3


class NotAFile(Exception):
    """The path is not of a kind the call opens (the message is the path)."""


def open_checked(scope: Scope, path: str, flags: int, need: str, *, deep: bool = False,
                 kinds: tuple[int, ...] = (stat.S_IFREG,)) -> tuple[int, str]:
    """``path`` opened with ``flags`` once seen to be one of ``kinds`` (a regular file by
    default), and its real path, as `Scope.open` gives them. With O_CREAT, a missing file is
    made with O_EXCL, so nothing else is opened."""
    for _ in range(CREATE_TRIES):
        try:
            probe, where = scope.open(path, os.O_PATH, need, deep=deep)
        except FileNotFoundError:
            if not flags & os.O_CREAT:
                raise
            try:
                return scope.open(path, flags | os.O_EXCL, need, deep=deep)
            except FileExistsError:
                continue  # made meanwhile: look at what it is
        try:
            kind = stat.S_IFMT(os.fstat(probe).st_mode)
            if kind == stat.S_IFDIR and flags & os.O_ACCMODE != os.O_RDONLY:
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)  # as open
            if kind not in kinds:
                raise NotAFile(path)
            again = flags & ~(os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW)
            return os.open(f"/proc/self/fd/{probe}", again | os.O_CLOEXEC), where
        finally:
            os.close(probe)
    raise FileExistsError(path)
