"""The registry's word on each method's origin, held to the reference: it answers every method
the registry calls the reference's (a params error for params ``"x"``, so nothing runs) and
none the registry calls execproto's extension (-32601); and each capability flag the registry
names is one the reference announces. One reference over stdio, about a second."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
from reference import REFERENCE, WHY_MISSING

from execproto._methods import EXTENSION, METHODS
from execproto._methods import REFERENCE as OF_THE_REFERENCE

INVALID_PARAMS, METHOD_NOT_FOUND = -32602, -32601

pytestmark = pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)


def test_the_reference_answers_its_methods_and_not_the_extensions(tmp_path: Path) -> None:
    assert REFERENCE is not None
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    env = dict(os.environ, HOME=str(home), CODEX_HOME=str(home / ".codex"))
    calls = [name for name in METHODS if name not in ("initialize", "initialized")]
    server = subprocess.Popen([REFERENCE, "exec-server", "--listen", "stdio"], cwd=tmp_path,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=env)
    watchdog = threading.Timer(60, server.kill)  # a reference that stops answering
    watchdog.start()
    assert server.stdin is not None and server.stdout is not None
    stdin, stdout = server.stdin, server.stdout

    def call(msg_id: int, method: str, params: object) -> dict[str, object]:
        """One request, and its answer (one at a time: the reference exits at end of input
        without answering what it still had)."""
        stdin.write(json.dumps({"id": msg_id, "method": method, "params": params}) + "\n")
        stdin.flush()
        for line in stdout:
            message = json.loads(line)
            if message.get("id") == msg_id:
                return dict(message)
        raise AssertionError(f"the reference ended without answering {method}")

    try:
        greeting = call(0, "initialize", {"clientName": "registry"})["result"]
        assert isinstance(greeting, dict)
        announced = greeting["environmentInfo"]["capabilities"]
        stdin.write(json.dumps({"method": "initialized", "params": {}}) + "\n")
        expected = {OF_THE_REFERENCE: INVALID_PARAMS, EXTENSION: METHOD_NOT_FOUND}
        wrong = {}
        for msg_id, name in enumerate(calls, 1):
            error = call(msg_id, name, "x")["error"]
            assert isinstance(error, dict)
            if error["code"] != expected[METHODS[name].origin]:
                wrong[name] = (METHODS[name].origin, error)
    finally:
        watchdog.cancel()
        server.kill()
        server.wait()
    assert not wrong, f"the registry's origin vs the reference's answer: {wrong}"
    # Each capability the registry names is a flag of the reference's.
    named = {method.capability for method in METHODS.values()} - {""}
    assert named <= set(announced), f"not the reference's flags: {named - set(announced)}"
