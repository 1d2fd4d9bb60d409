"""fs/watchMissing (one watch per connection, told once), environment/status, and the calls about
the executor's setup (environmentConfig/read, capability discovery): params and routing."""

from __future__ import annotations

from typing import Any

import pytest

from execproto import (
    FsCompleted,
    LocalProtocolError,
    MissingChanged,
    RunFs,
    Unwatch,
    WatchMissing,
)
from execproto.fs import DiscoverRoots, DiscoverSkills, ReadConfig, SkillRoot

from .harness import Harness
from .messages import missing, wrong

W = "file:///tmp/wm/"
NOT_INITIALIZED = "client must call initialize before using {} methods"


def error(h: Harness, method: str, params: Any, conn: int = 1) -> dict[str, Any]:
    reply = h.call(conn, method, params)
    assert "error" in reply, reply
    return reply["error"]  # type: ignore[no-any-return]


def params_error(message: str) -> dict[str, Any]:
    return {"code": -32602, "message": message}


# -- fs/watchMissing -------------------------------------------------------------------------


@pytest.mark.parametrize("params, message", [
    ({}, missing("watchId")),
    ({"watchId": 1}, missing("missing")),
    ({"watchId": "w1", "missing": []}, wrong('string "w1"', "u64")),
    ({"watchId": -1, "missing": []}, "invalid number"),
    ({"watchId": 1, "missing": "x"}, wrong('string "x"', "a sequence")),
    ({"watchId": 1, "missing": [1]}, wrong("number", "a string")),
    ({"watchId": 1, "missing": ["relative"]}, "invalid URI: relative URL without a base"),
    ({"watchId": 1, "missing": ["http://x/y"]}, "unsupported path URI scheme `http`"),
    ({"watchId": 1, "missing": [], "present": "x"}, "invalid URI: relative URL without a base"),
    ([1, [W + "a"]], "invalid length 2, expected struct FsWatchMissingParams with 3 elements"),
    ([1, [], None, 4], "invalid length 4, expected fewer elements in array"),
    (None, wrong("null", "struct FsWatchMissingParams")),
])
def test_watch_params_errors(h: Harness, params: Any, message: str) -> None:
    assert error(h, "fs/watchMissing", params) == params_error(message)


def test_too_many_paths_is_refused(h: Harness) -> None:
    paths = [f"{W}{i}" for i in range(257)]
    assert error(h, "fs/watchMissing", {"watchId": 1, "missing": paths}) == {
        "code": -32600, "message": "fs/watchMissing watches at most 256 paths"}
    assert not h.of_type(WatchMissing)


def test_empty_missing_answers_false_without_the_adapter(h: Harness) -> None:
    for params in ({"watchId": 1, "missing": []}, [2, [], None],
                   {"watchId": 3, "missing": [], "present": W}):
        assert h.call(1, "fs/watchMissing", params)["result"] == {"watching": False}
    assert not h.of_type(WatchMissing)


def watch(h: Harness, watch_id: int, paths: list[str], conn: int = 1,
          present: str | None = None, watching: bool = True) -> WatchMissing:
    msg_id = h.request(conn, "fs/watchMissing",
                       {"watchId": watch_id, "missing": paths, "present": present})
    action = h.of_type(WatchMissing)[-1]
    h.feed(FsCompleted(op=action.op, result={"watching": watching}))
    assert h.response(conn, msg_id)["result"] == {"watching": watching}  # type: ignore[index]
    return action


def changed(h: Harness, conn: int = 1) -> list[Any]:
    return [n["params"] for n in h.notifications(conn, "fs/missingChanged")]


def test_a_watch_fires_once_on_its_connection(h: Harness) -> None:
    action = watch(h, 7, [W + "a", W + "b/c"], present=W)
    assert (action.missing, action.present) == (("/tmp/wm/a", "/tmp/wm/b/c"), "/tmp/wm/")
    h.feed(MissingChanged(watch=action.watch))
    assert changed(h) == [{"watchId": 7}]
    h.feed(MissingChanged(watch=action.watch))  # already over: the adapter raced it
    assert changed(h) == [{"watchId": 7}]
    h.assert_replays()


def test_each_call_replaces_the_watch(h: Harness) -> None:
    first = watch(h, 1, [W + "a"])
    second = watch(h, 2, [W + "b"])
    assert Unwatch(watch=first.watch) in h.actions
    h.feed(MissingChanged(watch=first.watch))
    assert changed(h) == []
    h.call(1, "fs/watchMissing", {"watchId": 3, "missing": []})  # unwatch
    assert Unwatch(watch=second.watch) in h.actions
    third = watch(h, 4, [W + "c"])
    # A stale id (not above every id sent before) is answered false and changes nothing.
    for stale in (4, 2, 0):
        assert h.call(1, "fs/watchMissing", {"watchId": stale, "missing": [W + "d"]})[
            "result"] == {"watching": False}
    assert Unwatch(watch=third.watch) not in h.actions
    h.feed(MissingChanged(watch=third.watch))
    assert changed(h) == [{"watchId": 4}]
    h.feed(MissingChanged(watch=second.watch))
    assert changed(h) == [{"watchId": 4}]


def test_watches_are_per_connection_and_end_with_it(h: Harness) -> None:
    h.connect(2)
    h.handshake(2)
    mine = watch(h, 1, [W + "a"])
    theirs = watch(h, 1, [W + "a"], conn=2)
    assert not h.of_type(Unwatch)
    h.disconnect(2)
    assert h.of_type(Unwatch) == [Unwatch(watch=theirs.watch)]
    h.feed(MissingChanged(watch=theirs.watch))
    h.feed(MissingChanged(watch=mine.watch))
    assert changed(h) == [{"watchId": 1}]
    assert changed(h, 2) == []


def test_an_unanswered_watch_is_dropped_with_its_connection(h: Harness) -> None:
    h.request(1, "fs/watchMissing", {"watchId": 1, "missing": [W + "a"]})
    action = h.of_type(WatchMissing)[-1]
    h.disconnect(1)
    h.feed(FsCompleted(op=action.op, result={"watching": True}))  # stale: ignored
    h.feed(MissingChanged(watch=action.watch))
    assert [m for m in h.messages(1) if "result" in m and m["id"] != 1] == []


def test_an_unknown_watch_is_an_adapter_bug(h: Harness) -> None:
    with pytest.raises(LocalProtocolError):
        h.feed(MissingChanged(watch=99))


# -- environment/status ----------------------------------------------------------------------


@pytest.mark.parametrize("params", [None, {}])
def test_status_is_ready(h: Harness, params: Any) -> None:
    assert h.call(1, "environment/status", params)["result"] == {"status": "ready"}


@pytest.mark.parametrize("params, what", [({"x": 1}, "map"), ([], "sequence"), ([1], "sequence"),
                                          (1, "number")])
def test_status_takes_no_params(h: Harness, params: Any, what: str) -> None:
    assert error(h, "environment/status", params) == params_error(wrong(what, "unit"))


# -- environmentConfig/read and discovery ------------------------------------------------------

CONFIG = {"cwd": "file:///tmp/p", "configPaths": [["model"]], "requirementsPaths": []}


@pytest.mark.parametrize("params, message", [
    ({}, missing("cwd")),
    ({"cwd": "file:///tmp", "configPaths": []}, missing("requirementsPaths")),
    ({"cwd": "file:///tmp", "configPaths": [], "requirementsPaths": []},
     "at least one config or requirements path is required"),
    ({"cwd": "file:///tmp", "configPaths": [[]], "requirementsPaths": []},
     "TOML paths must contain at least one key segment"),
    ({"cwd": "file:///tmp", "configPaths": ["a"], "requirementsPaths": []},
     wrong('string "a"', "a sequence")),
    ({"cwd": "file:///tmp", "configPaths": 1, "requirementsPaths": []},
     wrong("number", "a sequence")),
    ({"cwd": "file:///tmp", "configPaths": [[1]], "requirementsPaths": []},
     wrong("number", "a string")),
    ({**CONFIG, "cwd": None}, wrong("null", "a string")),
    ({**CONFIG, "cwd": "/tmp"}, "invalid URI: relative URL without a base"),
])
def test_config_read_params_errors(h: Harness, params: Any, message: str) -> None:
    assert error(h, "environmentConfig/read", params) == params_error(message)


def test_config_read_runs_in_the_adapter(h: Harness) -> None:
    msg_id = h.request(1, "environmentConfig/read", {**CONFIG, "configPaths": [[""], ["a", "b"]]})
    (run,) = h.of_type(RunFs)
    assert run.request == ReadConfig(cwd="/tmp/p", config_paths=(("",), ("a", "b")),
                                     requirements_paths=())
    h.feed(FsCompleted(op=run.op, result={"hostname": "h"}))
    assert h.response(1, msg_id)["result"] == {"hostname": "h"}  # type: ignore[index]


@pytest.mark.parametrize("params, message", [
    ({}, missing("cwd")),
    (None, wrong("null", "struct DiscoverV2CapabilitiesRequest")),
    ([], "invalid length 0, expected struct DiscoverV2CapabilitiesRequest with 2 elements"),
    (["file:///tmp", None, 3], "invalid length 3, expected fewer elements in array"),
    ({"cwd": 1}, wrong("number", "a string")),
])
def test_discover_v2_params_errors(h: Harness, params: Any, message: str) -> None:
    assert error(h, "capabilities/discoverV2", params) == params_error(message)


@pytest.mark.parametrize("params, message", [
    ({}, missing("roots")),
    ({"roots": [{"id": "r"}]}, missing("path")),
    ({"roots": [{"path": "file:///x"}]}, missing("id")),
    ({"roots": [{"id": 1, "path": "file:///x"}]}, wrong("number", "a string")),
    ({"roots": 1}, wrong("number", "a sequence")),
])
def test_discover_v1_params_errors(h: Harness, params: Any, message: str) -> None:
    assert error(h, "capabilityRoots/discoverV1", params) == params_error(message)


def test_discovery_runs_in_the_adapter(h: Harness) -> None:
    h.request(1, "capabilities/discoverV2", ["file:///tmp/p"])
    h.request(1, "capabilityRoots/discoverV1",
              {"roots": [{"id": "r", "path": "file:///tmp/p", "extra": 1}]})
    assert [run.request for run in h.of_type(RunFs)] == [
        DiscoverSkills(cwd="/tmp/p"),
        DiscoverRoots(roots=(SkillRoot(id="r", path="/tmp/p", sandbox=None),)),
    ]


@pytest.mark.parametrize("method, params, category", [
    ("environment/status", None, "environment status"),
    ("environmentConfig/read", CONFIG, "environment config"),
    ("capabilities/discoverV2", {"cwd": "file:///tmp"}, "capability discovery"),
    ("capabilityRoots/discoverV1", {"roots": []}, "capability discovery"),
])
def test_handshake_categories(method: str, params: Any, category: str) -> None:
    h = Harness()
    h.connect(1)
    assert error(h, method, params) == {"code": -32600,
                                        "message": NOT_INITIALIZED.format(category)}
    h.call(1, "initialize", {"clientName": "c"})
    assert error(h, method, params)["message"] == (
        f"client must send initialized before using {category} methods")
