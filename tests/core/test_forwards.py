"""Port forwarding in the core: ``forward/open``, ``write``, ``ack``, ``close`` and what the
adapter reports, driven through `ServerCore` with a scripted adapter. Every test's trace
replays."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from execproto import Config, SendBlocked, SendDrained, Shutdown
from execproto._forward_stream import WINDOW_BYTES, WINDOW_CHUNKS
from execproto._server import _extensions
from execproto.actions import CloseForward, OpenForward, PauseForward, ResumeForward, WriteForward
from execproto.events import (
    ForwardConnected,
    ForwardEnded,
    ForwardFailed,
    ForwardReceived,
    ForwardUnrouted,
    ForwardWritten,
)

from .harness import Harness, b64, unb64


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness(Config(max_session_forwards=4, max_forwards=6, forward_loopback=True,
                             session_ttl=5))
    harness.connect(1)
    harness.handshake(1)
    yield harness
    harness.assert_replays()


def opened(h: Harness, conn: int = 1, port: int = 3000, **extra: Any) -> tuple[int, int]:
    """A stream opened and connected: (the core's handle, the client's streamId)."""
    msg_id = h.request(conn, "forward/open", {"port": port, **extra})
    assert h.response(conn, msg_id) is None  # answered once connected
    handle = h.of_type(OpenForward)[-1].stream
    h.feed(ForwardConnected(stream=handle))
    reply = h.response(conn, msg_id)
    assert reply is not None and "result" in reply, reply
    assert reply["result"]["window"] == {"bytes": WINDOW_BYTES, "chunks": WINDOW_CHUNKS}
    return handle, reply["result"]["streamId"]


def error_of(reply: dict[str, Any] | None) -> tuple[int, str]:
    assert reply is not None and "error" in reply, reply
    return reply["error"]["code"], reply["error"]["message"]


def test_the_methods_are_announced(h: Harness) -> None:
    for method in ("forward/open", "forward/write", "forward/ack", "forward/close"):
        assert method in _extensions()


def test_open_asks_for_the_session_network_and_answers_once_connected(h: Harness) -> None:
    handle, stream_id = opened(h, port=8080, host="localhost")
    assert h.of_type(OpenForward) == [OpenForward(stream=handle, session_id="session-1",
                                                  host="127.0.0.1", port=8080)]
    assert stream_id == 1


def test_data_goes_out_in_order_and_the_window_pauses_the_target(h: Harness) -> None:
    handle, stream_id = opened(h)
    h.feed(ForwardReceived(stream=handle, data=b"hello"))
    h.feed(ForwardReceived(stream=handle, data=b" world"))
    data = h.notifications(1, "forward/data")
    assert [(m["params"]["streamId"], m["params"]["seq"], unb64(m["params"]["dataBase64"]))
            for m in data] == [(stream_id, 1, b"hello"), (stream_id, 2, b" world")]
    big = b"x" * WINDOW_BYTES
    h.feed(ForwardReceived(stream=handle, data=big))
    assert h.of_type(PauseForward) == [PauseForward(stream=handle)]
    assert h.call(1, "forward/ack", {"streamId": stream_id, "seq": 2})["result"] == {}
    assert h.of_type(ResumeForward) == []  # still a window's worth unacknowledged
    h.call(1, "forward/ack", {"streamId": stream_id, "seq": 3})
    assert h.of_type(ResumeForward) == [ResumeForward(stream=handle)]


def test_many_small_chunks_fill_the_window_too(h: Harness) -> None:
    handle, _ = opened(h)
    for _ in range(WINDOW_CHUNKS):
        h.feed(ForwardReceived(stream=handle, data=b"."))
    assert h.of_type(PauseForward) == [PauseForward(stream=handle)]


def test_a_blocked_connection_pauses_its_streams(h: Harness) -> None:
    handle, _ = opened(h)
    h.feed(SendBlocked(conn=1))
    assert h.of_type(PauseForward) == [PauseForward(stream=handle)]
    h.feed(SendDrained(conn=1))
    assert h.of_type(ResumeForward) == [ResumeForward(stream=handle)]


def test_writes_are_answered_once_written(h: Harness) -> None:
    handle, stream_id = opened(h)
    first = h.request(1, "forward/write", {"streamId": stream_id, "dataBase64": b64(b"GET /")})
    second = h.request(1, "forward/write", {"streamId": stream_id, "dataBase64": b64(b"\r\n")})
    assert h.of_type(WriteForward) == [WriteForward(stream=handle, data=b"GET /"),
                                       WriteForward(stream=handle, data=b"\r\n")]
    h.feed(ForwardWritten(stream=handle, size=4))
    assert h.response(1, first) is None
    h.feed(ForwardWritten(stream=handle, size=2))
    assert h.response(1, first) == {"jsonrpc": "2.0", "id": first, "result": {}}
    assert h.response(1, second) is None
    h.feed(ForwardWritten(stream=handle, size=1))
    assert h.response(1, second) is not None


def test_a_target_that_does_not_read_has_its_writes_refused_past_the_backlog(
        h: Harness) -> None:
    _, stream_id = opened(h)
    chunk = b64(b"x" * (1 << 20))
    for _ in range(4):
        h.request(1, "forward/write", {"streamId": stream_id, "dataBase64": chunk})
    code, message = error_of(h.call(1, "forward/write", {"streamId": stream_id,
                                                         "dataBase64": b64(b"y")}))
    assert code == -32600 and "is not reading" in message


def test_both_eofs_close_the_stream_and_the_client_hears(h: Harness) -> None:
    handle, stream_id = opened(h)
    h.feed(ForwardEnded(stream=handle))
    assert h.notifications(1, "forward/eof")[0]["params"] == {"streamId": stream_id, "seq": 0}
    reply = h.call(1, "forward/write", {"streamId": stream_id, "eof": True})
    assert reply["result"] == {}
    assert h.of_type(WriteForward)[-1] == WriteForward(stream=handle, data=b"", eof=True)
    assert h.of_type(CloseForward) == [CloseForward(stream=handle)]
    assert h.notifications(1, "forward/closed")[0]["params"] == {"streamId": stream_id,
                                                                 "error": None}
    code, _ = error_of(h.call(1, "forward/write", {"streamId": stream_id, "dataBase64": "eA=="}))
    assert code == -32600


def test_the_client_eof_first_waits_for_its_writes_and_the_target(h: Harness) -> None:
    handle, stream_id = opened(h)
    h.request(1, "forward/write", {"streamId": stream_id, "dataBase64": b64(b"abc"),
                                   "eof": True})
    code, message = error_of(h.call(1, "forward/write", {"streamId": stream_id,
                                                         "dataBase64": "eA=="}))
    assert "EOF already" in message
    h.feed(ForwardEnded(stream=handle))
    assert h.of_type(CloseForward) == []  # the write is not done yet
    h.feed(ForwardWritten(stream=handle, size=3))
    assert h.of_type(CloseForward) == [CloseForward(stream=handle)]


def test_a_broken_stream_tells_the_client_and_fails_its_writes(h: Harness) -> None:
    handle, stream_id = opened(h)
    write = h.request(1, "forward/write", {"streamId": stream_id, "dataBase64": b64(b"abc")})
    h.feed(ForwardFailed(stream=handle, error="Connection reset by peer (os error 104)"))
    assert error_of(h.response(1, write))[0] == -32600
    closed = h.notifications(1, "forward/closed")[0]["params"]
    assert closed["streamId"] == stream_id
    assert closed["error"] == ("forward to 127.0.0.1:3000 failed: Connection reset by peer "
                               "(os error 104)")
    assert h.of_type(CloseForward) == []  # the adapter closed it already


def test_a_target_that_refuses_fails_the_open(h: Harness) -> None:
    msg_id = h.request(1, "forward/open", {"port": 3000})
    handle = h.of_type(OpenForward)[-1].stream
    h.feed(ForwardFailed(stream=handle, error="Connection refused (os error 111)"))
    reply = h.response(1, msg_id)
    assert reply is not None
    assert reply["error"] == {"code": -32603, "message": "forward to 127.0.0.1:3000 failed: "
                              "Connection refused (os error 111)",
                              "data": {"kind": "forwardFailed"}}


def test_client_close_closes_the_target_silently(h: Harness) -> None:
    handle, stream_id = opened(h)
    assert h.call(1, "forward/close", {"streamId": stream_id})["result"] == {}
    assert h.of_type(CloseForward) == [CloseForward(stream=handle)]
    assert h.notifications(1, "forward/closed") == []
    assert h.call(1, "forward/close", {"streamId": stream_id})["result"] == {}  # idempotent
    h.feed(ForwardReceived(stream=handle, data=b"late"))  # queued before the close: dropped
    assert h.notifications(1, "forward/data") == []


def test_the_connection_closing_closes_its_streams(h: Harness) -> None:
    handle, _ = opened(h)
    h.request(1, "forward/open", {"port": 3001})
    connecting = h.of_type(OpenForward)[-1].stream
    h.disconnect(1)
    assert h.of_type(CloseForward) == [CloseForward(stream=handle),
                                       CloseForward(stream=connecting)]


def test_caps_per_session_and_per_server(h: Harness) -> None:
    for port in range(4):
        h.request(1, "forward/open", {"port": 3000 + port})
    code, message = error_of(h.call(1, "forward/open", {"port": 4000}))
    assert (code, message) == (-32600, "too many forwards: a session keeps at most 4 streams "
                               "open at once; close some first")
    h.connect(2)
    h.handshake(2)
    for port in range(2):
        h.request(2, "forward/open", {"port": 3000 + port})
    code, message = error_of(h.call(2, "forward/open", {"port": 4000}))
    assert message == "too many forwards: this server keeps at most 6 streams open at once"


@pytest.mark.parametrize("params,message", [
    ({}, "missing field `port`"),
    ({"port": 0}, "port must be an integer from 1 to 65535"),
    ({"port": 65536}, "port must be an integer from 1 to 65535"),
    ({"port": True}, "port must be an integer from 1 to 65535"),
    ({"port": 80, "host": "example.com"}, "host must be an IP address or localhost"),
])
def test_bad_open_params(h: Harness, params: dict[str, Any], message: str) -> None:
    assert error_of(h.call(1, "forward/open", params)) == (-32602, message)


def test_another_session_is_reached_by_its_id_and_an_unknown_one_refused(h: Harness) -> None:
    h.connect(2)
    h.handshake(2)
    h.request(2, "forward/open", {"port": 3000, "sessionId": "session-1"})
    assert h.of_type(OpenForward)[-1].session_id == "session-1"
    code, message = error_of(h.call(2, "forward/open", {"port": 3000, "sessionId": "nope"}))
    assert (code, message) == (-32600, "unknown session id nope")


def test_a_stream_into_an_ended_session_closes(h: Harness) -> None:
    h.connect(2)
    h.handshake(2)
    msg_id = h.request(2, "forward/open", {"port": 3000, "sessionId": "session-1"})
    h.feed(ForwardConnected(stream=h.of_type(OpenForward)[-1].stream))
    stream_id = h.response(2, msg_id)["result"]["streamId"]  # type: ignore[index]
    h.disconnect(1)
    h.advance(6)  # session-1's TTL
    closed = h.notifications(2, "forward/closed")
    assert closed[0]["params"] == {"streamId": stream_id,
                                   "error": "session session-1 has ended"}


def test_shutdown_closes_every_stream(h: Harness) -> None:
    handle, _ = opened(h)
    h.feed(Shutdown())
    assert CloseForward(stream=handle) in h.of_type(CloseForward)


def _unrouted(h: Harness, network: str, host: str = "127.0.0.1", port: int = 3000,
              listening: tuple[int, ...] = ()) -> tuple[int, dict[str, Any] | None]:
    msg_id = h.request(1, "forward/open", {"port": port, "host": host})
    handle = h.of_type(OpenForward)[-1].stream
    h.feed(ForwardUnrouted(stream=handle, network=network,  # type: ignore[arg-type]
                           listening=listening))
    return handle, h.response(1, msg_id)


def test_no_session_network_falls_back_to_the_host_loopback_when_allowed(h: Harness) -> None:
    handle, reply = _unrouted(h, "none", listening=(8765,))
    assert reply is None
    assert h.of_type(OpenForward)[-1] == OpenForward(stream=handle, session_id="session-1",
                                                     host="127.0.0.1", port=3000, route="host")
    h.feed(ForwardConnected(stream=handle))


@pytest.mark.parametrize("network,host,port,words", [
    ("none", "127.0.0.1", 8765, "port 8765 is the server's own"),
    ("none", "10.0.0.1", 3000, "only the server host's loopback is reachable, not 10.0.0.1"),
    ("unknown", "127.0.0.1", 3000, "cannot tell where the session's network is"),
])
def test_the_host_route_is_refused(h: Harness, network: str, host: str, port: int,
                                   words: str) -> None:
    _, reply = _unrouted(h, network, host, port, listening=(8765,))
    code, message = error_of(reply)
    assert code == -32600 and words in message, message
    assert len(h.of_type(OpenForward)) == 1
    assert h.of_type(CloseForward) == []


def test_the_host_route_is_refused_without_the_operator_flag() -> None:
    h = Harness(Config())
    h.connect(1)
    h.handshake(1)
    _, reply = _unrouted(h, "none")
    assert "not started with --forward-loopback" in error_of(reply)[1]
    h.assert_replays()


def test_a_failure_after_the_host_route_is_not_routed_again(h: Harness) -> None:
    handle, _ = _unrouted(h, "none")
    h.feed(ForwardUnrouted(stream=handle, network="none"))
    assert len(h.of_type(OpenForward)) == 2


def test_events_for_a_stream_never_issued_are_the_adapters_bug() -> None:
    from execproto import LocalProtocolError, ServerCore

    with pytest.raises(LocalProtocolError, match="never issued"):
        ServerCore().handle(ForwardReceived(stream=99, data=b"x"), 0.0)


def test_config_defaults() -> None:
    config = Config()
    assert (config.max_session_forwards, config.max_forwards, config.forward_loopback) == (
        64, 1024, False)
    assert attrs.evolve(config, forward_loopback=True).forward_loopback
