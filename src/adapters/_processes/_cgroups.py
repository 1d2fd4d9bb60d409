"""Each process in a cgroup of its own, so that nothing it starts outlives its terminate or the
server, whatever session or process group it moved to.

A process group is not enough: a command's child that calls `setsid` (or a daemon that forks
twice) leaves it, and a SIGKILLed server signals nobody. cgroup v2 membership cannot be left
by an unprivileged process and is inherited by every fork. So:

- the server makes ``execproto-PID`` beneath its own cgroup (where the cgroup v2 hierarchy is
  writable: root, or a delegated subtree), and one ``pN`` in it per process; the spawn's first
  wrapper (``sh -c 'echo 0 > DIR/cgroup.procs && exec "$@"'``) moves itself there before it
  execs the rest, so every descendant is born inside; a sandboxed process is born there itself,
  cloned into it by the stage server (`_zygote`, which takes the place from `place_of`);
- a terminate's TERM reaches every member (through a pidfd opened and then checked to be still
  in the cgroup, so never a reused pid), and once the terminated process is finalized whatever
  is left of its cgroup is killed (``cgroup.kill``, atomic against forks);
- a process that ended on its own may leave children behind, as without a cgroup; its cgroup
  is removed once empty, and everything left is killed when the server stops;
- a watchdog (a shell in a session of its own) waits on a pipe only the server holds: when
  the server dies, even by SIGKILL, it kills the whole tree and removes it.

Where no cgroup v2 hierarchy is writable, `Tree.create` says why, and the server warns. A
server makes its tree at its first process (`Later`): the watchdog's start is ~1.5 ms, which a
start that runs none need not spend; `Tree.problem` says at start what would stop it.
"""

from __future__ import annotations

import errno
import itertools
import os
import signal
import subprocess
import time
from collections.abc import Callable

from . import _posix
from ._posix import SIGNALS

# Moves the shell into the cgroup named by $0, then execs the rest: the descendants inherit it.
# The shell sets PWD in the environment it passes on; the program's must be exactly the
# client's, so PWD is put back as it was: absent, or the value given as $1.
JOIN_UNSET_PWD = 'echo 0 > "$0/cgroup.procs" || exit 126; unset PWD; exec "$@"'
JOIN_KEEP_PWD = 'echo 0 > "$0/cgroup.procs" || exit 126; PWD=$1; export PWD; shift; exec "$@"'
# The watchdog: waits for EOF on its stdin (the server gone), kills the tree, removes it. Its
# tools are given as the files they are ($1...$5, `TOOLS`): by name, its shell would look each
# up on PATH once the server is gone, after a sandbox allowed `/` could have put one of its own
# first there (a /usr/sbin/grep), and run it as the server.
WATCHDOG = """
cat=$1 grep=$2 sleep=$3 find=$4 rmdir=$5
"$cat" > /dev/null
echo 1 > "$0/cgroup.kill" 2>/dev/null
i=0
while [ $i -lt 50 ] && "$grep" -q "populated 1" "$0/cgroup.events" 2>/dev/null; do
    "$sleep" 0.1; i=$((i + 1))
done
"$find" "$0" -depth -type d -exec "$rmdir" {} \\; 2>/dev/null
"""
# Run at every spawn, as the server: the file, not `/bin/sh`, two links a writable root could
# turn (`_posix.real_program`).
SHELL = os.path.realpath("/bin/sh")
_servers = itertools.count(1)
SETSID = _posix.real_program("setsid", path="/usr/bin:/bin")
TOOLS = tuple(_posix.real_program(name, path="/usr/bin:/bin") or name
              for name in ("cat", "grep", "sleep", "find", "rmdir"))
FIXED_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def _hierarchy() -> str | None:
    """Where the cgroup v2 hierarchy is mounted (alone or beside v1), if anywhere."""
    with open("/proc/self/mountinfo") as table:
        for line in table:
            left, _, right = line.partition(" - ")
            if right.split(" ", 1)[0] == "cgroup2":
                return left.split()[4]
    return None


def _own() -> str:
    """This process's cgroup v2 path ("0::/path")."""
    with open("/proc/self/cgroup") as table:
        for line in table:
            if line.startswith("0::"):
                return line[3:].strip()
    return "/"


def wrapper(place: str | None, env: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """The command that puts a spawn in the cgroup ``place`` (None: no wrapper); ``env``: the
    environment the program must get exactly (its PWD is put back)."""
    if place is None:
        return ()
    pwd = dict(env).get("PWD")
    if pwd is None:
        return (SHELL, "-c", JOIN_UNSET_PWD, place)
    return (SHELL, "-c", JOIN_KEEP_PWD, place, pwd)


def place_of(join: tuple[str, ...]) -> str | None:
    """The cgroup a `wrapper` puts its spawn in (None: none), for a start that joins it by
    itself (`_zygote`)."""
    return join[3] if join else None


class NoTree:
    """Where no cgroup can be made: spawns go unwrapped, and signals reach the group only."""

    def place(self, proc: int) -> str | None:
        return None

    def signalled(self, proc: int, name: str) -> None:
        pass

    def finished(self, proc: int) -> None:
        pass

    def close(self) -> None:
        pass


class Tree:
    """The server's cgroup and its processes' ones beneath it."""

    def __init__(self, mount: str, base: str) -> None:
        self._mount = mount
        self.base = base
        self._lingering: set[str] = set()
        self._procs: dict[int, str] = {}  # proc -> its cgroup, until `finished`
        self._terminated: set[int] = set()
        read_end, self._alive = os.pipe()  # both close-on-exec: no process inherits them
        # Not the server's child (`setsid --fork` leaves it to init): a host application's
        # waits, and a count of the server's children, see nothing of it.
        try:
            subprocess.run([str(SETSID), "--fork", SHELL, "-c", WATCHDOG, base, *TOOLS],
                           stdin=read_end,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=FIXED_ENV,
                           timeout=10, check=True)
        finally:
            os.close(read_end)

    @classmethod
    def create(cls) -> tuple[Tree | NoTree, str | None]:
        """The tree, or a `NoTree` and why there can be none here."""
        mount = _hierarchy()
        if mount is None:
            return NoTree(), "no cgroup v2 hierarchy is mounted"
        if not os.path.exists(SHELL) or SETSID is None:
            return NoTree(), f"{SHELL} or util-linux's setsid is missing"
        # One per server, several servers in one process included.
        name = f"execproto-{os.getpid()}-{next(_servers)}"
        base = os.path.join(mount, _own().lstrip("/"), name)
        try:
            os.mkdir(base)
        except FileExistsError:
            pass  # a pid reused after a server that left its tree: taken over
        except OSError as exc:
            return NoTree(), f"cannot make a cgroup in {os.path.dirname(base)}: {exc.strerror}"
        if not os.path.exists(os.path.join(base, "cgroup.kill")):
            _remove(base)
            return NoTree(), "the kernel has no cgroup.kill (Linux 5.14 or later is needed)"
        try:
            return cls(mount, base), None
        except (OSError, subprocess.SubprocessError) as exc:
            _remove(base)
            return NoTree(), f"the watchdog could not be started: {exc}"

    @staticmethod
    def problem() -> str | None:
        """Why `create` would fail here, as far as can be told without making anything (None:
        it should succeed)."""
        mount = _hierarchy()
        if mount is None:
            return "no cgroup v2 hierarchy is mounted"
        if not os.path.exists(SHELL) or SETSID is None:
            return f"{SHELL} or util-linux's setsid is missing"
        own = os.path.join(mount, _own().lstrip("/"))
        if not os.access(own, os.W_OK):
            return f"cannot make a cgroup in {own}: {os.strerror(errno.EACCES)}"
        # The root cgroup has no cgroup.kill of its own; any other has it from Linux 5.14 on.
        if os.path.realpath(own) != os.path.realpath(mount) and not os.path.exists(
                os.path.join(own, "cgroup.kill")):
            return "the kernel has no cgroup.kill (Linux 5.14 or later is needed)"
        return None

    # -- one process's cgroup, as the driver sees it ----------------------------------------

    def place(self, proc: int) -> str | None:
        """Make ``proc``'s cgroup (on the owner: the tree's records are its); `wrapper` is how
        its spawn joins it."""
        path = os.path.join(self.base, f"p{proc}")
        os.mkdir(path)
        self._procs[proc] = path
        return path

    def signalled(self, proc: int, name: str) -> None:
        """The group of ``proc`` got signal ``name``. An interrupt is the group's alone, as a
        terminal's Ctrl-C; a terminate's TERM reaches every member, KILL all of them at once,
        and what is left of a terminated process goes with it at `finished`."""
        path = self._procs.get(proc)
        if path is None or name == "INT":
            return
        self._terminated.add(proc)
        if name == "KILL":
            self.kill(path)
        else:
            self._signal(path, SIGNALS[name])

    def finished(self, proc: int) -> None:
        """``proc`` is finalized, or its spawn failed: a terminated one's cgroup is killed, and
        any is removed once empty (one that ended on its own may leave daemons, as without a
        cgroup, until the server stops)."""
        path = self._procs.pop(proc, None)
        if path is None:
            return
        if proc in self._terminated:
            self._terminated.discard(proc)
            self.kill(path)
        self._release(path)

    def _signal(self, path: str, number: int) -> None:
        """Send ``number`` to every process in ``path``, each through a pidfd opened first and
        then checked to be in ``path`` still: a pid that was reused meanwhile is not ours."""
        for pid in self._members(path):
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                continue  # gone already
            try:
                if self._cgroup_of(pid) == path:
                    signal.pidfd_send_signal(pidfd, number)
            except OSError:
                pass
            finally:
                os.close(pidfd)

    def kill(self, path: str) -> None:
        """Kill everything in ``path`` at once."""
        try:
            with open(os.path.join(path, "cgroup.kill"), "w") as control:
                control.write("1")
        except OSError:
            pass  # removed already

    def _release(self, path: str) -> None:
        """Remove ``path`` once it is empty; until then it lingers (retried at each release)."""
        self._lingering.add(path)
        for place in list(self._lingering):
            if _remove(place):
                self._lingering.discard(place)

    def close(self) -> None:
        """The server stops: kill what is left, remove the tree, let the watchdog go."""
        self.kill(self.base)
        for place in list(self._lingering):
            _remove(place, wait=True)
        _remove(self.base, wait=True)
        os.close(self._alive)  # the watchdog finds nothing left, and ends

    def _members(self, path: str) -> list[int]:
        try:
            with open(os.path.join(path, "cgroup.procs")) as procs:
                return [int(line) for line in procs if line.strip()]
        except OSError:
            return []

    def _cgroup_of(self, pid: int) -> str:
        """The directory of ``pid``'s cgroup v2 ("" if it is gone)."""
        with open(f"/proc/{pid}/cgroup") as table:
            for line in table:
                if line.startswith("0::"):
                    return os.path.join(self._mount, line[3:].strip().lstrip("/"))
        return ""


class Later:
    """The server's tree, made at its first `place` (`Tree.create`); until then there is
    nothing to signal, finish or close. ``unexpected`` hears why it could not be made, where
    `Tree.problem` did not foresee it at start."""

    def __init__(self, unexpected: Callable[[str], None]) -> None:
        self._unexpected = unexpected
        self._made: Tree | NoTree | None = None

    def place(self, proc: int) -> str | None:
        if self._made is None:
            self._made, problem = Tree.create()
            if problem is not None:
                self._unexpected(problem)
        return self._made.place(proc)

    def signalled(self, proc: int, name: str) -> None:
        if self._made is not None:
            self._made.signalled(proc, name)

    def finished(self, proc: int) -> None:
        if self._made is not None:
            self._made.finished(proc)

    def close(self) -> None:
        if self._made is not None:
            self._made.close()


def _remove(path: str, wait: bool = False) -> bool:
    """rmdir ``path`` and any cgroups made beneath it, deepest first; False while populated."""
    for _ in range(100 if wait else 1):
        try:
            for here, subdirs, _ in os.walk(path, topdown=False):
                for name in subdirs:
                    os.rmdir(os.path.join(here, name))
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or not wait:
                return False
        time.sleep(0.01)  # killed members take a moment to leave
    return False
