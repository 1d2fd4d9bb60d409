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
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

from execproto import Config

from ._command import _auth_flags, _logs, _own_files, _secrets
from ._command._errors import UsageError, leaves

if TYPE_CHECKING:
    from ._wire._auth import Authenticator
    from ._wire._listen import Listen
    from ._wire._tls import CertFiles
    from .backends import Backend

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

    def error(self, message: str) -> NoReturn:
        # One line instead of argparse's usage block: what was wrong, and where to look.
        self.exit(USAGE, _error_line(f"{self.prog}: {message} (see {self.prog} --help)",
                                     self.json_errors))


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
    serve.add_argument("--tls-cert", type=Path, metavar="FILE",
                       help="with wss://: the server's certificate chain, PEM (read again, "
                            "with the key, when either file changes and at SIGHUP)")
    serve.add_argument("--tls-key", type=Path, metavar="FILE",
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
    serve.add_argument("--trace", type=Path, metavar="FILE",
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
    rerun.add_argument("trace", type=Path, help="a file written by execproto serve --trace")
    add_logging(rerun, "WARNING")
    parser.commands = dict(commands.choices)
    return parser


def _why(exc: BaseException) -> str:
    """An OS error without the errno and path noise: 'No such file or directory'."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _check_serve(
    args: argparse.Namespace,
) -> tuple[Listen, Authenticator | None, CertFiles | None]:
    from ._wire._listen import Listen, ListenError

    try:
        where = Listen.parse(args.listen)
    except ListenError as exc:
        raise UsageError(str(exc)) from None
    tls = _tls_context(args, where)
    mode = _auth_flags.mode(args)
    if where.stdio and mode is not None:
        raise UsageError(f"--auth {mode} needs a websocket listener (ws:// or wss://): "
                         "--listen stdio has no upgrade to carry a token")
    if where.stdio and args.exit_on_stdin_close:
        raise UsageError("--exit-on-stdin-close needs a websocket listener: with --listen "
                         "stdio, stdin is the connection, and its end stops the server already")
    auth = _auth_flags.authenticator(args, mode)
    if not where.loopback and auth is None:
        raise UsageError(f"refusing to listen on {args.listen} without --auth-token-file, "
                         "--auth-token-sha256 or --auth signed-bearer-token: anyone who can "
                         "reach it could run programs here")
    for name in ("session_ttl", "kill_grace", "ping_interval", "retention_bytes",
                 "handshake_timeout", "send_timeout", "max_connections"):
        if getattr(args, name) <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    for root in args.fs_root:
        if not Path(root).is_dir():
            raise UsageError(f"--fs-root {root} is not a directory")
    if args.trace_redact and args.trace is None:
        raise UsageError("--trace-redact needs --trace FILE")
    return where, auth, tls


def _tls_context(args: argparse.Namespace, where: Listen) -> CertFiles | None:
    """The TLS certificate of a wss:// listener, from --tls-cert and --tls-key (None for
    ws://)."""
    given = args.tls_cert is not None or args.tls_key is not None
    if not where.tls:
        if given:
            raise UsageError("--tls-cert and --tls-key need --listen wss://IP:PORT")
        return None
    if args.tls_cert is None or args.tls_key is None:
        raise UsageError("wss:// needs --tls-cert FILE and --tls-key FILE")
    from ._wire._tls import CertFiles, TlsSetupError  # loads ssl: only for a TLS listener

    try:
        return CertFiles(args.tls_cert, args.tls_key,
                         names=(f"--tls-cert {args.tls_cert}", f"--tls-key {args.tls_key}"))
    except TlsSetupError as exc:
        raise UsageError(str(exc)) from None


def tls_warnings(where: Listen, address: str) -> list[str]:
    """What to warn of once listening on ``address``: off loopback without TLS."""
    if where.stdio or where.loopback or where.tls:
        return []
    return [f"listening on {address} without TLS: the bearer token and every byte travel in "
            "clear (use wss:// with --tls-cert and --tls-key)"]


def _seconds(text: str) -> float:
    """A duration on the command line: a number of seconds, not negative."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text}")
    return value


def _serve(args: argparse.Namespace) -> int:
    where, auth, tls = _check_serve(args)
    _own_files.forget_cwd()
    try:
        backend = _backend(args)
    except UsageError:
        raise
    except Exception as exc:  # anything the backend says about why it cannot start
        log.debug("the backend could not be made", exc_info=True)
        raise UsageError(str(exc)) from None
    path_prepend = [*_apply_patch_directory(args), *args.path_prepend]
    # What the server runs is nothing a sandbox may write (see _own_files). Read (~15 ms)
    # where the core is made, before it starts any process or fs call; at once where a
    # writable root must be checked against it.
    extra = [*path_prepend, *_backend_files(args), *([args.tls_cert] if args.tls_cert else [])]
    protected: tuple[str, ...] = ()
    if args.writable_root:
        protected = _own_files.protected(extra)
    for root in args.writable_root:
        if (overlap := _own_files.overlap(root, protected)) is not None:
            raise UsageError(f"--writable-root {root} overlaps {overlap}, which the server "
                             "runs or loads: no sandbox may write it")
    # What the server reads or writes for itself is nothing a sandbox may read, before and
    # after a rotation moves it (see _secrets).
    secrets = _secrets.denied(
        [path for path in (args.auth_token_file, args.auth_shared_secret_file, args.trace,
                           args.tls_key) if path is not None],
        beside=[args.tls_cert] if args.tls_cert is not None else [])
    config = Config(
        floor=getattr(backend, "floor", None),
        secrets=secrets,
        protected=protected,
        session_ttl=args.session_ttl,
        retention_bytes=args.retention_bytes,
        kill_grace=args.kill_grace,
        handshake_timeout=args.handshake_timeout,
        send_timeout=args.send_timeout,
        max_connections=args.max_connections,
        path_prepend=path_prepend,
        forward_loopback=args.forward_loopback,
    )
    _fit_descriptors(config)
    denied_directories = _secrets.directories(secrets)
    bound = False

    def ready(address: str) -> None:
        nonlocal bound
        bound = True
        if address != "stdio":
            print(address, flush=True)  # the one line on stdout: the bound address
        security = ("" if address == "stdio" else " (no TLS)" if tls is None
                    else f" (TLS 1.2 or later, certificate {args.tls_cert})")
        _sandbox_report(args, backend)  # here, or once the probe of bubblewrap has run
        log.info("listening on %s%s", address, security,
                 extra={"fields": {"address": address, "tls": tls is not None}})
        if denied_directories:
            log.info("denied to every sandbox and fs call, whole, as the secrets' own: %s",
                     ", ".join(denied_directories))
        for warning in tls_warnings(where, address):
            log.warning("%s", warning)
        if args.exit_on_stdin_close:
            _stop_at_end_of_stdin()
        started()

    try:
        adapter = importlib.import_module(ADAPTERS[args.adapter], __package__)
    except ImportError as exc:
        raise UsageError(f"the {args.adapter} adapter needs {exc.name}: "
                         f"pip install 'execproto[{args.adapter}]'") from None
    trace_file = _open_trace(args.trace) if args.trace else None

    def hang_up() -> None:  # SIGHUP: as sshd and nginx, re-read the configuration, never die
        reread = auth is not None and auth.reload()
        if tls is not None:
            tls.reload()
        if not reread and tls is None:
            log.info("SIGHUP: nothing to re-read (no token or secret file, no TLS); "
                     "serving on")

    try:
        adapter.run(
            args.listen,
            on_hangup=hang_up,
            config=config,
            token=auth,
            trace=(lambda line: trace_file.write(line + "\n")) if trace_file else None,
            ready=ready,
            ping_interval=args.ping_interval,
            fs_roots=args.fs_root,
            backend=backend,
            redact_trace=args.trace_redact,
            tune_heap=True,  # the whole process is ours: see `Options.tune_heap`
            tls=tls.current if tls is not None else None,
            drain_grace=args.drain_grace,
            protect=None if protected else lambda: _own_files.protected(extra),
        )
    except BaseException as exc:
        problem = None if bound or where.stdio else _listen_problem(exc)
        if problem is None:
            raise
        log.debug("could not listen", exc_info=True)
        raise UsageError(f"cannot listen on {args.listen}: {problem}") from None
    finally:
        if trace_file is not None:
            try:
                trace_file.close()
            except OSError:
                pass  # the trace stopped already, and said so (see `Recorder`)
    return 0


def _stop_at_end_of_stdin() -> None:
    """--exit-on-stdin-close: once stdin ends (the parent that holds its pipe is gone, or
    closed it), stop as the first SIGTERM does, whichever loop the adapter runs. Read on a
    thread of its own, which only waits: what is read is thrown away."""
    import signal
    import threading

    def watch() -> None:
        try:
            while os.read(0, 65536):
                pass
        except OSError as exc:  # no stdin at all (closed, or not readable): it ended
            log.warning("stdin could not be read (%s): taken as closed", _why(exc))
        log.info("stdin closed (--exit-on-stdin-close): stopping as on SIGTERM")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="stdin watch", daemon=True).start()


def _fit_descriptors(config: Config) -> None:
    """Raise the descriptor limit to what the limits need, and say so when it stays short."""
    from execproto.descriptors import PER_PROCESS, budget

    from ._serving import _host

    limit = _host.raise_descriptor_limit()
    room = budget(config, limit)
    if room is not None and room < PER_PROCESS * config.max_processes:
        log.warning("the descriptor limit (ulimit -n) is %d: room for %d processes at once "
                    "rather than %d", limit, room // PER_PROCESS, config.max_processes)


def _open_trace(path: Path) -> IO[str]:
    """A new trace file, readable by the server's user only (a trace holds what clients sent
    and the server's environment); an existing file is never overwritten."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        hints = {errno.ENOENT: " (the directory must exist)",
                 errno.EEXIST: " (a trace is never overwritten: give a new file)"}
        raise UsageError(f"--trace {path}: {_why(exc)}{hints.get(exc.errno or 0, '')}") from None
    return os.fdopen(fd, "w", buffering=1)


def _listen_problem(exc: BaseException) -> str | None:
    """What went wrong binding the listener, if that is what ``exc`` (or a group) is."""
    for leaf in leaves(exc):
        if isinstance(leaf, OSError) and leaf.errno in LISTEN_ERRORS:
            return LISTEN_ERRORS[leaf.errno]
    return None


def _apply_patch_directory(args: argparse.Namespace) -> list[str]:
    """The directory with apply_patch (and rg) that leads the PATH, as the reference's
    codex-path and apply_patch alias do: models call both from the shell. Made where no
    writable root is; without it (a read-only machine) the server still serves, and says so."""
    if args.no_apply_patch:
        return []
    from ._command import _codex_path

    try:
        # Its real path: a link on the way is an entry a writable root could turn.
        return [os.path.realpath(_codex_path.make(avoid=args.writable_root))]
    except OSError as exc:
        log.warning("no apply_patch directory on the PATH (--no-apply-patch silences this): "
                    "%s", exc)
        return []


def _backend(args: argparse.Namespace) -> Backend | None:
    from . import backends

    if args.backend and (args.sandbox != "none" or args.host_network
                         or args.sandbox_pid_namespace != "isolate"):
        raise UsageError("--backend and --sandbox (or --host-network, --sandbox-pid-namespace) "
                         "are alternatives: give one")
    if args.backend:
        return _load_backend(args.backend)
    if args.sandbox == "bwrap":
        if args.allow_network and not args.host_network and backends.no_pasta():
            # Else it would start, say it is ready and refuse every process (each is given
            # the network, and this host cannot give one of its own).
            raise UsageError(f"--allow-network: {backends.NO_PASTA}; install passt, or add "
                             "--host-network to share the host's network")
        backend = backends.bwrap_sandbox(args.writable_root, allow_network=args.allow_network,
                                         host_network=args.host_network,
                                         pid_namespace=args.sandbox_pid_namespace)
    elif args.writable_root or args.allow_network:
        raise UsageError("--writable-root and --allow-network need --sandbox bwrap")
    else:
        backend = backends.LocalBackend(host_network=args.host_network,
                                        pid_namespace=args.sandbox_pid_namespace)
    return backend


def _backend_files(args: argparse.Namespace) -> list[str]:
    """The file of a `--backend` module (loaded by now), to be held read-only."""
    if not args.backend:
        return []
    module = sys.modules.get(args.backend.partition(":")[0])
    found = getattr(module, "__file__", None)
    return [found] if isinstance(found, str) else []


def _sandbox_report(args: argparse.Namespace, backend: Backend | None) -> None:
    """Once the server listens: warn of what the backend cannot enforce here, and say what a
    sandbox is here, who gets one and at most what it allows (of a --backend of the
    operator's, only its name). Our backend says so when its probe of bubblewrap has run (see
    `_serving._serve.Server.announce`): the start does not wait for it (what a client is
    told does)."""
    from . import backends

    if args.backend or not isinstance(backend, backends.LocalBackend):
        log.info("sandbox: as the backend %s does it (sandbox type %s)", args.backend,
                 getattr(backend, "sandbox_type", "none"))
        return
    local = backend

    def report() -> None:
        for warning in local.warnings():
            log.warning("%s", warning)
        log.info("sandbox: %s", local.describe())

    local.when_probed(report)


def _load_backend(spec: str) -> Backend:
    # The current directory is on no path (the `execproto` script puts it on none, and
    # `python -m`'s is taken off); a backend module next to the operator is the common case.
    # Appended for the load, so a file here cannot shadow an installed module.
    from . import backends

    here = os.getcwd()
    added = here not in sys.path
    if added:
        sys.path.append(here)
    try:
        return backends.load(spec)
    except ModuleNotFoundError as exc:
        raise UsageError(f"--backend {spec}: no module named {exc.name!r} (run from the "
                         "directory that holds it, or add that directory to PYTHONPATH)") from None
    except UsageError:
        raise
    except Exception as exc:  # no such factory, or the factory's own refusal
        log.debug("--backend %s could not be made", spec, exc_info=True)
        raise UsageError(f"--backend {spec}: {exc}") from None
    finally:
        # For that load only: a module planted here later (a sandbox may write the
        # operator's directory) would be imported by a late import, as the server.
        if added and here in sys.path:
            sys.path.remove(here)


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
        raise UsageError(f"{args.trace}: {_why(exc)}") from None
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
    "serve": _serve, "exec": _exec_command, "replay": _replay, "forward": _forward_command,
    "apply_patch": _apply_patch_command,
}


def _command_in(argv: list[str]) -> str | None:
    """The command ``argv`` names (its first word that is no option), if any."""
    return next((word for word in argv if not word.startswith("-")), None)


# What each command imports before it runs (serve's event loop waits for --adapter).
NEEDS = {
    "serve": ("._wire._listen", ".backends", "._serving._host", "execproto.descriptors"),
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
