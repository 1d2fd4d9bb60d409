"""The server's own files (its token file, its trace) are out of every sandbox's reach.

A read-only profile grants reading `/`, so without this a sandboxed command could read the
bearer token and open a connection of its own, with no sandbox, as the server's user. The
token and trace files live in a directory every user may read, so that only the sandbox stands
between a command and them; the control reads them without one.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server, uri
from .sandboxes import needs_bwrap, read_only, run, workspace_write
from .wsclient import Client

pytestmark = needs_bwrap

TOKEN = "execproto-secret-token-4d1f"


@pytest.fixture(scope="module")
def guarded() -> Iterator[tuple[Client, Path, Path]]:
    base = Path(tempfile.mkdtemp(prefix="execproto-secrets-", dir="/var/tmp"))
    base.chmod(0o755)
    token, trace = base / "token", base / "trace.jsonl"
    token.write_text(TOKEN + "\n")
    server = Server("asyncio", "--auth-token-file", str(token), "--trace", str(trace))
    client = Client(server.url, headers=[("Authorization", f"Bearer {TOKEN}")])
    assert "result" in client.handshake()
    yield client, token, trace
    client.close()
    server.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("mode", [read_only, workspace_write])
def test_no_sandboxed_process_reads_the_token_or_the_trace(
        guarded: tuple[Client, Path, Path], mode: object) -> None:
    client, token, trace = guarded
    sandbox = mode(str(token.parent))  # type: ignore[operator]
    ran = run(client, f"cat {token}; head -c 200 {trace}; echo done", sandbox)
    assert ran.sandbox_type == "linuxSeccomp" and "done" in ran.stdout, ran
    assert TOKEN not in ran.stdout and '"' not in ran.stdout, ran


def test_no_sandboxed_fs_call_reads_them(guarded: tuple[Client, Path, Path]) -> None:
    client, token, trace = guarded
    for path in (token, trace):
        reply = client.call("fs/readFile", {"path": uri(path),
                                            "sandbox": read_only(str(token.parent))})
        assert "error" in reply and "Permission denied" in reply["error"]["message"], reply


def test_the_control_without_a_sandbox_reads_them(guarded: tuple[Client, Path, Path]) -> None:
    client, token, trace = guarded
    ran = run(client, f"cat {token}; head -c 1 {trace}", None)
    assert TOKEN in ran.stdout and ran.stdout.endswith("{"), ran
