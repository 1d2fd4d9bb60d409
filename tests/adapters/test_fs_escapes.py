"""fs calls attacked as issue 15 did, on a real server: each escape of `--fs-root` or of the
operator's sandbox it found, and the check-then-open race, as a test that failed before."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server, uri
from .sandboxes import needs_bwrap
from .wsclient import Client

SECRET = b"OUTSIDE-SECRET"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
def jail(adapter: str, tmp_path: Path) -> Iterator[tuple[Client, Path, Path]]:
    """A server confined to ``root``; ``outside`` holds a secret next to it."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_bytes(SECRET)
    server = Server(adapter, "--fs-root", str(root))
    yield server.client(), root, outside
    log = server.stop()
    assert "Traceback" not in log, log


def _outside_untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_bytes() == SECRET


def test_a_copy_never_writes_through_a_file_symlink_at_its_destination(
        jail: tuple[Client, Path, Path]) -> None:
    """Only the destination directory used to be checked; the file copied into it then went
    through the symlink of the same name."""
    client, root, outside = jail
    (root / "src").mkdir()
    (root / "src" / "f").write_bytes(b"attack")
    (root / "dst").mkdir()
    (root / "dst" / "f").symlink_to(outside / "secret")
    for source, destination, recursive in ((root / "src", root / "dst", True),
                                           (root / "src" / "f", root / "dst" / "f", False)):
        reply = client.call("fs/copy", {"sourcePath": uri(source),
                                        "destinationPath": uri(destination),
                                        "recursive": recursive})
        assert reply["error"]["code"] == -32600, reply
    _outside_untouched(outside)


def test_a_recursive_copy_never_enters_a_symlinked_directory(
        jail: tuple[Client, Path, Path]) -> None:
    client, root, outside = jail
    (root / "src" / "sub").mkdir(parents=True)
    (root / "src" / "sub" / "planted").write_bytes(b"attack")
    (root / "dst").mkdir()
    (root / "dst" / "sub").symlink_to(outside)
    reply = client.call("fs/copy", {"sourcePath": uri(root / "src"),
                                    "destinationPath": uri(root / "dst"), "recursive": True})
    assert reply["error"] == {
        "code": -32600, "message": f"fs/copy will not write through the symlink at "
                                   f"`{root / 'dst' / 'sub'}`"}
    _outside_untouched(outside)


def test_a_relative_symlink_copied_to_another_depth_carries_no_write_out(
        jail: tuple[Client, Path, Path]) -> None:
    client, root, outside = jail
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "link").symlink_to("../../outside/new")  # root/outside/new: inside
    assert client.result("fs/copy", {"sourcePath": uri(root / "a" / "b"),
                                      "destinationPath": uri(root / "b"), "recursive": True}) == {}
    assert os.readlink(root / "b" / "link") == "../../outside/new"  # now it points out
    reply = client.call("fs/writeFile", {"path": uri(root / "b" / "link"), "dataBase64": b64(b"x")})
    assert reply["error"] == {
        "code": -32600, "message": f"path `{root / 'b' / 'link'}` is outside the allowed roots"}
    (root / "again").mkdir()
    (root / "again" / "link").write_bytes(b"attack")  # a file of the link's name, copied over it
    reply = client.call("fs/copy", {"sourcePath": uri(root / "again"),
                                    "destinationPath": uri(root / "b"), "recursive": True})
    assert reply["error"]["code"] == -32600, reply
    assert not (outside.parent / "outside" / "new").exists()
    _outside_untouched(outside)


def test_every_method_refuses_a_symlink_out(jail: tuple[Client, Path, Path]) -> None:
    client, root, outside = jail
    (root / "out").symlink_to(outside)
    into = uri(root / "out" / "secret")
    calls = [("fs/readFile", {"path": into}), ("fs/getMetadata", {"path": into}),
             ("fs/canonicalize", {"path": into}), ("fs/readDirectory", {"path": uri(root / "out")}),
             ("fs/writeFile", {"path": into, "dataBase64": b64(b"x")}),
             ("fs/createDirectory", {"path": uri(root / "out" / "d")}),
             ("fs/remove", {"path": into}),
             ("fs/walk", {"path": uri(root / "out")}),
             ("fs/open", {"path": into, "handleId": "h"}),
             ("fs/open", {"path": into, "handleId": "w", "mode": "replace"}),
             ("fs/copy", {"sourcePath": into, "destinationPath": uri(root / "copy"),
                          "recursive": False}),
             ("fs/copy", {"sourcePath": uri(root / "nothing"), "destinationPath": into,
                          "recursive": False})]
    for method, params in calls:
        reply = client.call(method, params)
        assert "error" in reply, (method, reply)
    assert not (root / "copy").exists()
    _outside_untouched(outside)
    # Listing the root shows the link, but not what kind of thing lies outside.
    listed = client.result("fs/readDirectory", {"path": uri(root)})["entries"]
    assert listed == []


def test_a_created_file_gets_what_the_umask_leaves(jail: tuple[Client, Path, Path]) -> None:
    client, root, _ = jail
    assert client.result("fs/writeFile", {"path": uri(root / "new"), "dataBase64": ""}) == {}
    umask = os.umask(0o022)
    os.umask(umask)  # the server inherited the test's umask
    assert (root / "new").stat().st_mode & 0o777 == 0o666 & ~umask


def test_names_not_in_utf8_are_listed_as_the_reference_lists_them(
        jail: tuple[Client, Path, Path]) -> None:
    client, root, _ = jail
    (root / os.fsdecode(b"bad\xffname")).write_bytes(b"")
    entries = client.result("fs/readDirectory", {"path": uri(root)})["entries"]
    assert entries == [{"fileName": "bad\ufffdname", "isDirectory": False, "isFile": True}]


SWAPPER = """
import os, sys, time
root, outside = sys.argv[1], sys.argv[2]
d, real, link = root + "/d", root + "/d.real", root + "/d.link"
os.symlink(outside, link)
end = time.monotonic() + float(sys.argv[3])
swaps = 0
while time.monotonic() < end:
    os.rename(real, d); os.rename(d, real)
    os.rename(link, d); os.rename(d, link)
    swaps += 1
print(swaps)
"""


def test_a_directory_swapped_for_a_symlink_in_a_loop_leaks_nothing(
        jail: tuple[Client, Path, Path]) -> None:
    """A process swaps ``d`` between a directory and a symlink out for 3 s while fs calls go
    through it: not one read of the secret, not one write outside."""
    client, root, outside = jail
    (root / "d.real").mkdir()
    (root / "d.real" / "secret").write_bytes(b"inside")
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(root), str(outside), "3"],
                               stdout=subprocess.PIPE, text=True)
    reads = leaks = 0
    end = time.monotonic() + 3
    while time.monotonic() < end:
        got = client.call("fs/readFile", {"path": uri(root / "d" / "secret")})
        if "result" in got:
            reads += 1
            leaks += base64.b64decode(got["result"]["dataBase64"]) == SECRET
        client.call("fs/writeFile", {"path": uri(root / "d" / "planted"), "dataBase64": ""})
        client.call("fs/copy", {"sourcePath": uri(root / "d.real" / "secret"),
                                "destinationPath": uri(root / "d" / "copied"), "recursive": False})
    out, _ = swapper.communicate(timeout=10)
    assert int(out) > 100 and reads > 0  # the race was run, and some calls got through
    assert leaks == 0
    _outside_untouched(outside)


@needs_bwrap
def test_under_the_operators_sandbox_http_is_refused_without_network(
        adapter: str, tmp_path: Path) -> None:
    server = Server(adapter, "--sandbox", "bwrap", "--writable-root", str(tmp_path))
    try:
        reply = server.client().call("http/request", {
            "method": "GET", "url": "http://127.0.0.1:9/", "requestId": "r"})
        assert reply["error"] == {
            "code": -32600, "message": "http/request is refused: the operator's sandbox allows "
                                       "no network (the server runs with --sandbox and without "
                                       "--allow-network)"}
    finally:
        server.stop()
