"""The processes of one test's namespaces, for the tests that look for what a server left.

`make test` runs two shards at once on the same machine: the other shard's servers start and
end holders, pastas and sleeps of the same names meanwhile, so a ``pgrep`` of the whole machine
counts theirs too. A server a test runs under ``ip netns exec`` (or ``unshare -m``) has a mount
namespace of its own, which its children keep (a holder makes only a network and a user
namespace), and the test's server host is a network namespace of its own, which pasta stays
in: what is in one of those is the test's.
"""

from __future__ import annotations

import os
import re


class Namespace:
    """One namespace, by the path of a link to it (``/proc/PID/ns/mnt``, ``/run/netns/NAME``),
    held open till `close`: the kernel gives a freed namespace's number to the next one made,
    which could be the other shard's while the test still looks for processes in this one."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.number = os.fstat(self._fd).st_ino

    def holds(self, pid: str) -> bool:
        """Whether process ``pid`` is in this namespace (False if it is gone)."""
        for kind in ("mnt", "net"):  # namespace numbers are unique across kinds
            try:
                if os.stat(f"/proc/{pid}/ns/{kind}").st_ino == self.number:
                    return True
            except OSError:  # gone
                return False
        return False

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> Namespace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pgrep(pattern: str, *spaces: Namespace) -> set[str]:
    """The pids whose command line (its arguments joined by spaces) matches the regular
    expression ``pattern``, as ``pgrep -f`` would, in one of ``spaces``. Read from /proc: a
    machine without procps has no pgrep."""
    wanted = re.compile(pattern.encode())
    found = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                line = cmdline.read().rstrip(b"\0").replace(b"\0", b" ")
        except OSError:  # gone meanwhile
            continue
        if wanted.search(line) and any(space.holds(pid) for space in spaces):
            found.add(pid)
    return found
