"""Each method's params struct, as the reference names it: params that are no struct at all
(``null``, a number, a string) get the reference's own words from execproto, the struct's name
included (``invalid type: null, expected struct WireFsReadFileParams``), method by method.

The reference is asked over stdio, one call at a time; execproto's core answers the same calls
on a connection that never initialized (params are checked first, so nothing runs). About a
second."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from reference import REFERENCE, WHY_MISSING, over_stdio

from execproto import ConnectionOpened, MessageReceived, Send, ServerCore
from execproto._methods import METHODS
from execproto._methods import REFERENCE as OF_THE_REFERENCE

pytestmark = pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)

# The reference's methods that take params (initialize's are checked by the handshake tests).
CALLED = [name for name, method in METHODS.items()
          if method.origin == OF_THE_REFERENCE and name not in ("initialize", "initialized")]
NOT_STRUCTS: list[Any] = [None, 5, "x"]


def execproto_errors() -> dict[tuple[str, str], Any]:
    core = ServerCore()
    core.handle(ConnectionOpened(conn=1, session_id="s"), 0.0)
    found = {}
    for msg_id, (name, params) in enumerate(
            ((name, params) for name in CALLED for params in NOT_STRUCTS), 1):
        data = json.dumps({"id": msg_id, "method": name, "params": params}).encode()
        (sent,) = [action for action in core.handle(MessageReceived(conn=1, data=data), 0.0)
                   if isinstance(action, Send)]
        found[name, json.dumps(params)] = json.loads(sent.data)["error"]
    return found


def reference_errors(tmp_path: Path) -> dict[tuple[str, str], Any]:
    found = {}
    with over_stdio(tmp_path) as reference:
        for msg_id, (name, params) in enumerate(
                ((name, params) for name in CALLED for params in NOT_STRUCTS), 1):
            found[name, json.dumps(params)] = reference.call(msg_id, name, params)["error"]
    return found


def test_every_methods_params_struct_is_named_as_the_reference_names_it(tmp_path: Path) -> None:
    ours, theirs = execproto_errors(), reference_errors(tmp_path)
    assert set(theirs) == set(ours)
    differ = {key: (ours[key], theirs[key]) for key in ours if ours[key] != theirs[key]}
    assert differ == {}
