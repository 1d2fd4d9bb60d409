"""The terminal-size extension end to end, on every adapter: ``rows``/``cols`` on
``process/start``, then ``process/resize`` seen by ``stty size`` inside the process and as a
SIGWINCH, plainly and inside the sandbox; a process without a terminal is refused; the
capability is named in ``initialize``'s answer.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from .conftest import Server, start
from .sandboxes import needs_bwrap, read_only
from .wsclient import Client, output_of


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def wait_for(client: Client, process_id: str, text: bytes, timeout: float = 15) -> bytes:
    """The process's terminal output until it holds ``text`` (the notifications are taken)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while text not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {text!r} from {process_id} in {timeout} s: {seen!r}"
        n = client.notification(lambda m: m["params"].get("processId") == process_id, left)
        assert n["method"] == "process/output", (n, seen)
        seen += base64.b64decode(n["params"]["chunk"])
    return seen


def resize(client: Client, process_id: str, rows: int, cols: int) -> dict[str, Any]:
    return client.call("process/resize", {"processId": process_id, "rows": rows, "cols": cols})


def sized_then_resized(client: Client, process_id: str, **extra: Any) -> bytes:
    """Start ``stty size; read; stty size`` at 33x101, resize it to 50x132 once the first size
    is out, end the read with a line: the whole terminal output."""
    reply = start(client, process_id, ["sh", "-c", "stty size; read x; stty size"], tty=True,
                  rows=33, cols=101, **extra)
    assert "result" in reply, reply
    first = wait_for(client, process_id, b"33 101\r\n")
    reply = resize(client, process_id, 50, 132)
    assert reply.get("result") == {} and "error" not in reply, reply
    write = {"processId": process_id, "chunk": b64(b"go\n"), "writeId": "1"}
    assert client.result("process/write", write) == {"status": "accepted"}
    events = client.events_until_closed(process_id)
    exited = [e["params"]["exitCode"] for e in events if e["method"] == "process/exited"]
    assert exited == [0], events
    return first + output_of(events).get("pty", b"")


def test_the_start_size_then_the_new_size_are_what_stty_sees(client: Client) -> None:
    out = sized_then_resized(client, "r")
    assert out.startswith(b"33 101\r\n"), out
    assert out.endswith(b"50 132\r\n"), out  # after the echoed "go"


def test_a_resize_is_a_sigwinch_to_the_foreground(client: Client) -> None:
    script = 'trap "stty size; exit 7" WINCH; echo ready; while :; do sleep 0.05; done'
    start(client, "w", ["sh", "-c", script], tty=True)
    wait_for(client, "w", b"ready\r\n")
    assert resize(client, "w", 44, 99)["result"] == {}
    events = client.events_until_closed("w")
    assert output_of(events)["pty"].endswith(b"44 99\r\n"), events
    assert [e["params"]["exitCode"] for e in events if e["method"] == "process/exited"] == [7]


@needs_bwrap
def test_a_sandboxed_terminal_is_resized_the_same(client: Client) -> None:
    out = sized_then_resized(client, "sb", sandbox=read_only("/tmp"))
    assert out.startswith(b"33 101\r\n") and out.endswith(b"50 132\r\n"), out


def test_a_process_without_a_terminal_is_refused_and_runs_on(client: Client) -> None:
    start(client, "p", ["sh", "-c", "read x; echo still-here"], pipeStdin=True)
    reply = resize(client, "p", 50, 132)
    assert reply["error"] == {"code": -32600,
                              "message": "process p has no terminal: it was started without tty"}
    assert resize(client, "nope", 50, 132)["error"] == {"code": -32600,
                                                      "message": "unknown process id nope"}
    write = {"processId": "p", "chunk": b64(b"\n"), "writeId": "1"}
    assert client.result("process/write", write) == {"status": "accepted"}
    assert output_of(client.events_until_closed("p")) == {"stdout": b"still-here\n"}


def test_rows_without_a_terminal_are_refused_at_start(client: Client) -> None:
    reply = start(client, "t", ["true"], rows=24, cols=80)
    assert reply["error"] == {"code": -32602,
                              "message": "rows and cols are only for a terminal (tty: true)"}


def test_initialize_names_the_extension_methods(server: Server) -> None:
    c = server.client(handshake=False)
    try:
        result = c.handshake()["result"]
        assert result["execproto"] == {"methods": [
            "process/ack", "process/resize", "session/end", "forward/open", "forward/write",
            "forward/ack", "forward/close"]}
    finally:
        c.close()
