"""How a process's output is read (`_children`): one read per wakeup per stream, 256 KiB, and
up to 512 KiB once a read came back full (the writer is ahead), on every adapter. Every byte
arrives, in order, and no chunk is larger than one read: what the held logs' and the clients'
bounds count on."""

from __future__ import annotations

import base64
import sys

from execproto.adapters._processes._children import BULK_READ_SIZE, READ_SIZE

from .conftest import Server, start

SIZE = 8 << 20


def test_a_writer_that_is_ahead_is_read_in_larger_chunks_never_past_the_bulk_size(
    server: Server,
) -> None:
    client = server.client()
    # One write of it all: the pipe is full whenever the server reads (a pipe's writer holds
    # it until the pipe is full), so reads come back full.
    start(client, "w", [sys.executable, "-c",
                        f"import sys; sys.stdout.buffer.write(bytes(range(256)) * {SIZE // 256})"])
    events = client.events_until_closed("w", timeout=60)
    chunks = [n["params"] for n in events if n["method"] == "process/output"]
    sizes = [len(base64.b64decode(c["chunk"])) for c in chunks]
    data = b"".join(base64.b64decode(c["chunk"]) for c in chunks)
    assert data == bytes(range(256)) * (SIZE // 256)
    seqs = [c["seq"] for c in chunks]
    assert seqs == sorted(set(seqs))  # the exit's seq may come between, if output was paused
    assert max(sizes) <= BULK_READ_SIZE
    assert max(sizes) > READ_SIZE, sizes  # bulk reads happened
    client.close()

