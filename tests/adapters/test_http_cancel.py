"""A cancelled http call lets go of its thread wherever it waits: a name lookup that never
answers, a TLS handshake nobody answers, a request body nobody reads."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from execproto import HttpRequest
from execproto.adapters._http import _http, _lookup

from .test_http_limits import Silent

LET_GO = 5  # seconds: a slice and a loaded machine's delay, far from the 30 s idle timeout


def request(url: str, method: str = "GET", body: bytes | None = None) -> HttpRequest:
    return HttpRequest(method=method, url=url, headers=(), body=body, timeout_ms=None,
                       stream_response=False, follow_redirects=True)


def cancelled_after(seconds: float) -> threading.Event:
    cancelled = threading.Event()
    threading.Timer(seconds, cancelled.set).start()
    return cancelled


def took_to_cancel(call: HttpRequest, after: float = 0.3) -> float:
    began = time.monotonic()
    with pytest.raises(_http.HttpFailure, match="cancelled"):
        _http.fetch(call, cancelled_after(after))
    return time.monotonic() - began


class Deaf(Silent):
    """A loopback listener that accepts and then neither reads nor writes."""

    def __init__(self) -> None:
        self.held: list[socket.socket] = []
        super().__init__()

    def _hold(self, conn: socket.socket) -> None:
        self.held.append(conn)  # never read: the client's sends fill the buffers and stop

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def deaf() -> Iterator[Deaf]:
    listener = Deaf()
    yield listener
    listener.close()


@pytest.fixture
def silent() -> Iterator[Silent]:
    listener = Silent()
    yield listener
    listener.sock.close()


class HangingResolver:
    """Stands in for a resolver that never answers: each lookup blocks until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.waiting = 0
        self.most = 0
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.waiting += 1
            self.most = max(self.most, self.waiting)
        self.release.wait(30)
        with self._lock:
            self.waiting -= 1
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")


@pytest.fixture
def hanging(monkeypatch: pytest.MonkeyPatch) -> Iterator[HangingResolver]:
    resolver = HangingResolver()
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    yield resolver
    resolver.release.set()


def test_a_tls_handshake_nobody_answers(silent: Silent) -> None:
    assert took_to_cancel(request(silent.url.replace("http:", "https:"))) < LET_GO


def test_a_request_body_nobody_reads(deaf: Deaf) -> None:
    body = bytes(32 << 20)  # far more than the socket buffers hold
    call = request(deaf.url, "POST", body)
    assert took_to_cancel(call) < LET_GO


def test_a_name_lookup_that_never_answers(hanging: HangingResolver) -> None:
    assert took_to_cancel(request("http://hangs.example/")) < LET_GO


def test_abandoned_lookups_are_bounded(hanging: HangingResolver) -> None:
    calls = [threading.Thread(target=took_to_cancel, args=(request(f"http://h{n}.example/"),))
             for n in range(3 * _lookup.LOOKUPS)]
    for call in calls:
        call.start()
    for call in calls:
        call.join(30)
    assert not any(call.is_alive() for call in calls), "a cancelled call did not let go"
    assert hanging.most == hanging.waiting == _lookup.LOOKUPS  # the rest never started one
    hanging.release.set()
    deadline = time.monotonic() + 10
    while hanging.waiting and time.monotonic() < deadline:
        time.sleep(0.02)
    # Their places are free again: the next lookup starts (and fails as the resolver says),
    # rather than waiting for a place until its time runs out.
    wait = _lookup.sliced(0.05, time.monotonic() + 5, lambda: None)
    with pytest.raises(socket.gaierror):
        _lookup.resolve("after.example", 80, wait)
