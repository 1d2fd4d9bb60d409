"""``process/resize`` and a start's ``rows``/``cols``: execproto's terminal-size extension.

``process/resize {processId, rows, cols}`` -> ``{}``: `ResizeTerminal` while the process runs;
asked while it starts, the newest size waits for the spawn; once exited, nothing and no error
(as ``process/signal``). Unknown, or without a terminal: -32600. ``rows`` and ``cols`` on
``process/start`` go into the `Spawn`. Every world is checked when the test ends
(`lifecycle_world.World.check`: no resize before the spawn, after the exit, or of a process
without a terminal; the trace replays).
"""

from __future__ import annotations

from typing import Any

import pytest

from execproto import ResizeTerminal, Spawn, SpawnFailed
from execproto._server import ServerCore, _extensions

from .harness import Harness
from .lifecycle_world import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    UNKNOWN_PROCESS,
    World,
    begin,
    close_all,
    error_of,
    finish,
    run,
    spawned,
)

TTY = ("pty",)
BAD_ROWS = "rows must be an integer from 1 to 65535"
BAD_COLS = "cols must be an integer from 1 to 65535"


def resize(w: World, rows: int = 50, cols: int = 132, process_id: str = "p") -> dict[str, Any]:
    """A `process/resize` answered at once; the whole response."""
    return w.call_now(1, "process/resize", {"processId": process_id, "rows": rows, "cols": cols})


def resizes(w: World) -> list[ResizeTerminal]:
    return w.of_type(ResizeTerminal)


# -- process/resize -------------------------------------------------------------------------------


def test_a_running_terminal_is_resized_at_once(w: World) -> None:
    proc = run(w, tty=True)
    assert resize(w, 50, 132)["result"] == {}
    assert resizes(w) == [ResizeTerminal(proc=proc, rows=50, cols=132)]
    assert resize(w, 1, 65535)["result"] == {}  # the edges
    assert resizes(w)[-1] == ResizeTerminal(proc=proc, rows=1, cols=65535)


def test_a_resize_while_starting_waits_for_the_spawn_and_only_the_newest_counts(
        w: World) -> None:
    _, spawn = begin(w, tty=True)
    assert resize(w, 30, 100)["result"] == {}
    assert resize(w, 40, 120)["result"] == {}
    assert resizes(w) == []  # no terminal yet
    spawned(w, spawn.proc)
    assert resizes(w) == [ResizeTerminal(proc=spawn.proc, rows=40, cols=120)]
    resize(w, 41, 121)  # and once running, at once again
    assert resizes(w)[-1] == ResizeTerminal(proc=spawn.proc, rows=41, cols=121)


def test_a_resize_while_starting_is_forgotten_with_a_failed_spawn(w: World) -> None:
    _, spawn = begin(w, tty=True)
    resize(w)
    w.feed(SpawnFailed(proc=spawn.proc, error="No such file or directory (os error 2)"))
    assert resizes(w) == []
    assert error_of(w, w.request(1, "process/resize", {"processId": "p", "rows": 1, "cols": 1})
                    ) == {"code": INVALID_REQUEST, "message": UNKNOWN_PROCESS.format("p")}


def test_after_the_exit_a_resize_does_nothing_and_is_no_error(w: World) -> None:
    proc = run(w, tty=True)
    w.exit(proc, 0)
    assert resize(w)["result"] == {}  # exited, the terminal still open
    close_all(w, proc, TTY)
    assert resize(w)["result"] == {}  # closed, still readable
    assert resizes(w) == []


def test_an_unknown_process_is_the_reads_error(w: World) -> None:
    run(w, tty=True)
    assert resize(w, process_id="q")["error"] == {
        "code": INVALID_REQUEST, "message": UNKNOWN_PROCESS.format("q")}
    assert resizes(w) == []


@pytest.mark.parametrize("closed", [False, True])
def test_a_process_without_a_terminal_is_refused(w: World, closed: bool) -> None:
    proc = run(w)
    if closed:
        finish(w, proc)
    assert resize(w)["error"] == {
        "code": INVALID_REQUEST,
        "message": "process p has no terminal: it was started without tty",
    }
    assert resizes(w) == []


def test_a_session_only_resizes_its_own(w: World) -> None:
    run(w, tty=True)
    w.connect(2)
    w.handshake(2)
    reply = w.call_now(2, "process/resize", {"processId": "p", "rows": 5, "cols": 5})
    assert reply["error"]["message"] == UNKNOWN_PROCESS.format("p")
    assert resizes(w) == []


@pytest.mark.parametrize(
    "params, message",
    [
        ({"rows": 24, "cols": 80}, "missing field `processId`"),
        ({"processId": "p", "cols": 80}, "missing field `rows`"),
        ({"processId": "p", "rows": 24}, "missing field `cols`"),
        ({"processId": "p", "rows": 0, "cols": 80}, BAD_ROWS),
        ({"processId": "p", "rows": 65536, "cols": 80}, BAD_ROWS),
        ({"processId": "p", "rows": -1, "cols": 80}, BAD_ROWS),
        ({"processId": "p", "rows": 24.0, "cols": 80}, BAD_ROWS),
        ({"processId": "p", "rows": "24", "cols": 80}, BAD_ROWS),
        ({"processId": "p", "rows": True, "cols": 80}, BAD_ROWS),
        ({"processId": "p", "rows": None, "cols": 80}, BAD_ROWS),
        ({"processId": "p", "rows": 24, "cols": 0}, BAD_COLS),
        ({"processId": "p", "rows": 24, "cols": 2**64}, BAD_COLS),
        ({"processId": "p", "rows": 24, "cols": [80]}, BAD_COLS),
        ({"processId": 5, "rows": 24, "cols": 80}, "invalid type: number, expected a string"),
    ],
)
def test_bad_params_are_invalid_params_naming_the_field(
        w: World, params: dict[str, Any], message: str) -> None:
    run(w, tty=True)
    msg_id = w.request(1, "process/resize", params)
    assert error_of(w, msg_id) == {"code": INVALID_PARAMS, "message": message}
    assert resizes(w) == []


def test_params_are_checked_before_the_handshake_and_the_handshake_before_the_process() -> None:
    h = Harness()
    h.connect(1)
    bad = h.call(1, "process/resize", {"processId": "p", "rows": 0, "cols": 1})
    assert bad["error"] == {"code": INVALID_PARAMS, "message": BAD_ROWS}
    early = h.call(1, "process/resize", {"processId": "p", "rows": 1, "cols": 1})
    assert early["error"] == {
        "code": INVALID_REQUEST,
        "message": "client must call initialize before using exec methods",
    }
    h.assert_replays()


# -- rows and cols on process/start ---------------------------------------------------------------


def test_a_start_with_rows_and_cols_spawns_its_terminal_at_that_size(w: World) -> None:
    _, spawn = begin(w, tty=True, rows=50, cols=132)
    assert spawn.spec.terminal_size == (50, 132)
    spawned(w, spawn.proc)
    assert resizes(w) == []  # the spawn carries it: nothing to resize afterwards


@pytest.mark.parametrize("extra", [{}, {"rows": None, "cols": None}])
def test_a_start_without_them_leaves_the_size_to_the_adapter(
        w: World, extra: dict[str, Any]) -> None:
    _, spawn = begin(w, tty=True, **extra)
    assert spawn.spec.terminal_size is None


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"tty": True, "rows": 24}, "rows and cols must be given together"),
        ({"tty": True, "cols": 80}, "rows and cols must be given together"),
        ({"tty": True, "rows": 24, "cols": None}, "rows and cols must be given together"),
        ({"tty": False, "rows": 24, "cols": 80}, "rows and cols are only for a terminal (tty: "
                                                  "true)"),
        ({"tty": True, "rows": 0, "cols": 80}, BAD_ROWS),
        ({"tty": True, "rows": 24, "cols": 70000}, BAD_COLS),
        ({"tty": True, "rows": "24", "cols": 80}, BAD_ROWS),
    ],
)
def test_a_start_with_bad_rows_or_cols_is_refused_and_spawns_nothing(
        w: World, extra: dict[str, Any], message: str) -> None:
    params = {"processId": "p", "argv": ["sh"], "cwd": "file:///tmp", "env": {}, **extra}
    msg_id = w.request(1, "process/start", params)
    assert error_of(w, msg_id) == {"code": INVALID_PARAMS, "message": message}
    assert w.of_type(Spawn) == []


# -- the capability --------------------------------------------------------------------------------


def test_initialize_names_every_extension_method_and_each_is_served() -> None:
    h = Harness()
    h.connect(1)
    result = h.handshake(1)["result"]
    assert result["execproto"] == {"methods": ["process/ack", "process/resize", "session/end",
                                               "forward/open", "forward/write", "forward/ack",
                                               "forward/close"]}
    core = ServerCore()
    core._later("forwards")  # forwarding's methods join the table at its first need
    served = core._methods  # noqa: SLF001 - the routing table is the truth here
    assert set(_extensions()) <= set(served)
    for method in _extensions():  # each is answered, none with -32601
        reply = h.call(1, method, {"processId": "nope", "seq": 1, "rows": 1, "cols": 1})
        assert reply.get("error", {}).get("code") != -32601, reply
    h.assert_replays()
