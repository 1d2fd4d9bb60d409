"""Generated trees of files, directories and symlinks (relative, absolute, dangling, loops, out
of the root) under `--fs-root`: no fs call may read, list, describe or change anything outside."""

from __future__ import annotations

import base64
import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .conftest import ADAPTERS, Server, uri
from .wsclient import Client

SECRET = b"OUTSIDE-SECRET-BYTES"
OUTSIDE_NAME = "outside-only-name"
NAMES = ["a", "b", "c", "..", "."]
_counter = itertools.count()


@pytest.fixture(scope="module", params=ADAPTERS)
def jail(request: pytest.FixtureRequest) -> Iterator[tuple[Client, Path, Path]]:
    base = Path(tempfile.mkdtemp(prefix="execproto-trees-"))
    root, outside = base / "root", base / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / OUTSIDE_NAME).write_bytes(SECRET)
    (outside / "dir").mkdir()
    server = Server(str(request.param), "--fs-root", str(root))
    yield server.client(), root, outside
    log = server.stop()
    shutil.rmtree(base, ignore_errors=True)
    assert "Traceback" not in log, log


def _inside(root: Path, path: str) -> bool:
    lands = os.path.realpath(path)
    return lands == str(root) or lands.startswith(str(root) + "/")


def _snapshot(outside: Path) -> list[tuple[str, int, bytes]]:
    found = []
    for here, dirs, files in os.walk(outside):
        for name in sorted(dirs + files):
            path = os.path.join(here, name)
            info = os.lstat(path)
            data = Path(path).read_bytes() if os.path.isfile(path) else b""
            found.append((path, info.st_mtime_ns, data))
    return sorted(found)


relative = st.lists(st.sampled_from(NAMES), min_size=1, max_size=4).map("/".join)
target = st.one_of(
    relative,                                                      # within, or climbing out
    st.just("OUT"), st.just("OUT/" + OUTSIDE_NAME), st.just("OUT/dir"),  # absolute, outside
    st.just("ROOT"), relative.map(lambda r: "ROOT/" + r),          # absolute, inside
    st.just("nowhere/at/all"), st.just("."), st.just(".."))        # dangling, loops
entry = st.tuples(st.sampled_from(["file", "dir", "link"]), relative, target)
method = st.sampled_from(["fs/readFile", "fs/getMetadata", "fs/canonicalize", "fs/readDirectory",
                          "fs/walk", "fs/writeFile", "fs/createDirectory", "fs/remove",
                          "fs/copy", "fs/open"])
call = st.tuples(method, relative, relative)


def _build(top: Path, outside: Path, entries: list[tuple[str, str, str]]) -> None:
    for kind, name, to in entries:
        path = Path(os.path.normpath(top / name))
        if not str(path).startswith(str(top)) or path == top:
            continue  # the tree is made inside; only its symlinks may point out
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if kind == "file":
                path.write_bytes(b"inside")
            elif kind == "dir":
                path.mkdir()
            else:
                path.symlink_to(to.replace("OUT", str(outside)).replace("ROOT", str(top)))
        except OSError:
            pass  # a name already taken, or a parent that is a file: skipped


def _params(name: str, path: str, other: str) -> dict[str, Any]:
    extra: dict[str, dict[str, Any]] = {
        "fs/writeFile": {"dataBase64": base64.b64encode(b"written").decode()},
        "fs/copy": {"sourcePath": uri(path), "destinationPath": uri(other), "recursive": True},
        "fs/open": {"handleId": f"h{next(_counter)}", "mode": "replace"},
    }
    params = {"path": uri(path), **extra.get(name, {})}
    if name == "fs/copy":
        del params["path"]
    return params


# The escapes issue 15 found, always tried: a listing that describes a link's outside target,
# and a recursive copy onto a file symlink of the same name.
@example(entries=[("link", "a", "OUT/dir")], calls=[("fs/readDirectory", ".", ".")])
@example(entries=[("file", "a/c", ""), ("dir", "b", ""), ("link", "b/c", "OUT/" + OUTSIDE_NAME)],
         calls=[("fs/copy", "a", "b")])
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(entries=st.lists(entry, max_size=12), calls=st.lists(call, min_size=1, max_size=10))
def test_no_call_touches_anything_outside_the_root(
        jail: tuple[Client, Path, Path], entries: list[tuple[str, str, str]],
        calls: list[tuple[str, str, str]]) -> None:
    client, root, outside = jail
    top = root / f"t{next(_counter)}"
    top.mkdir(parents=True)  # an earlier call may have removed the root itself
    _build(top, outside, entries)
    before = _snapshot(outside)
    for name, path, other in calls:
        target = os.path.join(top, path)
        params = _params(name, target, os.path.join(top, other))
        reply = client.call(name, params)
        text = str(reply)
        assert SECRET.decode() not in text and base64.b64encode(SECRET).decode() not in text
        assert OUTSIDE_NAME not in text and str(outside) not in text, (name, path, reply)
        # What the call named, resolved now (nothing else moves), decides the answer: a path
        # leading out is refused, never described.
        lands = os.path.realpath(target)
        if name in ("fs/getMetadata", "fs/canonicalize", "fs/readFile") and not _inside(
                root, target):
            assert "error" in reply, (name, path, lands, reply)
        if name == "fs/readDirectory" and "result" in reply:
            for listed in reply["result"]["entries"]:  # nothing listed that leads out
                assert _inside(root, os.path.join(lands, listed["fileName"])), (path, listed)
        if name == "fs/open" and "result" in reply:
            client.call("fs/close", {"handleId": params["handleId"]})
    assert _snapshot(outside) == before
