"""The part of `ClientCore` that follows processes: cursors, gaps, catch-up reads and acks.

Each process has a cursor, the last seq delivered. Events that arrive ahead of a gap wait in
``pending``; a gap is filled by a ``process/read`` from the cursor. With a server that takes acks,
released output is acknowledged every quarter window (see docs/protocol.md): output is released
when it is delivered, or, with ``release_on_delivery=False``, when the adapter says so with
`ClientCore.release` (its reader has taken it, or it has room to hold it). The server pauses a
process whose output is not acknowledged, so that is how a reader that stops reading pauses its
own process and nothing else.
"""

from __future__ import annotations

import enum
import json
from collections import deque
from typing import Any

import attrs

from ..client_events import (
    ClientEvent,
    Closed,
    Exited,
    HttpBodyDelta,
    Output,
    OutputLost,
    ServerMisbehaved,
)
from . import _client_frames as frames
from ._client_calls import Ack, Call, CatchUp

_dumps = json.JSONEncoder(separators=(",", ":")).encode


class ClientState(enum.Enum):
    """Where a `ClientCore` is with its connection and session (its ``state``)."""

    DISCONNECTED = "disconnected"  # no connection; calls wait for the next one
    HANDSHAKING = "handshaking"  # initialize sent
    READY = "ready"
    LOST = "lost"  # the session is gone for good
    ERROR = "error"  # it failed on a bug of its own: every call but connection_lost is refused


# A process's events as the client holds them until their turn (keyed by seq, in `_Track`),
# and turns them into `Output`, `Exited` and `Closed` (in `ProcessTracking._deliver`).


@attrs.frozen
class _Chunk:
    """A chunk of output."""

    stream: str
    data: bytes


@attrs.frozen
class _Exit:
    """The exit."""

    exit_code: int | None


@attrs.frozen
class _Close:
    """The close: the process's last event."""

    failure: str | None  # why the server gave up on the process, if it did


_Item = _Chunk | _Exit | _Close


class _Track:
    """One process as this client has seen it."""

    __slots__ = ("cursor", "pending", "started", "exited", "exit_code", "reading", "unacked",
                 "released", "unreleased")

    def __init__(self, started: bool) -> None:
        self.cursor = 0  # every event up to this seq has been delivered
        self.pending: dict[int, _Item] = {}  # events that arrived ahead of a gap
        self.started = started  # the server answered its start: it can be read back
        self.exited = False
        self.exit_code: int | None = None
        self.reading = False  # a catch-up read is in flight
        self.unacked = [0, 0]  # bytes and chunks released since the last ack
        self.released = 0  # the newest seq the server may drop (what the acks say)
        # Output delivered but not yet released, (seq, size), when the adapter releases it.
        self.unreleased: deque[tuple[int, int]] = deque()


class ProcessTracking:
    """Mixed into `ClientCore`, which sets these fields up."""

    state: ClientState
    _tracks: dict[str, _Track]
    _ack_window: tuple[int, int] | None  # (bytes, chunks) between acks, when the server takes them
    release_on_delivery: bool
    _next_id: int
    _inflight: dict[int, Call]
    _outbox: list[bytes]

    def _check_sound(self) -> None: ...

    def _fail(self, error: BaseException) -> None: ...

    # -- process events -------------------------------------------------------------------------

    def _on_notification(self, method: str, params: Any, events: list[ClientEvent]) -> None:
        if method not in frames.NOTIFICATIONS:
            events.append(ServerMisbehaved(detail=f"unknown notification {method}"))
            return
        params = frames.notification(method, params)
        if method == "http/request/bodyDelta":
            events.append(
                HttpBodyDelta(
                    request_id=params["requestId"],
                    seq=params["seq"],
                    data=frames.decoded(params.get("deltaBase64") or "", "deltaBase64"),
                    done=params["done"],
                    error=params.get("error"),
                )
            )
            return
        item: _Item
        if method == "process/output":
            item = _Chunk(params["stream"], frames.decoded(params["chunk"], "chunk"))
        elif method == "process/exited":
            item = _Exit(params["exitCode"])
        else:
            item = _Close(None)
        process_id, seq = params["processId"], params["seq"]
        track = self._tracks.get(process_id)
        if track is None:
            return  # closed already (this is a late repeat), or never this client's
        if seq > track.cursor:
            track.pending[seq] = item
            self._advance(process_id, track, events)

    def _advance(self, process_id: str, track: _Track, events: list[ClientEvent]) -> None:
        """Deliver what is next in seq order; read back across a gap."""
        pending = track.pending
        while (item := pending.pop(track.cursor + 1, None)) is not None:
            track.cursor += 1
            self._deliver(process_id, track, item, events)
            if process_id not in self._tracks:
                return  # closed
        if pending and not track.reading and self.state is ClientState.READY:
            self._catch_up(process_id, track)

    def _catch_up(self, process_id: str, track: _Track) -> None:
        track.reading = True
        self._send(CatchUp(self._call_id(), process_id, track.cursor))

    def _read_dropped(self, process_id: str) -> None:
        """A catch-up read's connection closed before its answer."""
        track = self._tracks.get(process_id)
        if track is not None:
            track.reading = False  # read again after the resume

    def _on_catch_up(
        self, process_id: str, message: dict[str, Any], events: list[ClientEvent]
    ) -> None:
        track = self._tracks.get(process_id)
        if track is None:
            return  # closed meanwhile, by notifications that arrived before this answer
        track.reading = False  # a malformed answer too: the next event reads again
        if "error" in message:
            # The server has forgotten the process: it closed while this client was away, and
            # its entry outlived its lifetime. Whatever it did since the cursor is gone.
            gone = frames.error(message)["message"]
            why = f"closed while the client was away and forgotten: {gone}"
            self._deliver(process_id, track, _Close(why), events)
            return
        result = frames.read(message)
        next_seq: int = result["nextSeq"]
        items = dict(track.pending)
        for chunk in result["chunks"]:
            if chunk["seq"] > track.cursor:
                data = frames.decoded(chunk["chunk"], "chunk")
                items.setdefault(chunk["seq"], _Chunk(chunk["stream"], data))
        # The exit and the close take seqs but are not chunks: place them in the seqs the
        # read skipped. Closed is always last; the exit is the newest other gap.
        free = _free_seqs(items, track.cursor, next_seq)
        if result["closed"] and free and free[0] == next_seq - 1:
            items[free.pop(0)] = _Close(result.get("failure"))
        late_exit: _Exit | None = None
        if result["exited"] and not track.exited and not _has_exit(items):
            if free:
                items[free.pop(0)] = _Exit(result["exitCode"])
            else:  # no seq left for it (not from a sound server): deliver it after the rest
                late_exit = _Exit(result["exitCode"])
        first = result.get("firstRetainedSeq")
        if result.get("droppedBytes") and isinstance(first, int) and first > track.cursor + 1:
            if any(track.cursor < seq < first for seq in _free_seqs(items, track.cursor, first)):
                events.append(
                    OutputLost(process_id=process_id, after_seq=track.cursor, before_seq=first)
                )
        track.pending = {seq: item for seq, item in items.items() if seq >= next_seq}
        for seq in sorted(s for s in items if s < next_seq):
            track.cursor = seq
            self._deliver(process_id, track, items[seq], events)
            if process_id not in self._tracks:
                return
        if late_exit is not None:
            self._deliver(process_id, track, late_exit, events)
        track.cursor = max(track.cursor, next_seq - 1)
        self._advance(process_id, track, events)

    def _deliver(
        self, process_id: str, track: _Track, item: _Item, events: list[ClientEvent]
    ) -> None:
        if isinstance(item, _Chunk):
            events.append(Output(process_id=process_id, seq=track.cursor, stream=item.stream,
                                 data=item.data))
            if self._ack_window is None:
                pass
            elif self.release_on_delivery:
                track.released = track.cursor
                self._released(process_id, track, len(item.data), 1)
            else:
                track.unreleased.append((track.cursor, len(item.data)))
        elif isinstance(item, _Exit):
            if not track.exited:
                track.exited, track.exit_code = True, item.exit_code
                events.append(Exited(process_id=process_id, exit_code=item.exit_code))
        else:
            if not track.exited:  # never seen: the close implies it
                events.append(Exited(process_id=process_id, exit_code=track.exit_code))
            del self._tracks[process_id]
            events.append(Closed(process_id=process_id, exit_code=track.exit_code,
                                 failure=item.failure))

    def release(self, process_id: str, seq: int) -> None:
        """The adapter has taken output up to ``seq`` of ``process_id`` off the server's hands:
        acknowledge it (in quarter windows), so the server may drop it and go on. Only with
        ``release_on_delivery=False``; harmless for a closed process or a server without acks.
        """
        self._check_sound()
        track = self._tracks.get(process_id)
        if track is None:
            return
        try:
            unreleased, size, count = track.unreleased, 0, 0
            while unreleased and unreleased[0][0] <= seq:
                track.released, chunk = unreleased.popleft()
                size, count = size + chunk, count + 1
            if count:
                self._released(process_id, track, size, count)
        except BaseException as exc:
            self._fail(exc)
            raise

    def _released(self, process_id: str, track: _Track, size: int, count: int) -> None:
        """``count`` more chunks of ``size`` bytes are released, up to ``track.released``."""
        assert self._ack_window is not None
        track.unacked[0] += size
        track.unacked[1] += count
        bytes_due, chunks_due = self._ack_window
        if track.unacked[0] >= bytes_due or track.unacked[1] >= chunks_due:
            self._ack(process_id, track)

    def _ack(self, process_id: str, track: _Track) -> None:
        """Tell the server this client has released everything up to ``track.released``, so it
        may drop it."""
        track.unacked = [0, 0]
        if self.state is not ClientState.READY:
            return  # the resume acks again
        self._send(Ack(self._call_id(), process_id, track.released))

    # -- sending --------------------------------------------------------------------------------

    def _call_id(self) -> int:
        call_id = self._next_id
        self._next_id += 1
        return call_id

    def _send(self, call: Call) -> None:
        self._inflight[call.id] = call
        message = {"jsonrpc": "2.0", "id": call.id, "method": call.method, "params": call.params}
        self._outbox.append(_dumps(message).encode("utf-8", "surrogateescape"))


def _free_seqs(items: dict[int, _Item], after: int, before: int) -> list[int]:
    """Seqs in (after, before) not in ``items``, newest first. Walks down from ``before`` past
    at most len(items) taken seqs, so a long run of dropped output costs nothing."""
    free: list[int] = []
    seq = before - 1
    while seq > after and len(free) < 2:
        if seq not in items:
            free.append(seq)
        seq -= 1
    return free


def _has_exit(items: dict[int, _Item]) -> bool:
    return any(isinstance(item, _Exit) for item in items.values())
