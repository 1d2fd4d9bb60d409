"""Differential tests: the same cases against the reference `codex exec-server` and execproto.

The reference is found by tests/reference.py (`make test` installs it with npm); without one
these tests are skipped, saying why. Where execproto differs on purpose (docs/protocol.md), the
case is left out rather than bent.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from reference import CACHE, REFERENCE, WHY_MISSING

from .conftest import Server, start
from .wsclient import Client, output_of

pytestmark = pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)
HOMES = CACHE.parent / "reference-homes"


class Reference:
    def __init__(self, binary: str) -> None:
        # Not under /tmp: there the reference refuses to make the helper its sandbox needs.
        HOMES.mkdir(parents=True, exist_ok=True)
        self.home = tempfile.mkdtemp(prefix="codex-home-", dir=HOMES)
        self.process = subprocess.Popen(
            [binary, "exec-server", "--listen", "ws://127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "CODEX_HOME": self.home},
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()

    def client(self) -> Client:
        c = Client(self.url)
        assert "result" in c.handshake()
        return c

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture
def both(adapter: str) -> Iterator[tuple[Callable[[], Client], Callable[[], Client]]]:
    assert REFERENCE is not None
    reference = Reference(REFERENCE)
    ours = Server(adapter)
    yield reference.client, ours.client
    reference.stop()
    ours.stop()


def answer(reply: dict[str, Any]) -> Any:
    """A reply without its envelope: the reference sends no "jsonrpc" field, execproto does."""
    return {"error": reply["error"]} if "error" in reply else {"result": reply["result"]}


def same(both: Any, scenario: Callable[[Client], Any]) -> Any:
    reference, ours = both
    expected = scenario(reference())
    actual = scenario(ours())
    assert actual == expected
    return actual


def test_errors_match(both: Any) -> None:
    def scenario(c: Client) -> list[Any]:
        start(c, "dup", ["sleep", "5"])
        base = {"processId": "q", "cwd": "file:///tmp", "env": {}, "tty": False}
        cases = [
            ("no/such", {}),
            ("process/start", {**base, "argv": []}),
            ("process/start", {"processId": "q", "cwd": "file:///tmp", "env": {}, "tty": False}),
            ("process/start", {**base, "argv": ["x"], "cwd": "/tmp"}),
            ("process/start", {**base, "argv": ["x"], "cwd": "file://otherhost/tmp"}),
            ("process/start", {**base, "argv": ["x"], "tty": "yes"}),
            ("process/start", {**base, "argv": ["/no/such/program"]}),
            ("process/start", {**base, "processId": "dup", "argv": ["true"]}),
            ("process/read", {"processId": "nope"}),
            ("process/read", {"processId": "dup", "afterSeq": -1}),
            ("process/write", {"processId": "dup", "chunk": "YWJj=", "writeId": "w"}),
            ("process/write", {"processId": "dup", "chunk": "", "writeId": ""}),
            ("process/write", {"processId": "nope", "chunk": "", "writeId": "w"}),
            ("process/signal", {"processId": "dup", "signal": "kill"}),
            ("process/signal", {"processId": "nope", "signal": "interrupt"}),
            ("process/terminate", {"processId": "nope"}),
        ]
        replies = [answer(c.call(method, params)) for method, params in cases]
        c.call("process/terminate", {"processId": "dup"})
        return replies

    same(both, scenario)


def test_event_sequence_and_read_match(both: Any) -> None:
    script = "printf 'event output\\n'; sleep 0.1; printf 'event err\\n' >&2; sleep 0.1; exit 7"

    def scenario(c: Client) -> Any:
        start(c, "e", ["sh", "-c", script])
        events = c.events_until_closed("e")
        shape = [(n["method"], n["params"]["seq"], n["params"].get("exitCode")) for n in events]
        read = c.result("process/read", {"processId": "e"})
        core = {k: read[k] for k in ("chunks", "nextSeq", "exited", "exitCode", "closed", "failure",
                                     "sandboxDenied")}
        return shape, output_of(events), core

    reference, ours = both
    for _ in range(3):
        expected = scenario(reference())
        # The reference now and then skips its process/exited (its seqs then have a gap: 1, 2,
        # 4): its race, seen once in a suite run, not what it means to send. Asked again.
        seqs = [seq for _, seq, _ in expected[0]]
        if seqs == list(range(1, len(seqs) + 1)):
            break
    assert scenario(ours()) == expected


def test_late_output_after_exit_matches(both: Any, tmp_path: Path) -> None:
    runs = iter(range(2))

    def scenario(c: Client) -> Any:
        # The descendant holds the pipes, silent, until the test has seen the exit.
        release = tmp_path / f"release-{next(runs)}"
        script = (f"(while [ ! -e {shlex.quote(str(release))} ]; do sleep 0.02; done; echo LATE)"
                  " & exit 3")
        start(c, "late", ["sh", "-c", script])
        try:
            events = [c.notification(lambda n: n["params"].get("processId") == "late")]
            while events[-1]["method"] not in ("process/exited", "process/closed"):
                events.append(c.notification(lambda n: n["params"].get("processId") == "late"))
        finally:
            release.touch()
        if events[-1]["method"] != "process/closed":
            events += c.events_until_closed("late")
        return [(n["method"], n["params"]["seq"]) for n in events], output_of(events)

    same(both, scenario)


def test_write_statuses_match(both: Any) -> None:
    def scenario(c: Client) -> Any:
        start(c, "np", ["sleep", "5"])
        start(c, "p", ["cat"], pipeStdin=True)
        statuses = [
            c.result("process/write", {"processId": "np", "chunk": "eA==", "writeId": "1"}),
            c.result("process/write", {"processId": "p", "chunk": "eA==", "writeId": "1"}),
        ]
        for pid in ("np", "p"):
            c.result("process/terminate", {"processId": pid})
        return statuses

    same(both, scenario)
