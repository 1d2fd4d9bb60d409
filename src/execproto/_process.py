"""One process's state: its phase, its stop, its streams, its log.

What moves it from one state to the next is decided in `_lifecycle`; this is the data, plus the
per-chunk work of the output path.
"""

from __future__ import annotations

import base64
from collections import OrderedDict, deque
from typing import TYPE_CHECKING

from ._errors import LocalProtocolError
from ._jsonrpc import encode_output, output_prefix
from ._lifecycle import LIVE, PROCESS_EVENTS, SIGNALLABLE, Input, Phase, Stop
from ._output import OutputLog
from ._sandbox import DENIAL_WORDS, likely_denied, mentions_denial

if TYPE_CHECKING:
    from ._jsonrpc import Id
    from ._params import WriteParams
    from ._session import PendingRead, Session


STREAMS_PIPE = ("stdout", "stderr")
STREAMS_TTY = ("pty",)


def exit_code_of(returncode: int) -> int:
    """Killed by signal N is reported as 128 + N, as shells and the reference do."""
    return 128 - returncode if returncode < 0 else returncode


# Enough of a chunk's end to hold all but the last byte of any word of denial.
_TAIL = max(len(word) for word in DENIAL_WORDS) - 1


class Process:
    """State of one process. Mutated only by the server, as `_lifecycle` decides."""

    __slots__ = (
        "proc",
        "process_id",
        "session",
        "tty",
        "pending_size",
        "phase",
        "open_streams",
        "stdin_open",
        "stdin_queued",
        "stdin_waiting",
        "stdin_waiting_bytes",
        "log",
        "next_seq",
        "exit_code",
        "failure",
        "timed_out",
        "stop",
        "paused",
        "held",
        "write_ids",
        "readers",
        "_prefixes",
        "sandboxed",
        "denial_mentioned",
        "_tail",
    )

    def __init__(
        self,
        proc: int,
        process_id: str,
        session: Session,
        *,
        tty: bool,
        pipe_stdin: bool,
        retention_bytes: int,
        retention_chunks: int,
        sandboxed: bool = False,
    ) -> None:
        self.proc = proc
        self.process_id = process_id
        self.session = session
        self.tty = tty
        # The newest size asked by process/resize while starting: the terminal gets it once
        # the spawn is reported (there is no terminal to resize before).
        self.pending_size: tuple[int, int] | None = None
        self.phase = Phase.STARTING
        self.open_streams = set(STREAMS_TTY if tty else STREAMS_PIPE)
        self.stdin_open = tty or pipe_stdin
        # Bytes given to the adapter (WriteStdin) and not yet reported written; writes waiting
        # their turn past Config.max_stdin_backlog: (conn, request id, params), and their bytes.
        self.stdin_queued = 0
        self.stdin_waiting: deque[tuple[int, Id, WriteParams]] = deque()
        self.stdin_waiting_bytes = 0
        self.log = OutputLog(retention_bytes, retention_chunks)
        self.next_seq = 1
        self.exit_code: int | None = None
        self.failure: str | None = None
        self.timed_out = False
        self.stop = Stop.NONE
        self.paused = False
        # Detached output is held, not dropped, until the client reads it back (see `hold`).
        self.held = False
        # Recent writeIds, oldest first, so a retried write is not written twice.
        self.write_ids: OrderedDict[str, None] = OrderedDict()
        # Pending long-poll reads, by token.
        self.readers: dict[int, PendingRead] = {}
        self._prefixes = {s: output_prefix(process_id, s) for s in self.open_streams}
        # A sandboxed process's output is scanned for words of denial (``sandboxDenied``); the
        # tail of the last chunk is kept so that a word split between two chunks is seen.
        self.sandboxed = sandboxed
        self.denial_mentioned = False
        self._tail = b""

    def step(self, event: Input) -> None:
        """Apply one input by the event-triggered table (`_lifecycle.PROCESS_EVENTS`)."""
        try:
            self.phase = PROCESS_EVENTS[self.phase, event]
        except KeyError:
            raise LocalProtocolError(
                f"process {self.proc}: {event.value} is impossible while {self.phase.value}"
            ) from None

    def take_seq(self) -> int:
        seq = self.next_seq
        self.next_seq = seq + 1
        return seq

    def output(self, stream: str, data: bytes) -> bytes | None:
        """Record a chunk; return its encoded ``process/output`` notification.

        An empty read carries nothing worth a seq: it is checked, then dropped (None).
        """
        if stream not in self.open_streams:
            raise LocalProtocolError(
                f"process {self.proc}: output on {stream!r}, which is not open")
        self.step(Input.OUTPUT)
        if not data:
            return None
        seq = self.take_seq()
        self.log.append(seq, stream, data)
        if self.sandboxed and not self.denial_mentioned:
            self.denial_mentioned = mentions_denial(self._tail + data[:_TAIL]) or (
                mentions_denial(data)
            )
            self._tail = data[-_TAIL:]
        return encode_output(self._prefixes[stream], seq, base64.b64encode(data))

    def close_stream(self, stream: str) -> None:
        if stream not in self.open_streams:
            raise LocalProtocolError(f"process {self.proc}: {stream!r} closed twice or unknown")
        self.open_streams.discard(stream)
        self.step(Input.STREAM_CLOSED)

    def exited(self, returncode: int) -> None:
        self.step(Input.EXITED)
        self.exit_code = exit_code_of(returncode)
        self.stdin_open = False

    def abandon_streams(self, why: str) -> None:
        """Give up on pipes a stray descendant still holds, so the process can close."""
        self.open_streams.clear()
        self.failure = why
        self.timed_out = True
        self.step(Input.ABANDONED)

    def hold(self) -> None:
        """Keep every chunk from now on: the client is away and will read back from its cursor."""
        self.held = True
        self.log.hold = True

    def release(self) -> None:
        self.held = False
        self.log.release()

    @property
    def sandbox_denied(self) -> bool:
        return self.sandboxed and likely_denied(self.exit_code, self.denial_mentioned)

    @property
    def may_signal(self) -> bool:
        return self.phase is SIGNALLABLE

    @property
    def may_resize(self) -> bool:
        """A terminal is resized while it runs, as it is signalled (`SIGNALLABLE`)."""
        return self.tty and self.phase is SIGNALLABLE

    @property
    def is_running(self) -> bool:
        return self.phase in LIVE

    def remember_write(self, write_id: str, limit: int) -> None:
        """Record a writeId, forgetting the oldest beyond ``limit``."""
        self.write_ids[write_id] = None
        if len(self.write_ids) > limit:
            self.write_ids.popitem(last=False)
