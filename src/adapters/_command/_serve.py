"""``execproto serve``: the command line's checks and the wiring of a server from its flags.

`cli` parses the command line; this turns the flags into the server's parts (listener,
authentication, TLS, backend, the held and the secret files, the core's `Config`) and runs
the chosen adapter. A mistake in them is a `UsageError` (one line, exit status 2).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import sys
from typing import IO, TYPE_CHECKING

from execproto import Config

from ..cli import ADAPTERS, LISTEN_ERRORS, started
from . import _auth_flags, _own_files, _secrets
from ._errors import UsageError, leaves, plain

if TYPE_CHECKING:
    from pathlib import Path

    from .._wire._auth import Authenticator
    from .._wire._listen import Listen
    from .._wire._tls import CertFiles
    from ..backends import Backend

log = logging.getLogger("execproto")


def check(
    args: argparse.Namespace,
) -> tuple[Listen, Authenticator | None, CertFiles | None]:
    from .._wire._listen import Listen, ListenError

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
        if not os.path.isdir(root):
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
    from .._wire._tls import CertFiles, TlsSetupError  # loads ssl: only for a TLS listener

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


def run(args: argparse.Namespace) -> int:
    where, auth, tls = check(args)
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
        adapter = importlib.import_module(ADAPTERS[args.adapter], "execproto.adapters")
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
            log.warning("stdin could not be read (%s): taken as closed", plain(exc))
        log.info("stdin closed (--exit-on-stdin-close): stopping as on SIGTERM")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="stdin watch", daemon=True).start()


def _fit_descriptors(config: Config) -> None:
    """Raise the descriptor limit to what the limits need, and say so when it stays short."""
    from execproto.descriptors import PER_PROCESS, budget

    from .._serving import _host

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
        raise UsageError(f"--trace {path}: {plain(exc)}{hints.get(exc.errno or 0, '')}") from None
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
    from . import _codex_path

    try:
        # Its real path: a link on the way is an entry a writable root could turn.
        return [os.path.realpath(_codex_path.make(avoid=args.writable_root))]
    except OSError as exc:
        log.warning("no apply_patch directory on the PATH (--no-apply-patch silences this): "
                    "%s", exc)
        return []


def _backend(args: argparse.Namespace) -> Backend | None:
    from .. import backends

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
    from .. import backends

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
    from .. import backends

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
