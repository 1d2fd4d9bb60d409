"""``execproto exec URL -- CMD ARGS...``: run one command on an exec-server, like ``ssh host cmd``.

The remote stdout and stderr go to the local ones byte for byte; local stdin is forwarded when
it is not a terminal (or, with ``--tty``, as raw keystrokes); Ctrl-C interrupts the remote process;
the third one, SIGTERM or SIGHUP terminate it and end exec within GIVE_UP (1 s) with 128 + N,
whatever the server does. The exit status is otherwise the remote exit code, 255 when the
server cannot be reached, closes the connection or the session is lost, 2 for a mistake in
the command line.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import termios
import tty as ttymod
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import anyio.abc

from ._errors import UsageError, leaves
from ._wsclient import HandshakeRefused, parse_url
from .client import (
    CONNECT_TIMEOUT,
    HANDSHAKE_TIMEOUT,
    Client,
    ExecError,
    Process,
    RemoteError,
    SessionGone,
    connect,
)

# Exit statuses of our own, as shells and ssh use them.
NOT_FOUND = 127
NOT_EXECUTABLE = 126
FAILED = 255
SPAWN_STATUS = {"spawnNotFound": NOT_FOUND, "spawnPermissionDenied": NOT_EXECUTABLE}
# Ctrl-C interrupts; this many in a row terminate instead, for a program that ignores SIGINT.
TERMINATE_AFTER = 3
GIVE_UP = 1.0  # seconds a stopping signal waits for the server before exec ends anyway
RESUME_TIMEOUT = 25.0
# With --tty the protocol carries no terminal size (the reference has no process/resize), so
# the command is started through sh, which sets the size on its terminal and then becomes it.
SIZED = 'stty rows "$1" cols "$2" 2>/dev/null; shift 2; exec "$@"'


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    run: argparse.ArgumentParser = commands.add_parser(
        "exec", help="run a command on an exec-server", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("url", help="the server, ws://IP:PORT")
    run.add_argument("argv", nargs="*", metavar="-- CMD ARGS",
                     help="the command to run (after --, so its options stay its own)")
    run.add_argument("--cwd", help="the remote working directory, an absolute path "
                                   "(default: the server's)")
    run.add_argument("--env", action="append", default=[], metavar="K=V",
                     help="set a variable in the remote environment; repeatable")
    run.add_argument("--inherit-env", choices=["all", "core", "none"], default="all",
                     help="what the remote process takes from the server's environment, before "
                          "--env (secrets named *KEY*, *SECRET*, *TOKEN* never; default all)")
    run.add_argument("--tty", action="store_true",
                     help="run under a pseudo-terminal of this terminal's size and TERM, and "
                          "forward keystrokes raw")
    run.add_argument("--auth-token-file", type=Path, help="send the bearer token in this file")
    run.add_argument("--connect-timeout", type=float, default=CONNECT_TIMEOUT, metavar="SECONDS",
                     help="give up connecting after this long (default %(default)g)")
    run.add_argument("--handshake-timeout", type=float, default=HANDSHAKE_TIMEOUT,
                     metavar="SECONDS", help="give up on a server that accepts the connection "
                                             "but does not answer after this long "
                                             "(default %(default)g)")
    run.add_argument("--resume-timeout", type=float, default=RESUME_TIMEOUT, metavar="SECONDS",
                     help="how long to try to resume the session after the connection drops "
                          "(default %(default)g; keep it under the server's --session-ttl)")
    return run


def run(args: argparse.Namespace) -> int:
    from .cli import read_token  # here, not at the top: cli imports this module

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
    for name in ("connect_timeout", "handshake_timeout", "resume_timeout"):
        if getattr(args, name) <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    try:
        parse_url(args.url)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    token = read_token(args.auth_token_file) if args.auth_token_file else None
    terminal = args.tty and os.isatty(0)
    if args.tty:
        argv = _sized(argv, env, terminal)
    session = _Session(args, argv, env, token)
    try:
        with _raw_terminal(terminal):
            return anyio.run(session.run)
    except BaseException as exc:
        # Task groups wrap a failure in an exception group: find the reason inside.
        for leaf in leaves(exc):
            if isinstance(leaf, UsageError):
                raise leaf from None
            if isinstance(leaf, HandshakeRefused):
                return _fail(f"{args.url}: {leaf}")
            if isinstance(leaf, SessionGone):
                return _fail(f"{args.url}: the server no longer has this session ({leaf})")
            if isinstance(leaf, ExecError):
                return _fail(f"{args.url}: {leaf}")
            if isinstance(leaf, OSError):
                return _fail(f"cannot reach the server at {args.url}: {_why(leaf)}")
        raise


def _sendable(value: str, what: str) -> None:
    """Refuse at once what the protocol cannot carry (a byte that is not UTF-8, which Python
    gives as a lone surrogate): sent, it made invalid JSON whose answer matched no call."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{what} is not UTF-8 text ({value!r}); the protocol carries UTF-8 "
                         "only") from None


def _why(exc: OSError) -> str:
    # anyio says "All connection attempts failed" and keeps the real reason as the cause.
    cause = exc.__cause__
    if not exc.strerror and isinstance(cause, OSError) and cause.strerror:
        exc = cause
    if exc.errno:  # asyncio's strerror is "Connect call failed (...)"; the errno says why
        return os.strerror(exc.errno)
    return str(exc) or type(exc).__name__


def _sized(argv: list[str], env: dict[str, str], terminal: bool) -> list[str]:
    """With ``--tty``: the local TERM (unless --env sets one) and, on a terminal, its size."""
    if "TERM" in os.environ:
        env.setdefault("TERM", os.environ["TERM"])
    if not terminal:
        return argv
    columns, rows = os.get_terminal_size(0)
    if not rows or not columns:
        return argv
    return ["sh", "-c", SIZED, "execproto-tty", str(rows), str(columns), *argv]


def _fail(message: str, status: int = FAILED) -> int:
    print(f"execproto exec: {message}", file=sys.stderr)
    return status


class _Session:
    """One command's run: connect, start, copy output, and hear signals throughout."""

    def __init__(self, args: argparse.Namespace, argv: list[str], env: dict[str, str],
                 token: str | None) -> None:
        self.args, self.argv, self.env, self.token = args, argv, env, token
        self.client: Client | None = None
        self.proc: Process | None = None
        self.status: int | None = None  # set when a signal ends the command early
        self.pressed = 0  # Ctrl-Cs so far

    async def run(self) -> int:
        # Signals are caught from the start, so one that comes while connecting or resuming
        # ends this command instead of waiting for a server that may never answer.
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            async with anyio.create_task_group() as group:
                async def hear() -> None:
                    async for signum in signals:
                        self._on_signal(signum, group)

                group.start_soon(hear)
                status = await self._command()
                group.cancel_scope.cancel()
        return self.status if self.status is not None else status

    def _on_signal(self, signum: int, group: anyio.abc.TaskGroup) -> None:
        client, proc = self.client, self.proc
        if client is None or not client.connected:
            # Still connecting, or waiting to resume: nothing can be told; give up now.
            if client is not None and proc is not None:
                print(f"execproto exec: {signal.Signals(signum).name} while reconnecting: "
                      "giving up (the server ends the process when the session expires)",
                      file=sys.stderr)
            self.status = 128 + signum
            group.cancel_scope.cancel()
            return
        # Ctrl-C interrupts, unless the terminal is raw: then it is just a keystroke.
        if signum == signal.SIGINT and not self.args.tty and proc is not None:
            self.pressed += 1
            if self.pressed < TERMINATE_AFTER:
                group.start_soon(_quietly, proc.interrupt)
                return
        # SIGTERM, SIGHUP, the third Ctrl-C, or any signal while the start is in flight: the
        # remote process is stopped, and exec ends within GIVE_UP whatever the server does.
        if self.status is None:
            self.status = 128 + signum
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
            print(f"execproto exec: lost the connection to {self.args.url}; reconnecting "
                  f"(for up to {self.args.resume_timeout:g} s, Ctrl-C gives up)", file=sys.stderr)
        else:
            print("execproto exec: reconnected; the session goes on", file=sys.stderr)

    async def _command(self) -> int:
        args = self.args
        forward = args.tty or not os.isatty(0)
        async with connect(args.url, token=self.token, client_name="execproto exec",
                           resume_timeout=args.resume_timeout,
                           connect_timeout=args.connect_timeout,
                           handshake_timeout=args.handshake_timeout,
                           on_connection=self._said) as ex:
            self.client = ex
            try:
                proc = await ex.start(self.argv, cwd=args.cwd, env=self.env,
                                      inherit_env=args.inherit_env, tty=args.tty,
                                      pipe_stdin=forward)
            except RemoteError as error:
                return await self._not_started(ex, error)
            self.proc = proc
            async with anyio.create_task_group() as group:
                if forward:
                    group.start_soon(_forward_stdin, proc)
                try:
                    await _copy_output(proc)
                except BrokenPipeError:
                    # Our reader went away (`| head`): stop the remote side, as ssh does.
                    await _quietly(proc.terminate)
                    group.cancel_scope.cancel()
                    return 128 + signal.SIGPIPE
                result = await proc.wait()
                group.cancel_scope.cancel()
        for lost in proc.lost:
            print(f"execproto exec: output between seqs {lost.after_seq} and {lost.before_seq} "
                  "was lost", file=sys.stderr)
        if result.failure:
            print(f"execproto exec: {result.failure}", file=sys.stderr)
        return result.exit_code if result.exit_code is not None else FAILED

    async def _not_started(self, ex: Client, error: RemoteError) -> int:
        """Say why the command did not start, blaming the right thing: the cwd, the program,
        or the server (a backend's own command missing is the server's problem)."""
        kind = error.data.get("kind") if isinstance(error.data, dict) else None
        cwd = self.args.cwd
        if kind in SPAWN_STATUS or kind == "spawnFailed":
            if cwd is not None and not await _is_directory(ex, cwd):
                raise UsageError(f"--cwd {cwd}: no such directory on the server")
            if kind in SPAWN_STATUS:
                return _fail(f"{self.args.argv[0]}: {error.message}", SPAWN_STATUS[kind])
        return _fail(f"the server could not start {self.args.argv[0]}: {error.message}")


async def _is_directory(ex: Client, path: str) -> bool:
    try:
        return bool((await ex.get_metadata(path)).get("isDirectory"))
    except RemoteError:
        return False


async def _quietly(call: Callable[[], Awaitable[object]]) -> None:
    """A signal's call: if the connection is gone, the main path says so, not this."""
    try:
        await call()
    except ExecError:
        pass


async def _copy_output(proc: Process) -> None:
    async for chunk in proc.output():
        _write_all(2 if chunk.stream == "stderr" else 1, chunk.data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:  # a non-blocking stdout we inherited: wait for room
            select.select([], [fd], [])


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


@contextmanager
def _raw_terminal(raw: bool) -> Iterator[None]:
    if not raw:
        yield
        return
    saved = termios.tcgetattr(0)
    ttymod.setraw(0)
    try:
        yield
    finally:
        termios.tcsetattr(0, termios.TCSADRAIN, saved)
