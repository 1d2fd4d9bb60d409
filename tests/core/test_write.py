"""``process/write``: stdin writes, ``closeStdin``, and write ids remembered per process.

Stdin closes at the *exited* transition of `execproto._lifecycle`; a write then, or without
``pipeStdin``, is ``stdinClosed``. Every world is checked when the test ends
(`lifecycle_world.World.check`).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from execproto import (
    CloseStdin,
    Config,
    WriteStdin,
)

from .lifecycle_world import (
    PIPES,
    World,
    begin,
    close_all,
    run,
    spawned,
    write,
    written,
)

# =================================================================================================
# process/write
# =================================================================================================


def test_write_to_an_unknown_process(w: World) -> None:
    assert write(w, "nope", b"x", "w1") == "unknownProcess"
    assert w.of_type(WriteStdin) == []


def test_write_while_starting(w: World) -> None:
    _, spawn = begin(w, pipeStdin=True)
    assert write(w, "p", b"early", "w1") == "starting"
    spawned(w, spawn.proc)
    # "starting" did not remember the writeId: the retry is written.
    assert write(w, "p", b"early", "w1") == "accepted"
    assert written(w, spawn.proc) == [WriteStdin(proc=spawn.proc, data=b"early")]


def test_write_accepted_emits_the_decoded_bytes(w: World) -> None:
    proc = run(w, pipeStdin=True)
    data = bytes(range(256))
    assert write(w, "p", data, "w1") == "accepted"
    assert write(w, "p", b"second", "w2") == "accepted"
    assert written(w, proc) == [
        WriteStdin(proc=proc, data=data),
        WriteStdin(proc=proc, data=b"second"),
    ]


def test_write_to_a_tty_is_accepted(w: World) -> None:
    proc = run(w, tty=True)
    assert write(w, "p", b"ls\n", "w1") == "accepted"
    assert written(w, proc) == [WriteStdin(proc=proc, data=b"ls\n")]


def test_write_without_pipe_stdin_is_stdin_closed(w: World) -> None:
    proc = run(w)
    assert write(w, "p", b"x", "w1") == "stdinClosed"
    assert write(w, "p", b"x", "w1", closeStdin=True) == "stdinClosed"
    assert written(w, proc) == []


@pytest.mark.parametrize("tty", [False, True])
def test_write_after_exit_is_stdin_closed(w: World, tty: bool) -> None:
    proc = run(w, pipeStdin=True, tty=tty)
    w.exit(proc, 0)
    assert write(w, "p", b"x", "w1") == "stdinClosed"
    close_all(w, proc, ("pty",) if tty else PIPES)
    assert write(w, "p", b"x", "w2") == "stdinClosed"  # closed, not yet evicted
    assert written(w, proc) == []


def test_write_after_close_stdin_is_stdin_closed(w: World) -> None:
    proc = run(w, pipeStdin=True)
    assert write(w, "p", b"last", "w1", closeStdin=True) == "accepted"
    assert written(w, proc) == [WriteStdin(proc=proc, data=b"last"), CloseStdin(proc=proc)]
    assert write(w, "p", b"more", "w2") == "stdinClosed"
    assert write(w, "p", b"", "w3", closeStdin=True) == "stdinClosed"
    # The write that closed stdin is remembered: its retry is accepted and nothing is done.
    assert write(w, "p", b"last", "w1", closeStdin=True) == "accepted"
    assert written(w, proc) == [WriteStdin(proc=proc, data=b"last"), CloseStdin(proc=proc)]


def test_close_stdin_with_an_empty_chunk_only_closes(w: World) -> None:
    proc = run(w, pipeStdin=True)
    assert write(w, "p", b"", "w1", closeStdin=True) == "accepted"
    assert written(w, proc) == [CloseStdin(proc=proc)]


def test_empty_chunk_writes_nothing(w: World) -> None:
    proc = run(w, pipeStdin=True)
    assert write(w, "p", b"", "w1") == "accepted"
    assert write(w, "p", b"", "w1", closeStdin=False) == "accepted"
    assert written(w, proc) == []
    assert write(w, "p", b"x", "w2") == "accepted"
    assert written(w, proc) == [WriteStdin(proc=proc, data=b"x")]


def test_repeated_write_id_is_accepted_without_writing_again(w: World) -> None:
    proc = run(w, pipeStdin=True)
    assert write(w, "p", b"once", "w1") == "accepted"
    assert write(w, "p", b"once", "w1") == "accepted"
    assert write(w, "p", b"different data, same id", "w1") == "accepted"
    assert written(w, proc) == [WriteStdin(proc=proc, data=b"once")]
    w.exit(proc, 0)
    # A retry of a write that was done stays "accepted" even once stdin is gone.
    assert write(w, "p", b"once", "w1") == "accepted"
    assert write(w, "p", b"new", "w9") == "stdinClosed"
    assert written(w, proc) == [WriteStdin(proc=proc, data=b"once")]


def test_write_ids_are_per_process(w: World) -> None:
    a = run(w, "a", pipeStdin=True)
    b = run(w, "b", pipeStdin=True)
    assert write(w, "a", b"1", "same") == "accepted"
    assert write(w, "b", b"2", "same") == "accepted"
    assert written(w, a) == [WriteStdin(proc=a, data=b"1")]
    assert written(w, b) == [WriteStdin(proc=b, data=b"2")]


def test_only_the_last_write_ids_are_remembered(make_world: Callable[..., World]) -> None:
    w = make_world(Config(write_id_memory=2))
    proc = run(w, pipeStdin=True)
    for write_id in ("a", "b", "c"):
        assert write(w, "p", write_id.encode(), write_id) == "accepted"
    assert len(written(w, proc)) == 3
    # "a" was forgotten when "c" came; "b" and "c" are remembered.
    assert write(w, "p", b"c", "c") == "accepted"
    assert write(w, "p", b"b", "b") == "accepted"
    assert len(written(w, proc)) == 3
    assert write(w, "p", b"a", "a") == "accepted"  # written again, and now "b" is forgotten
    assert written(w, proc)[-1] == WriteStdin(proc=proc, data=b"a")
    assert write(w, "p", b"c", "c") == "accepted"
    assert len(written(w, proc)) == 4
    assert write(w, "p", b"b", "b") == "accepted"
    assert len(written(w, proc)) == 5


def test_the_default_write_id_memory_is_4096(w: World) -> None:
    proc = run(w, pipeStdin=True)
    for i in range(4097):  # w0 is pushed out by the 4097th
        assert write(w, "p", b"", f"w{i}") == "accepted"
    assert write(w, "p", b"retry", "w1") == "accepted"
    assert written(w, proc) == []
    assert write(w, "p", b"fresh", "w0") == "accepted"
    assert written(w, proc) == [WriteStdin(proc=proc, data=b"fresh")]
