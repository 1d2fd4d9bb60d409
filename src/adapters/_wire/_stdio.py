"""``--listen stdio`` beyond pipes: regular files, /dev/null, and answering all that was asked.

An event loop can only watch what epoll can: pipes, sockets and ttys. Given a regular file or
/dev/null (``execproto serve --listen stdio < requests.jsonl > answers.jsonl``), `StdioFds`
puts a pipe in between and a thread that copies the file into it, or out of it into the file,
with plain blocking calls; the loop sees a pipe as always. Pipes and ttys are used as they are.

`DrainingStdioPeer` keeps the connection up after stdin ends until every request it read has
been answered and written: a file of requests gets all of its answers, a ``process/read`` that
waits for a process's output included. Then the server stops, as it always did at stdin's end.
"""

from __future__ import annotations

import json
import os
import select
import stat
import threading
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from execproto.jsonrpc import Incoming, parse

from ._peer import Peer, PeerState, Write

if TYPE_CHECKING:
    from ._connections import Connections

COPY_SIZE = 256 << 10

# Seconds the last output to a pipe or tty is waited for once the server has stopped: a reader
# that stopped reading does not hold the server up for longer.
FLUSH_TIMEOUT = 5.0

# Seconds `StdioFds.finish` waits for the last output to reach a file: a file takes what it is
# given at once, so this is only a bound against a stuck disk.
FINISH_TIMEOUT = 30.0

# How the core begins every answer (`_jsonrpc.encode_result`, `encode_error`): an answer is told
# from a notification by its first bytes, and only its id is decoded, never its result.
ANSWER = b'{"jsonrpc":"2.0","id":'
_decoder = json.JSONDecoder()


class StdioPeer(Peer):
    """``--listen stdio``: one connection, newline-delimited JSON. Blank lines are ignored."""

    def __init__(self, connections: Connections, write: Write,
                 hang_up: Callable[[], None]) -> None:
        super().__init__(connections, write, hang_up)
        self._partial = bytearray()

    def received(self, data: bytes) -> None:
        if not data:
            if self._partial.strip():
                self.message(bytes(self._partial))
            self._partial.clear()
            self.lost()
            return
        self._partial += data
        *lines, rest = self._partial.split(b"\n")
        self._partial = bytearray(rest)
        for line in lines:
            if line.strip():
                self.message(bytes(line))

    def send(self, data: bytes) -> None:
        if self._session is None:
            self._greeted()
        if self.state.writes:
            self.write((data, b"\n"))

    def close(self, code: int, reason: str) -> None:
        self._close_starts()
        self.hang_up()



def pollable(fd: int) -> bool:
    """Whether an event loop can wait on ``fd``: epoll refuses regular files and /dev/null."""
    if hasattr(select, "epoll"):
        poller = select.epoll()
        try:
            poller.register(fd, select.EPOLLIN)
        except PermissionError:
            return False
        finally:
            poller.close()
        return True
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


class StdioFds:
    """Descriptors for stdin and stdout that an event loop can watch, handed over to the adapter
    (which closes them): a duplicate of 0 or 1 when that one is pollable, else a pipe's end with a
    thread copying between it and the file. Once the adapter has closed its stdout, `finish`
    waits for the copy to reach the file."""

    def __init__(self) -> None:
        self._copier: threading.Thread | None = None
        if pollable(0):
            self.stdin = os.dup(0)
        else:
            self.stdin, feed = os.pipe()
            _start(_copy, os.dup(0), feed, "execproto-stdin")
        if pollable(1):
            self.stdout = os.dup(1)
        else:
            drain, self.stdout = os.pipe()
            self._copier = _start(_copy, drain, os.dup(1), "execproto-stdout")

    def finish(self) -> None:
        if self._copier is not None:
            self._copier.join(FINISH_TIMEOUT)


def _start(target: Callable[[int, int], None], source: int, sink: int,
           name: str) -> threading.Thread:
    # A daemon: if the adapter never closes its end, the process may still exit.
    thread = threading.Thread(target=target, args=(source, sink), name=name, daemon=True)
    thread.start()
    return thread


def _copy(source: int, sink: int) -> None:
    """Copy until ``source`` ends or ``sink`` fails, then close both: the pipe's other end sees
    the end (stdin) or a broken pipe (stdout to a full disk), as it would from a real pipe."""
    try:
        while data := os.read(source, COPY_SIZE):
            view = memoryview(data)
            while view:
                view = view[os.write(sink, view):]
    except OSError:
        pass
    finally:
        os.close(source)
        os.close(sink)


class DrainingStdioPeer(StdioPeer):
    """A `StdioPeer` that, once told stdin has ended (`end`), waits until every request read has
    its answer, and that answer is written, before it says so.

    Requests are counted by id as they are read, answers as the core sends them. The adapter
    tells `sent` how many bytes reached stdout, unless ``reports_sent`` is false (its writes
    are taken whole at once, as an asyncio transport does)."""

    def __init__(self, connections: Connections, write: Write, hang_up: Callable[[], None], *,
                 reports_sent: bool = True) -> None:
        super().__init__(connections, write, hang_up)
        self._owed: Counter[Any] = Counter()  # request id -> answers not yet sent
        self._unwritten = 0  # bytes sent and not yet reported written
        self._reports_sent = reports_sent
        self._ended: list[Callable[[], None]] = []

    def end(self, then: Callable[[], None]) -> None:
        """stdin has ended: call ``then`` once all it asked is answered (or the connection is
        gone). The adapter then reads its EOF, as it would have at once."""
        if self._partial.strip():
            self.message(bytes(self._partial))  # the last line had no newline: it counts too
        self._partial.clear()
        self._ended.append(then)
        self._check()

    def sent(self, size: int) -> None:
        """``size`` more bytes of what this peer wrote have reached stdout."""
        self._unwritten -= size
        self._check()

    def message(self, data: bytes | str) -> None:
        asks = b'"id"' in data if isinstance(data, bytes) else '"id"' in data  # else no id
        if asks:
            request = parse(data)
            if isinstance(request, Incoming) and request.id is not None:
                self._owed[request.id] += 1
        super().message(data)

    def send(self, data: bytes) -> None:
        if self._owed and data.startswith(ANSWER):
            self._answered(data)
        if self._reports_sent and self.state.writes:
            self._unwritten += len(data) + 1
        super().send(data)
        self._check()

    def _answered(self, data: bytes) -> None:
        start = len(ANSWER)
        try:  # ids are short: the first bytes hold it, and the result is not decoded
            msg_id = _decoder.raw_decode(data[start:start + 256].decode("ascii", "replace"))[0]
        except ValueError:
            msg_id = _decoder.raw_decode(data[start:].decode("ascii", "replace"))[0]
        if self._owed.get(msg_id, 0) > 0:
            self._owed[msg_id] -= 1
            if not self._owed[msg_id]:
                del self._owed[msg_id]

    def close(self, code: int, reason: str) -> None:
        super().close(code, reason)
        self._say_ended()  # the core closed it: nothing more will be answered

    def lost(self) -> None:
        super().lost()
        self._say_ended()

    def _check(self) -> None:
        # Closed or lost (a failed write, say), before stdin's end or after: nothing will come.
        gone = self.state is not PeerState.OPEN
        if self._ended and (gone or (not self._owed and self._unwritten <= 0)):
            self._say_ended()

    def _say_ended(self) -> None:
        ended, self._ended = self._ended, []
        for then in ended:
            then()
