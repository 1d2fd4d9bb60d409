"""A process's start: STARTING, then *spawned* (RUNNING) or *spawn failed* (forgotten at once).

The first of the process phases in `execproto._lifecycle` (STARTING --spawned--> RUNNING,
STARTING --spawn failed--> forgotten): the Spawn asked for, the start answered only after the
spawn, the environment policy, duplicate and reused processIds, and spawn failures. Scripted
events and explicit time through `ServerCore`; every world is checked when the test ends
(`lifecycle_world.World.check`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from execproto import (
    Config,
    Finalize,
    Host,
    LocalProtocolError,
    Send,
    Spawn,
    SpawnFailed,
    SpawnSpec,
)

from .lifecycle_world import (
    ALREADY_EXISTS,
    EPS,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    SPAWN_DENIED,
    SPAWN_ERROR,
    UNKNOWN_PROCESS,
    World,
    begin,
    close_all,
    error_of,
    events,
    expected_read,
    finalizes,
    finish,
    park,
    read,
    result_of,
    run,
    signals,
    spawned,
    start_params,
    terminate,
    unchecked_world,
)

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


def test_ids_the_server_keeps_are_bounded(w: World) -> None:
    """A processId or writeId is kept as long as its process, 4096 writeIds each: a 24 MiB one
    would cost that much per write. Past 256 characters they are refused, nothing spawned."""
    before = len(w.of_type(Spawn))
    long_start = w.request(1, "process/start", start_params("p" * 257))
    assert error_of(w, long_start) == {
        "code": -32602, "message": "processId is longer than 256 characters"}
    assert len(w.of_type(Spawn)) == before
    run(w, "q" * 256)  # the longest allowed
    long_write = w.request(1, "process/write", {"processId": "q" * 256, "chunk": "",
                                                "writeId": "w" * 257})
    assert error_of(w, long_write)["message"] == "writeId is longer than 256 characters"


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
