"""The descriptor limit shared out: processes and open fs handles take at most their share, so
connections and the server's own work always have descriptors left."""

from __future__ import annotations

from execproto import CloseConnection, Config, FsCompleted, Host, RunFs
from execproto._descriptors import PER_PROCESS, RESERVED, budget

from .harness import Harness
from .test_process_limits import finish, refused

# Room for exactly three processes after the reserve (a quarter of so low a limit) and the
# connections' share.
SMALL = Config(max_connections=4, max_upgrading=2)
LIMIT = 24
OUT_OF_DESCRIPTORS = (
    f"out of file descriptors: this server may hold {3 * PER_PROCESS} of its {LIMIT} for "
    "processes and open files (the rest are kept for connections and the server itself); "
    "wait for some to close"
)


def harness(config: Config = SMALL, limit: int | None = LIMIT) -> Harness:
    h = Harness(config, Host(descriptor_limit=limit))
    h.connect(1)
    h.handshake(1)
    return h


def fs(h: Harness, method: str, params: dict[str, object]) -> dict[str, object]:
    """The answer to an fs call, the adapter's part done at once when the core asks for it."""
    runs = len(h.of_type(RunFs))
    msg_id = h.request(1, method, params)
    for run in h.of_type(RunFs)[runs:]:
        h.feed(FsCompleted(op=run.op, result={}))
    response = h.response(1, msg_id)
    assert response is not None
    return response


def open_handle(h: Harness, handle: str) -> dict[str, object]:
    return fs(h, "fs/open", {"handleId": handle, "path": "file:///tmp/f"})


def test_the_budget_is_what_the_reserve_and_connections_leave() -> None:
    assert budget(SMALL, LIMIT) == 3 * PER_PROCESS
    assert budget(SMALL, None) is None
    assert budget(Config(), 8192) == 8192 - RESERVED - 256 - 64
    assert budget(Config(), 1024) == 1024 - RESERVED - 256 - 64
    # Too low a limit for the caps: shared out at a smaller scale, never to nothing.
    assert budget(Config(), 256) == 256 - 256 // 4 - (256 - 256 // 4) // 2
    assert budget(Config(), 10) == 4


def test_processes_take_at_most_their_share_and_get_it_back_as_they_close() -> None:
    h = harness()
    first = h.start(1, "a")
    h.start(1, "b")
    h.start(1, "c")
    assert refused(h, 1, "d") == OUT_OF_DESCRIPTORS
    finish(h, first)  # finalized: its descriptors are closed
    h.start(1, "d")
    h.assert_replays()


def test_open_fs_handles_count_with_processes() -> None:
    h = harness()
    h.start(1, "a")
    h.start(1, "b")
    for handle in ("h1", "h2", "h3", "h4"):
        assert "result" in open_handle(h, handle)
    assert open_handle(h, "h5")["error"] == {"code": -32600, "message": OUT_OF_DESCRIPTORS}
    assert refused(h, 1, "c") == OUT_OF_DESCRIPTORS
    assert "result" in fs(h, "fs/close", {"handleId": "h1"})
    assert "result" in open_handle(h, "h5")


def test_a_connection_gone_gives_its_handles_back() -> None:
    h = harness()
    for handle in ("h1", "h2", "h3", "h4", "h5"):
        open_handle(h, handle)
    h.start(1, "a")
    h.connect(2)
    h.handshake(2)
    assert refused(h, 2, "b") == OUT_OF_DESCRIPTORS
    h.disconnect(1)
    h.start(2, "b")


def test_without_a_known_limit_only_the_counts_apply() -> None:
    h = harness(limit=None)
    for name in "abcdefgh":
        h.start(1, name)


def test_connections_that_never_initialize_make_room_for_newcomers() -> None:
    """One client holding every place with connections that never send initialize: when the
    cap is reached, the oldest of those that had MAKE_ROOM_AFTER is closed for the newcomer; a
    connection that initialized, or a younger one, keeps its place."""
    h = harness(Config(max_connections=3))  # conn 1 initialized
    h.connect(2)
    h.advance(0.1)
    h.connect(3)
    closes = len(h.of_type(CloseConnection))
    h.advance(0.2)  # conn 2 is 0.3 s old, conn 3 0.2 s
    h.connect(4)
    h.connect(5)  # 2 is closing: 3 is the oldest staying, but too young
    evicted = [(a.conn, a.code) for a in h.of_type(CloseConnection)[closes:]]
    assert evicted == [(2, 1013), (5, 1013)]
    assert "sent no initialize" in h.of_type(CloseConnection)[closes].reason
    h.disconnect(2)
    h.disconnect(5)
    h.handshake(4)  # the newcomer got in
    h.advance(0.3)
    h.handshake(3)  # everyone initialized: the newcomer is the one refused
    h.connect(6)
    assert [(a.conn, a.code) for a in h.of_type(CloseConnection)[closes + 2:]] == [(6, 1013)]


def test_a_connection_past_the_cap_is_closed_at_once_and_its_place_reused() -> None:
    h = harness(Config(max_connections=2))
    h.connect(2)
    before = len(h.of_type(CloseConnection))
    h.connect(3)
    assert [(a.conn, a.code, a.reason) for a in h.of_type(CloseConnection)[before:]] == [
        (3, 1013, "too many connections: at most 2")]
    h.disconnect(3)
    h.disconnect(2)
    h.connect(4)
    h.handshake(4)
