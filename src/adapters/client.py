"""The execproto client on anyio: drive an exec-server from asyncio or trio.

    async with connect("ws://127.0.0.1:8765") as ex:
        proc = await ex.start(["make", "test"], cwd="/src/project")
        async for chunk in proc.output():
            print(chunk.stream, chunk.data)
        result = await proc.wait()

`ClientCore` does the protocol; this module moves its frames over a websocket, turns its events
into awaitable results, and reconnects after a dropped connection, resuming the session within
``resume_timeout`` so no output is lost.
"""

from __future__ import annotations

import base64
import logging
import math
import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs

from execproto import ClientCore, ClientState, path_from_uri, uri_from_path
from execproto.client_events import (
    CONNECTION_LOST,
    ClientEvent,
    Closed,
    Exited,
    Failure,
    HandshakeFailed,
    Output,
    OutputLost,
    Ready,
    Response,
    ServerMisbehaved,
    SessionLost,
)

from ._client._client_forward import Forwards, ForwardStream, is_forward
from ._client._client_process import (
    BUFFER_BYTES,
    Chunk,
    ClientBug,
    ConnectionLost,
    ExecError,
    MessageTooBig,
    Process,
    RemoteError,
    Result,
    ServerClosed,
    SessionGone,
    _Waiter,
)
from ._client._wsclient import MAX_MESSAGE, HandshakeRefused, NotWebSocket, TLSFailed, WebSocket

# The kinds of a refused start whose cause may be the cwd as well as the program.
SPAWN_REFUSALS = ("spawnNotFound", "spawnPermissionDenied", "spawnFailed")

__all__ = [
    "Chunk",
    "Client",
    "ClientBug",
    "ConnectionLost",
    "ExecError",
    "ForwardClosed",
    "ForwardStream",
    "HandshakeRefused",
    "MAX_MESSAGE",
    "MessageTooBig",
    "NotWebSocket",
    "Process",
    "RemoteError",
    "Result",
    "ServerClosed",
    "SessionGone",
    "TLSFailed",
    "connect",
    "run",
]

log = logging.getLogger("execproto.client")

# How long to wait for a TCP connection, and then for the websocket upgrade and `initialize`.
# A server that accepts but never answers (a wrong port, a stuck proxy) must not hang the client.
CONNECT_TIMEOUT = 10.0
HANDSHAKE_TIMEOUT = 10.0


class ForwardClosed(ExecError):
    """A forwarded stream the server closed: its target failed, or its session ended."""


class Client:
    """A connection to an exec-server. Create it with `connect`."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None,
        client_name: str,
        resume_timeout: float,
        acks: bool,
        connect_timeout: float = CONNECT_TIMEOUT,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        on_connection: Callable[[str], None] | None = None,
        buffer_bytes: int = BUFFER_BYTES,
        ca_file: str | os.PathLike[str] | None = None,
        max_message: int = MAX_MESSAGE,
    ) -> None:
        self.url = url
        self.max_message = max_message
        self.ca_file = ca_file
        self.buffer_bytes = buffer_bytes
        self.resume_timeout = resume_timeout
        self.connect_timeout = connect_timeout
        self.handshake_timeout = handshake_timeout
        # Told "lost" when a dropped connection starts a resume, "resumed" when it is back.
        self._on_connection = on_connection or (lambda state: None)
        self._token = token
        # Output is released to the server as the processes' readers take it (or while they
        # have room for it), so a reader that stops pauses only its own process.
        self._core = ClientCore(uuid.uuid4().hex, client_name, acks=acks,
                                release_on_delivery=False)
        self._ws: WebSocket | None = None
        self._calls: dict[int, _Waiter] = {}
        self._procs: dict[str, Process] = {}
        self._forwards = Forwards(ForwardClosed)
        self._next_process = 1
        self._broken: BaseException | None = None
        self._closing = False
        self._handshake_error: str | None = None  # why the last initialize was refused
        self._stirred = anyio.Event()  # a call was made or a reader read: see `_hold`

    @property
    def session_id(self) -> str | None:
        return self._core.session_id

    @property
    def connected(self) -> bool:
        """Whether the session is live now (not connecting, not waiting to resume)."""
        return self._ws is not None and self._core.state is ClientState.READY

    @property
    def environment_info(self) -> Any:
        return self._core.environment_info

    def supports(self, method: str) -> bool:
        """Whether the server named ``method`` among its execproto extensions (such as
        ``process/resize``); the reference names none."""
        return method in self._core.extensions

    async def end_session(self) -> None:
        """Tell the server this client is done with its session (execproto's ``session/end``):
        the session goes at once, any process of it still running stopped, rather than waiting
        its TTL for a resume that will not come; the server closes the connection after, and
        this client is done. A server without it (the reference) keeps the session for its
        TTL. Best effort: a connection already gone leaves the session to its TTL."""
        if not self.supports("session/end"):
            return
        self._closing = True  # the close that follows is expected: nothing to resume
        try:
            await self.request("session/end")
        except ExecError:
            pass

    # -- processes --------------------------------------------------------------------------------

    async def start(
        self,
        argv: list[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        inherit_env: str | None = "all",
        tty: bool = False,
        pipe_stdin: bool = False,
        arg0: str | None = None,
        process_id: str | None = None,
        size: tuple[int, int] | None = None,
    ) -> Process:
        """Start ``argv`` on the server. ``cwd`` defaults to the server's working directory.

        The environment starts from the server's own per ``inherit_env`` (``"all"``, ``"core"``
        or ``"none"``; names matching ``*KEY*``, ``*SECRET*`` and ``*TOKEN*`` are always left
        out), then ``env`` is laid over it. ``inherit_env=None`` sends no policy: the process
        gets exactly ``env``.
        """
        if process_id is None:
            process_id = f"{self._core.instance[:12]}-{self._next_process}"
            self._next_process += 1
        if cwd is None:
            cwd = self._server_cwd()
        policy = None
        if inherit_env is not None:
            policy = {"inherit": inherit_env, "ignoreDefaultExcludes": False, "exclude": [],
                      "set": {}, "includeOnly": []}
        proc = Process(self, process_id, self.buffer_bytes)
        self._procs[process_id] = proc
        try:
            await self.call_core(lambda core: core.start(
                process_id, argv, cwd=cwd, env=env, tty=tty, pipe_stdin=pipe_stdin, arg0=arg0,
                env_policy=policy, size=size,
            ))
        except RemoteError as error:
            del self._procs[process_id]
            raise await self._blamed(error, argv[0], cwd) from None
        except BaseException:
            del self._procs[process_id]
            raise
        return proc

    async def _blamed(self, error: RemoteError, program: str, cwd: str) -> RemoteError:
        """``error`` naming what a refused start failed on: its cwd or its program."""
        kind = error.data.get("kind") if isinstance(error.data, dict) else None
        if kind not in SPAWN_REFUSALS:
            return error
        try:
            metadata = await self.get_metadata(cwd)
        except RemoteError:
            return attrs.evolve(error, blamed=f"cwd {cwd} does not exist")
        if not metadata.get("isDirectory"):
            return attrs.evolve(error, blamed=f"cwd {cwd} is not a directory")
        return attrs.evolve(error, blamed=program)

    def _server_cwd(self) -> str:
        info = self._core.environment_info
        cwd = info.get("cwd") if isinstance(info, dict) else None
        if not isinstance(cwd, str) or not cwd:
            return "/"
        return path_from_uri(cwd) if cwd.startswith("file:") else cwd

    # -- port forwarding ---------------------------------------------------------------------------

    async def forward(self, port: int, *, host: str | None = None,
                      session_id: str | None = None) -> ForwardStream:
        """A TCP stream to ``host`` (an IP address; 127.0.0.1 by default) and ``port``, made
        by the server inside the network of session ``session_id`` (by default this client's
        own): what that session's sandboxes serve there. An anyio byte stream; `RemoteError`
        if the server refuses or cannot connect (execproto's extension: see `supports`). It
        ends with the connection: a resumed session does not resume its streams."""
        return await self._forwards.open(self, port, host, session_id)

    # -- the filesystem and the host --------------------------------------------------------------

    async def environment(self) -> Any:
        return await self.request("environment/info")

    async def read_file(self, path: str) -> bytes:
        reply = await self.request("fs/readFile", {"path": uri_from_path(path)})
        return base64.b64decode(reply["dataBase64"])

    async def write_file(self, path: str, data: bytes) -> None:
        params = {"path": uri_from_path(path), "dataBase64": base64.b64encode(data).decode()}
        await self.request("fs/writeFile", params)

    async def create_directory(self, path: str, *, recursive: bool = True) -> None:
        await self.request("fs/createDirectory", {"path": uri_from_path(path),
                                                  "recursive": recursive})

    async def get_metadata(self, path: str) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("fs/getMetadata", {"path": uri_from_path(path)})
        return result

    async def canonicalize(self, path: str) -> str:
        reply = await self.request("fs/canonicalize", {"path": uri_from_path(path)})
        return path_from_uri(reply["path"])

    async def read_directory(self, path: str) -> list[dict[str, Any]]:
        reply = await self.request("fs/readDirectory", {"path": uri_from_path(path)})
        return list(reply["entries"])

    async def remove(self, path: str, *, recursive: bool = True, force: bool = True) -> None:
        await self.request("fs/remove", {"path": uri_from_path(path), "recursive": recursive,
                                         "force": force})

    async def copy(self, source: str, destination: str, *, recursive: bool = False) -> None:
        await self.request("fs/copy", {"sourcePath": uri_from_path(source),
                                       "destinationPath": uri_from_path(destination),
                                       "recursive": recursive})

    async def request(self, method: str, params: Any = None) -> Any:
        """Any method, with raw params; returns the raw result or raises `RemoteError`."""
        return await self.call_core(lambda core: core.request(method, params))

    # -- calls ------------------------------------------------------------------------------------

    async def call_core(self, make: Any) -> Any:
        """Make one call on the client core (``make(core)`` returns its call id), send it, and
        await its result; `RemoteError` or the connection's failure if it fails. What `request`
        and a `Process`'s calls go through."""
        waiter = await self.send_call(make)
        await waiter.done.wait()
        if waiter.error is not None:
            raise waiter.error
        return waiter.value

    async def send_call(self, make: Any) -> _Waiter:
        """Make and send one call on the client core, as `call_core` does, without waiting for
        its answer: the returned waiter's ``done`` is set when it comes."""
        if self._broken is not None:
            raise self._broken
        call_id: int = make(self._core)
        waiter = self._calls[call_id] = _Waiter()
        self._stir()
        await self._flush()
        return waiter

    def _release(self, process_id: str, seq: int) -> None:
        self._core.release(process_id, seq)

    def _stir(self) -> None:
        self._stirred.set()

    async def _flush(self) -> None:
        frames = self._core.data_to_send()
        ws = self._ws
        if frames and ws is not None:
            try:
                await ws.send(frames)
            except Exception:
                # The receive loop sees the drop too; the core resends what is safe to resend.
                log.debug("send failed; the connection is going", exc_info=True)

    # -- the receive loop -------------------------------------------------------------------------

    async def _open(self) -> None:
        """Connect and complete the handshake, or raise."""
        ws = await WebSocket.connect(self.url, token=self._token,
                                     connect_timeout=self.connect_timeout,
                                     handshake_timeout=self.handshake_timeout,
                                     ca_file=self.ca_file, max_message=self.max_message)
        self._ws = ws
        self._core.connection_made()
        await self._flush()
        with anyio.move_on_after(self.handshake_timeout) as waiting:
            while self._core.state is ClientState.HANDSHAKING:
                message = await ws.receive()
                if message is None:
                    break
                self._dispatch(self._receive(message))
                await self._flush()
        if waiting.cancelled_caught:
            self._handshake_error = (f"no answer to initialize in {self.handshake_timeout:g} s "
                                     "(is it an exec-server?)")
        if self._core.state is not ClientState.READY:
            self._dispatch(self._core.connection_lost())
            self._ws = None
            await ws.aclose()
            if self._broken is not None:
                raise self._broken
            if ws.too_big is not None:
                raise MessageTooBig(ws.too_big)
            raise ConnectionLost(self._handshake_error or "the server closed the connection")

    async def _run(self) -> None:
        while True:
            ws = self._ws
            if ws is None:  # closed before this task first ran (the block raised at once)
                return
            while (message := await ws.receive()) is not None:
                self._dispatch(self._receive(message))
                await self._flush()
                await self._hold()
            self._ws = None
            self._dispatch(self._core.connection_lost())
            self._forwards.lost(ConnectionLost("the connection dropped: its streams with it"))
            await ws.aclose()
            if self._closing:
                return
            if ws.too_big is not None:  # resuming would only fetch the same message again
                self._break(MessageTooBig(ws.too_big))
                return
            if ws.closed_by_server is not None:
                # A close frame is the server's decision (going away, 1001; or refusing us):
                # only a connection that dropped is resumed.
                self._break(ServerClosed(*ws.closed_by_server))
                return
            self._on_connection("lost")
            try:
                await self._reconnect()
                self._on_connection("resumed")
            except TimeoutError:
                self._break(ConnectionLost(
                    f"the connection dropped and could not be resumed in {self.resume_timeout:g} s"
                ))
                return
            except ExecError as error:
                self._break(error)
                return

    async def _hold(self) -> None:
        """With a server that takes no acks (the reference), stop reading the connection while
        a process whose output is being read has more unread output than ``buffer_bytes``, so
        the client's memory stays bounded, but never while a call waits for its answer, which
        may be behind that output. Output nobody reads is read on: its close, which a `wait`
        may be waiting for, is behind it. A server with acks pauses the process itself: its
        connection is always read."""
        while (not self._core.output_acks and not self._calls
               and any(proc._backed_up for proc in self._procs.values())):
            stirred = self._stirred = anyio.Event()
            await stirred.wait()

    async def _reconnect(self) -> None:
        delay = 0.02
        with anyio.fail_after(self.resume_timeout):
            while True:
                try:
                    await self._open()
                    log.info("resumed session %s", self.session_id)
                    return
                except MessageTooBig:
                    raise  # it would come again: not a drop to retry
                except (OSError, ConnectionLost) as error:
                    log.debug("reconnect failed: %s", error)
                await anyio.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _receive(self, message: str | bytes) -> list[ClientEvent]:
        if is_forward(message):
            self._forwards.receive(message)
            return []
        try:
            return self._core.receive(message)
        except Exception as exc:
            error = ClientBug(f"the client failed on a bug of its own, not the server's: {exc!r}")
            self._break(error)
            raise error from exc

    def _dispatch(self, events: list[ClientEvent]) -> None:
        for event in events:
            if isinstance(event, (Response, Failure)):
                waiter = self._calls.pop(event.call_id, None)
                if waiter is None:
                    continue
                if isinstance(event, Response):
                    waiter.settle(event.result)
                elif event.code == CONNECTION_LOST:
                    waiter.settle(error=ConnectionLost(event.message))
                else:
                    waiter.settle(error=RemoteError(event.code, event.message, event.data))
            elif isinstance(event, (Output, Exited, Closed, OutputLost)):
                proc = self._procs.get(event.process_id)
                if proc is None:
                    continue
                if isinstance(event, Output):
                    proc._on_output(event)
                elif isinstance(event, Exited):
                    proc._on_exited(event)
                elif isinstance(event, Closed):
                    proc._on_closed(event)
                    del self._procs[event.process_id]
                else:
                    log.warning("process %s: output lost between seqs %d and %d",
                                event.process_id, event.after_seq, event.before_seq)
                    proc.lost.append(event)
            elif isinstance(event, HandshakeFailed):
                self._handshake_error = f"initialize failed: {event.message} ({event.code})"
            elif isinstance(event, SessionLost):
                self._break(SessionGone(event.message))
            elif isinstance(event, ServerMisbehaved):
                log.warning("ignored a frame from the server: %s", event.detail)
            elif isinstance(event, Ready):
                self._handshake_error = None

    def _break(self, error: BaseException) -> None:
        """Nothing more can be done on this client: fail every waiter and every process."""
        if self._broken is None:
            self._broken = error
        for waiter in self._calls.values():
            waiter.settle(error=error)
        self._calls.clear()
        for proc in self._procs.values():
            proc._fail(error)
        self._forwards.lost(error)

    async def aclose(self) -> None:
        self._closing = True
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.aclose()
        self._break(ExecError("the client is closed"))


@asynccontextmanager
async def connect(
    url: str,
    *,
    token: str | None = None,
    client_name: str = "execproto",
    resume_timeout: float = 25.0,
    acks: bool = True,
    connect_timeout: float = CONNECT_TIMEOUT,
    handshake_timeout: float = HANDSHAKE_TIMEOUT,
    on_connection: Callable[[str], None] | None = None,
    buffer_bytes: int = BUFFER_BYTES,
    ca_file: str | os.PathLike[str] | None = None,
    max_message: int = MAX_MESSAGE,
) -> AsyncIterator[Client]:
    """Connect to the exec-server at ``url`` (``ws://IP:PORT``) and start a session.

    Connecting gives up after ``connect_timeout`` seconds, the websocket upgrade and the
    ``initialize`` after ``handshake_timeout`` each. If the connection drops, the client
    reconnects and resumes the session for up to ``resume_timeout`` seconds (keep it under the
    server's session TTL, 30 s by default); calls wait meanwhile, and ``on_connection`` (if
    given) is called with "lost" and then "resumed". ``acks`` turns on execproto's output
    acknowledgements when the server has them, so not even output in flight is lost.

    Each process's unread output is held up to ``buffer_bytes`` (8 MiB); past it the server
    pauses the process until its output is read. A server without acks (the reference) cannot
    pause it: while a reader iterates the output, the connection is read no further meanwhile
    (unless a call waits for its answer); output nobody reads is held as it comes. A reader
    that stops reading stops only its own process: calls are always answered.

    A ``wss://`` server's certificate is verified against the system's trust store (or the
    file ``SSL_CERT_FILE`` names), or, given ``ca_file`` (PEM), against its certificates alone.

    A message from the server over ``max_message`` bytes (96 MiB: room for the largest an
    execproto server sends, a 64 MiB ``fs/readFile`` in base64) closes the connection as it
    comes, before it is held, and fails everything with `MessageTooBig`: a hostile server
    cannot grow the client without bound.
    """
    client = Client(url, token=token, client_name=client_name, resume_timeout=resume_timeout,
                    acks=acks, connect_timeout=connect_timeout,
                    handshake_timeout=handshake_timeout, on_connection=on_connection,
                    buffer_bytes=buffer_bytes, ca_file=ca_file, max_message=max_message)
    await client._open()
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(client._run)
            try:
                yield client
            finally:
                await client.aclose()
                group.cancel_scope.cancel()
    except BaseExceptionGroup as group_error:
        # The task group wraps what the caller's own code raised: give it back as it was, so
        # `except RemoteError` around the block works. Several at once stay a group.
        alone = _alone(group_error)
        if alone is None:
            raise
        raise alone from None


def _alone(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception inside ``group`` (through nested groups), or None if there are more.
    One error raised in two tasks (the receive loop's failure, handed to every waiter) counts
    once; so does the cancellation the other task got because of it."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        inner = pending.pop()
        if isinstance(inner, BaseExceptionGroup):
            pending.extend(inner.exceptions)
        elif not any(inner is leaf for leaf in leaves):
            leaves.append(inner)
    real = [leaf for leaf in leaves if not isinstance(leaf, anyio.get_cancelled_exc_class())]
    return real[0] if len(real) == 1 else None


def run(
    url: str,
    argv: list[str],
    *,
    stdin: bytes | None = None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    token: str | None = None,
    backend: str = "asyncio",
    **options: Any,
) -> tuple[int | None, bytes, bytes]:
    """Run ``argv`` on the server at ``url`` and wait for it: ``(exit_code, stdout, stderr)``.

    For scripts that are not async (it runs its own event loop, so call it from outside one).
    ``stdin`` is written to the process and then closed; without it the process's stdin is
    empty. After ``timeout`` seconds the process is terminated and `TimeoutError` raised.
    ``options`` go to `connect`; the errors are those of `connect` and `Client.start`.
    """

    async def main() -> tuple[int | None, bytes, bytes]:
        async with connect(url, token=token, **options) as ex:
            proc = await ex.start(argv, cwd=cwd, env=env, pipe_stdin=stdin is not None)
            with anyio.move_on_after(math.inf if timeout is None else timeout) as scope:
                async with anyio.create_task_group() as group:
                    if stdin is not None:
                        group.start_soon(_feed, proc, stdin)
                    out, err = await proc.communicate()
                result = await proc.wait()
            if scope.cancelled_caught:
                with anyio.move_on_after(5):
                    await proc.terminate()
                raise TimeoutError(f"{argv[0]!r} ran past {timeout:g} s; it was terminated")
            return result.exit_code, out, err

    return anyio.run(main, backend=backend)


async def _feed(proc: Process, data: bytes) -> None:
    view = memoryview(data)
    step = 64 << 10
    try:
        for offset in range(0, len(view), step):
            await proc.write(bytes(view[offset:offset + step]))
        await proc.close_stdin()
    except BrokenPipeError:
        pass  # it stopped reading (exited, or closed its stdin): the rest is not wanted
