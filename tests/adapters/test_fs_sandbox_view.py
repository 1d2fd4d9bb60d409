"""fs calls under a sandbox see what a sandboxed process sees: no process in /proc (the
server's environment and memory were readable, and writable under a root-write profile),
bubblewrap's few devices in /dev, mode bits that bind (no capabilities), the metadata beneath
a writable root read-only, and the reference's eof."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server, uri
from .wsclient import Client

MISSING = {"code": -32004, "message": "No such file or directory (os error 2)"}
DENIED = {"code": -32600, "message": "Permission denied (os error 13)"}
READ_ONLY = {"code": -32603, "message": "Read-only file system (os error 30)"}


def _sandbox(entries: list[dict[str, Any]], cwd: Path) -> dict[str, Any]:
    return {"permissions": {"type": "managed", "network": "restricted",
                            "file_system": {"type": "restricted", "entries": entries}},
            "cwd": uri(cwd), "windowsSandboxLevel": "disabled"}


def _root(access: str) -> dict[str, Any]:
    return {"path": {"type": "special", "value": {"kind": "root"}}, "access": access}


def _path(path: Path, access: str) -> dict[str, Any]:
    return {"path": {"type": "path", "path": uri(path)}, "access": access}


def _error(reply: dict[str, Any]) -> Any:
    return reply.get("error", reply)


def test_no_process_in_proc(server: Server, client: Client, tmp_path: Path) -> None:
    for sandbox in (_sandbox([_root("read")], tmp_path), _sandbox([_root("write")], tmp_path)):
        for path in ("/proc/self/environ", f"/proc/{server.process.pid}/cmdline",
                     "/proc/thread-self/status", "/proc/self/mem"):
            got = client.call("fs/readFile", {"path": uri(path), "sandbox": sandbox})
            assert _error(got) == MISSING, (path, got)
        mem = client.call("fs/open", {"path": uri("/proc/self/mem"), "handleId": "m",
                                      "mode": "replace", "sandbox": sandbox})
        assert _error(mem) == MISSING, mem
        # The kernel's own files are read, never written.
        assert "result" in client.call("fs/readFile", {"path": uri("/proc/version"),
                                                       "sandbox": sandbox})
        knob = client.call("fs/writeFile", {"path": uri("/proc/sys/kernel/hostname"),
                                            "dataBase64": "eA==", "sandbox": sandbox})
        assert _error(knob) == DENIED, knob
    # Without a sandbox nothing changes.
    assert "result" in client.call("fs/readFile", {"path": uri("/proc/self/cmdline")})


def test_dev_is_bubblewraps(client: Client, tmp_path: Path) -> None:
    sandbox = _sandbox([_path(tmp_path, "read")], tmp_path)  # nothing granted in /dev
    assert "result" in client.call("fs/getMetadata", {"path": uri("/dev/null"),
                                                      "sandbox": sandbox})
    for name in os.listdir("/dev"):
        if name not in ("null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts",
                        "shm", "fd", "stdin", "stdout", "stderr", "core"):
            got = client.call("fs/getMetadata", {"path": uri(f"/dev/{name}"),
                                                 "sandbox": sandbox})
            assert _error(got) == MISSING, (name, got)
            break


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root server has capabilities to drop")
def test_mode_bits_bind_a_root_server(client: Client, tmp_path: Path) -> None:
    theirs, mine = tmp_path / "theirs", tmp_path / "mine"
    theirs.write_text("theirs")
    os.chown(theirs, 1000, 1000)
    theirs.chmod(0o600)
    mine.write_text("mine")
    mine.chmod(0o444)
    sandbox = _sandbox([_path(tmp_path, "write")], tmp_path)
    assert _error(client.call("fs/readFile", {"path": uri(theirs), "sandbox": sandbox})) == DENIED
    wrote = client.call("fs/writeFile", {"path": uri(mine), "dataBase64": "eA==",
                                         "sandbox": sandbox})
    assert _error(wrote) == DENIED and mine.read_text() == "mine"
    # The same server, without a sandbox, has its rights.
    assert "result" in client.call("fs/readFile", {"path": uri(theirs)})


def test_metadata_beneath_a_writable_root_is_read_only(client: Client, tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]")
    sandbox = _sandbox([_root("read"), _path(tmp_path, "write")], tmp_path)
    for path in (tmp_path / ".git" / "config", tmp_path / ".codex" / "config.toml",
                 tmp_path / ".agents" / "x", tmp_path / ".aws" / "credentials"):
        got = client.call("fs/open", {"path": uri(path), "handleId": "h", "mode": "replace",
                                      "sandbox": sandbox})
        assert _error(got) == READ_ONLY, (path, got)
    assert (tmp_path / ".git" / "config").read_text() == "[core]"
    assert "result" in client.call("fs/writeFile", {"path": uri(tmp_path / "x"),
                                                    "dataBase64": "eA==", "sandbox": sandbox})


def test_replace_fails_in_the_kernels_order(client: Client, tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    sandbox = _sandbox([_root("read"), _path(tmp_path / "w", "write")], tmp_path)
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "dangling").symlink_to("made")

    def replace(path: Path) -> Any:
        return _error(client.call("fs/open", {"path": uri(path), "handleId": "h",
                                              "mode": "replace", "sandbox": sandbox}))
    assert replace(tmp_path / "dir") == {"code": -32603, "message": "Is a directory (os error 21)"}
    assert replace(tmp_path / "fifo") == {"code": -32603,
                                          "message": "No such device or address (os error 6)"}
    assert replace(tmp_path / "no" / "x") == MISSING
    assert replace(tmp_path / "x") == READ_ONLY
    assert replace(Path("/dev/null")) == {"code": -32600,
                                          "message": "path `/dev/null` is not a file"}
    # A dangling link is written through, as any program's open would.
    assert client.call("fs/open", {"path": uri(tmp_path / "w" / "dangling"), "handleId": "d",
                                   "mode": "replace", "sandbox": sandbox})["result"]
    client.result("fs/writeBlock", {"handleId": "d", "offset": 0,
                                    "chunk": base64.b64encode(b"W").decode()})
    client.result("fs/close", {"handleId": "d"})
    assert (tmp_path / "w" / "made").read_text() == "W"


def test_a_block_short_of_its_length_is_the_end(client: Client, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 18)
    client.result("fs/open", {"path": uri(tmp_path / "f"), "handleId": "f"})
    assert client.result("fs/readBlock", {"handleId": "f", "offset": 0, "len": 18})["eof"] is False
    assert client.result("fs/readBlock", {"handleId": "f", "offset": 18, "len": 18})["eof"] is True
    client.result("fs/open", {"path": uri("/proc/version"), "handleId": "p"})
    assert client.result("fs/readBlock", {"handleId": "p", "offset": 0, "len": 10})["eof"] is False
