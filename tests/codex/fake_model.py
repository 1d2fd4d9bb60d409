"""A scripted stand-in for the OpenAI Responses API, so that `codex exec` runs offline.

codex POSTs every turn to `{base_url}/responses` and reads the answer as server-sent events.
Each request takes the next scripted turn: a list of output items (tool calls, a message), or a
function of the request body that returns one (when a turn depends on an earlier tool's output).
Every request body is kept: the tests read what the model was told from them.

With ``approvals_reviewer = "auto_review"`` codex also asks the same provider to review an
approval (its Guardian: a session of its own, whose request carries the action between
">>> APPROVAL REQUEST START" and "... END", and whose final message must be strict JSON with an
`outcome` of "allow" or "deny"). Those requests take the next of the ``reviews`` answers instead
of a turn, and are kept apart, in `reviews`.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable
from typing import Any

Item = dict[str, Any]
Turn = list[Item] | Callable[[dict[str, Any]], list[Item]]


def shell(call_id: str, cmd: str, **arguments: Any) -> Item:
    """An `exec_command` call. Not a login shell: a profile's noise stays out of the output."""
    arguments = {"cmd": cmd, "login": False, "yield_time_ms": 5000, **arguments}
    return function_call(call_id, "exec_command", arguments)


def function_call(call_id: str, name: str, arguments: dict[str, Any]) -> Item:
    # The arguments travel as a JSON string inside the JSON item.
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": json.dumps(arguments), "status": "completed"}


def patch(call_id: str, text: str) -> Item:
    """An `apply_patch` call: a freeform tool, so the patch is the raw input, not JSON."""
    return {"type": "custom_tool_call", "id": f"ctc_{call_id}", "call_id": call_id,
            "name": "apply_patch", "input": text, "status": "completed"}


def say(text: str) -> Item:
    """A final answer: a turn with only a message ends the `codex exec` run."""
    return {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def verdict(outcome: str, rationale: str = "scripted") -> list[Item]:
    """The Guardian's answer: `{"outcome": "allow" | "deny", ...}` as its final message."""
    assessment = {"risk_level": "low" if outcome == "allow" else "high",
                  "user_authorization": "high", "outcome": outcome, "rationale": rationale}
    return [say(json.dumps(assessment))]


REVIEW_MARK = ">>> APPROVAL REQUEST START"


def _event(kind: str, **fields: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()


class FakeModel:
    def __init__(self, turns: list[Turn], reviews: list[list[Item]] | None = None) -> None:
        self.turns = list(turns)
        self.verdicts = list(reviews or [])
        self.requests: list[dict[str, Any]] = []
        self.reviews: list[dict[str, Any]] = []  # the Guardian's requests, in order
        self.strays: list[str] = []  # any other path codex asked for: it should ask for none
        self._lock = threading.Lock()
        self._http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._http.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def outputs(self) -> dict[str, str]:
        """Each tool output codex sent back, by call id, as the model first received it."""
        found: dict[str, str] = {}
        for body in self.requests:
            for item in body.get("input", []):
                if item.get("type", "").endswith("_output") and item["call_id"] not in found:
                    out = item.get("output")
                    if isinstance(out, list):  # the content-items form
                        out = "".join(part.get("text", "") for part in out)
                    found[item["call_id"]] = str(out)
        return found

    def _answer(self, body: dict[str, Any]) -> bytes:
        with self._lock:
            number = len(self.requests) + len(self.reviews) + 1
            turn: Turn
            if REVIEW_MARK in json.dumps(body.get("input")):
                self.reviews.append(body)
                turn = (self.verdicts.pop(0) if self.verdicts
                        else [say("(fake model: no verdict scripted)")])
            else:
                self.requests.append(body)
                turn = self.turns.pop(0) if self.turns else [say("(fake model: script exhausted)")]
        items = turn(body) if callable(turn) else turn
        response = {"id": f"resp_{number}", "status": "in_progress"}
        events = [_event("response.created", response=response)]
        for index, item in enumerate(items):
            events.append(_event("response.output_item.added", output_index=index, item=item))
            events.append(_event("response.output_item.done", output_index=index, item=item))
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": 15}
        events.append(_event("response.completed",
                             response={**response, "status": "completed", "usage": usage}))
        return b"".join(events)

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        model = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def reply(self, status: int, kind: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                model.strays.append(f"GET {self.path}")
                self.reply(404, "application/json", b"{}")

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if not self.path.endswith("/responses"):
                    model.strays.append(f"POST {self.path}")
                    self.reply(404, "application/json", b"{}")
                    return
                self.reply(200, "text/event-stream", model._answer(json.loads(body)))

        return Handler
