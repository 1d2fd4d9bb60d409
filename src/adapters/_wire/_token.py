"""A secret kept in a file (``--auth-token-file``, ``--auth-shared-secret-file``), read again
when the file changes or at SIGHUP.

A pod warmed before its user is known starts with a placeholder and is bound later by writing
the file (a Kubernetes Secret update, a sidecar): each upgrade checks the file's stat, one
system call, and re-reads it when it changed. SIGHUP re-reads it at once, as sshd and nginx
reload. A file that can no longer be read, is empty, or holds what the server would refuse at
start (a shared secret too short), keeps the last value (a warning says so): a half-written
secret must not open the server or lock everyone out. The value itself is never logged.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

log = logging.getLogger("execproto")


def file_stamp(path: str | Path) -> tuple[int, int, int] | None:
    """What tells that a file changed, in one system call: its mtime, size and inode (a file
    renamed over it, as a Secret volume or certbot does, is a new inode). None: unreadable."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


# A secret is a line, not a document: a file larger than this is not one, and reading it
# whole would let whoever can write it grow the server.
MAX_SECRET_FILE = 64 << 10


def read_secret(path: str | Path) -> str:
    """The text of a secret file, stripped. Only a regular file, opened without blocking (a
    FIFO put in its place must not hang the server) and read up to MAX_SECRET_FILE; OSError
    or ValueError (UnicodeDecodeError among them) say why not."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = os.read(fd, MAX_SECRET_FILE + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SECRET_FILE:
        raise ValueError(f"larger than {MAX_SECRET_FILE >> 10} KiB: not a secret")
    return data.decode("utf-8").strip()


def _fine(value: str) -> str | None:
    return None


class SecretFile:
    """The value of the moment of one secret file, its surrounding whitespace stripped.

    ``what`` names the file in the log ("token file"), ``noun`` its value ("token");
    ``problem`` says what is wrong with a value read again (None: nothing), which then keeps
    the last one."""

    def __init__(self, path: Path, value: str, what: str = "token file", noun: str = "token",
                 problem: Callable[[str], str | None] = _fine) -> None:
        self.path = path
        self._value = value
        self._what = what
        self._noun = noun
        self._problem = problem
        self._seen = file_stamp(path)

    def current(self) -> str:
        """The value now: re-read first if the file changed since it was last read."""
        if file_stamp(self.path) != self._seen:
            self.reload("the file changed")
        return self._value

    def reload(self, why: str = "SIGHUP") -> None:
        self._seen = file_stamp(self.path)
        keeps = f"the last {self._noun} stays"
        try:
            value = read_secret(self.path)
        except (OSError, ValueError) as exc:
            log.warning("%s %s could not be read again (%s): %s", self._what, self.path, exc,
                        keeps)
            return
        if not value:
            log.warning("%s %s is empty: %s", self._what, self.path, keeps)
            return
        problem = self._problem(value)
        if problem is not None:
            log.warning("%s %s %s: %s", self._what, self.path, problem, keeps)
            return
        changed = value != self._value
        self._value = value
        log.info("%s %s re-read (%s): the %s %s", self._what, self.path, why, self._noun,
                 "changed" if changed else "is the same")


# The name it had when the token file was the only one.
TokenFile = SecretFile
