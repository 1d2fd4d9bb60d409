"""TLS over one side of a proxied connection, sans-I/O (`ssl.SSLObject` over memory buffers),
for the tunnels credential masking opens: the same face as `Side` (read, write, queued,
budget, finish, end, close, and the callbacks), with plaintext on it and TLS records on the
socket beneath.

The handshake starts at once. ``ready`` is called when it is done; ``failed`` (with why) if it
fails: until then what is written waits (it is counted in `queued`). A side reads plaintext
only while its owner lets it, and never more than ``budget()`` at a time; the records beneath
are read no faster than that, so what the TLS layer holds stays bounded by the budget and
one record (16 KiB).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

from ._side import READ_SIZE, Side


def _nothing() -> None:
    pass


class TlsSide:
    def __init__(self, raw: Side, context: ssl.SSLContext, server_side: bool,
                 server_hostname: str | None, ready: Callable[[], None],
                 failed: Callable[[str], None], early: bytes = b"") -> None:
        self.loop = raw.loop
        self._raw = raw
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=server_side,
                                     server_hostname=server_hostname)
        self._ready_call: Callable[[], None] | None = ready
        self._failed_call: Callable[[str], None] | None = failed
        self._ready = False
        self._reading = False
        self._ended = False  # the end (b"") was delivered
        self._waiting: list[bytes] = []  # written before the handshake finished
        self._waiting_size = 0
        self._finish: Callable[[], None] | None = None
        self._pump_scheduled: Callable[[], None] | None = None
        self.on_data: Callable[[bytes], None] = lambda data: None
        self.on_drained: Callable[[], None] = _nothing
        self.on_error: Callable[[], None] = _nothing
        self.budget: Callable[[], int] = lambda: READ_SIZE
        raw.on_data = self._records
        raw.on_error = self._raw_error
        raw.on_drained = self._raw_drained
        raw.budget = self._raw_budget
        if early:
            self._incoming.write(early)
        self._handshake()

    # -- what `Side` offers ----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._raw.closed

    @property
    def queued(self) -> int:
        return self._raw.queued + self._waiting_size

    def read(self, on: bool) -> None:
        if self.closed:
            return
        self._reading = on
        if not self._ready:
            return  # the handshake reads for itself
        self._raw.read(on)
        if on and (self._tls.pending() or self._incoming.pending or self._incoming.eof):
            self._schedule_pump()

    def write(self, data: bytes) -> None:
        if self.closed or not data:
            return
        if not self._ready:
            self._waiting.append(bytes(data))
            self._waiting_size += len(data)
            return
        try:
            self._tls.write(data)
        except ssl.SSLError as exc:
            self._fail(exc)
            return
        self._flush()

    def finish(self, then: Callable[[], None]) -> None:
        if self.closed:
            return
        if self._ready:
            self._raw.finish(then)
        else:
            self._finish = then

    def end(self, done: Callable[[], None]) -> None:
        """Say close_notify, then end the socket beneath as `Side.end` does."""
        if self._ready:
            try:
                self._tls.unwrap()
            except (ssl.SSLError, ValueError):
                pass
            self._flush()
        self._raw.end(done)

    def close(self) -> None:
        if self._pump_scheduled is not None:
            self._pump_scheduled()
            self._pump_scheduled = None
        self.on_data = lambda data: None
        self.on_drained = self.on_error = _nothing
        self._ready_call = None
        self._failed_call = None
        self._raw.close()

    # -- beneath ---------------------------------------------------------------------------------

    def _raw_budget(self) -> int:
        if not self._ready:
            return READ_SIZE
        return max(0, min(READ_SIZE, self.budget()))

    def _raw_drained(self) -> None:
        self.on_drained()

    def _raw_error(self) -> None:
        if not self._ready:
            self._handshake_failed("the connection failed during the TLS handshake")
        else:
            self.on_error()

    def _records(self, data: bytes) -> None:
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()
        if not self._ready:
            self._handshake()
        elif self._reading:
            self._pump()

    def _handshake(self) -> None:
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            if self._incoming.eof:
                self._handshake_failed("the peer closed during the TLS handshake")
                return
            self._raw.read(True)
            return
        except (ssl.SSLError, ssl.CertificateError, OSError) as exc:
            self._flush()
            self._handshake_failed(getattr(exc, "verify_message", None) or str(exc))
            return
        self._flush()
        self._ready = True
        self._raw.read(self._reading)
        for data in self._waiting:
            self._tls.write(data)
        self._waiting.clear()
        self._waiting_size = 0
        self._flush()
        ready, self._ready_call = self._ready_call, None
        self._failed_call = None
        if ready is not None:
            ready()
        if self._finish is not None and not self.closed:
            finish, self._finish = self._finish, None
            self._raw.finish(finish)
        if self._reading and (self._tls.pending() or self._incoming.pending
                              or self._incoming.eof):
            self._schedule_pump()

    def _handshake_failed(self, why: str) -> None:
        failed, self._failed_call = self._failed_call, None
        self._ready_call = None
        if failed is not None:
            failed(why)
        else:
            self.on_error()

    def _schedule_pump(self) -> None:
        if self._pump_scheduled is None:
            self._pump_scheduled = self.loop.call_at(self.loop.now(), self._scheduled_pump)

    def _scheduled_pump(self) -> None:
        self._pump_scheduled = None
        if not self.closed and self._reading:
            self._pump()

    def _pump(self) -> None:
        """Hand on the plaintext there is, within the budget."""
        while self._reading and not self.closed and not self._ended:
            room = min(READ_SIZE, self.budget())
            if room <= 0:
                self._raw.read(False)  # the other side's drain reads again
                return
            try:
                data = self._tls.read(room)
            except ssl.SSLWantReadError:
                if self._incoming.eof:
                    self._deliver_end()
                return
            except ssl.SSLZeroReturnError:
                self._deliver_end()
                return
            except ssl.SSLError as exc:
                if isinstance(exc, ssl.SSLEOFError):
                    self._deliver_end()
                else:
                    self._fail(exc)
                return
            if not data:
                self._deliver_end()
                return
            self.on_data(data)
        self._flush()

    def _deliver_end(self) -> None:
        if not self._ended:
            self._ended = True
            self._raw.read(False)
            self.on_data(b"")

    def _flush(self) -> None:
        pending = self._outgoing.read()
        if pending and not self.closed:
            self._raw.write(pending)

    def _fail(self, exc: Exception) -> None:
        del exc
        self.on_error()
