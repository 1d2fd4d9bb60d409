"""The same scripted session, traced under each adapter, is the same session.

Traces from different adapters cannot match step for step: times differ, a stream's bytes may
arrive in different chunks, and whether a pipe's EOF is seen before or after the exit is a race
in the kernel. So they are compared in a canonical form (docs/design.md, "Comparing traces"):
the client's messages in order; per process, each stream's bytes joined, the exit status, the
streams closed, and the Finalize; and the set of event types seen, without Tick and flow control.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from .conftest import ADAPTERS, Server, start
from .wsclient import Client

# Timing, flow control, and the end: whether the client's close reaches the server before the
# shutdown does is a race between two processes.
IGNORED = {"Tick", "SendBlocked", "SendDrained", "ConnectionClosed", "Shutdown"}


def session(client: Client) -> None:
    start(client, "a", ["sh", "-c", "echo out; echo err >&2; exit 3"])
    client.events_until_closed("a")
    start(client, "b", ["cat"], pipeStdin=True)
    write = {"processId": "b", "chunk": base64.b64encode(b"hi\n").decode(), "writeId": "1",
             "closeStdin": True}
    client.result("process/write", write)
    client.events_until_closed("b")
    client.result("process/read", {"processId": "a"})
    client.call("no/such/method")


def canonical(trace: Path) -> dict[str, Any]:
    lines = trace.read_text().splitlines()[1:]
    messages: list[Any] = []
    names: dict[int, str] = {}
    processes: dict[str, dict[str, Any]] = {}
    types: set[str] = set()
    for line in lines:
        step = json.loads(line)
        event = step["event"]
        kind = event["$type"]
        if kind in IGNORED:
            continue
        types.add(kind)
        for action in step.get("actions", []):
            if action["$type"] == "Spawn":
                names[action["proc"]] = action["spec"]["process_id"]
                processes[action["spec"]["process_id"]] = {"output": {}, "eof": []}
            if action["$type"] == "Finalize":
                record = processes[names[action["proc"]]]
                record["finalize"] = (action["status"], action["exit_code"], action["timed_out"])
        if kind == "MessageReceived":
            data = event["data"]
            text = base64.b64decode(data["$bytes"]) if isinstance(data, dict) else data
            message = json.loads(text)
            messages.append((message.get("method"), message.get("id")))
        elif kind == "OutputReceived":
            output = processes[names[event["proc"]]]["output"]
            chunk = base64.b64decode(event["data"]["$bytes"])
            output[event["stream"]] = output.get(event["stream"], b"") + chunk
        elif kind == "StreamClosed":
            processes[names[event["proc"]]]["eof"].append(event["stream"])
        elif kind == "ProcessExited":
            processes[names[event["proc"]]]["exit"] = event["returncode"]
    for record in processes.values():
        record["eof"].sort()
    return {"messages": messages, "processes": processes, "types": sorted(types)}


def test_one_session_traced_under_every_adapter_is_the_same(tmp_path: Path) -> None:
    forms = {}
    for adapter in ADAPTERS:
        trace = tmp_path / f"{adapter}.jsonl"
        server = Server(adapter, "--trace", str(trace))
        client = server.client()
        session(client)
        client.close()
        server.stop()
        forms[adapter] = canonical(trace)
    first = forms[ADAPTERS[0]]
    assert first["processes"]["a"] == {
        "output": {"stdout": b"out\n", "stderr": b"err\n"},
        "eof": ["stderr", "stdout"],
        "exit": 3,
        "finalize": ("completed", 3, False),
    }
    for adapter in ADAPTERS[1:]:
        assert forms[adapter] == first, adapter
