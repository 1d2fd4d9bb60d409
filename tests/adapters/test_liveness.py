"""Clients that stop answering pings, and clients that flood pings or fragments."""

from __future__ import annotations

import json
import time

from wsproto import ConnectionType, WSConnection
from wsproto.events import Ping, Request, TextMessage

from execproto.adapters._wire._ws import MAX_FRAGMENTS, MAX_PINGS, ServerSocket

from .conftest import STARVED, Server, served, start
from .test_limits import rss_mib
from .wsclient import Client, Closed


def test_a_client_that_stops_answering_pings_is_closed_and_can_resume(adapter: str) -> None:
    server = Server(adapter, "--ping-interval", "0.3", "--session-ttl", "30")
    try:
        deaf = server.client()
        start(deaf, "p", ["sleep", "30"])
        listening = server.client()
        until = time.monotonic() + 0.3 * 6  # the deaf one reads nothing, so answers nothing
        while time.monotonic() < until:
            try:
                listening.recv(timeout=0.1)  # answering pings on the way
            except TimeoutError:
                pass
        assert listening.pings >= 3
        assert "result" in listening.call("environment/info")
        deaf.sock.settimeout(5)
        try:
            while deaf.recv_raw(timeout=5):
                pass
        except (Closed, OSError):  # closed, perhaps while answering a ping it had not read
            pass
        # Its session waits to be resumed, its process still running.
        back = Client(server.url)
        assert back.handshake(resume=deaf.session_id)["result"]["sessionId"] == deaf.session_id
        read = back.result("process/read", {"processId": "p"})
        assert read["exited"] is False
        back.result("process/terminate", {"processId": "p"})
        back.close()
        listening.close()
    finally:
        log = server.stop()
    assert "pings unanswered" in log, log
    assert "Traceback" not in log, log


def test_a_ping_flood_is_bounded_and_then_closed(server: Server) -> None:
    baseline = rss_mib(server.process.pid)
    flood = server.client()
    flood.sock.sendall(b"".join(flood.ws.send(Ping(payload=b"x" * 125))
                                for _ in range(MAX_PINGS + 10)))
    assert served(server, "probe") < STARVED
    closed_by_server(flood, 1008)
    assert rss_mib(server.process.pid) < baseline + 50


def test_a_message_in_too_many_fragments_is_closed_quickly(server: Server) -> None:
    flood = server.client()
    frames = b"".join(flood.ws.send(TextMessage(data=" ", message_finished=False))
                      for _ in range(MAX_FRAGMENTS * 20))
    flood.sock.settimeout(30)
    try:
        flood.sock.sendall(frames)
    except OSError:
        pass  # closed before it all went: as it should
    assert served(server, "probe") < STARVED
    closed_by_server(flood, 1009)


def test_a_message_in_many_fragments_under_the_cap_is_served(server: Server) -> None:
    client = server.client()
    text = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "environment/info"})
    frames = b"".join(client.ws.send(TextMessage(data=ch, message_finished=False))
                      for ch in text[:-1])
    client.sock.sendall(frames + client.ws.send(TextMessage(data=text[-1])))
    assert client.recv()["id"] == 7
    client.close()


def closed_by_server(client: Client, code: int) -> None:
    try:
        while True:
            client.recv_raw(timeout=10)
    except Closed as closed:
        assert closed.code == code, closed
    except OSError:
        pass  # reset: the close frame went, and the rest of what we sent was never read


def test_one_large_frame_read_in_thousands_of_pieces_is_one_fragment() -> None:
    # A slow link cuts a message's one frame into as many reads as it likes: the pieces are
    # not fragments, and the message arrives whole.
    server = ServerSocket()
    client = WSConnection(ConnectionType.CLIENT)
    upgrade = client.send(Request(host="localhost", target="/"))
    answered = server.receive(upgrade)
    assert answered.send.startswith(b"HTTP/1.1 101"), answered.send
    client.receive_data(answered.send)
    list(client.events())
    body = "x" * (MAX_FRAGMENTS * 4 * 64)  # one frame, read 64 bytes at a time
    wire = client.send(TextMessage(data=body))
    messages: list[object] = []
    for at in range(0, len(wire), 64):
        got = server.receive(wire[at:at + 64])
        assert not got.closed, got.send
        messages += got.messages
    assert messages == [body]
