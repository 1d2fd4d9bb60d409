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
    made with O_EXCL, so nothing else is opened.

    A write fails as the kernel's open would fail it in a sandbox, in its order: the path's
    own faults first (missing, not a directory, a loop; not there, or denied, for the
    policy), then what lies there (a directory, a FIFO or socket nobody reads, a device),
    and only then the policy's "read-only"."""
    writing = flags & os.O_ACCMODE != os.O_RDONLY
    for _ in range(CREATE_TRIES):
        try:
            probe, where = scope.open(path, os.O_PATH, "read" if writing else need, deep=deep)
        except FileNotFoundError:
            if not flags & os.O_CREAT:
                raise
            try:
                directory, _, _ = scope.parent(path, "read")  # its directory must be there
            except FileNotFoundError:
                scope.placeholder(path)  # unless a sandbox would have made it
                raise
            os.close(directory)
            try:
                return scope.open(path, flags | os.O_EXCL, need, deep=deep)
            except FileExistsError:
                continue  # made meanwhile: look at what it is
        try:
            kind = stat.S_IFMT(os.fstat(probe).st_mode)
            if writing and kind in _REFUSED:
                code = _REFUSED[kind]
                raise OSError(code, os.strerror(code), path)  # as the open itself would
            if kind not in kinds:
                raise NotAFile(path)
            if writing:  # the probe checked reads
                scope.check(path, where, need, deep=deep)
            again = flags & ~(os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW)
            return os.open(f"/proc/self/fd/{probe}", again | os.O_CLOEXEC), where
        finally:
            os.close(probe)
    raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), path)


# What an open for writing meets before any permission: a directory is EISDIR; a FIFO or a
# socket that nobody reads is ENXIO (a FIFO that someone reads is not opened here: the
# reader would see our close as its end of file).
_REFUSED = {stat.S_IFDIR: errno.EISDIR, stat.S_IFIFO: errno.ENXIO, stat.S_IFSOCK: errno.ENXIO}
