"""``execproto forward URL [BIND:]LOCAL_PORT:REMOTE_PORT...``: local ports to a session's
network, as ``ssh -L``.

Each pair binds a local TCP port (on BIND, 127.0.0.1 by default; port 0 picks a free one) and
prints the address it bound on stdout, one line each, as it binds. Every connection to it gets
a stream of its own (``forward/open``) to REMOTE_PORT inside the session's network (the
session ``--session`` names, by default the command's own), served at once with every other,
until a signal ends the command. Either side's EOF is passed on to the other; a side that
fails or resets closes the other. The token and TLS options are ``execproto exec``'s.

Exit statuses: 2 for a mistake on the command line, 255 when the server cannot be reached,
refuses, has no port forwarding or loses the connection, 128 + N when signal N ended it.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from ._errors import UsageError, unreachable

FAILED = 255
DESCRIPTION = """\
Forward local TCP ports to ports of a session's network on an exec-server, as
"ssh -L": each [BIND:]LOCAL_PORT:REMOTE_PORT binds LOCAL_PORT on BIND (default
127.0.0.1; 0 picks a free port), prints the address it bound, and connects each
connection to it to REMOTE_PORT on --remote-host (default 127.0.0.1) inside the
network the session's sandboxes share: what a command started there serves.
Runs until interrupted.
"""


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    from ._exec import add_connection_options  # built only for `forward`: exec's imports too

    run: argparse.ArgumentParser = commands.add_parser(
        "forward", help="forward local ports to a session's network on an exec-server",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("url", help="the server, ws://HOST:PORT or wss://HOST:PORT")
    run.add_argument("pairs", nargs="+", metavar="[BIND:]LOCAL_PORT:REMOTE_PORT",
                     help="a local port and the remote port it leads to; repeatable")
    run.add_argument("--session", metavar="ID",
                     help="the session whose network to reach (default: this command's own)")
    run.add_argument("--remote-host", default="127.0.0.1", metavar="IP",
                     help="the address in the session's network (default %(default)s)")
    add_connection_options(run)
    return run


def pair(text: str) -> tuple[str, int, int]:
    """``[BIND:]LOCAL_PORT:REMOTE_PORT`` as (bind, local, remote); BIND may be ``[v6]``."""
    bind = "127.0.0.1"
    if text.startswith("["):
        end = text.find("]:")
        if end < 0:
            raise UsageError(f"{text!r}: a bracketed address wants ]: after it")
        bind, text = text[1:end], text[end + 2:]
    parts = text.split(":")
    if len(parts) == 3 and bind == "127.0.0.1":
        bind, parts = parts[0], parts[1:]
    if len(parts) != 2:
        raise UsageError(f"{text!r} is not [BIND:]LOCAL_PORT:REMOTE_PORT")
    try:
        local, remote = int(parts[0]), int(parts[1])
    except ValueError:
        raise UsageError(f"{text!r}: ports are numbers") from None
    if not 0 <= local <= 65535 or not 1 <= remote <= 65535:
        raise UsageError(f"{text!r}: LOCAL_PORT is 0 to 65535, REMOTE_PORT 1 to 65535")
    return bind, local, remote


def run(args: argparse.Namespace) -> int:
    import anyio

    from .._client._wsclient import HandshakeRefused, NotWebSocket, parse_url
    from ..client import ExecError
    from ._auth_flags import read_secret
    from ._errors import leaves
    from ._exec import _check_ca_file

    pairs = [pair(text) for text in args.pairs]
    for name in ("connect_timeout", "handshake_timeout"):
        if not getattr(args, name) > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    try:
        tls = parse_url(args.url)[3]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.ca_file is not None:
        _check_ca_file(args.ca_file, tls)
    token = read_secret(args.auth_token_file, "--auth-token-file") if args.auth_token_file else None
    try:
        return anyio.run(_Forwarder(args, pairs, token).run)
    except BaseException as exc:
        for leaf in leaves(exc):
            if isinstance(leaf, UsageError):
                raise leaf from None
            if isinstance(leaf, (HandshakeRefused, NotWebSocket, ExecError)):
                return _fail(f"{args.url}: {leaf}")
            if isinstance(leaf, OSError):
                return _fail(unreachable(args.url, leaf))
        raise


def _say(message: str) -> None:
    sys.stderr.write(f"execproto forward: {message}\n")
    sys.stderr.flush()


def _fail(message: str) -> int:
    _say(message)
    return FAILED


class _Forwarder:
    def __init__(self, args: argparse.Namespace, pairs: list[tuple[str, int, int]],
                 token: str | None) -> None:
        self.args = args
        self.pairs = pairs
        self.token = token
        self.status = 0

    async def run(self) -> int:
        import anyio

        from ..client import connect

        args = self.args
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as heard:
            async with connect(args.url, token=self.token, client_name="execproto forward",
                               ca_file=args.ca_file, connect_timeout=args.connect_timeout,
                               handshake_timeout=args.handshake_timeout) as ex:
                if not ex.supports("forward/open"):
                    return _fail(f"{args.url}: the server does not forward ports "
                                 "(forward/open is not among its methods)")
                async with anyio.create_task_group() as group:
                    for bind, local, remote in self.pairs:
                        listener = await self._bind(bind, local)
                        group.start_soon(listener.serve,
                                         lambda conn, remote=remote: self._serve(ex, conn, remote))
                    async for signum in heard:
                        self.status = 128 + signum
                        group.cancel_scope.cancel()
                        break
        return self.status

    async def _bind(self, bind: str, port: int) -> Any:
        import anyio
        from anyio.abc import SocketAttribute

        try:
            listener = await anyio.create_tcp_listener(local_host=bind, local_port=port)
        except OSError as exc:
            raise UsageError(f"cannot bind {bind}:{port}: {exc.strerror or exc}") from None
        for each in listener.listeners:
            address = each.extra(SocketAttribute.local_address)
            assert isinstance(address, tuple)
            host, bound = address[0], address[1]
            print(f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}", flush=True)
        return listener

    async def _serve(self, ex: Any, local: Any, remote: int) -> None:
        import anyio

        from ..client import ExecError

        async with local:
            try:
                stream = await ex.forward(remote, host=self.args.remote_host,
                                          session_id=self.args.session)
            except ExecError as error:
                _say(f"port {remote}: {getattr(error, 'message', error)}")
                return
            async with stream, anyio.create_task_group() as group:
                done = [False, False]

                async def both_done(index: int) -> None:
                    done[index] = True
                    if all(done):
                        group.cancel_scope.cancel()

                async def out() -> None:  # local -> remote
                    try:
                        async for data in local:
                            await stream.send(data)
                        await stream.send_eof()
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                        group.cancel_scope.cancel()
                        return
                    await both_done(0)

                async def back() -> None:  # remote -> local
                    try:
                        async for data in stream:
                            await local.send(data)
                        await local.send_eof()
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                        if stream.failure is not None:
                            _say(f"port {remote}: {stream.failure}")
                        group.cancel_scope.cancel()
                        return
                    await both_done(1)

                group.start_soon(out)
                group.start_soon(back)
