"""``execproto exec URL -- CMD ARGS...``: run one command on an exec-server, like ``ssh host cmd``.

The remote stdout and stderr go to the local ones byte for byte; local stdin is forwarded when it
is not a terminal (or, with ``--tty``, as raw keystrokes); Ctrl-C interrupts the remote process
(the third one terminates it); the exit status is the remote exit code.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import termios
import tty as ttymod
from contextlib import contextmanager
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio

from ._wsclient import HandshakeRefused
from .client import ExecError, Process, RemoteError, connect

# Exit statuses of our own, as shells and ssh use them.
NOT_FOUND = 127
NOT_EXECUTABLE = 126
FAILED = 255
# Ctrl-C interrupts; this many in a row terminate instead, for a program that ignores SIGINT.
TERMINATE_AFTER = 3


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run = commands.add_parser("exec", help="run a command on an exec-server", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("url", help="the server, ws://IP:PORT")
    run.add_argument("argv", nargs="*", metavar="-- CMD ARGS",
                     help="the command to run (after --, so its options stay its own)")
    run.add_argument("--cwd", help="the remote working directory (default: the server's)")
    run.add_argument("--env", action="append", default=[], metavar="K=V",
                     help="set a variable in the remote environment; repeatable")
    run.add_argument("--inherit-env", choices=["all", "core", "none"], default="all",
                     help="what the remote process takes from the server's environment, before "
                          "--env (secrets named *KEY*, *SECRET*, *TOKEN* never; default all)")
    run.add_argument("--tty", action="store_true",
                     help="run under a pseudo-terminal and forward keystrokes raw")
    run.add_argument("--auth-token-file", type=Path, help="send the bearer token in this file")


def run(args: argparse.Namespace) -> int:
    argv = args.argv
    if not argv:
        print("execproto exec: no command given (execproto exec URL -- CMD ARGS...)",
              file=sys.stderr)
        return 2
    env = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            print(f"execproto exec: --env wants NAME=VALUE, not {item!r}", file=sys.stderr)
            return 2
        env[name] = value
    token = args.auth_token_file.read_text().strip() if args.auth_token_file else None
    try:
        with _raw_terminal(args.tty and os.isatty(0)):
            return anyio.run(_exec, args.url, argv, args, env, token)
    except HandshakeRefused as error:
        return _fail(str(error))
    except (OSError, ExecError, ValueError) as error:
        return _fail(f"{args.url}: {error}")


def _fail(message: str, status: int = FAILED) -> int:
    print(f"execproto exec: {message}", file=sys.stderr)
    return status


async def _exec(url: str, argv: list[str], args: argparse.Namespace, env: dict[str, str],
                token: str | None) -> int:
    forward = args.tty or not os.isatty(0)
    # Signals are caught from the start: one that arrives while connecting waits for the process.
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        return await _exec_caught(url, argv, args, env, token, forward, signals)


async def _exec_caught(url: str, argv: list[str], args: argparse.Namespace, env: dict[str, str],
                       token: str | None, forward: bool, signals: AsyncIterator[int]) -> int:
    async with connect(url, token=token, client_name="execproto exec") as ex:
        try:
            proc = await ex.start(argv, cwd=args.cwd, env=env, inherit_env=args.inherit_env,
                                  tty=args.tty, pipe_stdin=forward)
        except RemoteError as error:
            kind = error.data.get("kind") if isinstance(error.data, dict) else None
            status = {"spawnNotFound": NOT_FOUND, "spawnPermissionDenied": NOT_EXECUTABLE}
            return _fail(f"{argv[0]}: {error.message}", status.get(kind or "", FAILED))
        async with anyio.create_task_group() as group:
            if forward:
                group.start_soon(_forward_stdin, proc)
            group.start_soon(_forward_signals, proc, signals, not args.tty)
            try:
                await _copy_output(proc)
            except BrokenPipeError:
                # Our reader went away (`| head`): stop the remote side, as ssh does.
                await proc.terminate()
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


async def _forward_signals(proc: Process, signals: AsyncIterator[int], interrupts: bool) -> None:
    """Ctrl-C interrupts (unless the terminal is raw, when it is just a keystroke); SIGTERM and
    SIGHUP stop the remote process, so it does not outlive this command."""
    pressed = 0
    async for signum in signals:
        if signum == signal.SIGINT and interrupts:
            pressed += 1
            if pressed < TERMINATE_AFTER:
                await proc.interrupt()
                continue
        try:
            await proc.terminate()
        except ExecError:
            return  # the connection is gone: the server's session TTL ends the process


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
