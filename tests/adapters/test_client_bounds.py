"""The client against a hostile server: a message over its bound closes the connection as it
comes, before it is held, and the error names the bound (`execproto exec`: one line, 255)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Request, TextMessage

from execproto.adapters._client._wsclient import MAX_FRAGMENTS, WebSocket
from execproto.adapters._files._fs import MAX_READ_FILE
from execproto.adapters.client import (
    MAX_MESSAGE,
    MessageTooBig,
    NotWebSocket,
    connect,
)

from .conftest import Server

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0
MiB = 1 << 20
PIECE = 1 << 16  # what the hostile server sends at a time: its count of bytes sent is exact to it
# What may be in flight beyond the bound when the client closes: the socket buffers of both
# ends on loopback (a few MiB each) and a read.
SLACK = 16 * MiB


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def header(length: int, opcode: int = 0x1, fin: bool = False) -> bytes:
    """A server's (unmasked) frame header."""
    first = bytes((0x80 * fin | opcode,))
    if length < 126:
        return first + bytes((length,))
    if length < 1 << 16:
        return first + bytes((126,)) + length.to_bytes(2, "big")
    return first + bytes((127,)) + length.to_bytes(8, "big")


def fragments(total: int, size: int) -> Iterator[bytes]:
    """One text message in frames of ``size`` bytes, never finished, ``total`` bytes sent."""
    yield header(size, 0x1) + b"a" * size
    frame = header(size, 0x0) + b"a" * size
    batch = frame * max(1, PIECE // len(frame))
    for _ in range(total // len(batch)):
        yield batch


def one_frame(total: int, claimed: int = 1 << 40) -> Iterator[bytes]:
    """A text frame whose header claims ``claimed`` bytes, then ``total`` of them."""
    yield header(claimed)
    for _ in range(total // PIECE):
        yield b"a" * PIECE


class Hostile:
    """A websocket server on loopback: it answers the upgrade (unless not ``upgrade``: then
    ``frames`` must), and the initialize if ``ready``, then sends what ``frames`` gives,
    counting what the socket took, until the client goes. The client's close code is kept."""

    def __init__(self, frames: Iterator[bytes], ready: bool = False,
                 upgrade: bool = True) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(TIMEOUT)
        self.url = f"ws://127.0.0.1:{self._listener.getsockname()[1]}"
        self._frames, self._upgrade = frames, upgrade
        self._ws = WSConnection(ConnectionType.SERVER)
        self._go = threading.Event()  # the upgrade is answered (the initialize too, if ready)
        self._ready = ready
        self.sent = 0
        self.close_code: int | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join(TIMEOUT)
        assert not self._thread.is_alive()
        self._listener.close()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn:
            conn.settimeout(TIMEOUT)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, PIECE)
            reader = threading.Thread(target=self._read, args=(conn,), daemon=True)
            reader.start()
            if self._upgrade and not self._go.wait(TIMEOUT):
                return
            for data in self._frames:
                try:
                    conn.sendall(data)
                except OSError:  # the client went
                    break
                self.sent += len(data)
            reader.join(TIMEOUT)

    def _read(self, conn: socket.socket) -> None:
        """The client's side: the upgrade answered, the initialize too, its close kept."""
        while True:
            try:
                data = conn.recv(PIECE)
            except OSError:
                return
            if not self._upgrade:
                if not data:
                    return
                continue
            self._ws.receive_data(data or None)
            for event in self._ws.events():
                if isinstance(event, Request):
                    conn.sendall(self._ws.send(AcceptConnection()))
                    if not self._ready:
                        self._go.set()
                elif isinstance(event, TextMessage) and self._ready:
                    asked = json.loads(event.data)
                    if asked.get("method") != "initialize":
                        continue
                    answer = {"jsonrpc": "2.0", "id": asked["id"],
                              "result": {"sessionId": "hostile"}}
                    conn.sendall(self._ws.send(TextMessage(json.dumps(answer))))
                    self._go.set()
                elif isinstance(event, CloseConnection) and self.close_code is None:
                    self.close_code = event.code  # not the 1006 the hang-up after it makes
            if not data:
                return


async def test_a_message_in_fragments_over_the_bound_fails_the_connect() -> None:
    hostile = Hostile(fragments(256 * MiB, 1024))
    began = time.monotonic()
    with pytest.raises(MessageTooBig, match="over 1 MiB, the client's bound"):
        async with connect(hostile.url, max_message=MiB):
            pass
    assert time.monotonic() - began < 5
    hostile.join()
    assert hostile.sent < MiB + SLACK
    assert hostile.close_code == 1009


async def test_a_frame_claiming_a_terabyte_fails_the_waiting_call() -> None:
    hostile = Hostile(one_frame(256 * MiB), ready=True)
    async with connect(hostile.url, max_message=MiB) as ex:
        with pytest.raises(MessageTooBig, match="over 1 MiB"):
            await ex.request("environment/info")
        with pytest.raises(MessageTooBig):  # not resumed: everything after fails too
            await ex.request("environment/info")
    hostile.join()
    assert hostile.sent < MiB + SLACK
    assert hostile.close_code == 1009


async def test_a_message_in_endless_empty_frames_is_cut_off() -> None:
    # Empty frames never grow a message's bytes: their count is what ends it.
    hostile = Hostile(fragments(4 * MiB, 0))
    with pytest.raises(MessageTooBig, match=f"more than {MAX_FRAGMENTS} frames"):
        async with connect(hostile.url):
            pass
    hostile.join()
    assert hostile.sent < 4 * MiB


async def test_a_message_of_the_bound_itself_comes_whole() -> None:
    answer = json.dumps({"jsonrpc": "2.0", "id": 2, "result": "a" * MiB}).encode()
    bound = len(answer)
    hostile = Hostile(iter([header(bound, fin=True) + answer]), ready=True)
    async with connect(hostile.url, max_message=bound) as ex:
        assert await ex.request("environment/info") == "a" * MiB
    hostile.join()


async def test_the_default_bound() -> None:
    hostile = Hostile(one_frame(MAX_MESSAGE + 64 * MiB), ready=True)
    began = time.monotonic()
    async with connect(hostile.url) as ex:
        with pytest.raises(MessageTooBig, match="over 96 MiB"):
            await ex.request("environment/info")
    # Taking in 96 MiB is most of it: 0.1 s here idle, 1.3 s beside four busy loops on two
    # cores. Bounded all the same, well below the 10 s a wait for a timeout would take.
    assert time.monotonic() - began < 5
    hostile.join()
    assert MAX_MESSAGE == 96 * MiB < hostile.sent < MAX_MESSAGE + SLACK


async def test_the_default_bound_holds_the_largest_answer_of_a_server(tmp_path: Path) -> None:
    # The server reads messages up to 64 MiB, but answers fs/readFile of up to 64 MiB in base64.
    big = tmp_path / "big"
    big.write_bytes(b"\xff" * MAX_READ_FILE)
    server = Server("asyncio", "--log-level", "warning")
    try:
        async with connect(server.url) as ex:
            assert len(await ex.read_file(str(big))) == MAX_READ_FILE
    finally:
        server.stop()


async def test_an_upgrade_answer_of_endless_headers_is_refused() -> None:
    # h11 refuses a response head over 16 KiB: nothing of the client grows before the 101.
    head = b"HTTP/1.1 101 Switching Protocols\r\n"
    filler = b"x-filler: " + b"a" * 1000 + b"\r\n"
    hostile = Hostile(iter([head] + [filler] * 100_000), upgrade=False)
    with pytest.raises(NotWebSocket):
        async with connect(hostile.url):
            pass
    hostile.join()
    assert hostile.sent < SLACK


def test_a_trickled_message_is_held_as_few_pieces() -> None:
    # A message a byte at a time is joined as it comes, not kept as an object per byte.
    ws = WebSocket(None, None)  # type: ignore[arg-type]
    for _ in range(10_000):
        assert ws._collect(TextMessage("é", frame_finished=False, message_finished=False)) is None
        assert len(ws._parts) < 300
    assert ws._collect(TextMessage("!", message_finished=True)) == "é" * 10_000 + "!"
    assert ws._size == 0 and ws.too_big is None


def test_exec_says_so_in_one_line() -> None:
    hostile = Hostile(fragments(MAX_MESSAGE + 64 * MiB, 1 << 16))
    done = subprocess.run([sys.executable, "-m", "execproto.adapters", "exec", hostile.url,
                           "--", "true"], capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)
    hostile.join()
    assert done.returncode == 255
    assert done.stderr == (f"execproto exec: {hostile.url}: the server sent a message over "
                           "96 MiB, the client's bound (max_message); the connection is closed "
                           "(1009)\n")
    assert hostile.sent < MAX_MESSAGE + SLACK
