"""Fuzz `ClientCore`: a hostile or broken server, dropped connections, calls at any time.

Whatever the server sends, `receive` and `connection_lost` never raise, and what the client
delivers stays sane: per process, output seqs strictly increase, at most one exit and one close,
nothing after the close. Runs with the core targets (same budget, batches and atheris entry).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from fuzz_core import TARGETS, fuzz
from hypothesis import strategies as st

from execproto import ClientCore, ClientState, LocalProtocolError
from execproto.client_events import ClientEvent, Closed, Exited, Output

PIDS = ["p", "q", "r"]

_b64 = st.binary(max_size=6).map(lambda b: base64.b64encode(b).decode())
_seq = st.integers(-1, 12)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)

_chunk = st.fixed_dictionaries({"seq": _seq, "stream": st.sampled_from(["stdout", "pty"]),
                                "chunk": _b64})
_read_result = st.fixed_dictionaries({
    "chunks": st.lists(_chunk, max_size=4),
    "nextSeq": _seq,
    "exited": st.booleans(),
    "exitCode": st.none() | st.integers(0, 255),
    "closed": st.booleans(),
    "failure": st.none() | st.just("why"),
}, optional={"firstRetainedSeq": _seq, "droppedBytes": st.integers(0, 9)})
_result = (
    _read_result
    | st.fixed_dictionaries({"sessionId": st.sampled_from(["s1", "s2"])},
                            optional={"outputAcks": st.fixed_dictionaries(
                                {"bytes": st.integers(0, 8), "chunks": st.integers(0, 3)})})
    | st.fixed_dictionaries({"status": st.sampled_from(["accepted", "stdinClosed"])})
    | _json
)
_error = st.fixed_dictionaries({
    "code": st.sampled_from([-32600, -32010, -32603, 1]),
    "message": st.sampled_from(["unknown session id s1", "process p already exists", "x"]),
}, optional={"data": _json})

_note = st.tuples(
    st.sampled_from(["process/output", "process/exited", "process/closed", "http/request/bodyDelta",
                     "other"]),
    st.fixed_dictionaries({"processId": st.sampled_from(PIDS), "seq": _seq}, optional={
        "stream": st.just("stdout"), "chunk": _b64 | _json, "exitCode": st.integers(0, 3),
        "requestId": st.just("r"), "deltaBase64": _b64, "done": st.booleans(),
    }),
)

# A frame with fields of any type where the core expects one: a method that is a list, an id
# that is true or 1.0. Whatever they hold, the core reports them; it must not stop.
_odd_frame = st.fixed_dictionaries({"jsonrpc": st.just("2.0")}, optional={
    "id": st.sampled_from([True, False, 1.0, -1.0, "1", None]) | _json,
    "method": st.sampled_from(["process/output", "process/closed"]) | _json,
    "params": _json, "result": _result, "error": _error | _json,
})

STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("answer"), st.integers(0, 30), _result),
        st.tuples(st.just("error"), st.integers(0, 30), _error),
        st.tuples(st.just("note"), _note),
        st.tuples(st.just("raw"), st.text(max_size=12) | _json.map(json.dumps)
                  | _odd_frame.map(json.dumps)),
        st.tuples(st.just("lost")),
        st.tuples(st.just("made")),
        st.tuples(st.just("call"), st.sampled_from(["start", "write", "signal", "read", "info",
                                                    "release"]),
                  st.sampled_from(PIDS)),
    ),
    max_size=40,
)


def server_frames(steps: list[tuple[Any, ...]], release_on_delivery: bool) -> None:
    core = ClientCore("fz", client_name="fuzz", release_on_delivery=release_on_delivery)
    core.connection_made()
    sent: list[int] = []
    seen: dict[str, list[ClientEvent]] = {}

    def drain() -> None:
        for frame in core.data_to_send():
            message = json.loads(frame)
            if "id" in message:
                sent.append(message["id"])

    def take(events: list[ClientEvent]) -> None:
        for event in events:
            if isinstance(event, (Output, Exited, Closed)):
                seen.setdefault(event.process_id, []).append(event)

    drain()
    for kind, *args in steps:
        if kind in ("answer", "error"):
            k, body = args
            msg_id = sent[k % len(sent)] if sent and k < 25 else 1000 + k
            key = "result" if kind == "answer" else "error"
            take(core.receive(json.dumps({"jsonrpc": "2.0", "id": msg_id, key: body})))
        elif kind == "note":
            method, params = args[0]
            take(core.receive(json.dumps({"jsonrpc": "2.0", "method": method, "params": params})))
        elif kind == "raw":
            take(core.receive(args[0]))
        elif kind == "lost":
            core.connection_lost()
        elif kind == "made":
            if core.state is ClientState.DISCONNECTED:
                core.connection_made()
        elif core.state is not ClientState.LOST:
            what, pid = args
            try:
                if what == "start":
                    core.start(pid, ["sh"], cwd="/tmp")
                    seen.pop(pid, None)  # a new process under a freed id
                elif what == "write":
                    core.write(pid, b"x")
                elif what == "signal":
                    core.interrupt(pid)
                elif what == "read":
                    core.request("process/read", {"processId": pid})
                elif what == "release":  # all it has delivered, as a reader that caught up
                    delivered = [e.seq for e in seen.get(pid, []) if isinstance(e, Output)]
                    core.release(pid, max(delivered, default=0))
                else:
                    core.request("environment/info")
            except LocalProtocolError:
                pass  # the id is still in use: the caller's mistake, reported as such
        drain()

    for pid, events in seen.items():
        seqs = [e.seq for e in events if isinstance(e, Output)]
        assert seqs == sorted(set(seqs)), (pid, seqs)
        assert sum(isinstance(e, Exited) for e in events) <= 1, (pid, events)
        closes = [i for i, e in enumerate(events) if isinstance(e, Closed)]
        assert len(closes) <= 1 and (not closes or closes[0] == len(events) - 1), (pid, events)


TARGETS["server_frames"] = (server_frames, {"steps": STEPS, "release_on_delivery": st.booleans()})


def test_server_frames() -> None:
    fuzz("server_frames")
