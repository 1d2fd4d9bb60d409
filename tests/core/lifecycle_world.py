"""The world the process lifecycle tests run in, and their helpers.

A `World` is a `Harness` that remembers every step. Every world a test builds through the
`make_world` or `w` fixture is checked when the test ends (`World.check`): Finalize at most once
per Spawn and only when it may be, never a Signal before the spawn or after the exit, notification
seqs contiguous from 1 with exited once and closed last, every request answered at most once, and
the recorded trace replays identically. The lifecycle rules checked are those of
`execproto._lifecycle`; the tests are in test_process_start.py, test_process_phases.py,
test_reads.py, test_retention.py, test_write.py, test_terminate.py, test_process_sessions.py and
test_lifecycle_checker.py.

Scripted events and explicit time only: no subprocess, no socket.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from execproto import (
    Action,
    CloseStdin,
    Config,
    Event,
    Finalize,
    Host,
    PauseOutput,
    ProcessExited,
    ProcessSpawned,
    ResizeTerminal,
    ResumeOutput,
    Send,
    Signal,
    Spawn,
    SpawnFailed,
    SpawnSpec,
    StreamClosed,
    WriteStdin,
)

from .harness import CWD, Harness, b64, unb64

# -- the messages and codes, exactly as the core produces them now ------------------------------
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
ALREADY_EXISTS = "process {} already exists"
UNKNOWN_PROCESS = "unknown process id {}"
ABANDONED = "output pipes abandoned: a descendant kept them open after the process was terminated"
BAD_SIGNAL = "unknown variant `{}`, expected `interrupt`"
SPAWN_ERROR = "No such file or directory (os error 2)"
SPAWN_DENIED = "Permission denied (os error 13)"

PIPES = ("stdout", "stderr")
EPS = 1 / 64  # a binary fraction, so deadlines compare exactly


# -- the world: a harness that remembers every step and checks the lifecycle rules --------------


class World(Harness):
    def __init__(self, config: Config | None = None, host: Host | None = None) -> None:
        super().__init__(config, host)
        self.steps: list[tuple[Event, list[Action]]] = []
        # Notifications of one process are gapless only while its session stays attached.
        self.gapless = True

    def feed(self, event: Event) -> list[Action]:
        actions = super().feed(event)
        self.steps.append((event, actions))
        return actions

    def call_now(self, conn: int, method: str, params: Any) -> dict[str, Any]:
        """Like `call`, but decodes only this request's own actions (bulk tests stay linear)."""
        before = len(self.actions)
        msg_id = self.request(conn, method, params)
        found = [
            message
            for action in self.actions[before:]
            if isinstance(action, Send) and action.conn == conn
            for message in [json.loads(action.data)]
            if message.get("id") == msg_id and "method" not in message
        ]
        assert len(found) == 1, f"{method} answered {len(found)} times at once: {found}"
        return found[0]  # type: ignore[no-any-return]

    def check(self) -> None:
        check_lifecycle(self.steps)
        conns = {a.conn for a in self.actions if isinstance(a, Send)}
        for conn in conns:
            ids = [m["id"] for m in self.messages(conn) if "method" not in m]
            assert len(ids) == len(set(ids)), f"a request answered twice on {conn}: {ids}"
            if self.gapless:
                check_notifications(self.notifications(conn))
        self.assert_replays()


def check_lifecycle(steps: list[tuple[Event, list[Action]]]) -> None:
    """The lifecycle rules of `execproto._lifecycle`, checked over the whole action list."""
    specs: dict[int, SpawnSpec] = {}
    spawned: set[int] = set()
    failed: set[int] = set()
    exited: set[int] = set()
    eof: dict[int, set[str]] = {}
    stdin_closed: set[int] = set()
    finalized: dict[int, Finalize] = {}
    for event, actions in steps:
        proc = getattr(event, "proc", None)
        if proc is not None and proc not in finalized:  # events for finalized procs are dropped
            if isinstance(event, ProcessSpawned):
                spawned.add(proc)
            elif isinstance(event, SpawnFailed):
                failed.add(proc)
            elif isinstance(event, ProcessExited):
                exited.add(proc)
            elif isinstance(event, StreamClosed):
                eof.setdefault(proc, set()).add(event.stream)
        for action in actions:
            target = getattr(action, "proc", None)
            if isinstance(action, Spawn):
                assert action.proc not in specs, f"proc {action.proc} spawned twice"
                specs[action.proc] = action.spec
            elif isinstance(action, (Signal, ResizeTerminal)):
                assert target in spawned, f"{action} before the spawn was reported"
                assert target not in exited, f"{action} after ProcessExited"
                assert target not in finalized, f"{action} after Finalize"
                if isinstance(action, ResizeTerminal):
                    assert specs[action.proc].tty, f"{action} of a process without a terminal"
            elif isinstance(action, (WriteStdin, CloseStdin)):
                assert target in spawned and target not in exited and target not in finalized
                assert target not in stdin_closed, f"{action} after CloseStdin"
                if isinstance(action, CloseStdin):
                    stdin_closed.add(action.proc)
            elif isinstance(action, Finalize):
                assert action.proc in specs, f"{action} without a Spawn"
                assert action.proc not in finalized, f"{action} twice"
                finalized[action.proc] = action
                if action.status == "failed":
                    assert action.proc in failed and action.proc not in spawned
                    assert action.exit_code is None and action.timed_out is False
                else:
                    assert action.status == "completed"
                    assert action.proc in spawned and action.proc in exited
                    streams = {"pty"} if specs[action.proc].tty else set(PIPES)
                    if not streams <= eof.get(action.proc, set()):
                        assert action.timed_out, f"{action} with streams still open"
            elif isinstance(action, (PauseOutput, ResumeOutput)):
                assert target in specs and target not in finalized
    # ... and Finalize is not missing: a failed spawn, or an exit with every stream at EOF.
    for proc, spec in specs.items():
        streams = {"pty"} if spec.tty else set(PIPES)
        if proc in failed or (proc in exited and streams <= eof.get(proc, set())):
            assert proc in finalized, f"proc {proc} is done but was never finalized"


def check_notifications(notifications: list[dict[str, Any]]) -> None:
    """Per processId: seqs 1, 2, 3...; one exited; closed last; a reused id starts again at 1."""
    state: dict[str, tuple[int, bool, bool]] = {}
    for n in notifications:
        method, params = n["method"], n["params"]
        if not method.startswith("process/"):
            continue
        pid = params["processId"]
        expected, exited, closed = state.get(pid, (1, False, False))
        if closed:
            expected, exited, closed = 1, False, False
        assert (
            params["seq"] == expected
        ), f"{pid}: {method} seq {params['seq']}, expected {expected}"
        if method == "process/exited":
            assert not exited, f"{pid}: exited twice"
            assert isinstance(params["exitCode"], int) and params["sandboxDenied"] is False
            exited = True
        elif method == "process/closed":
            assert exited, f"{pid}: closed before exited"
            closed = True
        else:
            assert method == "process/output" and params["stream"] in ("stdout", "stderr", "pty")
        state[pid] = (expected + 1, exited, closed)


# -- fixtures and helpers --------------------------------------------------------------------------


@pytest.fixture(name="make_world")
def make_world_fixture() -> Iterator[Callable[..., World]]:
    """Build handshaken worlds (conn 1); each is checked when the test passes."""
    worlds: list[World] = []

    def make(config: Config | None = None, host: Host | None = None) -> World:
        w = World(config, host)
        w.connect(1)
        w.handshake(1)
        worlds.append(w)
        return w

    yield make
    for w in worlds:
        w.check()


def unchecked_world(config: Config | None = None, host: Host | None = None) -> World:
    """A handshaken world for xfail tests, which call `World.check` themselves at their end."""
    w = World(config, host)
    w.connect(1)
    w.handshake(1)
    return w


@pytest.fixture(name="w")
def w_fixture(make_world: Callable[..., World]) -> World:
    return make_world()


def start_params(process_id: str = "p", **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "processId": process_id,
        "argv": ["sh"],
        "cwd": CWD,
        "env": {},
        "tty": False,
    }
    params.update(extra)
    return params


def begin(w: World, process_id: str = "p", conn: int = 1, **extra: Any) -> tuple[int, Spawn]:
    """`process/start` up to the Spawn action (not yet reported spawned)."""
    before = len(w.actions)
    msg_id = w.request(conn, "process/start", start_params(process_id, **extra))
    spawns = [a for a in w.actions[before:] if isinstance(a, Spawn)]
    assert len(spawns) == 1, w.actions[before:]
    assert w.response(conn, msg_id) is None, "start answered before the spawn was reported"
    return msg_id, spawns[0]


def spawned(w: World, proc: int) -> list[Action]:
    return w.feed(ProcessSpawned(proc=proc, pid=1000 + proc))


def run(w: World, process_id: str = "p", **extra: Any) -> int:
    """Start a process through to its spawn; return its handle."""
    return w.start(1, process_id, **extra)


def close_all(w: World, proc: int, streams: tuple[str, ...] = PIPES) -> None:
    for stream in streams:
        w.eof(proc, stream)


def finish(w: World, proc: int, returncode: int = 0, streams: tuple[str, ...] = PIPES) -> None:
    """Exit, then EOF on every stream: the process closes."""
    w.exit(proc, returncode)
    close_all(w, proc, streams)


def read(w: World, process_id: str = "p", conn: int = 1, **params: Any) -> dict[str, Any]:
    """A `process/read` answered at once; its result."""
    response = w.call_now(conn, "process/read", {"processId": process_id, **params})
    assert "result" in response, response
    return response["result"]  # type: ignore[no-any-return]


def park(w: World, process_id: str = "p", conn: int = 1, **params: Any) -> int:
    """A `process/read` that must wait; its request id."""
    msg_id = w.request(conn, "process/read", {"processId": process_id, **params})
    assert w.response(conn, msg_id) is None, "the read was answered at once"
    return msg_id


def result_of(w: World, msg_id: int, conn: int = 1) -> dict[str, Any]:
    response = w.response(conn, msg_id)
    assert response is not None, "not answered"
    assert "result" in response, response
    return response["result"]  # type: ignore[no-any-return]


def error_of(w: World, msg_id: int, conn: int = 1) -> dict[str, Any]:
    response = w.response(conn, msg_id)
    assert response is not None, "not answered"
    assert "error" in response, response
    return response["error"]  # type: ignore[no-any-return]


def chunks(result: dict[str, Any]) -> list[tuple[int, str, bytes]]:
    return [(c["seq"], c["stream"], unb64(c["chunk"])) for c in result["chunks"]]


def expected_read(**fields: Any) -> dict[str, Any]:
    """A whole read result: the defaults of a running process with no output."""
    result: dict[str, Any] = {
        "chunks": [],
        "nextSeq": 1,
        "exited": False,
        "exitCode": None,
        "closed": False,
        "failure": None,
        "sandboxDenied": False,
        "firstRetainedSeq": 1,
        "droppedBytes": 0,
    }
    result.update(fields)
    return result


def wire_chunk(seq: int, stream: str, data: bytes) -> dict[str, Any]:
    return {"seq": seq, "stream": stream, "chunk": b64(data)}


def events(w: World, process_id: str = "p", conn: int = 1) -> list[tuple[str, int]]:
    return [
        (n["method"].removeprefix("process/"), n["params"]["seq"])
        for n in w.notifications(conn)
        if n["method"].startswith("process/") and n["params"]["processId"] == process_id
    ]


def signals(w: World, proc: int | None = None) -> list[str]:
    return [a.signal for a in w.of_type(Signal) if proc is None or a.proc == proc]


def finalizes(w: World, proc: int) -> list[Finalize]:
    return [a for a in w.of_type(Finalize) if a.proc == proc]


def write(w: World, process_id: str, data: bytes, write_id: str, **extra: Any) -> str:
    params = {"processId": process_id, "chunk": b64(data), "writeId": write_id, **extra}
    response = w.call_now(1, "process/write", params)
    assert "result" in response, response
    return response["result"]["status"]  # type: ignore[no-any-return]


def written(w: World, proc: int) -> list[Action]:
    return [a for a in w.actions if isinstance(a, (WriteStdin, CloseStdin)) and a.proc == proc]


def terminate(w: World, process_id: str = "p") -> dict[str, Any]:
    response = w.call_now(1, "process/terminate", {"processId": process_id})
    assert "result" in response, response
    return response["result"]  # type: ignore[no-any-return]


def interrupt(w: World, process_id: str = "p") -> dict[str, Any]:
    response = w.call_now(1, "process/signal", {"processId": process_id, "signal": "interrupt"})
    assert "result" in response, response
    return response["result"]  # type: ignore[no-any-return]
