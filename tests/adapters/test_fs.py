"""fs/* end to end: real files in temporary directories, through a real server."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server, uri
from .wsclient import Client


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def error(reply: dict[str, object]) -> object:
    assert "error" in reply, reply
    return reply["error"]


def test_whole_files_directories_and_metadata(client: Client, tmp_path: Path) -> None:
    f = tmp_path / "a b.txt"
    assert client.result("fs/writeFile", {"path": uri(f), "dataBase64": b64(b"hello\x00")}) == {}
    assert f.read_bytes() == b"hello\x00"
    assert client.result("fs/readFile", {"path": uri(f)}) == {"dataBase64": b64(b"hello\x00")}
    meta = client.result("fs/getMetadata", {"path": uri(f)})
    assert (meta["isFile"], meta["isDirectory"], meta["isSymlink"], meta["size"]) == (
        True, False, False, 6)
    assert abs(meta["modifiedAtMs"] / 1000 - f.stat().st_mtime) < 1
    deep = tmp_path / "x" / "y"
    assert client.result("fs/createDirectory", {"path": uri(deep)}) == {}
    assert deep.is_dir()
    (tmp_path / "link").symlink_to(f)
    (tmp_path / "broken").symlink_to(tmp_path / "nowhere")
    listing = client.result("fs/readDirectory", {"path": uri(tmp_path)})["entries"]
    assert sorted((e["fileName"], e["isDirectory"], e["isFile"]) for e in listing) == [
        ("a b.txt", False, True), ("link", False, True), ("x", True, False)]
    assert client.result("fs/canonicalize", {"path": uri(tmp_path / "link")}) == {"path": uri(f)}
    assert client.result("fs/getMetadata", {"path": uri(tmp_path / "link")})["isSymlink"] is True
    assert client.result("fs/remove", {"path": uri(tmp_path / "x")}) == {}
    assert not (tmp_path / "x").exists()
    assert client.result("fs/remove", {"path": uri(tmp_path / "x")}) == {}  # force by default


def test_errors(client: Client, tmp_path: Path) -> None:
    missing = uri(tmp_path / "missing")
    assert error(client.call("fs/readFile", {"path": missing})) == {
        "code": -32004, "message": "No such file or directory (os error 2)"}
    assert error(client.call("fs/remove", {"path": missing, "force": False}))["code"] == -32004  # type: ignore[index]
    assert error(client.call("fs/readFile", {"path": str(tmp_path)})) == {
        "code": -32602, "message": "invalid URI: relative URL without a base"}
    assert error(client.call("fs/readFile", {"path": uri(tmp_path)})) == {
        "code": -32600, "message": f"path `{tmp_path}` is not a file"}
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    reply = client.call("fs/remove", {"path": uri(tmp_path / "d"), "recursive": False})
    assert error(reply)["code"] == -32603  # type: ignore[index]


def test_a_fifo_is_refused_at_once(client: Client, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    began = time.monotonic()
    for method in ("fs/readFile", "fs/open"):
        params = {"path": uri(fifo), "handleId": "h"}
        assert error(client.call(method, params, timeout=5)) == {
            "code": -32600, "message": f"path `{fifo}` is not a file"}
    assert error(client.call("fs/writeFile", {"path": uri(fifo), "dataBase64": ""}, timeout=5))
    assert time.monotonic() - began < 5  # not waiting for a writer or reader that never comes


def test_copy_keeps_symlinks_and_refuses_itself(client: Client, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f").write_text("data")
    (src / "l").symlink_to("sub/f")
    copy = {"sourcePath": uri(src), "destinationPath": uri(tmp_path / "dst"), "recursive": True}
    assert client.result("fs/copy", copy) == {}
    assert (tmp_path / "dst" / "sub" / "f").read_text() == "data"
    assert os.readlink(tmp_path / "dst" / "l") == "sub/f"
    flat = {**copy, "recursive": False}
    assert error(client.call("fs/copy", flat)) == {
        "code": -32600,
        "message": "fs/copy requires recursive: true when sourcePath is a directory"}
    inside = {**copy, "destinationPath": uri(src / "sub" / "again")}
    assert error(client.call("fs/copy", inside)) == {
        "code": -32600,
        "message": "fs/copy cannot copy a directory to itself or one of its descendants"}


def test_handles_read_blocks_and_close_with_the_connection(server: Server, tmp_path: Path) -> None:
    f = tmp_path / "big"
    data = os.urandom(3 << 20)
    f.write_bytes(data)
    c = server.client()
    assert c.result("fs/open", {"handleId": "h", "path": uri(f)}) == {"handleId": "h"}
    got, offset = b"", 0
    while True:
        block = c.result("fs/readBlock", {"handleId": "h", "offset": offset, "len": 1 << 20})
        got += base64.b64decode(block["chunk"])
        offset += 1 << 20
        if block["eof"]:
            break
    assert got == data
    other = server.client()
    assert error(other.call("fs/readBlock", {"handleId": "h", "offset": 0, "len": 1})) == {
        "code": -32004, "message": "unknown file handle `h`"}
    assert c.result("fs/close", {"handleId": "h"}) == {}
    assert error(c.call("fs/readBlock", {"handleId": "h", "offset": 0, "len": 1}))["code"] == -32004  # type: ignore[index]
    fds = len(os.listdir(f"/proc/{server.process.pid}/fd"))
    for i in range(5):
        c.result("fs/open", {"handleId": f"k{i}", "path": uri(f)})
    c.close()  # the connection's handles are closed with it
    deadline = time.monotonic() + 15
    while len(os.listdir(f"/proc/{server.process.pid}/fd")) > fds and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(os.listdir(f"/proc/{server.process.pid}/fd")) <= fds


def test_whole_file_reads_have_a_limit(client: Client, tmp_path: Path) -> None:
    f = tmp_path / "huge"
    with open(f, "wb") as out:
        out.truncate((64 << 20) + 1)
    reply = error(client.call("fs/readFile", {"path": uri(f)}))
    assert reply["code"] == -32600 and "fs/open and fs/readBlock" in reply["message"]  # type: ignore[index]


@pytest.fixture
def rooted(adapter: str, tmp_path: Path) -> Iterator[tuple[Client, Path]]:
    root = tmp_path / "root"
    root.mkdir()
    server = Server(adapter, "--fs-root", str(root))
    yield server.client(), root
    server.stop()


def test_fs_root_confines_paths(rooted: tuple[Client, Path], tmp_path: Path) -> None:
    client, root = rooted
    (tmp_path / "secret").write_text("s")
    (root / "ok").write_text("fine")
    (root / "escape").symlink_to(tmp_path / "secret")
    assert client.result("fs/readFile", {"path": uri(root / "ok")}) == {"dataBase64": b64(b"fine")}
    for sneaky in (root / "escape", root / ".." / "secret"):
        assert error(client.call("fs/readFile", {"path": uri(sneaky)})) == {
            "code": -32600, "message": f"path `{sneaky}` is outside the allowed roots"}
    outside = tmp_path / "new"
    reply = client.call("fs/writeFile", {"path": uri(outside), "dataBase64": ""})
    assert error(reply)["code"] == -32600  # type: ignore[index]
    assert not outside.exists()
    assert client.result("fs/writeFile", {"path": uri(root / "new"), "dataBase64": b64(b"1")}) == {}
    os.mkfifo(root / "fifo")
    began = time.monotonic()
    assert error(client.call("fs/readFile", {"path": uri(root / "fifo")}, timeout=5)) == {
        "code": -32600, "message": f"path `{root / 'fifo'}` is not a file"}
    assert time.monotonic() - began < 5  # not waiting for a writer that never comes
