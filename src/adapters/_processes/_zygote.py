"""The server's side of the stage server (`_forker`): how a sandboxed process is started.

A sandboxed start used to exec a chain: setpriv (the parent-death signal), a shell (the
cgroup), a fresh Python for the stage (`_stage`, compiled each time), then bubblewrap: about
35 ms before bubblewrap ran. The stage server is one Python started once, with the stage
compiled; it forks each start, and the child does all of that by system calls before it execs
bubblewrap (`_forker` says how, and why it is as safe).

- Started lazily, at the first sandboxed start (the probe's, `_bwrap.problem`, which runs
  after the server listens), never on the ready path; by a thread of its own that lives as
  long as the process, because Linux ties a parent-death signal to the thread that forked:
  that of the stage server, and that of each child, which is cloned as the *server's* child
  of that same thread.
- It dies with the server: its parent-death signal, and the end of its socket.
- When it dies it is started again at the next start, at most `MAX_STARTS` times a minute; a
  start whose exchange it did not finish is tried once more, with a new gate. A child may
  have been cloned for the lost one: it is the server's child, and no answer named it. Its
  word on the old gate does (``PID ok``): the server then closes that gate, the child exits
  having done nothing, and the server reaps it. No word, only the gate's end, means none was
  cloned: the dead stage server held the only other end.

A command for it is an argv whose first word is `_posix.STAGED` (no program's name can hold
a NUL), then the plan's descriptor number (or nothing: bubblewrap takes `/` itself), then the
program (bubblewrap) and its words; `_posix.spawn` sends it here.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence

from execproto import SpawnSpec

from . import _bwrap, _forker
from ._cgroups import place_of
from ._posix import Child, Stdio, close_quietly, not_found_as

# Starts of the stage server within a minute: past them it is not started again until the
# oldest is a minute old (a machine where it dies at once would otherwise start one per spawn).
MAX_STARTS = 5
STARTS_WINDOW = 60.0
# How long its start (an interpreter, the stage compiled: ~60 ms) and one answer may take on a
# loaded machine, and how long a child's set-up up to its cwd may (a few system calls).
READY_WAIT = 20.0
ANSWER_WAIT = 10.0
SETUP_WAIT = 10.0
# The child's set-up steps whose failure is the client's spawn failure, as an exec's would be.
CLIENTS_STEPS = ("chdir",)


class Lost(Exception):
    """The stage server ended before it answered: the start may be tried again."""


class _Link:
    """A running stage server: its socket and process."""

    def __init__(self, control: socket.socket, process: subprocess.Popen[bytes]) -> None:
        self.control = control
        self.process = process


class Zygote:
    """This process's stage server, started at its first use."""

    def __init__(self) -> None:
        self._state = threading.Condition()
        self._exchange = threading.Lock()  # one request on the socket at a time
        self._link: _Link | None = None
        self._starts: list[float] = []  # when it was started, within the window
        self._wanted = False
        self._why = ""
        self._thread: threading.Thread | None = None
        self._owner = os.getpid()  # a fork of the server starts its own

    @property
    def pid(self) -> int | None:
        """The running stage server's pid (None: none runs)."""
        link = self._link
        return None if link is None else link.process.pid

    # -- its life -------------------------------------------------------------------------------

    def _running(self) -> _Link:
        """The running stage server, started (again) first if none runs."""
        if self._owner != os.getpid():  # a fork's: the stage server's children would not be
            self.__init__()  # type: ignore[misc]  # its own, but its parent's
        with self._state:
            ends = time.monotonic() + READY_WAIT
            while self._link is None:
                if not self._wanted:
                    now = time.monotonic()
                    self._starts = [at for at in self._starts if now - at < STARTS_WINDOW]
                    if len(self._starts) >= MAX_STARTS:
                        raise OSError(errno.EAGAIN, "the sandbox's stage server ended "
                                      f"{MAX_STARTS} times within {STARTS_WINDOW:g} s "
                                      f"({self._why})")
                    self._starts.append(now)
                    self._wanted = True
                    if self._thread is None:
                        self._thread = threading.Thread(target=self._keep, daemon=True,
                                                        name="execproto-stage-server")
                        self._thread.start()
                    self._state.notify_all()
                left = ends - time.monotonic()
                if left <= 0:
                    raise OSError(errno.ETIMEDOUT, "the sandbox's stage server did not start")
                self._state.wait(left)
                if self._link is None and not self._wanted:
                    raise OSError(errno.EIO, f"the sandbox's stage server: {self._why}")
            return self._link

    def _keep(self) -> None:
        """The thread that starts the stage server, and reaps it when it ends. It never ends
        itself: the stage server's children are its children too, for the parent-death
        signal's sake."""
        while True:
            with self._state:
                while not self._wanted:
                    self._state.wait()
            link, why = _launch()
            with self._state:
                self._link, self._why, self._wanted = link, why, False
                self._state.notify_all()
            if link is None:
                continue
            link.process.wait()
            with self._exchange:  # no exchange is left on its socket
                with self._state:
                    if self._link is link:
                        self._link = None
                    self._why = f"it exited with {link.process.returncode}"
                link.control.close()

    def _lose(self, link: _Link) -> None:
        """The stage server failed an exchange: it is not used again (its thread reaps it)."""
        with self._state:
            if self._link is link:
                self._link = None
        try:
            link.process.kill()
        except OSError:
            pass

    def _ask(self, fds: list[int], cgroup: bool) -> tuple[int, int]:
        """One start, its descriptors sent (the cgroup's directory after stdio, if
        ``cgroup``): the (pid, pidfd) the stage server answers."""
        link = self._running()
        with self._exchange:
            try:
                socket.send_fds(link.control, [b"start cgroup" if cgroup else b"start"], fds)
                said, got, _, _ = socket.recv_fds(link.control, 256, 1,
                                                  socket.MSG_CMSG_CLOEXEC)
            except OSError:  # its socket closed, or no answer in time
                self._lose(link)
                raise Lost from None
        if not said:
            self._lose(link)
            raise Lost
        if not said.startswith(b"ok ") or len(got) != 1:
            for fd in got:
                close_quietly(fd)
            raise OSError(errno.EIO, "the sandbox's stage server: "
                          + said.decode(errors="replace").removeprefix("error "))
        return int(said[3:]), got[0]

    # -- a start --------------------------------------------------------------------------------

    def spawn(self, spec: SpawnSpec, pass_fds: Sequence[int], join: tuple[str, ...]) -> Child:
        """Start ``spec`` (a command for the stage server) with ``pass_fds`` at their numbers,
        in the cgroup that ``join`` names (`_cgroups.wrapper`)."""
        plan, argv = spec.argv[1], list(spec.argv[2:])
        if plan and not (plan.isdigit() and int(plan) in pass_fds):
            raise OSError(errno.EINVAL, "the sandbox's plan is not among its descriptors")
        if len(pass_fds) + _forker.FIXED + 1 > _forker.MAX_FDS:
            raise OSError(errno.EMFILE, "too many descriptors for one start")
        place = place_of(join)
        stdio = Stdio(spec)
        cgroup = None  # the cgroup's directory, for the child to join
        try:
            sent = list(stdio.child)
            if place is not None:
                cgroup = os.open(place, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                sent.append(cgroup)
            body = _body(spec, plan, argv, place is not None, pass_fds)
            pid, pidfd = self._started(body, sent, pass_fds, place is not None)
        except BaseException:
            stdio.abandon()
            raise
        finally:
            stdio.handed()
            if cgroup is not None:
                os.close(cgroup)
        try:
            outputs, stdin = stdio.ends()
        except OSError:
            stdio.abandon()
            _kill(pidfd)
            raise
        return Child(pid, pidfd, outputs, stdin)

    def _started(self, body: bytes, sent: list[int], pass_fds: Sequence[int], cgroup: bool
                 ) -> tuple[int, int]:
        """The exchange and the child's set-up; tried once more if the stage server was lost."""
        for attempt in (1, 2):
            gate, their_gate = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with gate:
                try:
                    with their_gate:  # closed before a lost start's gate is read (_forget)
                        memfd = _memfd(body)
                        try:
                            pid, pidfd = self._ask(
                                [memfd, their_gate.fileno(), *sent, *pass_fds], cgroup)
                        finally:
                            os.close(memfd)
                except Lost:
                    _forget(gate)
                    if attempt == 2:
                        raise OSError(errno.EIO, "the sandbox's stage server ended during "
                                      "the start") from None
                    continue
                return pid, _go(gate, pidfd)
        raise AssertionError("unreachable")


def _go(gate: socket.socket, pidfd: int) -> int:
    """Its set-up's word, then the server's: the pidfd once it is started, or its set-up's
    failure."""
    try:
        gate.settimeout(SETUP_WAIT)
        said = gate.recv(64).partition(b" ")[2]  # after its pid, which the answer gave
        if said == b"ok":
            gate.send(b"g")
    except OSError:  # it died (its status says how), or is slow: started as far as we know
        said = b""
    if said in (b"ok", b""):
        return pidfd
    _kill(pidfd)  # it exits by itself; reaped here
    words = said.decode(errors="replace").split()
    code, step = int(words[0]), words[1] if len(words) > 1 else "?"
    if step in CLIENTS_STEPS:
        raise not_found_as(code)
    raise OSError(code, f"the sandbox's process could not be set up ({step}): "
                  f"{os.strerror(code)}")


def _forget(gate: socket.socket) -> None:
    """A lost start's child, if one was cloned: told to do nothing (its gate closed), and
    reaped, by the pid its word gives (the server's child, which nothing else reaps). It is
    left, a zombie, only if its word is slower than a set-up may take, or if something outside
    the server kills it before it says it (then its gate ends as if none had been cloned)."""
    try:
        gate.settimeout(SETUP_WAIT)
        said = gate.recv(64)
    except OSError:
        return
    gate.close()
    pid = said.partition(b" ")[0]
    if not pid.isdigit():
        return  # b"": none was cloned
    try:
        os.waitpid(int(pid), 0)
    except ChildProcessError:
        pass


def _kill(pidfd: int) -> None:
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:
        pass
    try:
        os.waitid(os.P_PIDFD, pidfd, os.WEXITED)
    except ChildProcessError:
        pass
    os.close(pidfd)


def _body(spec: SpawnSpec, plan: str, argv: list[str], cgroup: bool,
          pass_fds: Sequence[int]) -> bytes:
    fields = [spec.cwd, "1" if spec.tty else "", plan, "1" if cgroup else "",
              str(len(pass_fds)), *map(str, pass_fds), str(len(argv)), *argv,
              *(f"{name}={value}" for name, value in spec.env)]
    return b"\0".join(map(os.fsencode, fields))


def _memfd(data: bytes) -> int:
    fd = os.memfd_create("execproto-start")  # close-on-exec
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _launch() -> tuple[_Link | None, str]:
    """A new stage server, or None and why not. Run on the stage server's own thread."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fds = [theirs.fileno()]
    try:
        argv = [*_bwrap.FORKER.argv(fds), str(theirs.fileno()), str(os.getpid()),
                _bwrap.STAGE_SOURCE]
        process = subprocess.Popen(argv, pass_fds=fds, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, env=dict(_bwrap.WRAPPER_ENV),
                                   cwd="/", start_new_session=True)
    except OSError as exc:
        ours.close()
        return None, f"it could not be started: {exc}"
    finally:
        theirs.close()
        for fd in fds[1:]:
            close_quietly(fd)
    try:
        ours.settimeout(READY_WAIT)
        said = ours.recv(16)
    except OSError:
        said = b""
    if said != b"ready":
        process.kill()
        process.wait()
        ours.close()
        return None, f"it did not start (exit status {process.returncode})"
    ours.settimeout(ANSWER_WAIT)
    return _Link(ours, process), ""


def run(argv: list[str], pass_fds: Sequence[int], timeout: float) -> tuple[int | None, str]:
    """Run a command for the stage server to its end, as the probe does: (its exit status,
    or None if it ran out of ``timeout``; its stderr)."""
    spec = SpawnSpec(argv=tuple(argv), arg0=None, cwd="/", env=_bwrap.WRAPPER_ENV, tty=False,
                     pipe_stdin=False, session_id="", process_id="probe")
    child = ZYGOTE.spawn(spec, pass_fds, ())
    said = bytearray()
    ends = time.monotonic() + timeout
    try:
        streams = {fd: name for name, fd in child.outputs.items()}
        poller = select.poll()  # not select: a busy server's descriptors pass 1024
        for fd in streams:
            poller.register(fd, select.POLLIN)
        while streams and time.monotonic() < ends:
            for fd, _ in poller.poll(max(0.0, ends - time.monotonic()) * 1000):
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    poller.unregister(fd)
                    del streams[fd]
                elif streams[fd] == "stderr" and len(said) < 1 << 16:
                    said += chunk
        exited = select.poll()
        exited.register(child.pidfd, select.POLLIN)
        exited.poll(max(0.0, ends - time.monotonic()) * 1000)
        status = child.exit_status()
        if status is None:
            child.signal_group("KILL")
        return status, said.decode(errors="replace")
    finally:
        child.reap()


ZYGOTE = Zygote()
