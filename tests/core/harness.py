"""A scripted world for driving `ServerCore` in tests: explicit time, decoded messages.

Every harness records its trace; `assert_replays` checks the recording replays identically.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from execproto import (
    Action,
    Config,
    ConnectionClosed,
    ConnectionOpened,
    Event,
    Host,
    MessageReceived,
    OutputReceived,
    ProcessExited,
    ProcessSpawned,
    Recorder,
    Send,
    ServerCore,
    Spawn,
    StreamClosed,
    Tick,
    replay,
)

CWD = "file:///tmp"


class Harness:
    def __init__(self, config: Config | None = None, host: Host | None = None) -> None:
        self.lines: list[str] = []
        self.core = Recorder(ServerCore(config, host), self.lines.append)
        self.now = 0.0
        self.actions: list[Action] = []
        self._ids = 0
        self._sessions = 0

    # -- driving --------------------------------------------------------------------------------

    def feed(self, event: Event) -> list[Action]:
        actions = self.core.handle(event, self.now)
        self.actions.extend(actions)
        return actions

    def advance(self, seconds: float) -> list[Action]:
        """Let time pass, ticking at every deadline on the way, as an adapter would."""
        end = self.now + seconds
        out: list[Action] = []
        while (due := self.core.next_deadline()) is not None and due <= end:
            self.now = max(self.now, due)
            out += self.feed(Tick())
        self.now = end
        return out

    def connect(self, conn: int = 1, peer: str = "", identity: str = "") -> list[Action]:
        self._sessions += 1
        return self.feed(ConnectionOpened(conn=conn, session_id=f"session-{self._sessions}",
                                          peer=peer, identity=identity))

    def send(self, conn: int, message: Any) -> list[Action]:
        data = message if isinstance(message, (bytes, str)) else json.dumps(message)
        return self.feed(MessageReceived(conn=conn, data=data))

    def request(self, conn: int, method: str, params: Any = None) -> int:
        self._ids += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._ids, "method": method}
        if params is not None:
            message["params"] = params
        self.send(conn, message)
        return self._ids

    def call(self, conn: int, method: str, params: Any = None) -> dict[str, Any]:
        """A request that must be answered at once; returns the whole response message."""
        msg_id = self.request(conn, method, params)
        response = self.response(conn, msg_id)
        assert response is not None, f"{method} was not answered at once"
        return response

    def handshake(self, conn: int = 1, resume: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"clientName": "test"}
        if resume is not None:
            params["resumeSessionId"] = resume
        response = self.call(conn, "initialize", params)
        self.send(conn, {"jsonrpc": "2.0", "method": "initialized", "params": {}})
        return response

    def start(self, conn: int, process_id: str, argv: list[str] | None = None, **extra: Any) -> int:
        """`process/start` through to the spawn; returns the core's handle for the process."""
        params = {
            "processId": process_id, "argv": argv or ["sh"], "cwd": CWD, "env": {}, "tty": False,
        }
        params.update(extra)
        msg_id = self.request(conn, "process/start", params)
        spawn = [a for a in self.actions if isinstance(a, Spawn)][-1]
        self.feed(ProcessSpawned(proc=spawn.proc, pid=1000 + spawn.proc))
        response = self.response(conn, msg_id)
        assert response is not None and "result" in response, response
        return spawn.proc

    def output(self, proc: int, stream: str, data: bytes) -> list[Action]:
        return self.feed(OutputReceived(proc=proc, stream=stream, data=data))

    def eof(self, proc: int, stream: str) -> list[Action]:
        return self.feed(StreamClosed(proc=proc, stream=stream))

    def exit(self, proc: int, returncode: int) -> list[Action]:
        return self.feed(ProcessExited(proc=proc, returncode=returncode))

    def disconnect(self, conn: int) -> list[Action]:
        return self.feed(ConnectionClosed(conn=conn))

    # -- looking ---------------------------------------------------------------------------------

    def messages(self, conn: int) -> list[dict[str, Any]]:
        return [json.loads(a.data) for a in self.actions if isinstance(a, Send) and a.conn == conn]

    def response(self, conn: int, msg_id: int) -> dict[str, Any] | None:
        found = [m for m in self.messages(conn) if m.get("id") == msg_id and "method" not in m]
        assert len(found) <= 1, f"answered {len(found)} times: {found}"
        return found[0] if found else None

    def notifications(self, conn: int, method: str | None = None) -> list[dict[str, Any]]:
        return [
            m for m in self.messages(conn)
            if "method" in m and (method is None or m["method"] == method)
        ]

    def of_type(self, kind: type) -> list[Any]:
        return [a for a in self.actions if isinstance(a, kind)]

    def assert_replays(self) -> None:
        result = replay(self.lines)
        assert result.ok, result


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)
