"""The stage server ("zygote"): one warm process that forks each sandboxed start.

Run as ``/proc/self/fd/PYTHON_FD -I -S -c SOURCE PYTHON_FD CONTROL_FD SERVER_PID STAGE``: the
server's interpreter by the descriptor it opened at its start, this file's source and `_stage`'s
(STAGE) as read then, so that nothing a sandbox may write since decides what runs here, as for
the stage it replaces. Started once by the server (`_zygote`) and single-threaded, it compiles
the stage once and then serves requests on CONTROL_FD, a SOCK_SEQPACKET socket whose other end
only the server holds, till that end closes; it also dies with the server (a parent-death
signal, checked against SERVER_PID).

A request is the word ``start`` (``start cgroup`` with a cgroup) with descriptors
(SCM_RIGHTS), in this order: the body (a memfd the server wrote), the gate (a socket whose
other end the server keeps), stdin, stdout and stderr (one terminal for all three when the body
says so), the process's cgroup directory if it has one, then the descriptors the command
inherits. The zygote clones a child with ``CLONE_PARENT``, so that it is the *server's* child
(its pidfd, waits, process group and reaping are the server's as for any spawn), born in its
cgroup (``CLONE_INTO_CGROUP``), and answers ``ok PID`` with a pidfd made by the clone itself
(``CLONE_PIDFD``): no pid can be reused in between. Anything else is answered ``error WHY``;
the zygote goes on serving.

The child, before anything else, sets its parent-death signal and checks that its parent is
still the server. Then it leaves every signal as a fresh process has it, leads a session of
its own (its terminal's when it has one), joins its cgroup if it was not born there (by
``cgroup.procs`` beneath the directory's descriptor: where clone3 is filtered), puts its
stdio and inherited descriptors at their numbers and closes every other, and enters its cwd:
nothing that outlives it, done while the zygote answers. A failure up to there is written on
the gate (``PID ERRNO STEP``) and is the spawn's failure; else it writes ``PID ok`` and waits
for the server's word: a server that did not get the answer (the zygote killed meanwhile)
closes the gate, and the child exits having done nothing more, reaped by the server, which
learnt its pid from that word (it is the server's child, and no answer named it). Then it
builds the sandbox's root when the body has a plan (`_stage.build`, unchanged), or joins a
fresh session keyring, and execs the program (bubblewrap): a failure from there on is the
process's, said on its stderr (exit 1 for the sandbox, as the stage's, and 127 for an exec).

The body is NUL-separated fields: the cwd, ``1`` for a terminal, the plan's descriptor number
(or nothing), ``1`` if a cgroup descriptor is sent, the count of inherited descriptors and their
numbers, the count of argv words and the words, then the environment's ``NAME=VALUE``.

Only the standard library, nothing from execproto: it trusts only what the server sends.
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import itertools
import os
import signal
import socket
import sys
import types
from collections.abc import Callable

# The GIL stays held across the clone (a PyDLL call), so the child is this very thread, as
# os.fork's child is; the interpreter's own before and after hooks run around it.
_PY = ctypes.PyDLL(None, use_errno=True)
_PY.syscall.restype = ctypes.c_long
_LIBC = ctypes.CDLL(None, use_errno=True)
_API = ctypes.pythonapi

SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine)
SYS_CLONE3, SYS_CLOSE_RANGE = 435, 436  # one number on every architecture
CLONE_PIDFD, CLONE_PARENT, CLONE_INTO_CGROUP = 0x1000, 0x8000, 0x200000000
PR_SET_PDEATHSIG = 1
TIOCSCTTY = 0x540E
# The request's descriptors, by place (the cgroup's and the inherited ones follow).
BODY, GATE, STDIN, STDOUT, STDERR = range(5)
FIXED = 5
# At most this many descriptors in one request: more are discarded by the kernel (MSG_CTRUNC)
# and the request refused.
MAX_FDS = 64
MAX_FD = 0xFFFFFFFF  # close_range's "to the last one"
# Signals the interpreter changed from a fresh process's (Python ignores these two).
RESTORED = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT)
SYS_RT_SIGACTION = {"x86_64": 13, "aarch64": 134}.get(os.uname().machine)
SIGNALS = 64  # the kernel's, glibc's own two (32, 33) among them


class _KernelSigaction(ctypes.Structure):
    """The kernel's `struct sigaction` (with its restorer, as on x86_64 and arm64); all zero
    is SIG_DFL, no flags, nothing blocked."""
    _fields_ = [("handler", ctypes.c_void_p), ("flags", ctypes.c_ulong),
                ("restorer", ctypes.c_void_p), ("mask", ctypes.c_uint64)]


class Refused(Exception):
    """A step of the child's set-up failed: ``errno`` and which step, for the server."""

    def __init__(self, code: int, step: str) -> None:
        super().__init__(code, step)
        self.code = code
        self.step = step


class _CloneArgs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size",
        "tls", "set_tid", "set_tid_size", "cgroup")]


def clone(cgroup: int | None) -> tuple[int, int, bool]:
    """(pid, pidfd, whether it was born in ``cgroup``) in the zygote, (0, -1, the same) in
    the child, which is the server's. Born in its cgroup when it has one (clone3's
    CLONE_INTO_CGROUP, Linux 5.7): joining it later by ``cgroup.procs`` takes the cgroups'
    writer lock, which waits out an RCU grace period (measured: 1 to 13 ms a start)."""
    if cgroup is not None:
        try:
            return _clone3(cgroup)
        except OSError:
            pass  # clone3 filtered, or an older kernel: the child joins by cgroup.procs
    if SYS_CLONE is None:
        raise OSError(38, f"no clone number known for {os.uname().machine}")
    pidfd = ctypes.c_int(-1)
    pid = _forked(SYS_CLONE, ctypes.c_ulong(CLONE_PARENT | CLONE_PIDFD | signal.SIGCHLD),
                  None, ctypes.byref(pidfd), None, None)
    return pid, pidfd.value, False


def _clone3(cgroup: int) -> tuple[int, int, bool]:
    pidfd = ctypes.c_int(-1)
    # No exit signal of its own with CLONE_PARENT (EINVAL): it takes the zygote's, SIGCHLD.
    args = _CloneArgs(flags=CLONE_PARENT | CLONE_PIDFD | CLONE_INTO_CGROUP,
                      pidfd=ctypes.addressof(pidfd), cgroup=cgroup)
    pid = _forked(SYS_CLONE3, ctypes.byref(args), ctypes.c_size_t(ctypes.sizeof(args)))
    return pid, pidfd.value, True


def _forked(number: int, *args: object) -> int:
    """The clone system call ``number``, with the interpreter's own fork hooks around it (as
    os.fork runs them; where the interpreter does not export them, this single-threaded
    process holds no lock they would reset)."""
    _HOOKS[0]()
    pid = _PY.syscall(ctypes.c_long(number), *args)
    if pid == 0:
        _HOOKS[2]()
        return 0
    code = ctypes.get_errno()
    _HOOKS[1]()
    if pid < 0:
        raise OSError(code, f"clone: {os.strerror(code)}")
    return int(pid)


def _hooks() -> list[Callable[[], object]]:
    try:
        return [_API.PyOS_BeforeFork, _API.PyOS_AfterFork_Parent, _API.PyOS_AfterFork_Child]
    except AttributeError:
        return [lambda: None] * 3


_HOOKS = _hooks()


def serve(control: socket.socket, server: int, stage: types.ModuleType) -> None:
    """Answer the server's requests till it closes its end."""
    while True:
        try:
            word, fds, flags, _ = socket.recv_fds(control, 64, MAX_FDS, socket.MSG_CMSG_CLOEXEC)
        except OSError:
            return
        if not word and not fds:
            return  # the server is gone
        try:
            into = word == b"start cgroup"  # then fds[FIXED] is its cgroup's directory
            if (word not in (b"start", b"start cgroup") or len(fds) < FIXED + into
                    or flags & socket.MSG_CTRUNC):
                control.send(b"error a malformed request")
                continue
            try:
                pid, pidfd, inside = clone(fds[FIXED] if into else None)
            except OSError as exc:
                control.send(f"error {exc}".encode())
                continue
            if pid == 0:
                child(fds, server, stage, inside)  # never returns
            try:
                socket.send_fds(control, [f"ok {pid}".encode()], [pidfd])
            finally:
                os.close(pidfd)
        except OSError:
            return  # the server closed its end meanwhile
        finally:
            for fd in fds:
                _close(fd)


def child(fds: list[int], server: int, stage: types.ModuleType, inside: bool) -> None:
    """The child's whole life: set up, then exec; it never returns to the loop."""
    try:
        gc.disable()  # nothing of the zygote's is finalized here
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != server:
            os._exit(1)  # the server died before the parent-death signal was set
        gate = fds[GATE]
        me = os.getpid()  # in each word: a server that lost the answer reaps it by this
        setup = None
        try:  # nothing here that outlives it: done while the zygote answers
            setup = Setup(fds)
            setup.run(inside)
        except Refused as exc:
            os.write(gate if setup is None else setup.gate,
                     f"{me} {exc.code} {exc.step}".encode())
            os._exit(127)
        os.write(setup.gate, f"{me} ok".encode())
        if os.read(setup.gate, 1) != b"g":
            os._exit(1)  # the server never got the answer: nothing more is done
        os.close(setup.gate)
        run(setup.argv, setup.env, setup.plan, stage)
    finally:
        os._exit(127)


class Setup:
    """Everything up to the cwd, each step named for the server should it fail."""

    def __init__(self, fds: list[int]) -> None:
        self.fds = fds
        self.gate = fds[GATE]
        try:
            fields = [os.fsdecode(field) for field in _read_all(fds[BODY]).split(b"\0")]
            self.cwd, self.tty, plan, self.cgroup = fields[:4]
            count = int(fields[4])
            self.targets = [int(number) for number in fields[5:5 + count]]
            rest = fields[5 + count:]
            words = int(rest[0])
            self.argv, environment = rest[1:1 + words], rest[1 + words:]
            self.env = dict(word.split("=", 1) for word in environment)
            self.plan = int(plan) if plan else None
            self.inherited = fds[FIXED + (1 if self.cgroup else 0):]
        except (ValueError, IndexError):
            raise Refused(22, "body") from None
        if (len(self.inherited) != len(self.targets) or not self.argv
                or min(self.targets, default=3) < 3 or len(fds) < FIXED + bool(self.cgroup)
                or (self.plan is not None and self.plan not in self.targets)):
            raise Refused(22, "body")

    def run(self, inside: bool) -> None:
        """``inside``: born in its cgroup already."""
        for number in RESTORED:
            signal.signal(number, signal.SIG_DFL)
        _default_signals()
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        with _step("setsid"):
            os.setsid()
        if self.tty:
            with _step("terminal"):
                _ioctl(self.fds[STDIN], TIOCSCTTY)
        if self.cgroup and not inside:
            with _step("cgroup"):
                _join(self.fds[FIXED])
        with _step("descriptors"):
            self.gate = _place(self.gate, self.fds[STDIN:STDERR + 1], self.inherited,
                               self.targets)
        with _step("chdir"):
            os.chdir(self.cwd)


def run(argv: list[str], env: dict[str, str], plan: int | None,
        stage: types.ModuleType) -> None:
    """The sandbox's root, then the program: what fails here is the process's own."""
    if plan is not None:
        with os.fdopen(plan, "rb") as file:
            fields = [os.fsdecode(field) for field in file.read().split(b"\0")]
        try:
            stage.build(fields)
        except (OSError, stage.Changed) as exc:
            os.write(2, f"execproto sandbox: {exc}\n".encode(errors="replace"))
            os._exit(1)
        os.chdir("/")  # bubblewrap enters the cwd in the staged root
    else:
        try:
            stage.fresh_keyring()
        except OSError as exc:
            os.write(2, f"execproto sandbox: {exc}\n".encode(errors="replace"))
            os._exit(1)
    try:
        os.execve(argv[0], argv, env)
    except OSError as exc:
        os.write(2, f"execproto: {argv[0]}: {exc.strerror}\n".encode(errors="replace"))
        os._exit(127)


def _default_signals() -> None:
    """Every signal as a fresh process has it. A handled one ends at the exec anyway, but one
    the server was started ignoring (nohup's SIGHUP, a harness's) would stay ignored in the
    program. By the system call, as glibc's `sigaction` refuses its own two; only those the
    stage server found changed at its start (`_changed_signals`): a child has its dispositions,
    which it never changes afterwards, and resetting all 62 was a third of a ms a start."""
    if SYS_RT_SIGACTION is None:
        return
    default = _KernelSigaction()
    for number in CHANGED:
        _LIBC.syscall(ctypes.c_long(SYS_RT_SIGACTION), ctypes.c_long(number),
                      ctypes.byref(default), None, ctypes.c_size_t(8))


def _changed_signals() -> list[int]:
    """The signals whose disposition is not the default in this process (every one, if it
    cannot be read): ignored, or handled by the interpreter."""
    if SYS_RT_SIGACTION is None:
        return []
    changed = []
    now = _KernelSigaction()
    for number in range(1, SIGNALS + 1):
        if number in (signal.SIGKILL, signal.SIGSTOP):
            continue
        if _LIBC.syscall(ctypes.c_long(SYS_RT_SIGACTION), ctypes.c_long(number), None,
                         ctypes.byref(now), ctypes.c_size_t(8)) != 0 or now.handler:
            changed.append(number)
    return changed


# Set at the stage server's start (`main`), once its interpreter has set its own.
CHANGED: list[int] = []


class _step:
    """A step of the set-up: its OSError becomes `Refused`, naming it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        pass

    def __exit__(self, kind: object, exc: object, trace: object) -> None:
        if isinstance(exc, OSError):
            raise Refused(exc.errno or 5, self.name) from None


def _ioctl(fd: int, request: int) -> None:
    if _LIBC.ioctl(ctypes.c_int(fd), ctypes.c_ulong(request), ctypes.c_int(0)) < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _join(directory: int) -> None:
    """Into the cgroup whose directory ``directory`` is, before anything is started: every
    descendant is born inside."""
    procs = os.open("cgroup.procs", os.O_WRONLY | os.O_CLOEXEC, dir_fd=directory)
    try:
        os.write(procs, b"0")
    finally:
        os.close(procs)


def _place(gate: int, stdio: list[int], inherited: list[int], targets: list[int]) -> int:
    """stdio at 0, 1, 2 and each inherited descriptor at its number (inheritable), every other
    descriptor closed; returns where the gate now is: above them all, close-on-exec."""
    top = max([2, *targets, gate, *stdio, *inherited]) + 1
    high_gate = fcntl.fcntl(gate, fcntl.F_DUPFD_CLOEXEC, top)
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, top) for fd in (*stdio, *inherited)]
    for fd, number in zip(moved, [0, 1, 2, *targets], strict=True):
        os.dup2(fd, number, inheritable=True)
    kept = sorted({0, 1, 2, *targets, high_gate})
    for low, high in itertools.pairwise(kept):
        if high > low + 1:
            _close_range(low + 1, high - 1)
    _close_range(kept[-1] + 1, MAX_FD)
    return high_gate


def _close_range(first: int, last: int) -> None:
    """Close every descriptor from ``first`` to ``last``, both included."""
    if _LIBC.syscall(ctypes.c_long(SYS_CLOSE_RANGE), ctypes.c_uint(first), ctypes.c_uint(last),
                     ctypes.c_uint(0)) < 0:  # before Linux 5.9: one by one, to the limit
        os.closerange(first, min(last + 1, os.sysconf("SC_OPEN_MAX")))


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def main() -> None:
    interpreter_fd, control_fd, server = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    CHANGED[:] = _changed_signals()
    os.close(interpreter_fd)  # what it was run from: no child may inherit it
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server:
        sys.exit(1)
    stage = types.ModuleType("_stage")
    exec(compile(sys.argv[4], "_stage.py", "exec"), stage.__dict__)
    control = socket.socket(fileno=control_fd)
    control.send(b"ready")
    serve(control, server, stage)


if __name__ == "__main__":
    main()
