"""A process that never reads its stdin cannot be how a client fills the server's memory.

Forty 1 MiB writes to `sleep`, sent without waiting: the pipe takes what it holds, the
backlog (`Config.max_stdin_backlog`, 8 MiB) is accepted, as much again waits unanswered, the
rest is refused. Before, every write was accepted and kept (+1 GB for 1,000 of them).
"""

from __future__ import annotations

import base64
import time

from execproto import Config

from .conftest import Server, start
from .test_limits import rss_mib

CHUNK = 1 << 20
WRITES = 40


def test_writes_to_a_process_that_never_reads_are_bounded(adapter: str) -> None:
    server = Server(adapter, "--log-level", "warning")
    try:
        client = server.client()
        assert "result" in start(client, "p", ["sleep", "60"], pipeStdin=True)
        baseline = rss_mib(server.process.pid)
        data = base64.b64encode(b"x" * CHUNK).decode()
        ids = [client.request("process/write", {"processId": "p", "chunk": data,
                                                "writeId": f"w{i}"}) for i in range(WRITES)]
        answers: dict[int, dict[str, object]] = {}
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(answers) < WRITES - 8:
            message = client.recv(timeout=max(0.1, deadline - time.monotonic()))
            if message.get("id") in ids:
                answers[message["id"]] = message
        accepted = [i for i in ids if "result" in answers.get(i, {})]
        refused = [i for i in ids if "error" in answers.get(i, {})]
        waiting = [i for i in ids if i not in answers]
        backlog = Config().max_stdin_backlog // CHUNK
        assert backlog <= len(accepted) <= backlog + 4, (len(accepted), len(refused))
        assert backlog - 1 <= len(waiting) <= backlog, len(waiting)
        assert len(refused) == WRITES - len(accepted) - len(waiting)
        assert rss_mib(server.process.pid) - baseline < 150
        # The exit closes stdin: what waited is answered, and nothing of it is kept.
        assert client.result("process/terminate", {"processId": "p"}) == {"running": True}
        statuses = {client.response(i)["result"]["status"] for i in waiting}
        assert statuses == {"stdinClosed"}
    finally:
        log = server.stop()
    assert "Traceback" not in log, log
