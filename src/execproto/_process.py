"""One process: its place in the lifecycle (`life`), its stdin, its log.

Its phase, stop, open streams, held and paused are in `life`, a `_lifecycle.ProcessLife`, their
only writer; this is the rest of the data, plus the per-chunk work of the output path.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._config import b2a_base64
from ._jsonrpc import encode_output, output_prefix
from ._lifecycle import LIVE, SIGNALLABLE, Do, ProcessLife
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
    """State of one process, mutated only by the server; ``life`` only by its own methods."""

    __slots__ = (
        "proc",
        "process_id",
        "session",
        "tty",
        "pending_size",
        "life",
        "stdin_open",
        "stdin_queued",
        "stdin_waiting",
        "stdin_waiting_bytes",
        "log",
        "next_seq",
        "exit_code",
        "failure",
        "timed_out",
        "write_ids",
        "readers",
        "_prefixes",
        "sandboxed",
        "denial_mentioned",
        "_tail",
        "b64encode",
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
        b64encode: Callable[[bytes], bytes] = b2a_base64,
    ) -> None:
        self.proc = proc
        self.process_id = process_id
        self.session = session
        self.tty = tty
        # The newest size asked by process/resize while starting: the terminal gets it once
        # the spawn is reported (there is no terminal to resize before).
        self.pending_size: tuple[int, int] | None = None
        streams = STREAMS_TTY if tty else STREAMS_PIPE
        self.life = ProcessLife(proc, streams)
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
        # Recent writeIds, oldest first, so a retried write is not written twice.
        self.write_ids: OrderedDict[str, None] = OrderedDict()
        # Pending long-poll reads, by token.
        self.readers: dict[int, PendingRead] = {}
        self._prefixes = {s: output_prefix(process_id, s) for s in streams}
        # A sandboxed process's output is scanned for words of denial (``sandboxDenied``); the
        # tail of the last chunk is kept so that a word split between two chunks is seen.
        self.sandboxed = sandboxed
        self.denial_mentioned = False
        self._tail = b""
        self.b64encode = b64encode  # `Config.b64encode`

    def take_seq(self) -> int:
        seq = self.next_seq
        self.next_seq = seq + 1
        return seq

    def output(self, stream: str, data: bytes) -> bytes | None:
        """Record a chunk; return its encoded ``process/output`` notification.

        An empty read carries nothing worth a seq: it is checked, then dropped (None).
        """
        self.life.output(stream)
        if not data:
            return None
        seq = self.take_seq()
        self.log.append(seq, stream, data)
        if self.sandboxed and not self.denial_mentioned:
            self.denial_mentioned = mentions_denial(self._tail + data[:_TAIL]) or (
                mentions_denial(data)
            )
            self._tail = data[-_TAIL:]
        return encode_output(self._prefixes[stream], seq, self.b64encode(data))

    def exited(self, returncode: int) -> tuple[Do, ...]:
        todo = self.life.exited()
        self.exit_code = exit_code_of(returncode)
        self.stdin_open = False
        return todo

    def abandon_streams(self, why: str) -> tuple[Do, ...]:
        """Give up on pipes a stray descendant still holds, so the process can close."""
        todo = self.life.abandon_streams()
        self.failure = why
        self.timed_out = True
        return todo

    def hold(self) -> None:
        """Keep every chunk from now on: the client is away and will read back from its cursor."""
        self.life.hold()
        self.log.hold = True

    def release(self) -> None:
        self.life.release()
        self.log.release()

    @property
    def sandbox_denied(self) -> bool:
        return self.sandboxed and likely_denied(self.exit_code, self.denial_mentioned)

    @property
    def may_signal(self) -> bool:
        return self.life.phase is SIGNALLABLE

    @property
    def may_resize(self) -> bool:
        """A terminal is resized while it runs, as it is signalled (`SIGNALLABLE`)."""
        return self.tty and self.life.phase is SIGNALLABLE

    @property
    def is_running(self) -> bool:
        return self.life.phase in LIVE

    def remember_write(self, write_id: str, limit: int) -> None:
        """Record a writeId, forgetting the oldest beyond ``limit``."""
        self.write_ids[write_id] = None
        if len(self.write_ids) > limit:
            self.write_ids.popitem(last=False)
