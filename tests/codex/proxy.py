"""A loopback TCP relay between codex and a websocket exec-server.

It keeps every byte the server sent, so a test can read the server's answers (server frames are
not masked, so their JSON is plain in the stream), and every byte codex sent (`to_server`: its
frames are masked), and it can break the connection once, a moment
after the server first sends a given string: a network that fails mid-command.
"""

from __future__ import annotations

import socket
import struct
import threading


class Proxy:
    def __init__(self, target_url: str, cut_after: bytes | None = None, cut_delay: float = 0.3):
        self.target_port = int(target_url.rsplit(":", 1)[1])
        self.cut_after = cut_after
        self.cut_delay = cut_delay
        self.from_server = bytearray()
        self.to_server = bytearray()
        self.connections = 0
        self.cuts = 0
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"ws://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()
        self.cut()

    def cut(self) -> None:
        """Reset every open connection, as a network that went away would."""
        with self._lock:
            sockets, self._open = self._open, []
        for s in sockets:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            try:
                s.shutdown(socket.SHUT_RDWR)  # wakes the pump blocked reading it; close would not
            except OSError:
                pass
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._open += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_server: bool) -> None:
        try:
            while data := source.recv(1 << 16):
                sink.sendall(data)
                if from_server:
                    self._saw(data)
                else:
                    with self._lock:
                        self.to_server += data
        except OSError:
            pass
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _saw(self, data: bytes) -> None:
        with self._lock:
            self.from_server += data
            due = self.cut_after is not None and self.cut_after in self.from_server
            if due:
                self.cut_after = None  # once
                self.cuts += 1
        if due:
            threading.Timer(self.cut_delay, self.cut).start()
