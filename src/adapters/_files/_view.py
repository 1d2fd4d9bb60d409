"""What a sandboxed process finds at /proc and /dev, whatever its policy says: fs calls under
a sandbox see the same.

A sandboxed process has a /proc of its own pid namespace and bubblewrap's small /dev, both
mounted whatever the policy grants. So an fs call under a sandbox reads the kernel's files in
/proc (never writes them) and finds no process there: the server's own /proc/self would
otherwise give its environment, its memory and the other processes' to a call the policy
confines. In /dev it finds the few devices bubblewrap makes (which fs calls never open) and
nothing else. Kept apart: what lies in /dev/shm and /dev/pts follows the policy (a process has
empty ones of its own), since a shared memory segment is no more secret than the disk a
policy grants.
"""

from __future__ import annotations

# bubblewrap's --dev, as a sandboxed process lists it.
DEVICES = frozenset(("null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts", "shm",
                     "fd", "stdin", "stdout", "stderr", "core"))
# Names in /proc that are a process (the server's, or another's).
_SELVES = ("self", "thread-self")


def access(path: str) -> str | None:
    """The access a sandboxed fs call has at the real ``path`` whatever the policy: "read",
    "none" where a sandboxed process finds nothing (see `absent`), None where the policy
    decides."""
    names = path.split("/")[1:]  # "/proc/1/x" -> ["proc", "1", "x"]
    if names[0] == "proc":
        return "none" if absent(path) else "read"
    if names[0] == "dev" and len(names) == 2:
        return "none" if absent(path) else "read"
    if names[0] == "dev" and len(names) > 2:  # in /dev/shm and /dev/pts: the policy's
        return "none" if absent(path) else None
    return None


def absent(path: str) -> bool:
    """Whether a sandboxed process finds nothing at the real ``path``: a process in /proc, a
    device bubblewrap does not make."""
    names = path.split("/")[1:]
    if len(names) < 2:
        return False
    top, name = names[0], names[1]
    if top == "proc":
        return name.isdigit() or name in _SELVES
    if top == "dev":
        return name not in DEVICES
    return False
