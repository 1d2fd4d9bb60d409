"""The ``execproto`` command: ``serve`` a server, ``exec`` a command on one, ``replay`` a trace.

A mistake of the user's (a flag, a file, a port) is one line on stderr and exit status 2,
raised as `UsageError`; a traceback means a bug, and is shown with ``--log-level debug``.

Each command imports what it needs when it runs (the client for exec, the backends and the
event loop for serve, the replayer for replay), and only the parser of the command given is
built in full: a server's start, measured by bench/cold_start.py, pays for nothing else.
"""

from __future__ import annotations

import argparse
import errno
import gc
import importlib
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NoReturn, cast

from execproto import Config

from ._command import _auth_flags, _logs
from ._command._args import file_path
from ._command._errors import UsageError, plain

# --adapter name -> module (relative to this package) with a `run(listen, **options)`.
ADAPTERS = {"asyncio": ".asyncio", "trio": ".trio", "threads": ".threaded"}
USAGE = 2  # the exit status of a usage or configuration error, as argparse's own
BUG = 1

# Why a listener could not be bound, and what to do about it.
LISTEN_ERRORS = {
    errno.EADDRINUSE: "the port is in use (is another server running? pick another port, "
                      "or port 0 for a free one)",
    errno.EADDRNOTAVAIL: "no network interface of this machine has that address "
                         "(give one of its own, or 127.0.0.1)",
    errno.EACCES: "permission denied (ports below 1024 need privileges; pick a higher one)",
}

log = logging.getLogger("execproto")


class _Parser(argparse.ArgumentParser):
    # The subcommands' parsers, by name: a flag no subcommand knows is reported by the one it
    # was given to, whose --help lists the flags it does take.
    commands: dict[str, argparse.ArgumentParser] = {}
    # Set by `main` when the command line asks for --log-format json: then an error in the
    # command line is a JSON line too, for the same log shipper.
    json_errors = False

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes a formatter for each add_argument (to check its metavar), and its
        # default width comes from shutil, whose import (bz2, lzma) is ~1.5 ms of a server's
        # start: the same width, found as shutil finds it.
        make = cast("Callable[..., argparse.HelpFormatter]", self.formatter_class)
        return make(prog=self.prog, width=_columns() - 2)

    def error(self, message: str) -> NoReturn:
        # One line instead of argparse's usage block: what was wrong, and where to look.
        self.exit(USAGE, _error_line(f"{self.prog}: {message} (see {self.prog} --help)",
                                     self.json_errors))


def _columns() -> int:
    """The terminal's width as `shutil.get_terminal_size` says it: $COLUMNS, else stdout's
    terminal, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


def _error_line(text: str, as_json: bool) -> str:
    """A start-up error for stderr: the text as it is, or as a JSON log line."""
    return (_logs.json_line("ERROR", text) if as_json else text) + "\n"


def _wants_json(argv: list[str]) -> bool:
    """Whether ``argv`` asks for JSON logs, before argparse has read it (or failed to)."""
    return any(word == "--log-format=json" or argv[at : at + 2] == ["--log-format", "json"]
               for at, word in enumerate(argv))


def _directory(given: str) -> str:
    """An absolute path to an existing directory, for --path-prepend."""
    if not (os.path.isabs(given) and os.path.isdir(given)):
        raise argparse.ArgumentTypeError(f"{given} is not an absolute path to a directory")
    return given


def _version() -> str:
    from importlib import metadata  # slow to import (~20 ms), and only --version asks

    try:
        return metadata.version("execproto")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class _VersionAction(argparse.Action):
    """argparse's ``version`` action, with the version looked up only when it is asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"execproto {_version()}")
        parser.exit()


def add_logging(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument("--log-level", type=_logs.level_name, choices=_logs.LEVELS,
                        default=default, metavar="LEVEL",
                        help=f"debug, info, warning or error, in any case (default "
                             f"{default.lower()}); debug also shows tracebacks")
    parser.add_argument("--log-format", choices=_logs.FORMATS, default="text",
                        help="text lines, or one JSON object per line for log shippers "
                             "(default %(default)s)")


DESCRIPTION = """\
A server for the Codex exec-server protocol: it runs programs and reads and writes files for a
remote client. serve runs one, exec runs a command on one, forward forwards local ports to
one, replay checks a recorded trace, apply_patch applies a Codex patch here (as the commands
a server runs do: serve puts it first on their PATH).
"""

SERVE = """\
Serve the exec-server protocol on a websocket (ws://IP:PORT, or wss://IP:PORT over TLS with
--tls-cert and --tls-key; the bound address is printed on stdout) or on stdin and stdout
(--listen stdio: one JSON-RPC message a line, from a pipe or a file; when stdin ends,
everything it asked is answered and the server stops).

SIGTERM or Ctrl-C drains the server (see --drain-grace), then stops it: every process it
started is terminated first. A second signal stops it at once; SIGHUP re-reads the token file
(or the shared secret) and the TLS certificate.
"""

REPLAY = """\
Feed a trace written by serve --trace to a fresh server core and check that the core does,
step for step, exactly what was recorded.

Exit status: 0 every step matched (also when the last line was cut short by a crash while
recording: the steps before it are checked); 1 a step differed (shown as a diff of the recorded
and the replayed actions); 2 the file cannot be read or is not a trace.
"""


# exec's line in ``execproto --help`` when its parser is not built (the same as _exec's).
EXEC_HELP = "run a command on an exec-server"
FORWARD_HELP = "forward local ports to a session's network on an exec-server"
APPLY_PATCH_HELP = "apply a Codex patch to the files here"


def _parser(exec_options: bool = True, forward_options: bool = True,
            apply_patch_options: bool = True) -> _Parser:
    """The command line's parser. Without ``exec_options`` the exec command is only a name and
    its line of help: its options are the client's, and would load it."""
    parser = _Parser(prog="execproto", description=DESCRIPTION,
                     epilog="Each command has a --help of its own: execproto serve --help.",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.commands = {}
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="command",
                                     title="commands", help="one of")

    serve = commands.add_parser("serve", help="run an exec-server", description=SERVE,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--listen", default="ws://127.0.0.1:0", metavar="ADDRESS",
                       help="ws://IP:PORT, wss://IP:PORT (TLS; port 0 picks a free one) or "
                            "stdio (default %(default)s)")
    serve.add_argument("--tls-cert", type=file_path, metavar="FILE",
                       help="with wss://: the server's certificate chain, PEM (read again, "
                            "with the key, when either file changes and at SIGHUP)")
    serve.add_argument("--tls-key", type=file_path, metavar="FILE",
                       help="with wss://: the certificate's private key, PEM, unencrypted")
    serve.add_argument("--adapter", choices=list(ADAPTERS), default="asyncio",
                       help="the event loop to run on (default %(default)s)")
    _auth_flags.add_flags(serve)
    serve.add_argument("--session-ttl", type=float, default=Config().session_ttl,
                       metavar="SECONDS",
                       help="seconds a detached session may be resumed (default %(default)s)")
    serve.add_argument("--retention-bytes", type=int, default=Config().retention_bytes,
                       metavar="BYTES",
                       help="newest output bytes kept per process (default %(default)s)")
    serve.add_argument("--drain-grace", type=_seconds, default=10.0, metavar="SECONDS",
                       help="on the first SIGTERM or SIGINT, refuse new connections and "
                       "processes and wait up to this long for the running ones to finish "
                       "(/readyz answers 503 meanwhile; a second signal stops at once); 0 "
                       "stops at once. The default ends well inside Kubernetes' 30 s "
                       "terminationGracePeriodSeconds, leaving room for a preStop hook, the "
                       "kill grace and the close; Nomad waits 5 s (kill_timeout) by default, "
                       "so set kill_timeout above it (default %(default)s)")
    serve.add_argument("--kill-grace", type=float, default=Config().kill_grace,
                       metavar="SECONDS",
                       help="seconds between TERM and KILL on terminate (default %(default)s)")
    serve.add_argument("--sandbox", choices=["none", "bwrap"], default="none",
                       help="bwrap: every process runs inside bubblewrap, reading everything "
                            "and writing only the writable roots (a floor each request can "
                            "only narrow); none: only the requests that ask for a sandbox get "
                            "one (default %(default)s)")
    serve.add_argument("--writable-root", action="append", default=[], metavar="DIR",
                       help="with --sandbox bwrap: a directory processes may write; repeatable")
    serve.add_argument("--allow-network", action="store_true",
                       help="with --sandbox bwrap: let processes use the network")
    serve.add_argument("--host-network", action="store_true",
                       help="a sandbox allowed the network shares the host's, its loopback "
                            "included (default: a network of its own, through pasta)")
    serve.add_argument("--forward-loopback", action="store_true",
                       help="where sandboxes get no network of their own (no pasta, or "
                            "--host-network), let forward/open reach this host's loopback "
                            "(never the server's own ports)")
    serve.add_argument("--sandbox-pid-namespace", choices=("isolate", "inherit"),
                       default="isolate",
                       help="a sandbox's process namespace: its own (isolate, the default) or "
                            "the host's (inherit: it sees this host's processes and may signal "
                            "those of its user; only where the host is the sandbox's alone)")
    serve.add_argument("--backend", metavar="MODULE:FACTORY",
                       help="a spawn backend of your own: FACTORY() returns it (MODULE may be "
                            "a file in the current directory)")
    serve.add_argument("--fs-root", action="append", default=[], metavar="DIR",
                       help="confine every fs/* path to DIR (after resolving symlinks); repeatable")
    serve.add_argument("--path-prepend", type=_directory, action="append", default=[],
                       metavar="DIR", help="put DIR before the PATH processes inherit, and "
                       "name it in prependPathDirs; repeatable")
    serve.add_argument("--no-apply-patch", action="store_true",
                       help="do not put a directory holding apply_patch (execproto's) and "
                            "this host's rg first on the PATH processes inherit and in "
                            "prependPathDirs, as the reference does with its own")
    serve.add_argument("--ping-interval", type=float, default=30.0, metavar="SECONDS",
                       help="seconds between websocket pings (default %(default)s)")
    serve.add_argument("--handshake-timeout", type=float, default=Config().handshake_timeout,
                       metavar="SECONDS",
                       help="seconds a connection gets to finish its websocket upgrade "
                            "(default %(default)s)")
    serve.add_argument("--max-connections", type=int, default=Config().max_connections,
                       metavar="N", help="connections served at once; past it a new one is "
                            "closed (default %(default)s)")
    serve.add_argument("--send-timeout", type=float, default=Config().send_timeout,
                       metavar="SECONDS",
                       help="seconds a client may leave its answers unread before it is "
                            "disconnected (default %(default)s)")
    serve.add_argument("--exit-on-stdin-close", action="store_true",
                       help="stop when stdin reaches its end, as on the first SIGTERM (drain, "
                            "then stop), so a server started on a pipe ends with its parent; "
                            "for a websocket listener (with --listen stdio, stdin is the "
                            "connection, and its end stops the server already)")
    serve.add_argument("--trace", type=file_path, metavar="FILE",
                       help="record every step of the server's core to this new file, for "
                            "execproto replay")
    serve.add_argument("--trace-redact", action="store_true",
                       help="with --trace: write process output, stdin and environment values "
                            "(but PATH and TMPDIR) as same-length filler")
    add_logging(serve, "INFO")

    if exec_options:
        from ._command import _exec

        add_logging(_exec.add_parser(commands), "WARNING")
    else:
        commands.add_parser("exec", help=EXEC_HELP, add_help=False)
    if forward_options:
        from ._command import _forward

        add_logging(_forward.add_parser(commands), "WARNING")
    else:
        commands.add_parser("forward", help=FORWARD_HELP, add_help=False)
    if apply_patch_options:
        from ._command import _apply_patch

        add_logging(_apply_patch.add_parser(commands), "WARNING")
    else:
        commands.add_parser("apply_patch", help=APPLY_PATCH_HELP, add_help=False)

    rerun = commands.add_parser("replay", help="replay a trace and report the first divergence",
                                description=REPLAY,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    rerun.add_argument("trace", type=file_path, help="a file written by execproto serve --trace")
    add_logging(rerun, "WARNING")
    parser.commands = dict(commands.choices)
    return parser


def _seconds(text: str) -> float:
    """A duration on the command line: a number of seconds, not negative."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text}")
    return value


def _serve_command(args: argparse.Namespace) -> int:
    from ._command import _serve

    return _serve.run(args)


def _replay(args: argparse.Namespace) -> int:
    from execproto import replay
    from execproto.trace import readable

    line = 0

    def counted(lines: Iterable[str]) -> Iterator[str]:
        nonlocal line
        for number, text in enumerate(lines, start=1):
            line = number  # where a bad line was, for the error
            yield text

    try:
        with args.trace.open() as lines:
            result = replay(counted(lines))
    except OSError as exc:
        raise UsageError(f"{args.trace}: {plain(exc)}") from None
    except StopIteration:
        raise UsageError(f"{args.trace} is empty, not an execproto trace") from None
    except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
        log.debug("replay stopped", exc_info=True)
        raise UsageError(f"{args.trace} is not an execproto trace (line {line}: "
                         f"{type(exc).__name__}: {exc})") from None
    if result.ok and result.cut_short:
        print(f"ok: the last line was cut short (a crash while recording?); {result.steps} "
              "steps replayed identically")
        return 0
    if result.ok:
        print(f"ok: {result.steps} steps replayed identically")
        return 0
    # The step that differed is the last line read.
    print(f"diverged at step {result.step} (line {line}) on {readable(result.event)}:")
    for text in result.diff():
        print(f"  {text}")
    return 1


def _forward_command(args: argparse.Namespace) -> int:
    from ._command import _forward

    return _forward.run(args)


def _apply_patch_command(args: argparse.Namespace) -> int:
    from ._command import _apply_patch

    return _apply_patch.run(args)


def _exec_command(args: argparse.Namespace) -> int:
    from ._command import _exec

    return _exec.run(args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "serve": _serve_command, "exec": _exec_command, "replay": _replay, "forward": _forward_command,
    "apply_patch": _apply_patch_command,
}


def _command_in(argv: list[str]) -> str | None:
    """The command ``argv`` names (its first word that is no option), if any."""
    return next((word for word in argv if not word.startswith("-")), None)


# What each command imports before it runs (serve's event loop waits for --adapter).
NEEDS = {
    "serve": ("._command._serve", "._wire._listen", ".backends", "._serving._host",
              "execproto.descriptors"),
    "exec": ("._command._exec",),
    "forward": ("._command._forward", "._command._exec", ".client"),
    "replay": ("execproto.trace",),
    "apply_patch": ("._command._apply_patch",),
}


def load(argv: list[str]) -> None:
    """Import what the command ``argv`` names needs: `_entry` does it while a Ctrl-C still ends
    the process quietly."""
    for module in NEEDS.get(_command_in(argv) or "", ()):
        importlib.import_module(module, __package__)


def started() -> None:
    """The command has started: the cyclic collector, which `_entry` stopped for the start,
    runs again, with what the start made (modules, classes: never garbage) frozen out of its
    passes. A no-op where the collector was running (`main` called by other code)."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # `exec URL [options] -- CMD ARGS`: what follows `--` is the remote command, untouched.
    command: list[str] = []
    if argv[:1] == ["exec"] and "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    as_json = _Parser.json_errors = _wants_json(argv)
    parser = _parser(exec_options=_command_in(argv) == "exec",
                     forward_options=_command_in(argv) == "forward",
                     apply_patch_options=_command_in(argv) == "apply_patch")
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        words = " ".join(unknown)
        hint = ""
        if args.command == "exec" and args.argv and not command:  # `exec URL ls -la`
            typed = " ".join([*args.argv, *unknown])
            hint = f" (the command goes after --: execproto exec URL -- {typed})"
        parser.commands[args.command].error(f"unrecognized arguments: {words}{hint}")
    if command:
        args.argv = [*args.argv, *command]
    # `exec` shares stderr with the remote command's: by default only warnings of its own.
    _logs.set_up(args.log_level, args.log_format)
    if args.command != "serve":  # serve has started once it listens
        started()
    name = f"execproto {args.command}"
    try:
        return COMMANDS[args.command](args)
    except UsageError as error:
        sys.stderr.write(_error_line(f"{name}: {error}", as_json))
        return USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if args.log_level == "DEBUG":
            log.exception("%s failed", name)
        else:
            sys.stderr.write(_error_line(
                f"{name}: internal error: {type(exc).__name__}: {exc} (a bug: please report "
                "it; --log-level debug shows the traceback)", as_json))
        return BUG
