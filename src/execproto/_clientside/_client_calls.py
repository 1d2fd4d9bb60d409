"""The calls a `ClientCore` has sent or queued and waits on, one small class per kind.

Each knows what its answer means (`Call.answered`), how a malformed answer ends it
(`Call.malformed`), and what becomes of it when the connection drops before the answer
(`Call.dropped`) or the session is lost (`Call.abandoned`):

- `Request`: a call of the core's user; it ends in exactly one `Response` or `Failure`.
- `Start`: a ``process/start``, which also tells the core whether its process exists.
- `Initialize`: the handshake, which makes the core ready or ends the session.
- `CatchUp`: a ``process/read`` of the core's own, filling a gap in a process's seqs.
- `Ack`: a ``process/ack``; its answer matters to nobody.

The core owns the state (``state``, the processes, the queues): a call asks it to change it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import INTERNAL_ERROR, INVALID_REQUEST, SESSION_ATTACHED
from ..client_events import CONNECTION_LOST, ClientEvent, Failure, HandshakeFailed, Response
from . import _client_frames as frames

if TYPE_CHECKING:  # the core calls these, and they call it back: a type-only circle
    from ._client import ClientCore


class Call:
    """A JSON-RPC call the server has yet to answer."""

    __slots__ = ("id", "method", "params", "retry", "sent_before")

    def __init__(self, call_id: int, method: str, params: Any, retry: bool = False) -> None:
        self.id = call_id
        self.method = method
        self.params = params
        self.retry = retry  # sent again after a reconnect, when it may or may not have been served
        self.sent_before = False  # sent on a connection that dropped before the answer

    def answered(self, core: ClientCore, message: dict[str, Any],
                 events: list[ClientEvent]) -> None:
        """The server's answer (a result or an error), not yet checked: raise `Malformed` for
        what cannot be acted on, before changing anything."""
        raise NotImplementedError

    def malformed(self, core: ClientCore, why: str, events: list[ClientEvent]) -> None:
        """The answer was malformed. Nobody waits on a call of the core's own: nothing to end."""

    def dropped(self, core: ClientCore, events: list[ClientEvent]) -> None:
        """The connection closed before the answer (calls are told newest first)."""

    def abandoned(self, why: str) -> Failure | None:
        """The session is lost, and this call with it: how its caller hears of it."""
        return None


class Request(Call):
    """A call of the core's user: `ClientCore.request` returned its id."""

    __slots__ = ()

    def answered(self, core: ClientCore, message: dict[str, Any],
                 events: list[ClientEvent]) -> None:
        if "error" in message:
            self.failed(core, frames.error(message), events)
        else:
            self.succeeded(core, frames.result(message), events)

    def succeeded(self, core: ClientCore, result: Any, events: list[ClientEvent]) -> None:
        events.append(Response(call_id=self.id, method=self.method, result=result))

    def failed(self, core: ClientCore, error: dict[str, Any], events: list[ClientEvent]) -> None:
        events.append(Failure(call_id=self.id, method=self.method, code=error["code"],
                              message=error["message"], data=error.get("data")))

    def malformed(self, core: ClientCore, why: str, events: list[ClientEvent]) -> None:
        # Ends the call all the same: failing it beats leaving its caller waiting for good.
        events.append(Failure(call_id=self.id, method=self.method, code=INTERNAL_ERROR,
                              message=f"the server's answer was malformed: {why}"))

    def dropped(self, core: ClientCore, events: list[ClientEvent]) -> None:
        if self.retry and core._resend(self):
            self.sent_before = True
        else:
            events.append(self._lost("the connection closed before the answer"))

    def abandoned(self, why: str) -> Failure | None:
        return self._lost(f"the session is lost: {why}")

    def _lost(self, why: str) -> Failure:
        return Failure(call_id=self.id, method=self.method, code=CONNECTION_LOST, message=why)


class Start(Request):
    """``process/start``: the core tracks its process from the moment it is sent, so none of
    its events are lost; the answer says whether it can be read back or is to be forgotten."""

    __slots__ = ()

    @property
    def process_id(self) -> str:
        process_id: str = self.params["processId"]
        return process_id

    def succeeded(self, core: ClientCore, result: Any, events: list[ClientEvent]) -> None:
        core._mark_started(self.process_id)
        super().succeeded(core, result, events)

    def failed(self, core: ClientCore, error: dict[str, Any], events: list[ClientEvent]) -> None:
        if (self.sent_before and error["code"] == INVALID_REQUEST
                and error["message"].endswith("already exists")):
            # The first send was served before the connection dropped: the repeat found it.
            self.succeeded(core, {"processId": self.process_id, "sandboxType": "none"}, events)
            return
        core._forget(self.process_id)
        super().failed(core, error, events)

    def malformed(self, core: ClientCore, why: str, events: list[ClientEvent]) -> None:
        core._forget(self.process_id)
        super().malformed(core, why, events)


# The call class for a method of `ClientCore.request`, where it is not a plain `Request`.
REQUESTS: dict[str, type[Request]] = {"process/start": Start}


class Initialize(Call):
    """``initialize``, resuming the session when it names one. Never sent again: the next
    connection sends a new one."""

    __slots__ = ()

    def __init__(self, call_id: int, params: dict[str, Any]) -> None:
        super().__init__(call_id, "initialize", params)

    def answered(self, core: ClientCore, message: dict[str, Any],
                 events: list[ClientEvent]) -> None:
        if "error" not in message:
            core._ready(frames.session(message, core.acks), events)
            return
        error = frames.error(message)
        code, text = error["code"], error["message"]
        if "resumeSessionId" in self.params and code != SESSION_ATTACHED:
            core._lose(text, events)  # expired, or the server restarted
        else:
            core._handshake_failed(HandshakeFailed(code=code, message=text,
                                                  retry=code == SESSION_ATTACHED), events)

    def malformed(self, core: ClientCore, why: str, events: list[ClientEvent]) -> None:
        core._handshake_failed(HandshakeFailed(code=INTERNAL_ERROR, retry=False,
                                              message=f"a malformed answer: {why}"), events)


class CatchUp(Call):
    """A ``process/read`` from a process's cursor, sent by the core across a gap in its seqs."""

    __slots__ = ("process_id",)

    def __init__(self, call_id: int, process_id: str, after_seq: int) -> None:
        super().__init__(call_id, "process/read", {"processId": process_id, "afterSeq": after_seq})
        self.process_id = process_id

    def answered(self, core: ClientCore, message: dict[str, Any],
                 events: list[ClientEvent]) -> None:
        core._on_catch_up(self.process_id, message, events)

    def dropped(self, core: ClientCore, events: list[ClientEvent]) -> None:
        core._read_dropped(self.process_id)  # read again after the resume


class Ack(Call):
    """``process/ack``: the server may drop a process's output up to ``seq``."""

    __slots__ = ()

    def __init__(self, call_id: int, process_id: str, seq: int) -> None:
        super().__init__(call_id, "process/ack", {"processId": process_id, "seq": seq})

    def answered(self, core: ClientCore, message: dict[str, Any],
                 events: list[ClientEvent]) -> None:
        """Nothing: a lost ack is sent again by the next one, or by the resume."""
