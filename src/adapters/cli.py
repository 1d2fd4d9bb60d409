"""The ``execproto`` command: ``serve`` a server, ``exec`` a command on one, ``replay`` a trace."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from pathlib import Path

from execproto import Config, replay

from . import _exec, backends
from ._listen import Listen, ListenError
from .backends import Backend

# --adapter name -> module (relative to this package) with a `run(listen, **options)`.
ADAPTERS = {"asyncio": ".asyncio", "trio": ".trio", "threads": ".threaded"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="execproto", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run an exec-server")
    serve.add_argument("--listen", default="ws://127.0.0.1:0",
                       help="ws://IP:PORT (port 0 picks one) or stdio; default %(default)s")
    serve.add_argument("--adapter", choices=list(ADAPTERS), default="asyncio",
                       help="the event loop to run on (default %(default)s)")
    serve.add_argument("--auth-token-file", type=Path,
                       help="require 'Authorization: Bearer <token>' with the token in this file")
    serve.add_argument("--session-ttl", type=float, default=Config().session_ttl,
                       help="seconds a detached session may be resumed (default %(default)s)")
    serve.add_argument("--retention-bytes", type=int, default=Config().retention_bytes,
                       help="newest output bytes kept per process (default %(default)s)")
    serve.add_argument("--kill-grace", type=float, default=Config().kill_grace,
                       help="seconds between TERM and KILL on terminate (default %(default)s)")
    serve.add_argument("--sandbox", choices=["none", "bwrap"], default="none",
                       help="run each process inside bubblewrap (bwrap) or not (default)")
    serve.add_argument("--writable-root", action="append", default=[], metavar="DIR",
                       help="with --sandbox bwrap: a directory processes may write; repeatable")
    serve.add_argument("--allow-network", action="store_true",
                       help="with --sandbox bwrap: let processes use the network")
    serve.add_argument("--backend", metavar="MODULE:FACTORY",
                       help="a spawn backend of your own: FACTORY() returns it")
    serve.add_argument("--fs-root", action="append", default=[], metavar="DIR",
                       help="confine every fs/* path to DIR (after resolving symlinks); repeatable")
    serve.add_argument("--ping-interval", type=float, default=30.0,
                       help="seconds between websocket pings (default %(default)s)")
    serve.add_argument("--trace", type=Path, help="record a replayable trace to this file")
    serve.add_argument("--trace-redact", action="store_true",
                       help="with --trace: write process output and stdin as same-length filler")
    serve.add_argument("--log-level", default="INFO")

    _exec.add_parser(commands)

    rerun = commands.add_parser("replay", help="replay a trace and report the first divergence")
    rerun.add_argument("trace", type=Path)
    return parser


def _serve(args: argparse.Namespace) -> int:
    try:
        where = Listen.parse(args.listen)
    except ListenError as exc:
        print(f"execproto: {exc}", file=sys.stderr)
        return 2
    token = None
    if args.auth_token_file is not None:
        token = args.auth_token_file.read_text().strip()
        if not token:
            print(f"execproto: {args.auth_token_file} holds no token", file=sys.stderr)
            return 2
    if not where.loopback and token is None:
        print(
            f"execproto: refusing to listen on {args.listen} without --auth-token-file: "
            "anyone who can reach it could run programs here",
            file=sys.stderr,
        )
        return 2
    for name in ("session_ttl", "kill_grace", "ping_interval"):
        if getattr(args, name) <= 0:
            print(f"execproto: --{name.replace('_', '-')} must be positive", file=sys.stderr)
            return 2
    for root in args.fs_root:
        if not Path(root).is_dir():
            print(f"execproto: --fs-root {root} is not a directory", file=sys.stderr)
            return 2
    if args.trace_redact and args.trace is None:
        print("execproto: --trace-redact needs --trace FILE", file=sys.stderr)
        return 2
    if args.retention_bytes <= 0:
        print("execproto: --retention-bytes must be positive", file=sys.stderr)
        return 2
    try:
        backend = _backend(args)
    except Exception as exc:  # anything the backend says about why it cannot start
        print(f"execproto: {exc}", file=sys.stderr)
        return 2
    config = Config(
        floor=getattr(backend, "floor", None),
        session_ttl=args.session_ttl,
        retention_bytes=args.retention_bytes,
        kill_grace=args.kill_grace,
    )

    def ready(address: str) -> None:
        if address != "stdio":
            print(address, flush=True)  # the one line on stdout: the bound address
        logging.getLogger("execproto").info("listening on %s", address)

    try:
        adapter = importlib.import_module(ADAPTERS[args.adapter], __package__)
    except ImportError as exc:
        print(f"execproto: the {args.adapter} adapter needs {exc.name}: "
              f"pip install 'execproto[{args.adapter}]'", file=sys.stderr)
        return 2
    trace_file = args.trace.open("w", buffering=1) if args.trace else None
    try:
        adapter.run(
            args.listen,
            config=config,
            token=token,
            trace=(lambda line: trace_file.write(line + "\n")) if trace_file else None,
            ready=ready,
            ping_interval=args.ping_interval,
            fs_roots=args.fs_root,
            backend=backend,
            redact_trace=args.trace_redact,
        )
    finally:
        if trace_file is not None:
            trace_file.close()
    return 0


def _backend(args: argparse.Namespace) -> Backend | None:
    if args.backend and args.sandbox != "none":
        raise ValueError("--backend and --sandbox are alternatives: give one")
    if args.backend:
        return backends.load(args.backend)
    if args.sandbox == "bwrap":
        return backends.bwrap_sandbox(args.writable_root, allow_network=args.allow_network)
    if args.writable_root or args.allow_network:
        raise ValueError("--writable-root and --allow-network need --sandbox bwrap")
    return None


def _replay(args: argparse.Namespace) -> int:
    with args.trace.open() as lines:
        result = replay(lines)
    if result.ok:
        print(f"ok: {result.steps} steps replayed identically")
        return 0
    print(f"diverged at step {result.step}:\n  expected {result.expected}\n  actual   {result.actual}")
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # `exec URL [options] -- CMD ARGS`: what follows `--` is the remote command, untouched.
    command: list[str] = []
    if argv[:1] == ["exec"] and "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    args = _parser().parse_args(argv)
    if command:
        args.argv = [*args.argv, *command]
    logging.basicConfig(
        stream=sys.stderr,
        # `exec` shares stderr with the remote command's: only warnings of its own go there.
        level=getattr(args, "log_level", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    commands = {"serve": _serve, "exec": _exec.run, "replay": _replay}
    return commands[args.command](args)
