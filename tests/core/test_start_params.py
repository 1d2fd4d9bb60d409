"""Strings the OS would refuse are refused at the door, naming the field, before any spawn."""

from __future__ import annotations

from typing import Any

import pytest

from execproto import Spawn

from .harness import CWD, Harness

OS_REFUSED = [
    ({"argv": ["echo", "a\x00b"]}, "argv[1] must not contain a NUL byte"),
    ({"argv": ["ec\x00ho"]}, "argv[0] must not contain a NUL byte"),
    ({"arg0": "x\x00"}, "arg0 must not contain a NUL byte"),
    ({"env": {"A": "x\x00y"}}, "env `A` must not contain a NUL byte"),
    ({"env": {"A\x00": "x"}}, "env name `A\x00` must not contain a NUL byte"),
    ({"env": {"A=B": "x"}}, "env name `A=B` must be non-empty and without `=`"),
    ({"env": {"": "x"}}, "env name `` must be non-empty and without `=`"),
    ({"envPolicy": {"inherit": "none", "ignoreDefaultExcludes": False, "exclude": [],
                    "set": {"B": "\x00"}, "includeOnly": []}},
     "envPolicy.set `B` must not contain a NUL byte"),
]


@pytest.mark.parametrize(("extra", "message"), OS_REFUSED)
def test_a_string_the_os_refuses_is_invalid_params(extra: dict[str, Any], message: str) -> None:
    h = Harness()
    h.connect()
    h.handshake()
    params = {"processId": "p", "argv": ["true"], "cwd": CWD, "env": {}, "tty": False, **extra}
    response = h.call(1, "process/start", params)
    assert response["error"] == {"code": -32602, "message": message}
    assert h.of_type(Spawn) == []
    # The id was never taken: the same id starts once the request is right.
    h.start(1, "p")
