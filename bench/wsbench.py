"""The measuring client of `bench/compare.py`: a blocking websocket client that costs little.

Frames are parsed by hand from one receive buffer; an output notification is never decoded as
JSON, only searched for its ``"chunk"`` and counted by its base64 length, so the client keeps up
with a server pushing hundreds of MB/s on one core. Client frames go out with an all-zero mask
(allowed by RFC 6455), so masking costs nothing.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

CHUNK_KEY = b'"chunk":"'


class WsClient:
    def __init__(self, url: str, timeout: float = 120.0) -> None:
        parts = urlsplit(url)
        assert parts.hostname and parts.port
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET / HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        self.buf = bytearray()
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, rest = bytes(self.buf).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        self.buf = bytearray(rest)
        self.pos = 0
        self.next_id = 1

    def _fill(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise EOFError("the server closed the connection")
        self.buf += data

    def send(self, message: dict[str, Any]) -> None:
        payload = json.dumps(message).encode()
        n = len(payload)
        if n < 126:
            header = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 1 << 16:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        self.sock.sendall(header + b"\0\0\0\0" + payload)

    def request(self, method: str, params: Any) -> int:
        msg_id = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return msg_id

    def messages(self) -> Iterator[bytes]:
        """Whole messages as they arrive; answers pings; EOFError at the close."""
        parts: list[bytes] = []
        while True:
            buf, pos = self.buf, self.pos
            while len(buf) - pos < 2:
                self._compact_and_fill()
                buf, pos = self.buf, self.pos
            b0, b1 = buf[pos], buf[pos + 1]
            length = b1 & 0x7F
            head = 2
            if length == 126:
                head = 4
            elif length == 127:
                head = 10
            while len(buf) - pos < head:
                self._compact_and_fill()
                buf, pos = self.buf, self.pos
            if length == 126:
                length = struct.unpack_from("!H", buf, pos + 2)[0]
            elif length == 127:
                length = struct.unpack_from("!Q", buf, pos + 2)[0]
            while len(buf) - pos < head + length:
                self._compact_and_fill()
                buf, pos = self.buf, self.pos
            payload = bytes(buf[pos + head : pos + head + length])
            self.pos = pos + head + length
            opcode = b0 & 0x0F
            if opcode == 0x9:  # ping
                pong = struct.pack("!BB", 0x8A, 0x80 | len(payload)) + b"\0\0\0\0"
                self.sock.sendall(pong + payload)
                continue
            if opcode == 0x8:
                raise EOFError("close frame")
            if opcode == 0xA:
                continue
            parts.append(payload)
            if b0 & 0x80:
                yield parts[0] if len(parts) == 1 else b"".join(parts)
                parts = []

    def _compact_and_fill(self) -> None:
        if self.pos > 1 << 20:
            del self.buf[: self.pos]
            self.pos = 0
        self._fill()

    def handshake(self) -> dict[str, Any]:
        msg_id = self.request("initialize", {"clientName": "bench"})
        for raw in self.messages():
            message = json.loads(raw)
            if message.get("id") == msg_id:
                self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
                return message
        raise EOFError

    def close(self) -> None:
        self.sock.close()


def output_bytes(raw: bytes) -> int:
    """Decoded size of an output notification's chunk, from its base64 length alone."""
    start = raw.find(CHUNK_KEY)
    if start < 0:
        return -1
    start += len(CHUNK_KEY)
    end = raw.index(b'"', start)
    pad = (raw[end - 1] == 61) + (raw[end - 2] == 61)  # '='
    return (end - start) // 4 * 3 - pad


def start_params(process_id: str, argv: list[str]) -> dict[str, Any]:
    return {
        "processId": process_id,
        "argv": argv,
        "cwd": "file:///tmp",
        "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        "tty": False,
    }
