"""The token file is read again when it changes and at SIGHUP, so a warm server can be bound
to its user late; SIGHUP never stops the server."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from .conftest import Server
from .wsclient import Client


def accepted(server: Server, token: str) -> bool:
    client = Client(server.url, headers=[("Authorization", f"Bearer {token}")])
    try:
        return client.rejected is None
    finally:
        client.close()


def test_a_changed_token_file_is_read_again_at_the_next_connection(
    adapter: str, tmp_path: Path
) -> None:
    path = tmp_path / "token"
    path.write_text("placeholder\n")
    server = Server(adapter, "--auth-token-file", str(path))
    try:
        assert accepted(server, "placeholder")
        # As a Secret is updated: a new file renamed over the old one.
        (tmp_path / "new").write_text("the-users-token\n")
        os.replace(tmp_path / "new", path)
        assert accepted(server, "the-users-token")
        assert not accepted(server, "placeholder")
        path.write_text("")  # half-written: the last token stays
        assert accepted(server, "the-users-token")
    finally:
        log = server.stop()
    assert "re-read (the file changed): the token changed" in log, log
    assert "is empty: the last token stays" in log, log
    assert "the-users-token" not in log and "placeholder" not in log  # never the token


def test_sighup_rereads_the_token_file_and_the_server_serves_on(
    adapter: str, tmp_path: Path
) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    server = Server(adapter, "--auth-token-file", str(path))
    try:
        server.process.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert server.process.poll() is None  # before, SIGHUP killed it, with no cleanup
        assert accepted(server, "first")
    finally:
        log = server.stop()
    assert "re-read (SIGHUP): the token is the same" in log, log
    assert server.process.returncode == 0, log


def test_sighup_without_a_token_file_is_no_death(adapter: str) -> None:
    server = Server(adapter)
    try:
        server.process.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert server.process.poll() is None
        server.client().close()
    finally:
        log = server.stop()
    assert "SIGHUP: nothing to re-read" in log, log
