"""A secret file (the token, the JWT secret) is a small regular file: a FIFO or a huge file put
in its place neither hangs nor grows the server, at start or when it is read again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import Server
from .test_token_reload import accepted

SERVE = [sys.executable, "-m", "execproto.adapters", "serve", "--listen", "ws://127.0.0.1:0"]


def test_a_fifo_or_a_huge_file_is_refused_at_start(tmp_path: Path) -> None:
    fifo, huge = tmp_path / "fifo", tmp_path / "huge"
    os.mkfifo(fifo)
    huge.write_bytes(b"x" * (1 << 20))
    for path, why in [(fifo, "not a regular file"), (huge, "larger than 64 KiB")]:
        for flag in ("--auth-token-file", "--auth-shared-secret-file"):
            done = subprocess.run([*SERVE, flag, str(path)], capture_output=True, text=True,
                                  timeout=30)
            assert done.returncode == 2, (flag, path, done.stderr)
            assert why in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_a_fifo_put_in_its_place_keeps_the_token(adapter: str, tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first-token\n")
    server = Server(adapter, "--auth-token-file", str(path))
    try:
        assert accepted(server, "first-token")
        path.unlink()
        os.mkfifo(path)  # nobody writes it: opened blocking, the server would hang here
        assert not accepted(server, "anything")
        assert accepted(server, "first-token")
    finally:
        log = server.stop()
    assert "not a regular file" in log and "the last token stays" in log, log
