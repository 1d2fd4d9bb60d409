"""``execproto exec URL -- CMD ARGS...``: run one command on an exec-server, like ``ssh host cmd``.

The remote stdout and stderr go to the local ones byte for byte, written by a thread of their
own (`Writer`): a local reader that stalls (``| less``) blocks that thread, not the event loop,
which goes on answering the server's pings, and the next chunk is not taken until the last is
written, so the client leaves it unacknowledged and the server pauses the remote process.
Local stdin is forwarded when it is not a terminal, or with ``--tty`` as raw keystrokes
(`Keys`: ``~.`` at the start of a line disconnects, ``~~`` sends one ``~``, as in ssh).

Exit statuses:

- the remote exit code (128 + N when the remote process was killed by signal N);
- 1 (LOCAL_OUTPUT): the local stdout or stderr cannot be written (``>/dev/full``); the remote
  process is terminated (1 is also the command line's status for a bug of exec's own);
- 2: a mistake in the command line, or in what it names (a ``--cwd`` that is no directory on
  the server, text that is not UTF-8, a missing token file);
- 124 (TIMED_OUT): ``--timeout`` ran out; the remote process is terminated, as timeout(1) does;
- 126, 127: the program cannot be run, or is missing;
- 128 + N: signal N ended exec (130 Ctrl-C, 129 SIGHUP, 143 SIGTERM);
- 141 (CLOSED_PIPE): the local stdout was closed (``| head``); the remote process is terminated
  and nothing is said, as a shell's command killed by SIGPIPE;
- 255 (FAILED): the server cannot be reached, refuses or closes the connection, loses the
  session or cannot start the command; also ``~.`` (DISCONNECTED), as ssh.

Signals:

- SIGINT (Ctrl-C): the first two interrupt the remote process (SIGINT to its group), the third
  terminates it (130). While connecting or waiting to resume, the first ends exec at once (130).
  Under ``--tty`` the terminal is raw, so Ctrl-C is a keystroke the remote terminal hears (a
  SIGINT from kill terminates, 130); while waiting to resume, the third one typed gives up
  (130), and so does ``~.`` (255).
- SIGTERM, SIGHUP: terminate the remote process; exec ends with 128 + N.
- Whatever ends exec early (those, ``--timeout``, ``~.``) ends it within GIVE_UP (1 s), even
  when the server answers nothing (frozen, or a request still out).
- SIGWINCH, under ``--tty``: the new size goes to the remote terminal when the server has
  ``process/resize`` (execproto's); otherwise only the size at the start is passed on.
- SIGPIPE is not used: a closed stdout is seen as EPIPE (141, above).
"""

from __future__ import annotations

import argparse
import os
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable
from contextlib import suppress
from pathlib import Path

import anyio
import anyio.abc

from .._client._wsclient import HandshakeRefused, NotWebSocket, parse_url
from ..client import (
    CONNECT_TIMEOUT,
    HANDSHAKE_TIMEOUT,
    Client,
    ExecError,
    Process,
    RemoteError,
    SessionGone,
    connect,
)
from ._errors import UsageError, leaves, unreachable
from ._local import Backlog, Keys, LocalOutputFailed, Stderr, Writer, raw_terminal

# Exit statuses of our own, as shells, timeout(1) and ssh use them.
LOCAL_OUTPUT = 1
TIMED_OUT = 124
NOT_EXECUTABLE = 126
NOT_FOUND = 127
CLOSED_PIPE = 128 + signal.SIGPIPE
FAILED = 255
DISCONNECTED = FAILED  # ~., as ssh exits
SPAWN_STATUS = {"spawnNotFound": NOT_FOUND, "spawnPermissionDenied": NOT_EXECUTABLE}
# Ctrl-C interrupts; this many in a row terminate instead, for a program that ignores SIGINT.
# Typed on a raw terminal while the connection is down, this many give up.
TERMINATE_AFTER = 3
GIVE_UP = 1.0  # seconds a stopping signal waits for the server before exec ends anyway
RESUME_TIMEOUT = 25.0
# With --tty and a server without process/resize (the reference), the protocol carries no
# terminal size, so the command is started through sh, which sets it and then becomes it.
SIZED = 'stty rows "$1" cols "$2" 2>/dev/null; shift 2; exec "$@"'
# Keystrokes read while they cannot be sent (the connection is down) wait, up to this much.
KEYS_BACKLOG = 1 << 20
CTRL_C = 3

DESCRIPTION = """\
Run one command on an exec-server, like "ssh host cmd". The remote stdout and
stderr come out here byte for byte, local stdin is forwarded when it is not a
terminal, and exec exits with the command's exit code.

Ctrl-C interrupts the command, the third one terminates it; SIGTERM and SIGHUP
terminate it. A dropped connection is resumed. With --tty the command runs
under a pseudo-terminal and keystrokes go to it raw: "~." at the start of a
line disconnects (and terminates the command), "~~" sends one "~", and a
resized window is passed on when the server can.

Exit status:
  the command's  its exit code (128+N when signal N killed it)
  1              the local stdout or stderr cannot be written
  2              a mistake on the command line
  124            --timeout ran out (the command is terminated)
  126, 127       the program cannot be run, or is missing
  128+N          signal N ended exec: 130 Ctrl-C, 129 SIGHUP, 143 SIGTERM
  141            the local stdout was closed (| head)
  255            the server cannot be reached, refuses or closes the connection,
                 loses the session or cannot start the command; or "~." was typed
"""


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    run: argparse.ArgumentParser = commands.add_parser(
        "exec", help="run a command on an exec-server", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("url", help="the server, ws://HOST:PORT or wss://HOST:PORT")
    run.add_argument("argv", nargs="*", metavar="-- CMD ARGS",
                     help="the command to run (after --, so its options stay its own)")
    run.add_argument("--cwd", metavar="DIR", help="the remote working directory, an absolute "
                                                  "path (default: the server's)")
    run.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                     help="set a variable in the remote environment; repeatable")
    run.add_argument("--inherit-env", choices=["all", "core", "none"], default="all",
                     help="what the remote process takes from the server's environment, before "
                          "--env (secrets named *KEY*, *SECRET*, *TOKEN* never; default all)")
    run.add_argument("--tty", action="store_true",
                     help="run under a pseudo-terminal of this terminal's size and TERM, and "
                          "forward keystrokes raw (~. at the start of a line disconnects)")
    run.add_argument("--timeout", type=float, metavar="SECONDS",
                     help="after this long (connecting included), terminate the remote "
                          "process and exit 124, as timeout(1) does")
    add_connection_options(run)
    run.add_argument("--resume-timeout", type=float, default=RESUME_TIMEOUT, metavar="SECONDS",
                     help="how long to try to resume the session after the connection drops "
                          "(default %(default)g; keep it under the server's --session-ttl)")
    return run


def add_connection_options(run: argparse.ArgumentParser) -> None:
    """How a client command reaches a server: its token, its CA, and the two timeouts (shared
    by `exec` and `forward`)."""
    run.add_argument("--auth-token-file", type=Path, metavar="FILE",
                     help="send the bearer token in this file (the server's --auth-token-file)")
    run.add_argument("--ca-file", type=Path, metavar="FILE",
                     help="with wss://, trust only the CA certificates in this PEM file "
                          "(default: the system's, or those SSL_CERT_FILE names)")
    run.add_argument("--connect-timeout", type=float, default=CONNECT_TIMEOUT, metavar="SECONDS",
                     help="give up connecting after this long (default %(default)g)")
    run.add_argument("--handshake-timeout", type=float, default=HANDSHAKE_TIMEOUT,
                     metavar="SECONDS", help="give up on a server that accepts the connection "
                                             "but does not answer after this long "
                                             "(default %(default)g)")


def _check_ca_file(path: Path, tls: bool) -> None:
    """A usage error now, rather than a failed connection later, for a --ca-file that cannot
    serve."""
    if not tls:
        raise UsageError("--ca-file is for wss:// URLs")
    try:
        ssl.create_default_context(cafile=path)
    except (ssl.SSLError, ValueError):  # before OSError: an SSLError is one
        raise UsageError(f"--ca-file {path}: no PEM certificate in it") from None
    except OSError as exc:
        raise UsageError(f"--ca-file {path}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    from ._auth_flags import read_secret

    argv = args.argv
    if not argv:
        raise UsageError("no command given (execproto exec URL -- CMD ARGS...)")
    env = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--env wants NAME=VALUE, not {item!r}")
        env[name] = value
    for index, arg in enumerate(argv):
        _sendable(arg, "the program" if index == 0 else f"argument {index} of the command")
    for name, value in env.items():
        _sendable(name, f"--env name {name!r}")
        _sendable(value, f"--env {name}")
    if args.cwd is not None:
        _sendable(args.cwd, "--cwd")
    if args.cwd is not None and not args.cwd.startswith("/"):
        raise UsageError(f"--cwd must be an absolute path on the server, not {args.cwd!r}")
    for name in ("connect_timeout", "handshake_timeout", "resume_timeout", "timeout"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    try:
        tls = parse_url(args.url)[3]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.ca_file is not None:
        _check_ca_file(args.ca_file, tls)
    token = read_secret(args.auth_token_file, "--auth-token-file") if args.auth_token_file else None
    if args.tty and "TERM" in os.environ:
        env.setdefault("TERM", os.environ["TERM"])
    session = _Session(args, argv, env, token, terminal=args.tty and os.isatty(0))
    try:
        return anyio.run(session.run)
    except BaseException as exc:
        # Task groups wrap a failure in an exception group: find the reason inside.
        for leaf in leaves(exc):
            if isinstance(leaf, UsageError):
                raise leaf from None
            if isinstance(leaf, (HandshakeRefused, NotWebSocket)):
                return _fail(f"{args.url}: {leaf}")
            if isinstance(leaf, SessionGone):
                return _fail(f"{args.url}: the server no longer has this session ({leaf})")
            if isinstance(leaf, ExecError):
                return _fail(f"{args.url}: {leaf}")
            if isinstance(leaf, OSError):
                return _fail(unreachable(args.url, leaf))
        raise


def _sendable(value: str, what: str) -> None:
    """Refuse at once what the protocol cannot carry (a byte that is not UTF-8, which Python
    gives as a lone surrogate): sent, it made invalid JSON whose answer matched no call."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{what} is not UTF-8 text ({value!r}); the protocol carries UTF-8 "
                         "only") from None


def _terminal_size() -> tuple[int, int] | None:
    """The local terminal's (rows, columns), or None when it has none."""
    try:
        columns, rows = os.get_terminal_size(0)
    except OSError:
        return None
    return (rows, columns) if rows and columns else None


def _say(message: str) -> None:
    try:
        print(f"execproto exec: {message}", end="\r\n" if Stderr.raw else "\n",
              file=sys.stderr, flush=True)
    except OSError:
        pass  # a stderr that cannot be written cannot be told so either


def _fail(message: str, status: int = FAILED) -> int:
    _say(message)
    return status


class _Session:
    """One command's run: connect, start, copy output, and hear signals throughout."""

    def __init__(self, args: argparse.Namespace, argv: list[str], env: dict[str, str],
                 token: str | None, terminal: bool) -> None:
        self.args, self.argv, self.env, self.token = args, argv, env, token
        self.terminal = terminal  # --tty on a local terminal: raw keystrokes, a size
        self.client: Client | None = None
        self.proc: Process | None = None
        self.status: int | None = None  # set when exec ends early (a signal, --timeout, ~.)
        self.pressed = 0  # Ctrl-Cs so far (signals)
        self.typed = 0  # Ctrl-Cs typed on a raw terminal since the connection dropped
        self.resized = anyio.Event()  # SIGWINCH came
        self._group: anyio.abc.TaskGroup | None = None

    @property
    def connected(self) -> bool:
        return self.client is not None and self.client.connected

    async def run(self) -> int:
        # Signals are caught from the start, so one that comes while connecting or resuming
        # ends this command instead of waiting for a server that may never answer.
        heard = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
        if self.terminal:
            heard.append(signal.SIGWINCH)
        with anyio.open_signal_receiver(*heard) as signals:
            async with anyio.create_task_group() as group:
                self._group = group

                async def hear() -> None:
                    async for signum in signals:
                        self._on_signal(signum)

                group.start_soon(hear)
                if self.args.timeout is not None:
                    group.start_soon(self._time_out, self.args.timeout)
                status = await self._command()
                group.cancel_scope.cancel()
        return self.status if self.status is not None else status

    def _on_signal(self, signum: int) -> None:
        if signum == signal.SIGWINCH:
            self.resized.set()
            return
        # Ctrl-C interrupts. On a raw terminal it is a keystroke, so a SIGINT is someone's kill.
        proc = self.proc
        if signum == signal.SIGINT and self.connected and not self.terminal and proc is not None:
            self.pressed += 1
            if self.pressed < TERMINATE_AFTER:
                assert self._group is not None
                self._group.start_soon(_quietly, proc.interrupt)
                return
        # SIGTERM, SIGHUP, the third Ctrl-C, or any signal while the start is in flight.
        self._end(128 + signum, signal.Signals(signum).name)

    async def _time_out(self, seconds: float) -> None:
        await anyio.sleep(seconds)
        self._end(TIMED_OUT, f"--timeout {seconds:g}")

    def _end(self, status: int, what: str) -> None:
        """End exec early with ``status``: the remote process is terminated, and exec ends
        within GIVE_UP whatever the server does; without a connection, at once."""
        group = self._group
        if self.status is not None or group is None:
            return
        self.status = status
        if self.client is None or not self.client.connected:
            # Still connecting, or waiting to resume: nothing can be told; give up now.
            if self.client is not None and self.proc is not None:
                _say(f"{what} while reconnecting: giving up (the server ends the process when "
                     "the session expires)")
            group.cancel_scope.cancel()
            return
        group.start_soon(self._stop_within, group)

    async def _stop_within(self, group: anyio.abc.TaskGroup) -> None:
        """Terminate the remote process (once the start answers, if it is in flight) and let
        its last output come; after GIVE_UP, end anyway: a frozen server answers nothing."""
        with anyio.move_on_after(GIVE_UP):
            while self.proc is None:
                await anyio.sleep(0.02)
            await _quietly(self.proc.terminate)
            await anyio.sleep_forever()  # the command ends with its process, or this window
        group.cancel_scope.cancel()

    def _said(self, state: str) -> None:
        if state == "lost":
            self.typed = 0
            how = "Ctrl-C three times or ~. gives up" if self.terminal else "Ctrl-C gives up"
            _say(f"lost the connection to {self.args.url}; reconnecting (for up to "
                 f"{self.args.resume_timeout:g} s, {how})")
        else:
            _say("reconnected; the session goes on")

    async def _command(self) -> int:
        args = self.args
        forward = args.tty or not os.isatty(0)
        async with connect(args.url, token=self.token, client_name="execproto exec",
                           ca_file=args.ca_file, resume_timeout=args.resume_timeout,
                           connect_timeout=args.connect_timeout,
                           handshake_timeout=args.handshake_timeout,
                           on_connection=self._said) as ex:
            self.client = ex
            argv, size = self._sized(ex)
            try:
                proc = await ex.start(argv, cwd=args.cwd, env=self.env,
                                      inherit_env=args.inherit_env, tty=args.tty,
                                      pipe_stdin=forward, size=size)
            except RemoteError as error:
                return self._not_started(error)
            self.proc = proc
            writer = Writer()
            failed: LocalOutputFailed | None = None
            try:
                # Raw only once the command runs: until then Ctrl-C is a signal, and ends exec.
                with raw_terminal(self.terminal):
                    async with anyio.create_task_group() as group:
                        if self.terminal:
                            group.start_soon(self._forward_keys, proc)
                        elif forward:
                            group.start_soon(_forward_stdin, proc)
                        if size is not None:
                            group.start_soon(self._pass_resizes, proc, size)
                        try:
                            await _copy_output(proc, writer)
                        except LocalOutputFailed as error:
                            failed = error
                        else:
                            result = await proc.wait()
                        group.cancel_scope.cancel()
            finally:
                writer.close()
            if failed is not None:
                return await _local_output_failed(proc, failed)
            # Done: the session need not wait, detached, for a resume (where the server can
            # end it; each of ours can).
            with anyio.move_on_after(GIVE_UP):
                await ex.end_session()
        for lost in proc.lost:
            _say(f"output between seqs {lost.after_seq} and {lost.before_seq} was lost")
        if result.failure:
            _say(result.failure)
        return result.exit_code if result.exit_code is not None else FAILED

    def _sized(self, ex: Client) -> tuple[list[str], tuple[int, int] | None]:
        """The command and the terminal size to start it with: with --tty on a terminal, its
        size, given to the server when it has process/resize (and kept up with SIGWINCH),
        else set by `SIZED` before the command runs."""
        size = _terminal_size() if self.terminal else None
        if size is None:
            return self.argv, None
        if ex.supports("process/resize"):
            return self.argv, size
        rows, columns = size
        return ["sh", "-c", SIZED, "execproto-tty", str(rows), str(columns), *self.argv], None

    async def _pass_resizes(self, proc: Process, size: tuple[int, int]) -> None:
        """On SIGWINCH, the local terminal's new size to the remote one. A burst of them is
        one resize: the size is read when the last is sent."""
        while True:
            await self.resized.wait()
            self.resized = anyio.Event()
            now = _terminal_size()
            if now is not None and now != size:
                size = now
                with suppress(ExecError):  # a process that has just exited, or a lost session
                    await proc.resize(*size)

    async def _forward_keys(self, proc: Process) -> None:
        """--tty on a terminal: keystrokes are read even while they cannot be sent (the
        connection is down), so that Ctrl-C and ~. still give up then."""
        typed = Backlog(KEYS_BACKLOG)
        async with anyio.create_task_group() as group:
            group.start_soon(self._read_keys, typed)
            with suppress(BrokenPipeError, ExecError):  # the process or the session is gone
                while data := await typed.take():
                    await proc.write(data)

    async def _read_keys(self, typed: Backlog) -> None:
        keys = Keys()
        while True:
            await anyio.wait_readable(0)
            try:
                data = os.read(0, 1 << 16)
            except OSError:  # EIO: the terminal hung up
                data = b""
            if not data:
                typed.close()
                return
            if not self.connected:
                self.typed += data.count(CTRL_C)
                if self.typed >= TERMINATE_AFTER:
                    self._end(128 + signal.SIGINT, "Ctrl-C")
                    return
            send, disconnect = keys.feed(data)
            if send:
                await typed.put(send)
            if disconnect:
                if self.connected:
                    _say("~.: disconnecting; the remote process is terminated")
                self._end(DISCONNECTED, "~.")
                return

    def _not_started(self, error: RemoteError) -> int:
        """Say why the command did not start, blaming the right thing: the cwd, the program,
        or the server (a backend's own command missing is the server's problem)."""
        kind = error.data.get("kind") if isinstance(error.data, dict) else None
        if kind in SPAWN_STATUS or kind == "spawnFailed":
            if error.blamed.startswith("cwd "):  # the client looked: the cwd's fault
                raise UsageError(f"--{error.blamed} on the server")
            if kind in SPAWN_STATUS:
                return _fail(f"{self.args.argv[0]}: {error.message}", SPAWN_STATUS[kind])
        return _fail(f"the server could not start {self.args.argv[0]}: {error.message}")


async def _quietly(call: Callable[[], Awaitable[object]]) -> None:
    """A signal's call: if the connection is gone, the main path says so, not this."""
    try:
        await call()
    except ExecError:
        pass


async def _local_output_failed(proc: Process, failed: LocalOutputFailed) -> int:
    """The local stdout or stderr cannot be written: exec's own problem, not the server's. The
    remote process is terminated (GIVE_UP at most); a closed pipe is not remarked on, as a
    shell does not remark on a command that SIGPIPE ended."""
    with anyio.move_on_after(GIVE_UP):
        await _quietly(proc.terminate)
    if isinstance(failed.error, BrokenPipeError):
        return CLOSED_PIPE
    _say(f"cannot write to the local {failed.name}: {failed.error.strerror or failed.error}; "
         "the remote process is terminated")
    return LOCAL_OUTPUT


async def _copy_output(proc: Process, writer: Writer) -> None:
    async for chunk in proc.output():
        await writer.write(2 if chunk.stream == "stderr" else 1, chunk.data)


async def _forward_stdin(proc: Process) -> None:
    # Polled, not read in a thread: a thread blocked in read() would keep this command alive
    # after the remote process is done, for as long as whatever feeds stdin keeps it open.
    pollable = True
    try:
        while True:
            if pollable:
                try:
                    await anyio.wait_readable(0)
                except OSError:  # a regular file or /dev/null: a read never blocks anyway
                    pollable = False
            data = os.read(0, 1 << 16)
            if not data:
                break
            await proc.write(data)
        await proc.close_stdin()
    except BrokenPipeError:
        pass  # the remote process closed its stdin or exited: nothing more to give it
    except ExecError:
        pass  # the session is gone: the output side says so
