"""Flow control in the client: a request is always answered, and unread output is bounded.

A reader that stops reading pauses its own process (through acks, or, with a server that takes
none, by the connection not being read while no call waits); it never holds back an answer.
"""

from __future__ import annotations

import hashlib
import sys

import anyio
import pytest

from execproto._clientside._client_tracks import ProcessTracking
from execproto.adapters._processes._children import BULK_READ_SIZE
from execproto.adapters.client import ClientBug, Process, connect

from .conftest import Server

pytestmark = pytest.mark.anyio

MiB = 1 << 20
WINDOW = MiB  # the server's ack window (its retention), what it may send past the last ack
CHUNK = BULK_READ_SIZE  # the most one output notification carries (a read of the pipe)
WRITE = 64 << 10  # what exec writes to stdin at a time


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(shared_server: Server) -> Server:
    return shared_server


def zeros(size: int) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.stdout.buffer.write(bytes({size}))"]


async def held_at_most(proc: Process, buffer: int) -> int:
    """The most ``proc`` held unread: once it has filled its buffer (waited for, however
    loaded the machine), and over one second more, in which it must not grow past the bound."""
    with anyio.fail_after(30):
        while proc.buffered < buffer:
            await anyio.sleep(0.02)
    most = 0
    for _ in range(20):
        await anyio.sleep(0.05)
        most = max(most, proc.buffered)
    return most


@pytest.mark.parametrize("acks", [True, False], ids=["acks", "no-acks"])
async def test_a_call_made_while_reading_is_answered_behind_50_mb_of_output(
    server: Server, acks: bool
) -> None:
    # "Read until you see X, then kill it": the calls are made from inside the loop, with far
    # more than the client's buffer still to come.
    async with connect(server.url, acks=acks) as ex:
        proc = await ex.start(zeros(50_000_000))
        seen = 0
        with anyio.fail_after(60):
            async for chunk in proc.output():
                seen += len(chunk.data)
                if seen > 20_000_000:
                    await anyio.sleep(0.5)  # let the unread output pile up behind the answers
                    assert (await ex.get_metadata("/"))["isDirectory"]
                    await proc.terminate()
                    break
            await proc.wait()


async def test_output_nobody_reads_is_bounded_and_then_all_of_it_arrives(server: Server) -> None:
    size = 24 * MiB
    async with connect(server.url, buffer_bytes=2 * MiB) as ex:
        proc = await ex.start(zeros(size))
        most = await held_at_most(proc, 2 * MiB)
        # The server stops a window past what the client released.
        assert 2 * MiB <= most <= 2 * MiB + WINDOW + CHUNK, most
        digest, total = hashlib.sha256(), 0
        with anyio.fail_after(60):
            async for chunk in proc.output():
                digest.update(chunk.data)
                total += len(chunk.data)
            result = await proc.wait()
        assert (total, result.exit_code) == (size, 0)
        assert digest.hexdigest() == hashlib.sha256(bytes(size)).hexdigest()


async def test_a_slow_reader_of_a_server_without_acks_is_bounded(server: Server) -> None:
    # Without acks the server cannot pause the process: the client reads the connection no
    # further while the reader lags, and the socket's backpressure stops the server.
    async with connect(server.url, acks=False, buffer_bytes=2 * MiB) as ex:
        proc = await ex.start(zeros(24 * MiB))
        most = total = 0
        with anyio.fail_after(60):
            async for chunk in proc.output():
                if total == 0:
                    most = await held_at_most(proc, 2 * MiB)
                total += len(chunk.data)
        assert 2 * MiB <= most <= 2 * MiB + CHUNK, most
        assert total == 24 * MiB


async def test_a_reader_that_stops_pauses_only_its_own_process(server: Server) -> None:
    async with connect(server.url, buffer_bytes=MiB) as ex:
        stalled = await ex.start(zeros(30 * MiB))
        with anyio.fail_after(30):
            while stalled.buffered < MiB:
                await anyio.sleep(0.02)
            other = await ex.start(zeros(20 * MiB))
            out, err = await other.communicate()
            assert (len(out), err, (await other.wait()).exit_code) == (20 * MiB, b"", 0)
        assert not stalled.closed  # it is paused, not lost
        out, _ = await stalled.communicate()
        assert len(out) == 30 * MiB


async def test_pipelined_stdin_arrives_whole_and_in_order(server: Server) -> None:
    block = bytes(range(256)) * 256
    data = b"".join(bytes([i % 256]) + block[1:] for i in range(320))  # 20 MiB
    async with connect(server.url) as ex:
        proc = await ex.start(["sha256sum"], pipe_stdin=True)
        with anyio.fail_after(60):
            for offset in range(0, len(data), WRITE):
                await proc.write(data[offset:offset + WRITE])
            await proc.close_stdin()
            out, _ = await proc.communicate()
        assert out.split()[0].decode() == hashlib.sha256(data).hexdigest()


async def test_a_pipelined_write_that_fails_raises_from_a_later_call(server: Server) -> None:
    async with connect(server.url) as ex:
        proc = await ex.start(["head", "-c", "1"], pipe_stdin=True)
        with anyio.fail_after(30), pytest.raises(BrokenPipeError, match="stdinClosed"):
            for _ in range(2000):  # bounded: head exits after the first byte
                await proc.write(b"x" * WRITE)
            await proc.drain()


async def test_a_bug_in_the_client_core_fails_the_client_and_says_so(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(ProcessTracking, "_deliver", broken)
    with anyio.fail_after(20), pytest.raises(ClientBug, match="bug of its own.*KeyError"):
        async with connect(server.url) as ex:
            proc = await ex.start(["echo", "hi"])
            await proc.wait()
