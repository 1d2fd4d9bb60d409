"""`ClientCore`: the client side of the exec-server protocol, with no I/O.

It builds requests, matches answers to calls, and keeps each process's events in seq order,
delivering every output chunk, the exit and the close exactly once. When the connection drops,
the adapter opens a new one and the core resumes the session: it sends ``initialize`` with the
session id, reads every unfinished process back from the last seq it delivered, and sends again
the calls that are safe to repeat. Feed it frames with `receive`, tell it about connections with
`connection_made` / `connection_lost`, and send what `data_to_send` returns.
"""

from __future__ import annotations

import base64
from typing import Any

from .._errors import LocalProtocolError, UnsendableText
from .._methods import METHODS
from .._paths import uri_from_path
from ..client_events import ClientEvent, HandshakeFailed, Ready, ServerMisbehaved, SessionLost
from . import _client_frames as frames
from ._client_calls import REQUESTS, Call, Initialize, Request
from ._client_tracks import ClientState, ProcessTracking, _dumps, _Track

# Whether a call may be sent again after a reconnect, when it may or may not have been served:
# the registry's word for each method (`_methods`, where each is argued). A start is safe because
# a repeat that finds the process already there counts as its success; a write because the
# server skips a writeId it has seen. A signal is not: it would signal twice.
_RETRY_SAFE = {name: method.retry_safe for name, method in METHODS.items()}


class ClientCore(ProcessTracking):
    """One client session. ``instance`` must be unique to this client (a random hex string
    from the adapter): it makes writeIds that no other client of the session can repeat.

    An exception that escapes `receive`, `connection_lost` or `release` is the core's own bug
    (a frame it cannot act on is `ServerMisbehaved`, never an exception): the core stops, in
    state ``ERROR`` with the exception in ``error``, and every later call but
    `connection_lost` raises `LocalProtocolError`, as h11's ERROR state does."""

    def __init__(self, instance: str, client_name: str = "execproto", *, acks: bool = True,
                 release_on_delivery: bool = True) -> None:
        self.instance = instance
        self.client_name = client_name
        self.acks = acks
        # Whether delivered output counts as released at once, or waits for `release`.
        self.release_on_delivery = release_on_delivery
        # A quarter of the server's ack window (bytes, chunks), when it takes acks: the output
        # released between two acks.
        self._ack_window: tuple[int, int] | None = None
        self.state = ClientState.DISCONNECTED
        self.session_id: str | None = None
        self.environment_info: Any = None
        # execproto's extension methods the server named in its initialize answer (a server
        # without them, the reference, names none).
        self.extensions: frozenset[str] = frozenset()
        self._next_id = 1
        self._next_write = 1
        self._outbox: list[bytes] = []
        self._inflight: dict[int, Call] = {}  # sent, by id, oldest first
        self._waiting: list[Call] = []  # made while not READY, sent once it is
        self._tracks: dict[str, _Track] = {}
        self.error: BaseException | None = None  # what stopped the core (state ERROR)

    def _check_sound(self) -> None:
        if self.error is not None:
            raise LocalProtocolError(
                f"the client core stopped after a bug of its own: {self.error!r}"
            ) from self.error

    def _fail(self, error: BaseException) -> None:
        """The core's own bug: stop for good (state ERROR)."""
        self.state, self.error = ClientState.ERROR, error

    def _check_usable(self) -> None:
        """For what starts something new: a lost session cannot."""
        self._check_sound()
        if self.state is ClientState.LOST:
            raise LocalProtocolError("the session is lost; start a new client")

    # -- the connection -------------------------------------------------------------------------

    def connection_made(self) -> None:
        """A new connection is open: start the handshake (resuming the session if there is one)."""
        self._check_usable()
        if self.state is not ClientState.DISCONNECTED:
            raise LocalProtocolError(f"connection_made while {self.state.value}")
        params: dict[str, Any] = {"clientName": self.client_name}
        if self.session_id is not None:
            params["resumeSessionId"] = self.session_id
        if self.acks:
            # execproto's extension, ignored by servers without it: output this client has not
            # acknowledged stays retained, so a dropped connection loses nothing in flight.
            params["outputAcks"] = True
        self.state = ClientState.HANDSHAKING
        self._send(Initialize(self._call_id(), params))

    def connection_lost(self) -> list[ClientEvent]:
        """The connection is gone. Calls that are safe to repeat wait for the next connection;
        the others fail with `CONNECTION_LOST`, since they may or may not have been served."""
        events: list[ClientEvent] = []
        try:
            self._outbox.clear()
            if self.state not in (ClientState.LOST, ClientState.ERROR):
                self.state = ClientState.DISCONNECTED
            # Newest first, so the calls sent again keep their order ahead of those made since.
            for call in sorted(self._inflight.values(), key=lambda c: c.id, reverse=True):
                call.dropped(self, events)
            self._inflight.clear()
        except BaseException as exc:
            self._fail(exc)
            raise
        events.reverse()
        return events

    @property
    def output_acks(self) -> bool:
        """Whether the server takes acks, so a process's output waits for `release`."""
        return self._ack_window is not None

    def data_to_send(self) -> list[bytes]:
        """Frames to send, in order; each is one websocket text message (or one stdio line)."""
        self._check_sound()  # what a core that failed midway queued is not to be trusted
        out, self._outbox = self._outbox, []
        return out

    # -- calls ----------------------------------------------------------------------------------

    def request(self, method: str, params: Any = None, *, retry: bool | None = None) -> int:
        """Queue a call; return its id. ``retry`` overrides whether it is sent again after a
        reconnect (the default is per method: see ``_RETRY_SAFE``)."""
        self._check_usable()
        if retry is None:
            retry = _RETRY_SAFE.get(method, False)
        _check_text(params, "")
        kind = REQUESTS.get(method, Request)
        call = kind(self._call_id(), method, {} if params is None else params, retry)
        if self.state is ClientState.READY:
            self._send(call)
        else:
            self._waiting.append(call)
        return call.id

    def start(
        self,
        process_id: str,
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str] | None = None,
        tty: bool = False,
        pipe_stdin: bool = False,
        arg0: str | None = None,
        env_policy: dict[str, Any] | None = None,
        size: tuple[int, int] | None = None,
    ) -> int:
        """``process/start``; ``cwd`` is a path on the server's host. ``size`` (rows, cols) is
        the terminal's first size, sent only when given (execproto's extension, for a tty).
        Its events are tracked from now on, so none that arrive before the answer are lost."""
        if process_id in self._tracks:
            raise LocalProtocolError(f"process id {process_id} is already in use by this client")
        params: dict[str, Any] = {
            "processId": process_id,
            "argv": list(argv),
            "cwd": uri_from_path(cwd),
            "env": dict(env or {}),
            "tty": tty,
            "pipeStdin": pipe_stdin,
        }
        if arg0 is not None:
            params["arg0"] = arg0
        if env_policy is not None:
            params["envPolicy"] = env_policy
        if size is not None:
            params["rows"], params["cols"] = size
        _check_text(params, "")  # before it is tracked: a refused start leaves nothing behind
        self._tracks[process_id] = _Track(started=False)
        return self.request("process/start", params)

    def write(self, process_id: str, data: bytes, *, close_stdin: bool = False) -> int:
        """``process/write`` with a fresh writeId, so a repeat after a reconnect writes once."""
        write_id = f"{self.instance}-{self._next_write}"
        self._next_write += 1
        params: dict[str, Any] = {
            "processId": process_id,
            "chunk": base64.b64encode(data).decode("ascii"),
            "writeId": write_id,
        }
        if close_stdin:
            params["closeStdin"] = True
        return self.request("process/write", params)

    def interrupt(self, process_id: str) -> int:
        return self.request("process/signal", {"processId": process_id, "signal": "interrupt"})

    def terminate(self, process_id: str) -> int:
        return self.request("process/terminate", {"processId": process_id})

    def resize(self, process_id: str, rows: int, cols: int) -> int:
        """``process/resize`` (execproto's extension: see `extensions`): the terminal's size."""
        return self.request("process/resize", {"processId": process_id, "rows": rows,
                                               "cols": cols})

    # -- receiving ------------------------------------------------------------------------------

    def receive(self, data: bytes | str) -> list[ClientEvent]:
        """One frame from the server; what it means, in order.

        A frame the core cannot act on is reported as `ServerMisbehaved`, and fails the call it
        answers; nothing else of it is applied. Any exception that escapes is the core's own
        bug: it stops the core (see `ClientCore`)."""
        self._check_sound()
        try:
            message = frames.parsed(data)
        except frames.Malformed as exc:
            return [ServerMisbehaved(detail=str(exc))]
        events: list[ClientEvent] = []
        try:
            if "method" in message:
                self._on_notification(frames.method(message), message.get("params"), events)
            else:
                self._on_answer(message, events)
        except frames.Malformed as exc:
            events.append(ServerMisbehaved(detail=f"malformed {_summary(message)}: {exc}"))
        except BaseException as exc:
            self._fail(exc)
            raise
        return events

    def _on_answer(self, message: dict[str, Any], events: list[ClientEvent]) -> None:
        msg_id = frames.answer_id(message)
        call = self._inflight.pop(msg_id, None) if isinstance(msg_id, int) else None
        if call is None and msg_id in _NO_ID and "error" in message and self._inflight:
            # A frame the server could not read is answered with no id of its own (-1, as the
            # reference does): it is the oldest call still waiting, since answers to frames
            # are never overtaken by those to later ones on the same connection. Failing it
            # beats waiting for good.
            call = self._inflight.pop(next(iter(self._inflight)))
        if call is None:
            error = message.get("error")
            detail = error.get("message") if isinstance(error, dict) else None
            events.append(ServerMisbehaved(detail=f"answer to no call: {detail or message}"))
            return
        try:
            call.answered(self, message, events)
        except frames.Malformed as exc:
            call.malformed(self, str(exc), events)  # it ends all the same: nobody waits for good
            raise

    # -- what answers ask of the core (see `_client_calls`) -------------------------------------

    def _ready(self, result: dict[str, Any], events: list[ClientEvent]) -> None:
        """``initialize`` succeeded (its ``result`` checked): resume, and send what waited."""
        resumed = self.session_id is not None
        self.session_id = result["sessionId"]
        self.environment_info = result.get("environmentInfo")
        self.extensions = _extensions(result)
        window = result.get("outputAcks") if self.acks else None
        self._ack_window = (
            (max(1, window["bytes"] // 4), max(1, window["chunks"] // 4)) if window else None
        )
        self.state = ClientState.READY
        initialized = {"jsonrpc": "2.0", "method": "initialized", "params": {}}
        self._outbox.append(_dumps(initialized).encode())
        events.append(Ready(session_id=result["sessionId"], resumed=resumed,
                            environment_info=self.environment_info))
        for process_id, track in self._tracks.items():
            if track.started:
                if self._ack_window is not None and track.released:
                    self._ack(process_id, track)  # the last ack may have been lost in flight
                self._catch_up(process_id, track)
        waiting, self._waiting = self._waiting, []
        for waiting_call in waiting:
            self._send(waiting_call)

    def _handshake_failed(self, failed: HandshakeFailed, events: list[ClientEvent]) -> None:
        self.state = ClientState.DISCONNECTED
        events.append(failed)

    def _resend(self, call: Call) -> bool:
        """Keep ``call`` to send again after the next handshake, ahead of the calls made since;
        False when there is no next handshake (the session is lost)."""
        if self.state is ClientState.LOST:
            return False
        self._waiting.insert(0, call)
        return True

    def _forget(self, process_id: str) -> None:
        """Its start failed: the id is free again."""
        self._tracks.pop(process_id, None)

    def _mark_started(self, process_id: str) -> None:
        track = self._tracks.get(process_id)
        if track is not None:  # else it has closed already
            track.started = True

    def _lose(self, why: str, events: list[ClientEvent]) -> None:
        self.state = ClientState.LOST
        events.append(SessionLost(message=why))
        for call in [*self._inflight.values(), *self._waiting]:
            failure = call.abandoned(why)
            if failure is not None:
                events.append(failure)
        self._inflight.clear()
        self._waiting.clear()
        self._tracks.clear()


# The ids an answer has when the server could not tell which frame it answers.
_NO_ID = (-1, None)


def _extensions(result: dict[str, Any]) -> frozenset[str]:
    """The extension methods an initialize answer names (``execproto.methods``), if any."""
    ours = result.get("execproto")
    methods = ours.get("methods") if isinstance(ours, dict) else None
    if not isinstance(methods, list):
        return frozenset()
    return frozenset(m for m in methods if isinstance(m, str))


def _check_text(value: Any, where: str) -> None:
    """Raise `UnsendableText` for the first string of ``value`` that is not UTF-8 text."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise UnsendableText(where or "a parameter", value) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, f"{where}[{key!r}] (its name)" if where else f"{key!r}")
            _check_text(item, f"{where}[{key!r}]" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_text(item, f"{where}[{index}]")


def _summary(message: dict[str, Any]) -> str:
    return f"{message['method']} notification" if "method" in message else "answer"
