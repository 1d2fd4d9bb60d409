"""``execproto serve --listen stdio < requests.jsonl > answers.jsonl``: regular files and
/dev/null as stdin and stdout, on every adapter, and every request in the file answered."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

BIG = 3 << 20  # an answer far past a pipe's buffer, and past asyncio's write buffer marks


def line(msg_id: int | None, method: str, params: object) -> bytes:
    message: dict[str, object] = {"jsonrpc": "2.0", "method": method, "params": params}
    if msg_id is not None:
        message["id"] = msg_id
    return json.dumps(message).encode() + b"\n"


def requests(tmp_path: Path) -> bytes:
    """A session: the handshake, ``echo hi``, a read that waits for its output, and a big file
    read (the answer is the last thing written: it must reach the file whole)."""
    big = tmp_path / "big"
    big.write_bytes(os.urandom(BIG))
    return b"".join([
        line(1, "initialize", {"clientName": "tests"}),
        line(None, "initialized", {}),
        line(2, "process/start", {
            "processId": "hi", "argv": ["echo", "hi"], "cwd": tmp_path.as_uri(),
            "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, "tty": False}),
        # Its output, exit and close take seqs 1 to 3 in an order the kernel picks: a read
        # after each of the first two waits for the next, so all three are answered.
        *(line(3 + after, "process/read", {"processId": "hi", "afterSeq": after,
                                           "waitMs": 20000}) for after in range(3)),
        line(6, "fs/readFile", {"path": big.as_uri()}),
    ])


def serve(adapter: str, stdin: IO[bytes] | int, stdout: IO[bytes] | int,
          data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """``data``, if given, is written to stdin (a pipe) and stdin is closed."""
    command = [sys.executable, "-m", "execproto.adapters", "serve", "--listen", "stdio",
               "--adapter", adapter, "--log-level", "warning", "--kill-grace", "0.5"]
    if data is not None:
        return subprocess.run(command, input=data, stdout=stdout, stderr=subprocess.PIPE,
                              timeout=60)
    return subprocess.run(command, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
                          timeout=60)


def check(answers: bytes, tmp_path: Path) -> None:
    by_id: dict[Any, Any] = {}
    output: dict[int, bytes] = {}  # seq -> chunk, from notifications and the read alike
    for text in answers.splitlines():
        message = json.loads(text)  # every line whole: the last one was not cut short
        if "id" in message:
            by_id[message["id"]] = message
        elif message["method"] == "process/output":
            output[message["params"]["seq"]] = base64.b64decode(message["params"]["chunk"])
    assert sorted(by_id) == [1, 2, 3, 4, 5, 6], answers[:2000]
    assert "result" in by_id[2], by_id[2]
    for msg_id in (3, 4, 5):
        for chunk in by_id[msg_id]["result"]["chunks"]:
            output[chunk["seq"]] = base64.b64decode(chunk["chunk"])
    assert by_id[5]["result"]["closed"], by_id[5]  # so every read waited for its event
    assert b"".join(output[seq] for seq in sorted(output)) == b"hi\n", output
    data = base64.b64decode(by_id[6]["result"]["dataBase64"])
    assert data == (tmp_path / "big").read_bytes()


def test_files_in_and_out(adapter: str, tmp_path: Path) -> None:
    (tmp_path / "requests.jsonl").write_bytes(requests(tmp_path))
    with open(tmp_path / "requests.jsonl", "rb") as stdin, \
            open(tmp_path / "answers.jsonl", "wb") as stdout:
        done = serve(adapter, stdin, stdout)
    assert done.returncode == 0, done.stderr.decode()
    check((tmp_path / "answers.jsonl").read_bytes(), tmp_path)


def test_a_file_in_and_a_pipe_out(adapter: str, tmp_path: Path) -> None:
    (tmp_path / "requests.jsonl").write_bytes(requests(tmp_path))
    with open(tmp_path / "requests.jsonl", "rb") as stdin:
        done = serve(adapter, stdin, subprocess.PIPE)
    assert done.returncode == 0, done.stderr.decode()
    check(done.stdout, tmp_path)


def test_a_pipe_in_and_a_file_out(adapter: str, tmp_path: Path) -> None:
    with open(tmp_path / "answers.jsonl", "wb") as stdout:
        done = serve(adapter, subprocess.PIPE, stdout, requests(tmp_path))
    assert done.returncode == 0, done.stderr.decode()
    check((tmp_path / "answers.jsonl").read_bytes(), tmp_path)


@pytest.mark.parametrize("where", ["stdin", "stdout", "both"])
def test_dev_null(adapter: str, tmp_path: Path, where: str) -> None:
    """Nothing asked and nothing heard: the server starts and ends cleanly."""
    with open(os.devnull, "r+b") as null:
        stdin = null if where in ("stdin", "both") else subprocess.PIPE
        stdout = null if where in ("stdout", "both") else subprocess.PIPE
        data = requests(tmp_path) if stdin is subprocess.PIPE else None
        done = serve(adapter, stdin, stdout, data)
    assert done.returncode == 0, done.stderr.decode()
    assert b"error" not in done.stderr.lower(), done.stderr.decode()
    if stdout is subprocess.PIPE:
        assert done.stdout == b""  # stdin was empty: no request, no answer


def test_a_last_line_without_its_newline_is_answered(adapter: str, tmp_path: Path) -> None:
    data = requests(tmp_path).rstrip(b"\n")
    (tmp_path / "requests.jsonl").write_bytes(data)
    with open(tmp_path / "requests.jsonl", "rb") as stdin:
        done = serve(adapter, stdin, subprocess.PIPE)
    assert done.returncode == 0, done.stderr.decode()
    check(done.stdout, tmp_path)


@pytest.mark.parametrize("stdin_kind", ["file", "pipe"])
def test_a_stdout_that_cannot_be_written_ends_the_server(adapter: str, tmp_path: Path,
                                                          stdin_kind: str) -> None:
    """/dev/full: no answer can be written, so none is waited for once stdin ends."""
    (tmp_path / "requests.jsonl").write_bytes(requests(tmp_path))
    with open("/dev/full", "wb") as full, open(tmp_path / "requests.jsonl", "rb") as stdin:
        if stdin_kind == "file":
            done = serve(adapter, stdin, full)
        else:
            done = serve(adapter, subprocess.PIPE, full, stdin.read())
    assert "Traceback" not in done.stderr.decode(), done.stderr.decode()
    assert done.returncode == 0, done.stderr.decode()
