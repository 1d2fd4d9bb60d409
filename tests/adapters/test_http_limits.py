"""http/request against servers that never answer, or never stop: the server stays served."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from execproto import HttpRequest
from execproto.adapters._http import _http
from execproto.adapters._http._http_calls import HTTP_PER_CONNECTION

from .conftest import STARVED, Server, start, uri
from .test_limits import rss_mib
from .wsclient import Client


class Silent:
    """A loopback listener that accepts and never answers; it notes each connection's end."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        self.accepted = 0
        self.ended = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        try:
            while conn.recv(1 << 16):
                pass
        except OSError:
            pass
        with self._lock:
            self.ended += 1
        conn.close()

    def wait(self, what: str, count: int, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while getattr(self, what) < count:
            assert time.monotonic() < deadline, (what, getattr(self, what), count)
            time.sleep(0.02)


@pytest.fixture
def silent() -> Iterator[Silent]:
    listener = Silent()
    yield listener
    listener.sock.close()


HUNG = 12  # more than any pool the server had before: every worker thread of it, once


def hang(client: Client, url: str, count: int = HUNG, **extra: object) -> None:
    for i in range(count):
        client.request("http/request", {"method": "GET", "url": url, "requestId": f"h{i}",
                                        "headers": [], **extra})


def test_hung_http_calls_never_hold_up_fs_calls(server: Server, silent: Silent,
                                                tmp_path: object) -> None:
    c = server.client()
    hang(c, silent.url)
    # One connection gets its share of the http threads, and no more: its other calls wait.
    silent.wait("accepted", HTTP_PER_CONNECTION)
    time.sleep(0.5)
    assert silent.accepted == HTTP_PER_CONNECTION
    other = server.client()
    for _ in range(20):
        began = time.monotonic()
        assert other.result("fs/getMetadata", {"path": uri("/tmp")})["isDirectory"] is True
        assert time.monotonic() - began < STARVED
    start(other, "p", ["true"])
    other.events_until_closed("p")
    hang(other, silent.url, 1)  # its own share is there for it
    silent.wait("accepted", HTTP_PER_CONNECTION + 1)
    other.close()
    c.close()
    # Gone with their client: every connection to the silent server is closed, and the calls
    # that waited their turn never start.
    silent.wait("ended", HTTP_PER_CONNECTION + 1)
    time.sleep(1)
    assert silent.accepted == silent.ended == HTTP_PER_CONNECTION + 1


def test_sigterm_with_hung_calls_stops_within_the_kill_grace_and_a_second(
    adapter: str, silent: Silent
) -> None:
    server = Server(adapter, "--kill-grace", "0.5", "--drain-grace", "0")  # the stop at once
    c = server.client()
    hang(c, silent.url)
    start(c, "sleeper", ["sleep", "60"])
    silent.wait("accepted", HTTP_PER_CONNECTION)
    began = time.monotonic()
    log = server.stop(signal.SIGTERM)
    took = time.monotonic() - began
    assert server.process.returncode == 0, log
    assert took < 5, took  # the kill grace and a moment: not the hung calls' 30 s, nor never
    assert "Traceback" not in log, log


def test_a_call_without_a_timeout_times_out_when_nothing_comes(
    silent: Silent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_http, "IDLE_TIMEOUT", 0.5)
    request = HttpRequest(method="GET", url=silent.url, headers=(), body=None, timeout_ms=None,
                          stream_response=False, follow_redirects=True)
    began = time.monotonic()
    with pytest.raises(_http.HttpFailure, match="timed out"):
        _http.fetch(request, threading.Event())
    assert 0.4 < time.monotonic() - began < 5


def test_a_cancelled_call_lets_go_of_its_thread_at_once(silent: Silent) -> None:
    request = HttpRequest(method="GET", url=silent.url, headers=(), body=None, timeout_ms=None,
                          stream_response=False, follow_redirects=True)
    cancelled = threading.Event()
    threading.Timer(0.3, cancelled.set).start()
    began = time.monotonic()
    with pytest.raises(_http.HttpFailure, match="cancelled"):
        _http.fetch(request, cancelled)
    assert time.monotonic() - began < 5  # not the idle timeout


class Flood:
    """A loopback HTTP server that answers every request with endless zeros, as fast as the
    reader takes them; `declared` sets a Content-Length of that many bytes instead."""

    def __init__(self, declared: int | None = None) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        self.declared = declared
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        block = bytes(1 << 16)
        try:
            conn.recv(1 << 16)
            if self.declared is None:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: x/y\r\n\r\n")
                while True:
                    conn.sendall(block)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % self.declared)
            left = self.declared
            while left > 0:
                conn.sendall(block[:left])
                left -= len(block)
        except OSError:
            pass
        finally:
            conn.close()


def test_a_body_read_whole_is_capped(client: Client) -> None:
    flood = Flood(declared=_http.MAX_BODY + 1)
    reply = client.call("http/request", {"method": "GET", "url": flood.url, "requestId": "b",
                                         "headers": []}, timeout=60)
    assert "over 64 MiB" in reply["error"]["message"], reply
    flood.sock.close()


def test_a_streamed_body_its_client_does_not_read_costs_a_bounded_buffer(server: Server) -> None:
    flood = Flood()
    probe = server.client()
    baseline = rss_mib(server.process.pid)
    greedy = server.client()
    greedy.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    greedy.request("http/request", {"method": "GET", "url": flood.url, "requestId": "s",
                                    "headers": [], "streamResponse": True})
    peak, worst = baseline, 0.0
    for i in range(10):
        began = time.monotonic()
        start(probe, f"p{i}", ["true"])
        probe.events_until_closed(f"p{i}")
        worst = max(worst, time.monotonic() - began)
        peak = max(peak, rss_mib(server.process.pid))
        time.sleep(0.3)
    assert peak < baseline + 100, (baseline, peak)
    assert worst < STARVED, worst
    # Still flowing, at the client's pace.
    greedy.sock.settimeout(10)
    assert greedy.sock.recv(1 << 16)
    greedy.close()
    probe.close()
    flood.sock.close()
