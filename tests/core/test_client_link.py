"""`ClientCore` against a real `ServerCore`, linked in memory: no sockets, no processes.

Hypothesis drives output, frame delivery and dropped connections in any order; whatever happens,
the client must deliver every byte the process wrote, once and in order, then one exit and one
close. Frames in flight when a connection drops are lost, as on a real network.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from execproto import (
    ClientCore,
    Config,
    ConnectionClosed,
    ConnectionOpened,
    Event,
    MessageReceived,
    OutputReceived,
    PauseOutput,
    ProcessExited,
    ProcessSpawned,
    ResumeOutput,
    Send,
    ServerCore,
    Spawn,
    StreamClosed,
)
from execproto.client_events import ClientEvent, Closed, Exited, Output, OutputLost, Ready, Response


class Link:
    """One client, one server core, one process world, and the frames in flight between them."""

    def __init__(self, config: Config, acks: bool) -> None:
        self.server = ServerCore(config)
        self.client = ClientCore("link", client_name="link", acks=acks)
        self.now = 0.0
        self.conn = 0
        self.up = False
        self.to_server: list[bytes] = []
        self.to_client: list[bytes] = []
        self.events: list[ClientEvent] = []
        self.handle: int | None = None
        self.paused = False
        self.fed = {"stdout": bytearray(), "stderr": bytearray()}
        self.open_streams = {"stdout", "stderr"}
        self.exited = False

    # -- the network ------------------------------------------------------------------------------

    def connect(self) -> None:
        self.conn += 1
        self.up = True
        self._server(ConnectionOpened(conn=self.conn, session_id=f"session-{self.conn}"))
        self.client.connection_made()
        self._collect_client()

    def drop(self) -> None:
        """The connection breaks: whatever was in flight is gone."""
        self.up = False
        self.to_server.clear()
        self.to_client.clear()
        self._server(ConnectionClosed(conn=self.conn))
        self.events += self.client.connection_lost()

    def deliver(self, to_server: int, to_client: int) -> None:
        for _ in range(to_server):
            if self.to_server:
                self._server(MessageReceived(conn=self.conn, data=self.to_server.pop(0)))
        for _ in range(to_client):
            if self.to_client:
                self.events += self.client.receive(self.to_client.pop(0))
                self._collect_client()

    def settle(self) -> None:
        while self.up and (self.to_server or self.to_client):
            self.deliver(len(self.to_server), len(self.to_client))

    def _collect_client(self) -> None:
        self.to_server += self.client.data_to_send()

    def _server(self, event: Event) -> None:
        for action in self.server.handle(event, self.now):
            if isinstance(action, Send):
                assert action.conn == self.conn and self.up
                self.to_client.append(action.data)
            elif isinstance(action, Spawn):
                self.handle = action.proc
            elif isinstance(action, PauseOutput):
                self.paused = True
            elif isinstance(action, ResumeOutput):
                self.paused = False

    # -- the process ------------------------------------------------------------------------------

    def spawn(self) -> None:
        assert self.handle is not None
        self._server(ProcessSpawned(proc=self.handle, pid=100))

    def output(self, stream: str, data: bytes) -> None:
        assert self.handle is not None and stream in self.open_streams
        self.fed[stream] += data
        self._server(OutputReceived(proc=self.handle, stream=stream, data=data))

    def eof(self, stream: str) -> None:
        assert self.handle is not None
        self.open_streams.discard(stream)
        self._server(StreamClosed(proc=self.handle, stream=stream))

    def exit(self, returncode: int) -> None:
        assert self.handle is not None
        self.exited = True
        self._server(ProcessExited(proc=self.handle, returncode=returncode))


def started(config: Config, acks: bool = True) -> Link:
    link = Link(config, acks)
    link.connect()
    link.client.start("p", ["sh"], cwd="/tmp")
    link._collect_client()
    link.settle()
    link.spawn()
    link.settle()
    return link


def got(link: Link) -> dict[str, bytes]:
    streams: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
    seqs = [e.seq for e in link.events if isinstance(e, Output)]
    assert seqs == sorted(set(seqs)), "output delivered twice or out of order"
    for e in link.events:
        if isinstance(e, Output):
            streams[e.stream] += e.data
    return {k: bytes(v) for k, v in streams.items()}


step = st.one_of(
    st.tuples(st.just("output"), st.sampled_from(["stdout", "stderr"]), st.integers(1, 40)),
    st.tuples(st.just("deliver"), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just("drop")),
    st.tuples(st.just("connect")),
    st.tuples(st.just("eof"), st.sampled_from(["stdout", "stderr"])),
    st.tuples(st.just("exit"), st.sampled_from([0, 1, -9])),
)


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(step, max_size=60), retention=st.sampled_from([16, 64, 1 << 20]))
def test_every_byte_arrives_once_in_order_across_drops(steps: list[Any], retention: int) -> None:
    """With output acks, even frames lost in flight are read back: nothing is ever missing.
    (Without them a drop can lose what was in flight and no longer retained.)"""
    link = started(Config(retention_bytes=retention))
    counter = 0
    for kind, *args in steps:
        if kind == "output":
            stream, size = args
            # A paused process writes nothing: its pipe is full and nobody reads it.
            if stream in link.open_streams and not link.paused:
                counter += 1
                link.output(stream, (b"%d." % counter * size)[:size])
        elif kind == "deliver" and link.up:
            link.deliver(*args)
        elif kind == "drop" and link.up:
            link.drop()
        elif kind == "connect" and not link.up:
            link.connect()
        elif kind == "eof" and args[0] in link.open_streams:
            link.eof(args[0])
        elif kind == "exit" and not link.exited:
            link.exit(args[0])
    # Bring it home: reconnect, let the process finish, deliver everything.
    if not link.up:
        link.connect()
    link.settle()
    if not link.exited:
        link.exit(0)
    for stream in sorted(link.open_streams):
        link.eof(stream)
    link.settle()

    assert got(link) == {k: bytes(v) for k, v in link.fed.items()}
    assert not [e for e in link.events if isinstance(e, OutputLost)]
    exits = [e for e in link.events if isinstance(e, Exited)]
    closes = [e for e in link.events if isinstance(e, Closed)]
    assert len(exits) == 1 and len(closes) == 1
    assert link.events.index(closes[0]) == max(
        i for i, e in enumerate(link.events) if isinstance(e, (Output, Exited, Closed))
    )


def test_a_detached_flood_is_held_and_arrives_whole_after_the_resume() -> None:
    # Without acks: the server holds a detached session's output on its own.
    link = started(Config(retention_bytes=64), acks=False)
    link.output("stdout", b"before ")
    link.settle()
    link.drop()
    sizes = 0
    while not link.paused:  # the server pauses the process once the held log is full
        link.output("stdout", b"x" * 10)
        sizes += 10
    assert sizes == 60  # 7 + 60 bytes reach the 64-byte bound
    link.connect()
    link.settle()
    assert not link.paused  # read back in full: released
    link.output("stdout", b" after")
    link.exit(0)
    link.eof("stdout")
    link.eof("stderr")
    link.settle()
    assert got(link)["stdout"] == b"before " + b"x" * sizes + b" after"
    ready = [e for e in link.events if isinstance(e, Ready)]
    assert [r.resumed for r in ready] == [False, True]
    assert any(isinstance(e, Response) and e.method == "process/start" for e in link.events)
