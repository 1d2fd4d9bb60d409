"""One process's sequenced output, bounded in bytes and in chunks.

The log keeps the newest chunks. What falls off the front is counted, never silently lost:
readers see ``first_retained_seq`` and ``dropped_bytes``. A held log (its session is detached,
or its client acknowledges output) drops nothing; its owner pauses the process's output instead
once the log is full. Seqs are increasing but not contiguous
here, because exit and close take seqs too and are not chunks.
"""

from __future__ import annotations

from bisect import bisect_right

import attrs

from ._records import Record


@attrs.frozen(repr=False, eq=False)
class Chunk(Record):
    seq: int
    stream: str
    data: bytes


class OutputLog:
    """Chunks in a list with a moving head, so a reader's cursor is found by bisection.

    Chunks are kept as plain (seq, stream, data) tuples: this is the output hot path, and a
    tuple costs a fraction of an object. Readers get `Chunk` objects.
    """

    __slots__ = (
        "_max_bytes",
        "_max_chunks",
        "_chunks",
        "_seqs",
        "_head",
        "retained_bytes",
        "dropped_bytes",
        "dropped_chunks",
        "hold",
    )

    def __init__(self, max_bytes: int, max_chunks: int) -> None:
        self._max_bytes = max_bytes
        self._max_chunks = max_chunks
        self._chunks: list[tuple[int, str, bytes]] = []
        self._seqs: list[int] = []
        self._head = 0
        self.retained_bytes = 0
        self.dropped_bytes = 0
        self.dropped_chunks = 0
        # While held nothing is dropped: the owner pauses the output instead once `full`.
        self.hold = False

    def __len__(self) -> int:
        return len(self._chunks) - self._head

    @property
    def first_retained_seq(self) -> int | None:
        return self._seqs[self._head] if self._head < len(self._seqs) else None

    def append(self, seq: int, stream: str, data: bytes) -> None:
        chunks = self._chunks
        chunks.append((seq, stream, data))
        self._seqs.append(seq)
        self.retained_bytes += len(data)
        if self.hold or (
            self.retained_bytes <= self._max_bytes and len(chunks) - self._head <= self._max_chunks
        ):
            return
        self._trim()

    @property
    def full(self) -> bool:
        """At or past a bound: a held log wants its output paused."""
        return (
            self.retained_bytes >= self._max_bytes
            or len(self._chunks) - self._head >= self._max_chunks
        )

    def release(self) -> None:
        """Stop holding, and drop what is over the bounds now rather than at the next append."""
        self.hold = False
        if self._over():
            self._trim()

    def forget(self) -> None:
        """Let go of everything kept: its process is no longer readable (evicted)."""
        self._chunks = []
        self._seqs = []
        self._head = 0
        self.retained_bytes = 0

    def discard_through(self, seq: int) -> None:
        """Drop every chunk up to ``seq``: the client acknowledged it. Counted as dropped,
        since a reader from an earlier seq can no longer have it."""
        chunks = self._chunks
        head = self._head
        while head < len(chunks) and chunks[head][0] <= seq:
            seq_at, stream, data = chunks[head]
            # Let go of the data now: the list itself is only compacted now and then.
            chunks[head] = (seq_at, stream, b"")
            size = len(data)
            head += 1
            self.retained_bytes -= size
            self.dropped_bytes += size
            self.dropped_chunks += 1
        self._head = head
        self._compact()

    def _over(self) -> bool:
        return (
            self.retained_bytes > self._max_bytes
            or len(self._chunks) - self._head > self._max_chunks
        )

    def _trim(self) -> None:
        # Inlined rather than shared with `discard_through`: an attached stream past its bound
        # trims on every append, and the calls would cost about 7% of the output hot path.
        chunks = self._chunks
        # The newest chunk is always kept, even when it alone is over the byte bound: a chunk is
        # at most one adapter read, and dropping it whole would lose more than keeping it costs.
        head = self._head
        while len(chunks) - head > 1 and (
            self.retained_bytes > self._max_bytes or len(chunks) - head > self._max_chunks
        ):
            seq_at, stream, data = chunks[head]
            # Let go of the data now: the list itself is only compacted now and then.
            chunks[head] = (seq_at, stream, b"")
            size = len(data)
            head += 1
            self.retained_bytes -= size
            self.dropped_bytes += size
            self.dropped_chunks += 1
        self._head = head
        self._compact()

    def _compact(self) -> None:
        head = self._head
        if head > 1024 and head * 2 > len(self._chunks):
            del self._chunks[:head]
            del self._seqs[:head]
            self._head = 0

    def read(self, after_seq: int, max_bytes: int | None) -> tuple[list[Chunk], bool]:
        """Retained chunks with seq > after_seq, and whether max_bytes cut the list short.

        With max_bytes: at least one chunk, then only those that fit in it.
        """
        start = bisect_right(self._seqs, after_seq, self._head)
        out: list[Chunk] = []
        total = 0
        for index in range(start, len(self._chunks)):
            seq, stream, data = self._chunks[index]
            total += len(data)
            if out and max_bytes is not None and total > max_bytes:
                return out, True
            out.append(Chunk(seq, stream, data))
        return out, False

    def has_after(self, after_seq: int) -> bool:
        """Whether a chunk with seq > after_seq is retained."""
        return len(self) > 0 and self._seqs[-1] > after_seq
