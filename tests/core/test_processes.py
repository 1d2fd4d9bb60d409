"""The process lifecycle through `ServerCore`: start, events and seqs, read, retention, write,
signal, terminate. Scripted events and explicit time only: no subprocess, no socket.

Every world a test builds is checked when the test ends (`World.check`): Finalize at most once per
Spawn and only when it may be, never a Signal before the spawn or after the exit, notification seqs
contiguous from 1 with exited once and closed last, every request answered at most once, and the
recorded trace replays identically.
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
    ConnectionOpened,
    Event,
    Finalize,
    Host,
    LocalProtocolError,
    MessageReceived,
    OutputReceived,
    PauseOutput,
    ProcessExited,
    ProcessSpawned,
    ResumeOutput,
    Send,
    SendBlocked,
    SendDrained,
    ServerCore,
    Signal,
    Spawn,
    SpawnFailed,
    SpawnSpec,
    StreamClosed,
    Tick,
    WriteStdin,
)

from execproto._output import Chunk, OutputLog
from execproto._process import Process
from execproto._session import Session

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
    """The rules of DESIGN.md's lifecycle table, checked over the whole action list."""
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
            elif isinstance(action, Signal):
                assert target in spawned, f"{action} before the spawn was reported"
                assert target not in exited, f"{action} after ProcessExited"
                assert target not in finalized, f"{action} after Finalize"
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


@pytest.fixture
def make_world() -> Iterator[Callable[..., World]]:
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


@pytest.fixture
def w(make_world: Callable[..., World]) -> World:
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


# =================================================================================================
# start
# =================================================================================================


def test_start_spawns_the_requested_spec_and_answers_only_after_the_spawn(w: World) -> None:
    msg_id, spawn = begin(
        w,
        "build",
        argv=["make", "-j", "4", "all"],
        arg0="gmake",
        cwd="file:///tmp/a%20b/c",
        env={"A": "1", "EMPTY": ""},
        tty=False,
        pipeStdin=True,
    )
    assert spawn.spec == SpawnSpec(
        argv=("make", "-j", "4", "all"),
        arg0="gmake",
        cwd="/tmp/a b/c",
        env=(("A", "1"), ("EMPTY", "")),
        tty=False,
        pipe_stdin=True,
        session_id="session-1",
        process_id="build",
    )
    assert isinstance(spawn.spec.argv, tuple)
    w.advance(60)  # no deadline answers a start
    assert w.response(1, msg_id) is None
    actions = spawned(w, spawn.proc)
    assert result_of(w, msg_id) == {"processId": "build", "sandboxType": "none"}
    assert [type(a) for a in actions] == [Send]


def test_start_defaults_and_localhost_uri(w: World) -> None:
    _, spawn = begin(w, "p", argv=["true"], cwd="file://localhost/srv/x")
    assert spawn.spec == SpawnSpec(
        argv=("true",),
        arg0=None,
        cwd="/srv/x",
        env=(),
        tty=False,
        pipe_stdin=False,
        session_id="session-1",
        process_id="p",
    )


def test_start_tty(w: World) -> None:
    _, spawn = begin(w, "t", tty=True)
    assert spawn.spec.tty is True and spawn.spec.pipe_stdin is False


def test_handles_are_unique_and_session_ids_are_carried(make_world: Callable[..., World]) -> None:
    w = make_world()
    w.connect(2)
    w.handshake(2)
    _, a = begin(w, "p", conn=1)
    _, b = begin(w, "p", conn=2)  # processIds are per session
    assert a.proc != b.proc
    assert (a.spec.session_id, b.spec.session_id) == ("session-1", "session-2")


# Sorted by name: a trace header stores the host env sorted, so an unsorted one does not replay
# (see test_trace_of_an_env_policy_start_replays_with_an_unsorted_host_env).
SERVER_ENV = dict(
    sorted(
        {
            "PATH": "/usr/bin",
            "HOME": "/home/u",
            "LANG": "C.UTF-8",
            "OPENAI_API_KEY": "k",
            "db_secret": "s",
            "GH_TOKEN": "t",
            "EDITOR": "vi",
            "XDG_DIR": "/x",
        }.items()
    )
)
SAFE_SERVER_ENV = {
    "PATH": "/usr/bin",
    "HOME": "/home/u",
    "LANG": "C.UTF-8",
    "EDITOR": "vi",
    "XDG_DIR": "/x",
}


def policy(inherit: str, **fields: Any) -> dict[str, Any]:
    """A whole envPolicy object: every field is required on the wire."""
    result: dict[str, Any] = {
        "inherit": inherit,
        "ignoreDefaultExcludes": False,
        "exclude": [],
        "set": {},
        "includeOnly": [],
    }
    result.update(fields)
    return result


@pytest.mark.parametrize(
    ("env_policy", "env", "expected"),
    [
        pytest.param(None, {"A": "1"}, {"A": "1"}, id="no-policy-exactly-env"),
        pytest.param(None, {}, {}, id="no-policy-empty"),
        pytest.param(policy("all"), {"A": "1"}, {**SAFE_SERVER_ENV, "A": "1"}, id="all"),
        pytest.param(
            policy("core"),
            {},
            {"PATH": "/usr/bin", "HOME": "/home/u", "LANG": "C.UTF-8"},
            id="core",
        ),
        pytest.param(policy("none"), {"A": "1"}, {"A": "1"}, id="none"),
        pytest.param(policy("all", ignoreDefaultExcludes=True), {}, SERVER_ENV, id="keep-secrets"),
        pytest.param(
            policy("all", exclude=["xdg_*", "LANG"]),
            {},
            {"PATH": "/usr/bin", "HOME": "/home/u", "EDITOR": "vi"},
            id="exclude-globs-any-case",
        ),
        pytest.param(
            policy("none", set={"X": "1", "API_KEY": "set"}),
            {},
            {"X": "1", "API_KEY": "set"},
            id="set-after-excludes",
        ),
        pytest.param(
            policy("all", set={"X": "1"}, includeOnly=["PATH", "h*"]),
            {},
            {"PATH": "/usr/bin", "HOME": "/home/u"},
            id="include-only-after-set",
        ),
        pytest.param(
            policy("all", set={"PATH": "/set"}, includeOnly=["PATH"]),
            {"PATH": "/env", "GH_TOKEN": "mine"},
            {"PATH": "/env", "GH_TOKEN": "mine"},
            id="env-overlays-last",
        ),
    ],
)
def test_start_environment(
    make_world: Callable[..., World],
    env_policy: dict[str, Any] | None,
    env: dict[str, str],
    expected: dict[str, str],
) -> None:
    w = make_world(host=Host(env=dict(SERVER_ENV)))
    extra: dict[str, Any] = {"env": env}
    if env_policy is not None:
        extra["envPolicy"] = env_policy
    _, spawn = begin(w, **extra)
    assert dict(spawn.spec.env) == expected
    assert len(spawn.spec.env) == len(expected)  # no name twice


def test_trace_of_an_env_policy_start_replays_with_an_unsorted_host_env() -> None:
    w = unchecked_world(host=Host(env={"B": "1", "A": "2"}))
    _, spawn = begin(w, envPolicy=policy("all"))
    assert dict(spawn.spec.env) == {"A": "2", "B": "1"}
    w.assert_replays()


def test_duplicate_process_id_while_starting(w: World) -> None:
    first, spawn = begin(w)
    before = len(w.of_type(Spawn))
    dup = w.request(1, "process/start", start_params("p", argv=["other"]))
    assert error_of(w, dup) == {"code": INVALID_REQUEST, "message": ALREADY_EXISTS.format("p")}
    assert len(w.of_type(Spawn)) == before  # no second Spawn
    spawned(w, spawn.proc)
    assert result_of(w, first) == {"processId": "p", "sandboxType": "none"}


def test_duplicate_process_id_while_running_exited_and_closed(
    make_world: Callable[..., World],
) -> None:
    w = make_world(Config(closed_ttl=5.0))
    proc = run(w)

    def dup_error() -> dict[str, Any]:
        return error_of(w, w.request(1, "process/start", start_params("p")))

    expected = {"code": INVALID_REQUEST, "message": ALREADY_EXISTS.format("p")}
    assert dup_error() == expected  # running
    w.exit(proc, 0)
    assert dup_error() == expected  # exited, streams open
    close_all(w, proc)
    assert dup_error() == expected  # closed, still readable
    w.advance(5.0 - EPS)
    assert dup_error() == expected  # until the very end of closed_ttl
    assert len(w.of_type(Spawn)) == 1


def test_process_id_is_reusable_after_eviction() -> None:
    w = unchecked_world(Config(closed_ttl=5.0))
    proc = run(w)
    finish(w, proc)
    w.advance(5.0)  # evicted
    new_proc = run(w)
    assert new_proc != proc
    assert len(w.of_type(Spawn)) == 2
    # The new process's events are numbered from 1 again.
    w.output(new_proc, "stdout", b"again")
    assert events(w)[-1] == ("output", 1)
    w.check()


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("spawnNotFound", SPAWN_ERROR),
        ("spawnPermissionDenied", SPAWN_DENIED),
        ("spawnFailed", "Argument list too long (os error 7)"),
        (None, "Exec format error (os error 8)"),  # the event's default kind
    ],
)
def test_spawn_failure(w: World, kind: str | None, text: str) -> None:
    msg_id, spawn = begin(w)
    if kind is None:
        actions = w.feed(SpawnFailed(proc=spawn.proc, error=text))
    else:
        actions = w.feed(SpawnFailed(proc=spawn.proc, error=text, kind=kind))
    error = {"code": INTERNAL_ERROR, "message": text, "data": {"kind": kind or "spawnFailed"}}
    assert error_of(w, msg_id) == error
    assert actions[-1] == Finalize(
        proc=spawn.proc, status="failed", exit_code=None, timed_out=False
    )
    assert len(finalizes(w, spawn.proc)) == 1
    assert w.notifications(1) == []  # it never ran: no exited, no closed
    # The id is free at once: not readable, and startable again.
    read_id = w.request(1, "process/read", {"processId": "p"})
    assert error_of(w, read_id) == {"code": INVALID_REQUEST, "message": UNKNOWN_PROCESS.format("p")}
    again, spawn2 = begin(w)
    assert spawn2.proc != spawn.proc
    spawned(w, spawn2.proc)
    assert result_of(w, again) == {"processId": "p", "sandboxType": "none"}


def test_spawn_failure_answers_pending_reads_with_unknown_process(w: World) -> None:
    msg_id, spawn = begin(w)
    assert read(w) == expected_read()  # a starting process reads as running and empty
    r1 = park(w, waitMs=1000)
    r2 = park(w, afterSeq=3, maxBytes=10, waitMs=500)
    w.feed(SpawnFailed(proc=spawn.proc, error=SPAWN_ERROR, kind="spawnNotFound"))
    unknown = {"code": INVALID_REQUEST, "message": UNKNOWN_PROCESS.format("p")}
    assert error_of(w, r1) == unknown and error_of(w, r2) == unknown
    assert error_of(w, msg_id)["code"] == INTERNAL_ERROR
    w.advance(2)  # their deadlines were cancelled: no second answer (checked at teardown)
    assert w.core.next_deadline() is None


def test_spawn_failure_while_terminating_sends_no_signal(w: World) -> None:
    _, spawn = begin(w)
    assert terminate(w) == {"running": True}
    w.feed(SpawnFailed(proc=spawn.proc, error=SPAWN_DENIED))
    w.advance(10)
    assert signals(w) == []
    assert finalizes(w, spawn.proc) == [
        Finalize(proc=spawn.proc, status="failed", exit_code=None, timed_out=False)
    ]
    assert terminate(w) == {"running": False}  # unknown now


def test_spawn_failure_after_spawn_is_a_local_protocol_error(w: World) -> None:
    proc = run(w)
    with pytest.raises(LocalProtocolError):
        w.feed(SpawnFailed(proc=proc, error=SPAWN_ERROR))


def test_spawned_twice_is_a_local_protocol_error(w: World) -> None:
    proc = run(w)
    with pytest.raises(LocalProtocolError):
        spawned(w, proc)


def test_start_answer_is_not_sent_to_a_closed_or_resuming_connection(
    make_world: Callable[..., World],
) -> None:
    w = make_world()
    w.gapless = False
    _, a = begin(w, "a")
    _, b = begin(w, "b")
    w.disconnect(1)
    assert spawned(w, a.proc) == []  # detached: nobody to answer
    w.connect(2)
    w.handshake(2, resume="session-1")
    before = len(w.actions)
    spawned(w, b.proc)  # the start came from conn 1; conn 2 never asked
    assert [x for x in w.actions[before:] if isinstance(x, Send)] == []
    _, c = begin(w, "c", conn=2)
    w.disconnect(2)
    assert w.feed(SpawnFailed(proc=c.proc, error=SPAWN_ERROR)) == [
        Finalize(proc=c.proc, status="failed", exit_code=None, timed_out=False)
    ]


# =================================================================================================
# events and seq
# =================================================================================================


def test_every_event_takes_the_next_seq_and_closed_is_last(w: World) -> None:
    proc = run(w)
    w.output(proc, "stdout", b"out1")
    w.output(proc, "stderr", b"err1")
    w.output(proc, "stdout", b"\x00\xffbinary")
    w.eof(proc, "stderr")
    w.exit(proc, 3)
    w.output(proc, "stdout", b"late")
    assert finalizes(w, proc) == []
    w.eof(proc, "stdout")
    assert [n["params"] for n in w.notifications(1)] == [
        {"processId": "p", "stream": "stdout", "seq": 1, "chunk": b64(b"out1")},
        {"processId": "p", "stream": "stderr", "seq": 2, "chunk": b64(b"err1")},
        {"processId": "p", "stream": "stdout", "seq": 3, "chunk": b64(b"\x00\xffbinary")},
        {"processId": "p", "seq": 4, "exitCode": 3, "sandboxDenied": False},
        {"processId": "p", "stream": "stdout", "seq": 5, "chunk": b64(b"late")},
        {"processId": "p", "seq": 6},
    ]
    assert [n["method"] for n in w.notifications(1)] == ["process/output"] * 3 + [
        "process/exited",
        "process/output",
        "process/closed",
    ]
    assert all(n["jsonrpc"] == "2.0" and "id" not in n for n in w.notifications(1))
    assert w.actions[-1] == Finalize(proc=proc, status="completed", exit_code=3, timed_out=False)


def test_tty_uses_only_the_pty_stream(w: World) -> None:
    proc = run(w, "t", tty=True)
    w.output(proc, "pty", b"$ ")
    w.exit(proc, 0)
    assert finalizes(w, proc) == []
    w.eof(proc, "pty")
    assert events(w, "t") == [("output", 1), ("exited", 2), ("closed", 3)]
    assert w.notifications(1)[0]["params"]["stream"] == "pty"
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=0, timed_out=False)
    ]


@pytest.mark.parametrize(
    ("tty", "make_event"),
    [
        pytest.param(
            True, lambda p: OutputReceived(proc=p, stream="stdout", data=b"x"), id="stdout-on-tty"
        ),
        pytest.param(True, lambda p: StreamClosed(proc=p, stream="stderr"), id="stderr-eof-on-tty"),
        pytest.param(
            False, lambda p: OutputReceived(proc=p, stream="pty", data=b"x"), id="pty-on-pipes"
        ),
        pytest.param(
            False, lambda p: OutputReceived(proc=p, stream="bogus", data=b"x"), id="bogus-stream"
        ),
        pytest.param(False, lambda p: StreamClosed(proc=p, stream="pty"), id="pty-eof-on-pipes"),
    ],
)
def test_wrong_stream_is_a_local_protocol_error(
    w: World, tty: bool, make_event: Callable[[int], Event]
) -> None:
    proc = run(w, tty=tty)
    with pytest.raises(LocalProtocolError):
        w.feed(make_event(proc))


@pytest.mark.parametrize("exited_first", [False, True])
def test_output_after_the_streams_eof_is_a_local_protocol_error(
    w: World, exited_first: bool
) -> None:
    proc = run(w)
    if exited_first:
        w.exit(proc, 0)
    w.eof(proc, "stderr")
    w.output(proc, "stdout", b"still open")
    with pytest.raises(LocalProtocolError):
        w.output(proc, "stderr", b"after eof")


def test_an_empty_chunk_takes_no_seq_and_sends_nothing(w: World) -> None:
    proc = run(w)
    assert w.output(proc, "stdout", b"") == []
    w.output(proc, "stdout", b"x")
    finish(w, proc)
    assert events(w) == [("output", 1), ("exited", 2), ("closed", 3)]


def test_eof_twice_is_a_local_protocol_error(w: World) -> None:
    proc = run(w)
    w.eof(proc, "stdout")
    with pytest.raises(LocalProtocolError):
        w.eof(proc, "stdout")


def test_exit_twice_is_a_local_protocol_error(w: World) -> None:
    proc = run(w)
    w.exit(proc, 0)
    with pytest.raises(LocalProtocolError):
        w.exit(proc, 1)


@pytest.mark.parametrize(
    "make_event",
    [
        pytest.param(lambda p: OutputReceived(proc=p, stream="stdout", data=b"x"), id="output"),
        pytest.param(lambda p: StreamClosed(proc=p, stream="stdout"), id="eof"),
        pytest.param(lambda p: ProcessExited(proc=p, returncode=0), id="exit"),
    ],
)
def test_process_events_before_the_spawn_are_local_protocol_errors(
    w: World, make_event: Callable[[int], Event]
) -> None:
    _, spawn = begin(w)
    with pytest.raises(LocalProtocolError):
        w.feed(make_event(spawn.proc))


def test_spawned_after_exit_is_a_local_protocol_error(w: World) -> None:
    proc = run(w)
    w.exit(proc, 0)
    with pytest.raises(LocalProtocolError):
        spawned(w, proc)


def test_streams_closed_before_the_exit_close_right_after_it(w: World) -> None:
    proc = run(w)
    w.output(proc, "stdout", b"bye")
    w.eof(proc, "stdout")
    w.eof(proc, "stderr")
    w.advance(100)  # it keeps running with both pipes closed
    assert finalizes(w, proc) == [] and events(w) == [("output", 1)]
    assert read(w, afterSeq=1, waitMs=0) == expected_read(nextSeq=2)
    actions = w.exit(proc, 0)
    assert events(w) == [("output", 1), ("exited", 2), ("closed", 3)]
    assert actions[-1] == Finalize(proc=proc, status="completed", exit_code=0, timed_out=False)
    assert read(w, afterSeq=1) == expected_read(
        nextSeq=4, exited=True, exitCode=0, closed=True, firstRetainedSeq=1
    )


@pytest.mark.parametrize(
    ("returncode", "exit_code"),
    [(0, 0), (1, 1), (7, 7), (255, 255), (-9, 137), (-15, 143), (-2, 130), (-1, 129)],
)
def test_exit_code_mapping(w: World, returncode: int, exit_code: int) -> None:
    proc = run(w)
    finish(w, proc, returncode)
    assert w.notifications(1, "process/exited")[0]["params"]["exitCode"] == exit_code
    assert read(w)["exitCode"] == exit_code
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=exit_code, timed_out=False)
    ]


def test_events_for_a_finalized_process_are_ignored(w: World) -> None:
    proc = run(w)
    finish(w, proc)
    _, failed = begin(w, "f")
    w.feed(SpawnFailed(proc=failed.proc, error=SPAWN_ERROR))
    for handle in (proc, failed.proc):
        for event in (
            OutputReceived(proc=handle, stream="stdout", data=b"queued"),
            StreamClosed(proc=handle, stream="stdout"),
            StreamClosed(proc=handle, stream="stdout"),
            ProcessExited(proc=handle, returncode=1),
            ProcessSpawned(proc=handle, pid=1),
            SpawnFailed(proc=handle, error="late"),
        ):
            assert w.feed(event) == []
    assert events(w) == [("exited", 1), ("closed", 2)]
    assert read(w)["exitCode"] == 0


@pytest.mark.parametrize(
    "make_event",
    [
        pytest.param(lambda p: ProcessSpawned(proc=p, pid=1), id="spawned"),
        pytest.param(lambda p: SpawnFailed(proc=p, error="x"), id="spawn-failed"),
        pytest.param(lambda p: OutputReceived(proc=p, stream="stdout", data=b"x"), id="output"),
        pytest.param(lambda p: StreamClosed(proc=p, stream="stdout"), id="eof"),
        pytest.param(lambda p: ProcessExited(proc=p, returncode=0), id="exit"),
    ],
)
@pytest.mark.parametrize("handle", [0, -1, 2, 10**9])
def test_events_for_a_handle_never_issued_are_local_protocol_errors(
    w: World, make_event: Callable[[int], Event], handle: int
) -> None:
    run(w)  # handle 1 is issued; 2 is not yet
    with pytest.raises(LocalProtocolError):
        w.feed(make_event(handle))


# =================================================================================================
# process/read
# =================================================================================================


def _three_chunks(w: World) -> int:
    """seq 1: 3 bytes stdout, seq 2: 4 bytes stderr, seq 3: 5 bytes stdout."""
    proc = run(w)
    w.output(proc, "stdout", b"aaa")
    w.output(proc, "stderr", b"bbbb")
    w.output(proc, "stdout", b"ccccc")
    return proc


def test_read_after_seq_defaults_to_zero_and_returns_later_chunks(w: World) -> None:
    _three_chunks(w)
    everything = [
        wire_chunk(1, "stdout", b"aaa"),
        wire_chunk(2, "stderr", b"bbbb"),
        wire_chunk(3, "stdout", b"ccccc"),
    ]
    assert read(w) == expected_read(chunks=everything, nextSeq=4)
    assert read(w, afterSeq=0) == expected_read(chunks=everything, nextSeq=4)
    assert read(w, afterSeq=1)["chunks"] == everything[1:]
    assert read(w, afterSeq=2)["chunks"] == everything[2:]
    assert read(w, afterSeq=3) == expected_read(nextSeq=4)
    assert read(w, afterSeq=99) == expected_read(nextSeq=4)


@pytest.mark.parametrize(
    ("after_seq", "max_bytes", "seqs", "next_seq"),
    [
        (0, 0, [1], 2),  # at least one chunk, even over the limit
        (0, 1, [1], 2),
        (0, 3, [1], 2),
        (0, 6, [1], 2),  # 3 + 4 = 7 would exceed: stop before chunk 2
        (0, 7, [1, 2], 3),
        (0, 11, [1, 2], 3),
        (0, 12, [1, 2, 3], 4),  # exactly all: not cut short, the process's next seq
        (0, 10**6, [1, 2, 3], 4),
        (1, 4, [2], 3),
        (1, 8, [2], 3),
        (1, 9, [2, 3], 4),
        (2, 1, [3], 4),  # the last chunk, alone over the limit
        (3, 1, [], 4),
    ],
)
def test_read_max_bytes(
    w: World, after_seq: int, max_bytes: int, seqs: list[int], next_seq: int
) -> None:
    _three_chunks(w)
    result = read(w, afterSeq=after_seq, maxBytes=max_bytes)
    assert [c["seq"] for c in result["chunks"]] == seqs
    assert result["nextSeq"] == next_seq


def test_read_max_bytes_cut_short_before_the_exit(w: World) -> None:
    proc = run(w)
    w.output(proc, "stdout", b"12345")
    w.output(proc, "stdout", b"67890")
    w.exit(proc, 0)
    cut = read(w, maxBytes=5)
    assert chunks(cut) == [(1, "stdout", b"12345")] and cut["nextSeq"] == 2
    rest = read(w, afterSeq=1, maxBytes=5)
    assert chunks(rest) == [(2, "stdout", b"67890")] and rest["nextSeq"] == 4
    assert rest["exited"] is True and rest["exitCode"] == 0


@pytest.mark.parametrize("wait", [{}, {"waitMs": 0}])
def test_read_without_wait_returns_at_once(w: World, wait: dict[str, Any]) -> None:
    run(w)
    assert read(w, **wait) == expected_read()
    assert read(w, afterSeq=5, **wait) == expected_read()


def test_read_returns_at_once_when_there_are_chunks(w: World) -> None:
    proc = run(w)
    w.output(proc, "stdout", b"x")
    assert chunks(read(w, waitMs=60_000)) == [(1, "stdout", b"x")]


def test_read_returns_at_once_when_closed(w: World) -> None:
    proc = run(w)
    finish(w, proc, 1)
    assert read(w, afterSeq=2, waitMs=60_000) == expected_read(
        nextSeq=3, exited=True, exitCode=1, closed=True, firstRetainedSeq=3
    )
    assert read(w, afterSeq=50, waitMs=60_000)["closed"] is True


def test_read_returns_at_once_when_exited_and_behind_the_newest_event(w: World) -> None:
    proc = run(w)
    w.output(proc, "stdout", b"x")
    w.exit(proc, 0)  # seq 2
    behind = read(w, afterSeq=1, waitMs=60_000)
    assert behind == expected_read(nextSeq=3, exited=True, exitCode=0, firstRetainedSeq=1)
    w.output(proc, "stderr", b"late")  # seq 3
    assert chunks(read(w, afterSeq=2, waitMs=60_000)) == [(3, "stderr", b"late")]


def test_read_waits_until_its_deadline_then_answers_empty(w: World) -> None:
    proc = run(w)
    w.output(proc, "stdout", b"x")
    msg_id = park(w, afterSeq=1, waitMs=250)
    w.advance(0.25 - EPS)
    assert w.response(1, msg_id) is None
    w.advance(EPS)
    assert result_of(w, msg_id) == expected_read(nextSeq=2, firstRetainedSeq=1)
    w.output(proc, "stdout", b"y")  # answered once only (checked at teardown)


def test_read_on_a_starting_process_waits_and_times_out(w: World) -> None:
    _, spawn = begin(w)
    msg_id = park(w, waitMs=500)
    spawned(w, spawn.proc)  # the spawn alone is no event
    assert w.response(1, msg_id) is None
    w.advance(0.5)
    assert result_of(w, msg_id) == expected_read()


def test_waiting_read_is_answered_by_new_output(w: World) -> None:
    proc = run(w)
    w.output(proc, "stdout", b"old")
    msg_id = park(w, afterSeq=1, waitMs=5000)
    w.advance(1)
    w.output(proc, "stderr", b"new")
    assert result_of(w, msg_id) == expected_read(
        chunks=[wire_chunk(2, "stderr", b"new")], nextSeq=3, firstRetainedSeq=1
    )
    w.advance(10)


def test_waiting_read_is_answered_by_the_exit(w: World) -> None:
    proc = run(w)
    msg_id = park(w, waitMs=5000)
    w.exit(proc, 4)
    assert result_of(w, msg_id) == expected_read(
        nextSeq=2, exited=True, exitCode=4, firstRetainedSeq=2
    )


def test_waiting_read_at_the_exit_is_answered_by_the_close(w: World) -> None:
    proc = run(w)
    w.exit(proc, 0)
    msg_id = park(w, afterSeq=1, waitMs=5000)
    w.eof(proc, "stdout")
    assert w.response(1, msg_id) is None
    w.eof(proc, "stderr")
    assert result_of(w, msg_id) == expected_read(
        nextSeq=3, exited=True, exitCode=0, closed=True, firstRetainedSeq=3
    )


def test_waiting_read_with_closed_streams_is_answered_by_exit_and_close_together(w: World) -> None:
    proc = run(w)
    close_all(w, proc)
    msg_id = park(w, waitMs=5000)
    w.exit(proc, 0)
    assert result_of(w, msg_id) == expected_read(
        nextSeq=3, exited=True, exitCode=0, closed=True, firstRetainedSeq=3
    )


def test_reader_at_the_cursor_after_exit_waits_for_late_output(w: World) -> None:
    proc = run(w)
    w.exit(proc, 0)
    msg_id = park(w, afterSeq=1, waitMs=5000)
    w.advance(2)
    assert w.response(1, msg_id) is None
    w.output(proc, "stdout", b"late")
    assert result_of(w, msg_id) == expected_read(
        chunks=[wire_chunk(2, "stdout", b"late")],
        nextSeq=3,
        exited=True,
        exitCode=0,
        firstRetainedSeq=2,
    )
    again = park(w, afterSeq=2, waitMs=1000)
    w.advance(1)
    assert result_of(w, again) == expected_read(
        nextSeq=3, exited=True, exitCode=0, firstRetainedSeq=2
    )


def test_several_concurrent_readers_on_one_process(w: World) -> None:
    proc = run(w)
    a = park(w, waitMs=10_000)
    b = park(w, maxBytes=1, waitMs=10_000)
    ahead = park(w, afterSeq=5, waitMs=10_000)  # a cursor past anything yet
    short = park(w, waitMs=250)
    w.advance(0.25)
    assert result_of(w, short) == expected_read()
    assert all(w.response(1, r) is None for r in (a, b, ahead))
    w.output(proc, "stdout", b"xy")
    assert (
        result_of(w, a)
        == result_of(w, b)
        == expected_read(chunks=[wire_chunk(1, "stdout", b"xy")], nextSeq=2)
    )
    assert w.response(1, ahead) is None
    c = park(w, afterSeq=1, waitMs=10_000)
    w.output(proc, "stdout", b"z1")
    w.output(proc, "stdout", b"z2")
    assert chunks(result_of(w, c)) == [(2, "stdout", b"z1")]
    w.exit(proc, 0)  # seq 4: still not past the cursor at 5
    assert w.response(1, ahead) is None
    w.output(proc, "stdout", b"late")  # seq 5
    assert w.response(1, ahead) is None
    w.output(proc, "stdout", b"later")  # seq 6
    assert chunks(result_of(w, ahead)) == [(6, "stdout", b"later")]


def test_reader_ahead_of_everything_is_answered_by_the_close(w: World) -> None:
    proc = run(w)
    ahead = park(w, afterSeq=10, waitMs=10_000)
    finish(w, proc)
    assert result_of(w, ahead) == expected_read(
        nextSeq=3, exited=True, exitCode=0, closed=True, firstRetainedSeq=3
    )


@pytest.mark.parametrize("wait", [0, 1000])
def test_read_of_an_unknown_process(w: World, wait: int) -> None:
    run(w, "p")
    msg_id = w.request(1, "process/read", {"processId": "q", "waitMs": wait})
    assert error_of(w, msg_id) == {"code": INVALID_REQUEST, "message": UNKNOWN_PROCESS.format("q")}


def test_read_fields_through_the_lifecycle(w: World) -> None:
    proc = run(w)
    assert read(w) == expected_read()
    w.output(proc, "stdout", b"a")
    assert read(w) == expected_read(chunks=[wire_chunk(1, "stdout", b"a")], nextSeq=2)
    w.exit(proc, -9)
    assert read(w, afterSeq=1) == expected_read(
        nextSeq=3, exited=True, exitCode=137, firstRetainedSeq=1
    )
    close_all(w, proc)
    assert read(w) == expected_read(
        chunks=[wire_chunk(1, "stdout", b"a")],
        nextSeq=4,
        exited=True,
        exitCode=137,
        closed=True,
        firstRetainedSeq=1,
    )


def test_pending_read_is_dropped_with_its_connection(make_world: Callable[..., World]) -> None:
    w = make_world()
    w.gapless = False
    proc = run(w)
    park(w, waitMs=1000)
    w.disconnect(1)
    assert w.output(proc, "stdout", b"unseen") == []
    assert w.advance(2) == []


# =================================================================================================
# retention
# =================================================================================================


def test_retention_keeps_the_newest_bytes_and_reports_the_loss(
    make_world: Callable[..., World],
) -> None:
    w = make_world(Config(retention_bytes=10))
    proc = run(w)
    for i in range(1, 6):
        w.output(proc, "stdout", b"%d%d%d%d" % (i, i, i, i))
    # 20 bytes: only the newest 8 fit in 10.
    expected_chunks = [wire_chunk(4, "stdout", b"4444"), wire_chunk(5, "stdout", b"5555")]
    assert read(w) == expected_read(
        chunks=expected_chunks, nextSeq=6, firstRetainedSeq=4, droppedBytes=12
    )
    assert read(w, afterSeq=4)["chunks"] == expected_chunks[1:]
    assert read(w, afterSeq=1)["chunks"] == expected_chunks
    # Notifications carried everything.
    sent = [unb64(n["params"]["chunk"]) for n in w.notifications(1, "process/output")]
    assert sent == [b"1111", b"2222", b"3333", b"4444", b"5555"]
    finish(w, proc)
    assert read(w) == expected_read(
        chunks=expected_chunks,
        nextSeq=8,
        exited=True,
        exitCode=0,
        closed=True,
        firstRetainedSeq=4,
        droppedBytes=12,
    )


def test_retention_keeps_an_oversized_newest_chunk_whole(make_world: Callable[..., World]) -> None:
    w = make_world(Config(retention_bytes=4))
    proc = run(w)
    w.output(proc, "stdout", b"ab")
    w.output(proc, "stderr", b"0123456789")
    assert read(w) == expected_read(
        chunks=[wire_chunk(2, "stderr", b"0123456789")],
        nextSeq=3,
        firstRetainedSeq=2,
        droppedBytes=2,
    )
    w.output(proc, "stdout", b"c")
    assert read(w) == expected_read(
        chunks=[wire_chunk(3, "stdout", b"c")], nextSeq=4, firstRetainedSeq=3, droppedBytes=12
    )


def test_retention_bounds_the_chunk_count(make_world: Callable[..., World]) -> None:
    w = make_world(Config(retention_chunks=3))
    proc = run(w)
    for i in range(5):
        w.output(proc, "stdout", bytes([65 + i]))
    result = read(w)
    assert chunks(result) == [(3, "stdout", b"C"), (4, "stdout", b"D"), (5, "stdout", b"E")]
    assert (result["firstRetainedSeq"], result["droppedBytes"]) == (3, 2)


def test_retention_over_many_drops_stays_consistent(make_world: Callable[..., World]) -> None:
    w = make_world(Config(retention_chunks=8))
    proc = run(w)
    total = 2100  # well past the log's internal compaction point
    for i in range(1, total + 1):
        w.output(proc, "stdout", b"%c" % (48 + i % 10))
        if i in (1030, 1040):
            # Reads in between compactions see the same view.
            mid = read(w, afterSeq=i - 3)
            assert [c["seq"] for c in mid["chunks"]] == [i - 2, i - 1, i]
            assert (mid["firstRetainedSeq"], mid["droppedBytes"]) == (i - 7, i - 8)
    result = read(w)
    assert [c["seq"] for c in result["chunks"]] == list(range(total - 7, total + 1))
    assert (result["firstRetainedSeq"], result["droppedBytes"], result["nextSeq"]) == (
        total - 7,
        total - 8,
        total + 1,
    )
    tail = read(w, afterSeq=total - 3, maxBytes=2)
    assert [c["seq"] for c in tail["chunks"]] == [total - 2, total - 1]
    assert tail["nextSeq"] == total
    assert len(w.notifications(1, "process/output")) == total


def test_closed_process_is_readable_until_closed_ttl(make_world: Callable[..., World]) -> None:
    w = make_world(Config(closed_ttl=10.0))
    proc = run(w)
    w.output(proc, "stdout", b"keep")
    finish(w, proc, 2)
    closed = read(w)
    w.advance(10.0 - EPS)
    assert read(w) == closed
    assert read(w, waitMs=5000) == closed
    assert write(w, "p", b"x", "w1") == "stdinClosed"
    assert terminate(w) == {"running": False}


def test_closed_process_is_unknown_after_closed_ttl() -> None:
    w = unchecked_world(Config(closed_ttl=10.0))
    proc = run(w)
    finish(w, proc, 2)
    w.advance(10.0)
    msg_id = w.request(1, "process/read", {"processId": "p"})
    assert error_of(w, msg_id) == {"code": INVALID_REQUEST, "message": UNKNOWN_PROCESS.format("p")}
    # Everything of it is gone: writes, signals and terminates see an unknown process.
    assert write(w, "p", b"x", "w1") == "unknownProcess"
    assert terminate(w) == {"running": False}
    assert interrupt(w) == {}
    # And the id is free.
    new_proc = run(w)
    assert read(w) == expected_read()
    assert new_proc != proc
    w.check()


def test_eviction_timer_of_each_process_runs_from_its_own_close() -> None:
    w = unchecked_world(Config(closed_ttl=4.0))
    a = run(w, "a")
    b = run(w, "b")
    finish(w, a)
    w.advance(2)
    finish(w, b)
    w.advance(2)
    assert error_of(w, w.request(1, "process/read", {"processId": "a"}))["code"] == INVALID_REQUEST
    assert read(w, "b")["closed"] is True
    w.advance(2)
    assert error_of(w, w.request(1, "process/read", {"processId": "b"}))["code"] == INVALID_REQUEST
    w.check()


def test_eviction_tick_of_a_bare_core_frees_the_process_id() -> None:
    core = ServerCore(Config(closed_ttl=1.0))
    core.handle(ConnectionOpened(conn=1, session_id="s"), 0)
    core.handle(
        MessageReceived(conn=1, data='{"id":1,"method":"initialize","params":{"clientName":"c"}}'),
        0,
    )
    core.handle(MessageReceived(conn=1, data='{"method":"initialized"}'), 0)
    start = (
        '{"id":2,"method":"process/start",'
        '"params":{"processId":"p","argv":["true"],"cwd":"file:///","env":{},"tty":false}}'
    )
    (spawn,) = core.handle(MessageReceived(conn=1, data=start), 0)
    assert isinstance(spawn, Spawn)
    core.handle(ProcessSpawned(proc=spawn.proc, pid=1), 0)
    core.handle(ProcessExited(proc=spawn.proc, returncode=0), 0)
    core.handle(StreamClosed(proc=spawn.proc, stream="stdout"), 0)
    core.handle(StreamClosed(proc=spawn.proc, stream="stderr"), 0)
    assert core.handle(Tick(), 1.0) == []  # evicted: nothing to say, nothing raised
    reuse = start.replace('"id":2', '"id":3')
    (again,) = core.handle(MessageReceived(conn=1, data=reuse), 1.0)
    assert isinstance(again, Spawn) and again.proc != spawn.proc


# =================================================================================================
# process/write
# =================================================================================================


def test_write_to_an_unknown_process(w: World) -> None:
    assert write(w, "nope", b"x", "w1") == "unknownProcess"
    assert w.of_type(WriteStdin) == []


def test_write_while_starting(w: World) -> None:
    _, spawn = begin(w, pipeStdin=True)
    assert write(w, "p", b"early", "w1") == "starting"
    spawned(w, spawn.proc)
    # "starting" did not remember the writeId: the retry is written.
    assert write(w, "p", b"early", "w1") == "accepted"
    assert written(w, spawn.proc) == [WriteStdin(proc=spawn.proc, data=b"early")]


def test_write_accepted_emits_the_decoded_bytes(w: World) -> None:
    proc = run(w, pipeStdin=True)
    data = bytes(range(256))
    assert write(w, "p", data, "w1") == "accepted"
    assert write(w, "p", b"second", "w2") == "accepted"
    assert written(w, proc) == [
        WriteStdin(proc=proc, data=data),
        WriteStdin(proc=proc, data=b"second"),
    ]


def test_write_to_a_tty_is_accepted(w: World) -> None:
    proc = run(w, tty=True)
    assert write(w, "p", b"ls\n", "w1") == "accepted"
    assert written(w, proc) == [WriteStdin(proc=proc, data=b"ls\n")]


def test_write_without_pipe_stdin_is_stdin_closed(w: World) -> None:
    proc = run(w)
    assert write(w, "p", b"x", "w1") == "stdinClosed"
    assert write(w, "p", b"x", "w1", closeStdin=True) == "stdinClosed"
    assert written(w, proc) == []


@pytest.mark.parametrize("tty", [False, True])
def test_write_after_exit_is_stdin_closed(w: World, tty: bool) -> None:
    proc = run(w, pipeStdin=True, tty=tty)
    w.exit(proc, 0)
    assert write(w, "p", b"x", "w1") == "stdinClosed"
    close_all(w, proc, ("pty",) if tty else PIPES)
    assert write(w, "p", b"x", "w2") == "stdinClosed"  # closed, not yet evicted
    assert written(w, proc) == []


def test_write_after_close_stdin_is_stdin_closed(w: World) -> None:
    proc = run(w, pipeStdin=True)
    assert write(w, "p", b"last", "w1", closeStdin=True) == "accepted"
    assert written(w, proc) == [WriteStdin(proc=proc, data=b"last"), CloseStdin(proc=proc)]
    assert write(w, "p", b"more", "w2") == "stdinClosed"
    assert write(w, "p", b"", "w3", closeStdin=True) == "stdinClosed"
    # The write that closed stdin is remembered: its retry is accepted and nothing is done.
    assert write(w, "p", b"last", "w1", closeStdin=True) == "accepted"
    assert written(w, proc) == [WriteStdin(proc=proc, data=b"last"), CloseStdin(proc=proc)]


def test_close_stdin_with_an_empty_chunk_only_closes(w: World) -> None:
    proc = run(w, pipeStdin=True)
    assert write(w, "p", b"", "w1", closeStdin=True) == "accepted"
    assert written(w, proc) == [CloseStdin(proc=proc)]


def test_empty_chunk_writes_nothing(w: World) -> None:
    proc = run(w, pipeStdin=True)
    assert write(w, "p", b"", "w1") == "accepted"
    assert write(w, "p", b"", "w1", closeStdin=False) == "accepted"
    assert written(w, proc) == []
    assert write(w, "p", b"x", "w2") == "accepted"
    assert written(w, proc) == [WriteStdin(proc=proc, data=b"x")]


def test_repeated_write_id_is_accepted_without_writing_again(w: World) -> None:
    proc = run(w, pipeStdin=True)
    assert write(w, "p", b"once", "w1") == "accepted"
    assert write(w, "p", b"once", "w1") == "accepted"
    assert write(w, "p", b"different data, same id", "w1") == "accepted"
    assert written(w, proc) == [WriteStdin(proc=proc, data=b"once")]
    w.exit(proc, 0)
    # A retry of a write that was done stays "accepted" even once stdin is gone.
    assert write(w, "p", b"once", "w1") == "accepted"
    assert write(w, "p", b"new", "w9") == "stdinClosed"
    assert written(w, proc) == [WriteStdin(proc=proc, data=b"once")]


def test_write_ids_are_per_process(w: World) -> None:
    a = run(w, "a", pipeStdin=True)
    b = run(w, "b", pipeStdin=True)
    assert write(w, "a", b"1", "same") == "accepted"
    assert write(w, "b", b"2", "same") == "accepted"
    assert written(w, a) == [WriteStdin(proc=a, data=b"1")]
    assert written(w, b) == [WriteStdin(proc=b, data=b"2")]


def test_only_the_last_write_ids_are_remembered(make_world: Callable[..., World]) -> None:
    w = make_world(Config(write_id_memory=2))
    proc = run(w, pipeStdin=True)
    for write_id in ("a", "b", "c"):
        assert write(w, "p", write_id.encode(), write_id) == "accepted"
    assert len(written(w, proc)) == 3
    # "a" was forgotten when "c" came; "b" and "c" are remembered.
    assert write(w, "p", b"c", "c") == "accepted"
    assert write(w, "p", b"b", "b") == "accepted"
    assert len(written(w, proc)) == 3
    assert write(w, "p", b"a", "a") == "accepted"  # written again, and now "b" is forgotten
    assert written(w, proc)[-1] == WriteStdin(proc=proc, data=b"a")
    assert write(w, "p", b"c", "c") == "accepted"
    assert len(written(w, proc)) == 4
    assert write(w, "p", b"b", "b") == "accepted"
    assert len(written(w, proc)) == 5


def test_the_default_write_id_memory_is_4096(w: World) -> None:
    proc = run(w, pipeStdin=True)
    for i in range(4097):  # w0 is pushed out by the 4097th
        assert write(w, "p", b"", f"w{i}") == "accepted"
    assert write(w, "p", b"retry", "w1") == "accepted"
    assert written(w, proc) == []
    assert write(w, "p", b"fresh", "w0") == "accepted"
    assert written(w, proc) == [WriteStdin(proc=proc, data=b"fresh")]


# =================================================================================================
# process/signal
# =================================================================================================


def test_interrupt_while_running(w: World) -> None:
    proc = run(w)
    assert interrupt(w) == {}
    assert w.of_type(Signal) == [Signal(proc=proc, signal="INT")]
    assert interrupt(w) == {}  # every interrupt is delivered while it runs
    assert signals(w, proc) == ["INT", "INT"]


def test_interrupt_after_exit_before_close_and_after_close_signals_nothing(w: World) -> None:
    proc = run(w)
    w.exit(proc, 0)
    assert interrupt(w) == {}
    close_all(w, proc)
    assert interrupt(w) == {}
    assert signals(w) == []


def test_interrupt_before_the_spawn_is_not_deferred(w: World) -> None:
    _, spawn = begin(w)
    assert interrupt(w) == {}
    spawned(w, spawn.proc)
    w.advance(10)
    assert signals(w) == []


def test_interrupt_of_an_unknown_process(w: World) -> None:
    run(w, "p")
    assert interrupt(w, "q") == {}
    assert signals(w) == []


def test_unknown_signal_name_is_invalid_params(w: World) -> None:
    run(w)
    msg_id = w.request(1, "process/signal", {"processId": "p", "signal": "kill"})
    assert error_of(w, msg_id) == {"code": INVALID_PARAMS, "message": BAD_SIGNAL.format("kill")}
    assert signals(w) == []


# =================================================================================================
# process/terminate
# =================================================================================================


def test_terminate_sends_term_then_kill_after_the_grace(make_world: Callable[..., World]) -> None:
    w = make_world(Config(kill_grace=2.0))
    proc = run(w)
    w.advance(1)
    assert terminate(w) == {"running": True}
    assert signals(w, proc) == ["TERM"]
    w.advance(2.0 - EPS)
    assert signals(w, proc) == ["TERM"]
    assert w.advance(EPS) == [Signal(proc=proc, signal="KILL")]
    assert terminate(w) == {"running": True}  # still running, and no re-signal
    w.output(proc, "stdout", b"dying words")
    close_all(w, proc)
    w.exit(proc, -9)
    assert events(w) == [("output", 1), ("exited", 2), ("closed", 3)]
    assert w.notifications(1, "process/exited")[0]["params"]["exitCode"] == 137
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=137, timed_out=True)
    ]
    assert signals(w, proc) == ["TERM", "KILL"]
    # terminate keeps the output produced before it.
    assert chunks(read(w)) == [(1, "stdout", b"dying words")]
    assert read(w)["failure"] is None


def test_terminate_with_no_kill_when_it_exits_in_time(w: World) -> None:
    proc = run(w)
    assert terminate(w) == {"running": True}
    w.advance(0.5)
    w.exit(proc, -15)
    w.advance(0.25)
    close_all(w, proc)
    w.advance(10)
    assert signals(w, proc) == ["TERM"]
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=143, timed_out=False)
    ]
    assert read(w)["failure"] is None


def test_second_terminate_does_not_resignal(w: World) -> None:
    proc = run(w)
    assert terminate(w) == {"running": True}
    w.advance(0.5)
    assert terminate(w) == {"running": True}
    w.advance(0.5)  # the KILL is due one grace after the first terminate, not the second
    assert signals(w, proc) == ["TERM", "KILL"]
    w.advance(10)
    assert signals(w, proc) == ["TERM", "KILL"]
    finish(w, proc, -9)
    assert terminate(w) == {"running": False}
    assert signals(w, proc) == ["TERM", "KILL"]


def test_interrupt_while_terminating_is_still_delivered(w: World) -> None:
    proc = run(w)
    terminate(w)
    assert interrupt(w) == {}
    assert signals(w, proc) == ["TERM", "INT"]


def test_terminate_while_starting_sends_term_as_soon_as_spawned(w: World) -> None:
    start_id, spawn = begin(w)
    assert terminate(w) == {"running": True}
    assert terminate(w) == {"running": True}
    w.advance(5)
    assert signals(w) == []  # nothing to signal before the spawn
    actions = spawned(w, spawn.proc)
    assert actions[-1] == Signal(proc=spawn.proc, signal="TERM")
    assert result_of(w, start_id) == {"processId": "p", "sandboxType": "none"}
    w.advance(1.0 - EPS)
    assert signals(w) == ["TERM"]
    w.advance(EPS)
    assert signals(w) == ["TERM", "KILL"]
    finish(w, spawn.proc, -9)
    assert finalizes(w, spawn.proc) == [
        Finalize(proc=spawn.proc, status="completed", exit_code=137, timed_out=True)
    ]


def test_terminate_after_exit_abandons_held_pipes_after_the_grace(
    make_world: Callable[..., World],
) -> None:
    w = make_world(Config(kill_grace=3.0))
    proc = run(w)
    w.output(proc, "stdout", b"before")
    w.exit(proc, 5)
    w.eof(proc, "stderr")  # stdout stays held by a descendant
    assert terminate(w) == {"running": False}
    assert terminate(w) == {"running": False}
    w.advance(3.0 - EPS)
    w.output(proc, "stdout", b"late")  # still flowing until the grace ends
    assert finalizes(w, proc) == [] and events(w)[-1] == ("output", 3)
    assert read(w, afterSeq=3, waitMs=0)["closed"] is False
    waiting = park(w, afterSeq=3, waitMs=60_000)
    actions = w.advance(EPS)
    assert Finalize(proc=proc, status="completed", exit_code=5, timed_out=True) in actions
    assert events(w) == [("output", 1), ("exited", 2), ("output", 3), ("closed", 4)]
    abandoned = expected_read(
        nextSeq=5, exited=True, exitCode=5, closed=True, failure=ABANDONED, firstRetainedSeq=1
    )
    assert result_of(w, waiting) == abandoned
    assert read(w, afterSeq=4) == abandoned
    assert chunks(read(w)) == [(1, "stdout", b"before"), (3, "stdout", b"late")]
    # The adapter's queued events for the abandoned pipe are ignored.
    assert w.output(proc, "stdout", b"too late") == []
    assert w.eof(proc, "stdout") == []
    assert signals(w) == []
    assert terminate(w) == {"running": False}


def test_terminated_process_whose_descendant_holds_the_pipes_is_abandoned(w: World) -> None:
    proc = run(w)
    assert terminate(w) == {"running": True}
    w.advance(0.5)
    w.exit(proc, -15)  # the kill timer is moot; the abandon grace starts at the exit
    w.advance(1.0 - EPS)
    assert finalizes(w, proc) == []
    w.output(proc, "stderr", b"orphan says hi")
    w.advance(EPS)
    assert signals(w, proc) == ["TERM"]
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=143, timed_out=True)
    ]
    assert read(w)["failure"] == ABANDONED
    assert events(w) == [("exited", 1), ("output", 2), ("closed", 3)]


def test_killed_process_whose_descendant_holds_the_pipes_is_abandoned(w: World) -> None:
    proc = run(w)
    terminate(w)
    w.advance(1.0)
    assert signals(w, proc) == ["TERM", "KILL"]
    w.advance(0.5)
    w.exit(proc, -9)
    w.advance(1.0)
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=137, timed_out=True)
    ]
    assert read(w)["failure"] == ABANDONED


def test_terminated_process_whose_pipes_close_in_time_is_not_abandoned(w: World) -> None:
    proc = run(w)
    terminate(w)
    w.exit(proc, -15)
    w.advance(0.5)
    close_all(w, proc)
    w.advance(10)
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=143, timed_out=False)
    ]
    assert read(w)["failure"] is None


def test_terminate_after_exit_with_pipes_closing_in_time_is_not_abandoned(w: World) -> None:
    proc = run(w)
    w.exit(proc, 0)
    assert terminate(w) == {"running": False}
    close_all(w, proc)
    w.advance(10)
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=0, timed_out=False)
    ]
    assert read(w)["failure"] is None


def test_terminate_of_a_closed_or_unknown_process(w: World) -> None:
    proc = run(w)
    finish(w, proc)
    assert terminate(w) == {"running": False}
    assert terminate(w, "nope") == {"running": False}
    w.advance(10)
    assert signals(w) == []
    assert len(finalizes(w, proc)) == 1


def test_terminate_of_a_process_with_closed_streams_closes_on_exit(w: World) -> None:
    proc = run(w)
    close_all(w, proc)
    assert terminate(w) == {"running": True}
    actions = w.exit(proc, -15)
    assert actions[-1] == Finalize(proc=proc, status="completed", exit_code=143, timed_out=False)
    w.advance(10)
    assert signals(w, proc) == ["TERM"]


# =================================================================================================
# the lifecycle with sessions and flow control
# =================================================================================================


def test_process_spawned_while_blocked_starts_paused(w: World) -> None:
    done = run(w, "done")
    finish(w, done)
    live = run(w, "live")
    w.feed(SendBlocked(conn=1))
    assert w.of_type(PauseOutput) == [PauseOutput(proc=live)]  # the closed one is left alone
    _, spawn = begin(w, "new")
    actions = spawned(w, spawn.proc)
    assert PauseOutput(proc=spawn.proc) in actions
    w.feed(SendDrained(conn=1))
    assert w.of_type(ResumeOutput) == [ResumeOutput(proc=live), ResumeOutput(proc=spawn.proc)]


def test_terminated_while_starting_and_spawned_while_blocked(w: World) -> None:
    start_id, spawn = begin(w)
    terminate(w)
    w.feed(SendBlocked(conn=1))
    actions = spawned(w, spawn.proc)
    assert isinstance(actions[0], Send)  # the start answer first
    assert result_of(w, start_id) == {"processId": "p", "sandboxType": "none"}
    assert Signal(proc=spawn.proc, signal="TERM") in actions
    assert actions[-1] == PauseOutput(proc=spawn.proc)
    w.feed(SendDrained(conn=1))
    assert w.of_type(ResumeOutput) == [ResumeOutput(proc=spawn.proc)]


def test_expired_session_terminates_live_processes_and_frees_closed_ones(
    make_world: Callable[..., World],
) -> None:
    w = make_world(Config(session_ttl=5.0, closed_ttl=30.0, kill_grace=1.0))
    w.gapless = False
    closed = run(w, "closed")
    finish(w, closed)
    running = run(w, "running")
    exited = run(w, "exited")
    w.exit(exited, 0)
    _, starting = begin(w, "starting")
    w.disconnect(1)
    w.advance(5.0)
    # Only the running one can be signalled; the starting one gets its TERM when spawned.
    assert signals(w) == ["TERM"] and w.of_type(Signal)[0].proc == running
    spawned(w, starting.proc)
    assert signals(w) == ["TERM", "TERM"]
    w.exit(running, -15)
    close_all(w, running)
    w.advance(1.0)  # the exited one's held pipes are abandoned; the starting one is killed
    assert signals(w, starting.proc) == ["TERM", "KILL"]
    finish(w, starting.proc, -9)
    assert finalizes(w, running) == [
        Finalize(proc=running, status="completed", exit_code=143, timed_out=True)
    ]
    assert finalizes(w, exited) == [
        Finalize(proc=exited, status="completed", exit_code=0, timed_out=True)
    ]
    assert finalizes(w, starting.proc) == [
        Finalize(proc=starting.proc, status="completed", exit_code=137, timed_out=True)
    ]
    assert len(finalizes(w, closed)) == 1


def test_eviction_after_the_session_expired() -> None:
    w = unchecked_world(Config(session_ttl=5.0, closed_ttl=30.0))
    w.gapless = False
    proc = run(w)
    finish(w, proc)
    w.disconnect(1)
    w.advance(5.0)  # the session is gone, and the closed process with it
    w.advance(60)  # its eviction then finds nothing to do
    assert w.core.next_deadline() is None
    assert len(finalizes(w, proc)) == 1
    w.check()


# =================================================================================================
# the checker itself, and the parts alone
# =================================================================================================


def _spawn_action(proc: int) -> Spawn:
    spec = SpawnSpec(
        argv=("sh",),
        arg0=None,
        cwd="/",
        env=(),
        tty=False,
        pipe_stdin=False,
        session_id="s",
        process_id="p",
    )
    return Spawn(proc=proc, spec=spec)


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(
            [
                (Tick(), [_spawn_action(1)]),
                (ProcessSpawned(proc=1, pid=9), []),
                (ProcessExited(proc=1, returncode=0), []),
                (Tick(), [Signal(proc=1, signal="KILL")]),
            ],
            id="signal-after-exit",
        ),
        pytest.param(
            [(Tick(), [_spawn_action(1), Signal(proc=1, signal="TERM")])],
            id="signal-before-spawn",
        ),
        pytest.param(
            [
                (Tick(), [_spawn_action(1)]),
                (ProcessSpawned(proc=1, pid=9), []),
                (StreamClosed(proc=1, stream="stdout"), []),
                (
                    ProcessExited(proc=1, returncode=0),
                    [Finalize(proc=1, status="completed", exit_code=0, timed_out=False)],
                ),
            ],
            id="finalize-with-a-stream-open",
        ),
        pytest.param(
            [
                (Tick(), [_spawn_action(1)]),
                (
                    SpawnFailed(proc=1, error="x"),
                    [Finalize(proc=1, status="failed", exit_code=None, timed_out=False)] * 2,
                ),
            ],
            id="finalize-twice",
        ),
    ],
)
def test_the_lifecycle_checker_catches_violations(
    steps: list[tuple[Event, list[Action]]],
) -> None:
    with pytest.raises(AssertionError):
        check_lifecycle(steps)


@pytest.mark.parametrize(
    "seqs",
    [
        [("output", 2)],
        [("exited", 1), ("exited", 2)],
        [("output", 1), ("closed", 2)],
        [("exited", 1), ("closed", 2), ("output", 3)],
    ],
)
def test_the_notification_checker_catches_violations(seqs: list[tuple[str, int]]) -> None:
    notifications = [
        {
            "method": f"process/{method}",
            "params": {
                "processId": "p",
                "seq": seq,
                "stream": "stdout",
                "exitCode": 0,
                "sandboxDenied": False,
            },
        }
        for method, seq in seqs
    ]
    with pytest.raises(AssertionError):
        check_notifications(notifications)


def test_output_log_alone() -> None:
    log = OutputLog(max_bytes=6, max_chunks=100)
    assert (len(log), log.first_retained_seq, log.has_after(0)) == (0, None, False)
    assert log.read(0, None) == ([], False) and log.read(0, 5) == ([], False)
    log.append(2, "stdout", b"abc")
    log.append(4, "stderr", b"de")  # seqs need not be contiguous: exit takes one too
    assert log.has_after(3) and not log.has_after(4)
    assert log.read(2, None) == ([Chunk(4, "stderr", b"de")], False)
    assert log.read(0, 4) == ([Chunk(2, "stdout", b"abc")], True)
    log.append(5, "stdout", b"fg")  # 7 bytes: the oldest chunk goes
    assert (len(log), log.first_retained_seq, log.retained_bytes) == (2, 4, 4)
    assert (log.dropped_bytes, log.dropped_chunks) == (3, 1)


def test_process_remembers_write_ids_first_in_first_out() -> None:
    process = Process(
        1,
        "p",
        Session("s"),
        tty=False,
        pipe_stdin=True,
        retention_bytes=1024,
        retention_chunks=16,
    )
    process.remember_write("a", 2)
    process.remember_write("b", 2)
    assert list(process.write_ids) == ["a", "b"]
    process.remember_write("c", 2)  # "a" falls out, oldest first
    assert list(process.write_ids) == ["b", "c"]
