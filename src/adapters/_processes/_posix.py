"""Processes on Linux, the way the core's lifecycle rules need them.

- Each process leads its own session and process group, so a signal reaches its whole tree.
- A parent-death signal (KILL) is set with util-linux ``setpriv``, which execs in place (the pid
  is kept), so children die even if the server is SIGKILLed. Linux ties that signal to the
  *thread* that forked, so `spawn` must be called from the adapter's long-lived owner thread.
  ``preexec_fn`` could set it too, but it is unsafe in a process that has threads.
- A sandboxed command (argv[0] `STAGED`) is started by the stage server instead (`_zygote`),
  which sets all of that up by system calls in a fork of its own, without those wrappers.
- Exit is observed through a pidfd with ``waitid(WEXITED | WNOWAIT)``: the child stays a zombie,
  so its pid and process group id cannot be reused until `Child.reap`, which the adapter calls on
  the core's `Finalize`. Signals go to the group only before that, and the core sends none after
  the exit.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import signal
import struct
import subprocess
from collections.abc import Mapping
from typing import TYPE_CHECKING

from execproto import SpawnSpec
from execproto.events import SpawnFailure, Stream

from .._system import os_error_text as os_error_text  # the processes room's words, as every room's
from .._system import readlink as readlink
from .._system import which

if TYPE_CHECKING:
    import ctypes

# Output is read in large pieces: a bigger pipe means fewer wakeups and fewer, larger chunks.
PIPE_SIZE = 1 << 20
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
SIGNALS = {"INT": signal.SIGINT, "TERM": signal.SIGTERM, "KILL": signal.SIGKILL}


def real_program(name: str, path: str | None = None) -> str | None:
    """A program the server runs outside every sandbox, as the file it is (found on ``path``,
    the server's PATH by default), found once at start. Never through a symlink: a sandbox
    with a writable root may replace a link (`/usr/bin/pasta -> passt`, `/bin/sh -> dash`)
    though never the file it leads to, which is held read-only in every sandbox
    (`_own_files`); run through the link, the server would run whatever it was turned to."""
    found = which(name, path=path)
    return os.path.realpath(found) if found is not None else None


_SETPRIV = real_program("setpriv")
# The first word of a command the stage server starts (`_zygote`): no program's name holds a NUL.
STAGED = "\0execproto-stage"
_SETSID = real_program("setsid")


class SpawnError(Exception):
    """The process could not be started. ``kind`` is the client's ``data.kind``."""

    def __init__(self, message: str, kind: SpawnFailure) -> None:
        super().__init__(message)
        self.kind = kind


def not_found() -> SpawnError:
    """What a spawn of a missing program or cwd fails with (the reference's words)."""
    return _spawn_error(OSError(errno.ENOENT, ""))


def not_found_as(code: int) -> SpawnError:
    """What a spawn whose exec (or cwd) failed with ``code`` fails with."""
    return _spawn_error(OSError(code, ""))


def _spawn_error(exc: OSError) -> SpawnError:
    kinds: dict[int, SpawnFailure] = {errno.ENOENT: "spawnNotFound",
                                      errno.EACCES: "spawnPermissionDenied"}
    kind = kinds.get(exc.errno or 0, "spawnFailed")
    return SpawnError(os_error_text(exc), kind)


def resolve_program(program: str, env: Mapping[str, str], cwd: str) -> str:
    """The executable ``program`` names, looked up on the child's PATH as execvp would.

    Done here, before the exec, so a missing or unrunnable program is a clean spawn error
    rather than an exit status from the wrapper that would have run it.
    """
    if "/" in program:
        path = program if os.path.isabs(program) else os.path.join(cwd, program)
        if not os.path.exists(path):
            raise _spawn_error(OSError(errno.ENOENT, ""))
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise _spawn_error(OSError(errno.EACCES, ""))
        return path
    search = env.get("PATH", os.defpath)
    found = which(program, path=search)
    if found is None:
        raise _spawn_error(OSError(errno.ENOENT, ""))
    return found if os.path.isabs(found) else os.path.join(cwd, found)


class Child:
    """One spawned process: its pid, pidfd and the parent's ends of its stdio."""

    __slots__ = ("pid", "pidfd", "outputs", "stdin", "reaped")

    def __init__(self, pid: int, pidfd: int, outputs: dict[Stream, int], stdin: int | None) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.outputs = outputs  # stream name -> non-blocking read end
        self.stdin = stdin  # non-blocking write end, or None
        self.reaped = False

    def exit_status(self) -> int | None:
        """The returncode (minus the signal number if killed), without reaping; None if running."""
        try:
            info = os.waitid(os.P_PIDFD, self.pidfd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return None
        if info is None or info.si_pid == 0:
            return None
        if info.si_code == os.CLD_EXITED:
            return info.si_status
        return -info.si_status

    def signal_group(self, name: str) -> None:
        """Signal the process group. Only valid before `reap` (the core guarantees it)."""
        assert not self.reaped, "signal after reap"
        try:
            os.killpg(self.pid, SIGNALS[name])
        except ProcessLookupError:
            pass  # the group is empty but for the zombie leader: nothing left to signal

    def set_terminal_size(self, rows: int, cols: int) -> None:
        """Resize a tty child's terminal; the kernel sends SIGWINCH to its foreground group.
        Either of our descriptors of the master will do (stdin is a duplicate of it); with
        both closed, the terminal is gone and there is nothing to resize."""
        fd = self.outputs.get("pty", self.stdin)
        if fd is not None:
            set_winsize(fd, rows, cols)

    def reap(self) -> None:
        """Collect the zombie and release every descriptor still open."""
        if self.reaped:
            return
        self.reaped = True
        try:
            os.waitid(os.P_PIDFD, self.pidfd, os.WEXITED)
        except ChildProcessError:
            pass
        for fd in [self.pidfd, self.stdin, *self.outputs.values()]:
            if fd is not None:
                close_quietly(fd)
        self.outputs.clear()
        self.stdin = None


def remove_empty_directory(path: str) -> None:
    """rmdir ``path`` if it is an empty directory, reached without following any symlink (a
    sandboxed command may have swapped a parent for a link to elsewhere); quietly otherwise."""
    parts = [part for part in path.split("/") if part]
    if not parts:
        return
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            step = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                           dir_fd=fd)
            os.close(fd)
            fd = step
        os.rmdir(parts[-1], dir_fd=fd)  # rmdir never follows a symlink at the end
    except OSError:
        pass
    finally:
        os.close(fd)


def close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def set_nonblocking(fd: int) -> int:
    os.set_blocking(fd, False)
    return fd


def pipe() -> tuple[int, int]:
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        fcntl.fcntl(read_end, F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:
        pass  # over the system's pipe-max-size: the default size still works
    return read_end, write_end


class Stdio:
    """A process's stdio as a spawn makes it, directly (`spawn`) or by the stage server
    (`_zygote`): ``child`` is what the process gets at 0, 1 and 2 (a pipe or /dev/null, and a
    pipe each for stdout and stderr; or one terminal for all three), and `ends` what the
    server keeps once it started. Every descriptor is close-on-exec here: the spawn puts the
    child's at their numbers."""

    def __init__(self, spec: SpawnSpec) -> None:
        self.kept: list[int] = []  # the server's, once the process runs
        self._theirs: list[int] = []  # the process's alone: closed once it has them
        self._tty = spec.tty
        try:
            if spec.tty:
                master, slave = os.openpty()
                self.kept.append(master)
                self._theirs.append(slave)
                rows, cols = spec.terminal_size or (24, 80)  # a plain terminal's, unless asked
                set_winsize(slave, rows, cols)
                self.child = (slave, slave, slave)
                return
            if spec.pipe_stdin:
                stdin, stdin_write = os.pipe2(os.O_CLOEXEC)
                self.kept.append(stdin_write)
            else:
                stdin = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            self._theirs.append(stdin)
            out_read, out_write = pipe()
            self.kept.append(out_read)
            self._theirs.append(out_write)
            err_read, err_write = pipe()
            self.kept.append(err_read)
            self._theirs.append(err_write)
            self.child = (stdin, out_write, err_write)
        except BaseException:
            self.handed()
            self.abandon()
            raise

    def handed(self) -> None:
        """The spawn is over, whether or not the process started: the process's ends are
        closed here."""
        for fd in self._theirs:
            close_quietly(fd)
        self._theirs.clear()

    def abandon(self) -> None:
        """The process did not start, or is being killed: the server's ends are closed."""
        for fd in self.kept:
            close_quietly(fd)
        self.kept.clear()

    def ends(self) -> tuple[dict[Stream, int], int | None]:
        """The server's ends, non-blocking, for its `Child`: the outputs and stdin (None when
        not piped). One terminal serves both directions: output reads the master, stdin
        writes a duplicate, so that each side can be closed on its own. Raises OSError (the
        duplicate), having closed nothing: the caller kills the process and `abandon`s."""
        if self._tty:
            master = set_nonblocking(self.kept[0])
            stdin = os.dup(master)
            return {"pty": master}, stdin
        stdin_write = set_nonblocking(self.kept[0]) if len(self.kept) == 3 else None
        return ({"stdout": set_nonblocking(self.kept[-2]),
                 "stderr": set_nonblocking(self.kept[-1])}, stdin_write)


def _command(spec: SpawnSpec, program: str, wrappers: list[str]) -> tuple[list[str], str | None]:
    """The argv to exec and the executable, with the wrappers (if any) in front.

    Wrappers exec the client's argv as given, so argv[0] and the PATH lookup are what a direct
    exec would do. An explicit arg0 needs the program exec'd under another name, which the
    wrappers cannot do: then bash's ``exec -a`` does it, after them.
    """
    if not wrappers:
        argv = [spec.arg0 if spec.arg0 is not None else spec.argv[0], *spec.argv[1:]]
        return argv, program
    if spec.arg0 is None:
        return wrappers + list(spec.argv), None
    rename = ["/bin/bash", "-c", 'exec -a "$0" "$@"', spec.arg0, program, *spec.argv[1:]]
    return wrappers + rename, None


def spawn(spec: SpawnSpec, pass_fds: tuple[int, ...] = (), join: tuple[str, ...] = ()) -> Child:
    """Start ``spec``, handing it ``pass_fds`` (at the same numbers), behind the wrapper
    ``join`` (which puts it in its cgroup, `_cgroups`) if any. Raises `SpawnError` when it
    cannot be started."""
    env = dict(spec.env)
    if not os.path.isdir(spec.cwd):
        missing = not os.path.exists(spec.cwd)
        raise _spawn_error(OSError(errno.ENOENT if missing else errno.ENOTDIR, ""))
    if spec.argv[0] == STAGED:
        from ._zygote import ZYGOTE
        return ZYGOTE.spawn(spec, pass_fds, join)
    program = resolve_program(spec.argv[0], env, spec.cwd)
    wrappers = [_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []
    wrappers += list(join)
    # With a terminal, `setsid --ctty` makes it the session's controlling one, as a login
    # would; else (or without setsid) the process leads a session of its own.
    ctty = [_SETSID, "--ctty", "--"] if spec.tty and _SETSID else []
    command, executable = _command(spec, program, wrappers + ctty)
    return _started(spec, env, command, executable, pass_fds, new_session=not ctty)


def _started(
    spec: SpawnSpec, env: dict[str, str], command: list[str], executable: str | None,
    pass_fds: tuple[int, ...], new_session: bool,
) -> Child:
    stdio = Stdio(spec)
    try:
        process = _popen(command, executable, env, spec.cwd, *stdio.child, pass_fds,
                         new_session)
    except BaseException:
        stdio.abandon()
        raise
    finally:
        stdio.handed()
    try:
        outputs, stdin = stdio.ends()
    except OSError as exc:
        _abort(process, stdio.kept)
        raise _spawn_error(exc) from None
    return _child(process, outputs, stdin)


def set_winsize(fd: int, rows: int, cols: int) -> None:
    """Set the terminal's size (termios is loaded by the first terminal, not a start)."""
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, winsize(rows, cols))


def winsize(rows: int, cols: int) -> bytes:
    """struct winsize {rows, cols, xpixel, ypixel}, unsigned shorts in the host's order."""
    return struct.pack("HHHH", rows, cols, 0, 0)


def _popen(
    command: list[str],
    executable: str | None,
    env: dict[str, str],
    cwd: str,
    stdin: int,
    stdout: int,
    stderr: int,
    pass_fds: tuple[int, ...] = (),
    new_session: bool = True,
) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            command,
            executable=executable,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            env=env,
            close_fds=True,
            pass_fds=pass_fds,
            start_new_session=new_session,
        )
    except OSError as exc:
        raise _spawn_error(exc) from None


def _child(process: subprocess.Popen[bytes], outputs: dict[Stream, int], stdin: int | None,
           ) -> Child:
    # From here on the pidfd is the process's handle. The Popen object must never wait or poll,
    # or it would reap the child behind the core's back: marking it collected keeps Popen's
    # own clean-up (which polls abandoned children) away from it.
    try:
        pidfd = os.pidfd_open(process.pid)
    except OSError as exc:  # out of descriptors, say
        _abort(process, [*outputs.values(), *([] if stdin is None else [stdin])])
        raise _spawn_error(exc) from None
    process.returncode = 0
    return Child(process.pid, pidfd, outputs, stdin)


def _abort(process: subprocess.Popen[bytes], fds: list[int]) -> None:
    """Undo a spawn that started a process but could not get a handle on it: kill it while its
    pid is still unreaped (so still ours), reap it, and close what was opened for it."""
    process.kill()
    process.wait()
    for fd in fds:
        close_quietly(fd)


# glibc's mallopt parameters.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def keep_buffers_in_heap() -> None:
    """Let output buffers (a read, its base64, its frame: up to a few MiB each) come from the
    heap instead of a fresh mmap per chunk.

    glibc maps every allocation above its mmap threshold (128 KiB to start) on its own and
    unmaps it when freed, so each chunk's buffers are new pages: measured, a quarter of a
    million page faults per 256 MiB streamed, half the server's CPU. Raising the threshold
    and the trim threshold keeps those pages in the heap for the next chunk. The price is that
    free memory below live blocks is not given back by itself (after a burst of a thousand
    processes, measured: 100 to 400 MB): the driver calls `release_free_memory` now and then.
    Does nothing where the C library is not glibc.
    """
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, 8 << 20)
        libc.mallopt(_M_TRIM_THRESHOLD, 32 << 20)
        # One heap per thread gains nothing under the GIL, and each keeps its own free memory
        # (the threads adapter held 15 of them, 35 MB that no trim gave back).
        libc.mallopt(_M_ARENA_MAX, 2)


def release_free_memory() -> None:
    """Give the heap's free pages back to the system (glibc's malloc_trim), wherever they are."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library if it is glibc, found at first use: ctypes is not loaded by a start."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
