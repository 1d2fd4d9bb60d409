"""A spawn backend for the tests, loaded by the server with ``--backend``: it runs the argv
locally and appends every prepare and finalize call, as JSON, to $EXECPROTO_TEST_RECORD."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from execproto import SpawnSpec
from execproto.adapters.backends import ExecSpec, Refused

SLOW_CLEANUP = 2.0  # seconds


class RecordingBackend:
    sandbox_type = "none"

    def __init__(self) -> None:
        self._path = os.environ["EXECPROTO_TEST_RECORD"]

    def _record(self, **call: Any) -> None:
        with open(self._path, "a") as out:
            out.write(json.dumps(call) + "\n")

    def prepare(self, request: SpawnSpec) -> ExecSpec:
        if request.argv[0] == "refuse-me":
            raise Refused("refuse-me cannot be enforced by this backend")
        if request.argv[0] == "crash-me":  # a bug in a backend, not a refusal
            raise RuntimeError("prepare crashed")
        token = f"token-{request.process_id}"
        self._record(call="prepare", token=token)
        return ExecSpec(argv=request.argv, env=request.env, cwd=request.cwd, token=token)

    def finalize(self, token: Any, status: str, exit_code: int | None, timed_out: bool) -> None:
        self._record(call="finalize", token=token, status=status, exit_code=exit_code,
                     timed_out=timed_out)
        if token == "token-explode":
            raise RuntimeError("finalize exploded")
        if token == "token-slow-cleanup":  # a sandbox's cleanup that takes its time
            time.sleep(SLOW_CLEANUP)


def make() -> RecordingBackend:
    return RecordingBackend()
