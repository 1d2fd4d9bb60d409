"""A path no file can have is refused at the door, whatever the method, before any I/O."""

from __future__ import annotations

import pytest

from execproto import RunFs, Spawn
from execproto._paths import PATH_MAX
from execproto.fs import GetMetadata

from .harness import Harness

TOO_LONG = {"code": -32603, "message": "File name too long (os error 36)"}
LONG = "file:///" + "a/" * (PATH_MAX // 2)
ENCODED = "file:///" + "%61" * PATH_MAX  # short to look at, overlong once decoded


@pytest.mark.parametrize("uri", [LONG, ENCODED, "file:///" + "a" * (50 << 20)])
def test_an_overlong_path_is_refused_before_any_io(uri: str) -> None:
    h = Harness()
    h.connect()
    h.handshake()
    assert h.call(1, "fs/getMetadata", {"path": uri})["error"] == TOO_LONG
    start = {"processId": "p", "argv": ["true"], "cwd": uri, "env": {}, "tty": False}
    assert h.call(1, "process/start", start)["error"] == TOO_LONG
    assert h.of_type(RunFs) == [] and h.of_type(Spawn) == []


def test_a_path_just_under_the_limit_is_served() -> None:
    h = Harness()
    h.connect()
    h.handshake()
    h.request(1, "fs/getMetadata", {"path": "file:///" + "a" * (PATH_MAX - 2)})
    assert len(h.of_type(RunFs)) == 1


def test_a_lone_surrogate_is_not_json_a_pair_is_a_character() -> None:
    h = Harness()
    h.connect()
    h.handshake()
    h.send(1, '{"id": 7, "method": "fs/getMetadata", "params": {"path": "file:///x\\ud800y"}}')
    (answer,) = [m for m in h.messages(1) if m.get("id") == -1]
    assert answer["error"]["code"] == -32600
    assert answer["error"]["message"].endswith(": unexpected end of hex escape")
    h.send(1, '{"id": 8, "method": "fs/getMetadata", "params": {"path": "file:///\\ud83d\\ude00"}}')
    (run,) = h.of_type(RunFs)
    assert run.request == GetMetadata(path="/\U0001f600")
    deep = '{"id": 9, "method": "x", "params": ' + "[" * 900 + '"\\ud800"' + "]" * 900 + "}"
    h.send(1, deep)  # answered, whatever the depth, never raised
    assert len([m for m in h.messages(1) if m.get("id") == -1]) == 2
