"""A loopback TCP proxy whose connections a test can cut, to drop a client's connection for real."""

from __future__ import annotations

import socket
import struct
import threading


class Proxy:
    """Forwards every connection on its own port to ``target_port``. `cut` breaks them all
    (the client sees a reset); while ``refusing`` new connections are closed at once."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"ws://127.0.0.1:{self.port}"
        self.accepted = 0
        self.refusing = False
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self.accepted += 1
                self._open += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(1 << 16):
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        """Break every open connection; whatever was in flight inside the proxy is lost."""
        with self._lock:
            sockets, self._open = self._open, []
        for s in sockets:
            # SO_LINGER 0: close with a reset, like a network that went away.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.listener.close()
        self.cut()
