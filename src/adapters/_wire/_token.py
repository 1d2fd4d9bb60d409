"""The bearer token of ``--auth-token-file``, read again when the file changes or at SIGHUP.

A pod warmed before its user is known starts with a placeholder and is bound later by writing
the file (a Kubernetes Secret update, a sidecar): each upgrade checks the file's stat, one
system call, and re-reads it when it changed. SIGHUP re-reads it at once, as sshd and nginx
reload. A file that can no longer be read, or is empty, keeps the last token (a warning says
so): a half-written secret must not open the server or lock everyone out. The token itself is
never logged.
"""

from __future__ import annotations

import logging
import os
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


class TokenFile:
    def __init__(self, path: Path, token: str) -> None:
        self.path = path
        self._token = token
        self._seen = file_stamp(path)

    def current(self) -> str:
        """The token now: re-read first if the file changed since it was last read."""
        if file_stamp(self.path) != self._seen:
            self.reload("the file changed")
        return self._token

    def reload(self, why: str = "SIGHUP") -> None:
        self._seen = file_stamp(self.path)
        try:
            token = self.path.read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("token file %s could not be read again (%s): the last token stays",
                        self.path, exc)
            return
        if not token:
            log.warning("token file %s is empty: the last token stays", self.path)
            return
        changed = token != self._token
        self._token = token
        log.info("token file %s re-read (%s): the token %s", self.path, why,
                 "changed" if changed else "is the same")
