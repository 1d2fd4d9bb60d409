"""The 0.171 calls end to end on every adapter: fs/walk, fs/open replace with fs/writeBlock,
fs/watchMissing, environment/status, environmentConfig/read and capability discovery."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server, uri
from .wsclient import Client

OPTIONS = {"maxDepth": 64, "maxDirectories": 100, "maxEntries": 100,
           "followDirectorySymlinks": False}


def walk(client: Client, root: Path, **options: Any) -> Any:
    return client.result("fs/walk", {"path": uri(root), "options": {**OPTIONS, **options}})


def listed(result: Any, root: Path) -> list[tuple[str, str]]:
    base = uri(root) + "/"
    return [(e["path"][len(base):], e["kind"]) for e in result["entries"]]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    t = tmp_path / "t"
    for d in ("b", "d1/d2", ".hid", "empty"):
        (t / d).mkdir(parents=True)
    for f in ("a.txt", "b/zz", "b/Bb", "d1/f1", "d1/d2/f2", ".hid/h", "sp ace#%"):
        (t / f).write_text("x")
    os.mkfifo(t / "fifo")
    (t / "link_dir").symlink_to("d1")
    (t / "link_file").symlink_to("a.txt")
    (t / "broken").symlink_to("nowhere")
    (t / "loop").symlink_to(".")
    (t / b"\xff\xfe".decode("utf-8", "surrogateescape")).write_text("x")
    return t


def test_walk_breadth_first_sorted_and_bounded(client: Client, tree: Path) -> None:
    result = walk(client, tree)
    assert listed(result, tree) == [
        (".hid", "directory"), ("a.txt", "file"), ("b", "directory"), ("d1", "directory"),
        ("empty", "directory"), ("sp%20ace%23%25", "file"), ("%FF%FE", "file"),
        (".hid/h", "file"), ("b/Bb", "file"), ("b/zz", "file"), ("d1/d2", "directory"),
        ("d1/f1", "file"), ("d1/d2/f2", "file")]
    assert (result["errors"], result["truncated"]) == ([], False)
    # Counted at the root: 7 listed + fifo, link_dir, link_file, loop (broken: nothing).
    assert listed(walk(client, tree, maxEntries=11), tree)[-1] == ("%FF%FE", "file")
    assert walk(client, tree, maxEntries=11)["truncated"] is True
    assert listed(walk(client, tree, maxDepth=0), tree)[-1] == ("%FF%FE", "file")
    assert walk(client, tree, maxDepth=0)["truncated"] is False
    one = walk(client, tree, maxDirectories=1)
    assert (len(one["entries"]), one["truncated"]) == (7, True)
    pruned = listed(walk(client, tree, pruneHiddenDirectories=True), tree)
    assert (".hid", "directory") in pruned and (".hid/h", "file") not in pruned


def test_walk_follows_directory_links_once(client: Client, tree: Path) -> None:
    got = listed(walk(client, tree, followDirectorySymlinks=True), tree)
    assert ("link_dir", "directory") in got and ("loop", "directory") in got
    assert ("d1/f1", "file") in got and ("link_dir/f1", "file") not in got  # d1 came first
    assert not any(path.startswith("loop/") for path, _ in got)
    assert ("link_file", "file") not in got


def test_walk_root_errors(client: Client, tree: Path) -> None:
    call = lambda path: client.call("fs/walk", {"path": uri(path), "options": OPTIONS})  # noqa: E731
    assert call(tree / "missing")["error"] == {
        "code": -32004, "message": "No such file or directory (os error 2)"}
    assert call(tree / "a.txt" / "x")["error"] == {
        "code": -32603, "message": "Not a directory (os error 20)"}
    empty = {"entries": [], "errors": [], "truncated": False}
    assert call(tree / "a.txt")["result"] == empty
    assert call(tree / "link_dir")["result"] == empty  # a link, not followed
    assert client.call("fs/walk", {"path": uri(tree), "options": {**OPTIONS, "maxDepth": 65}})[
        "error"]["code"] == -32600


def test_walk_stays_within_fs_root(adapter: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "in").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "secret").write_text("s")
    (root / "escape").symlink_to(tmp_path / "out")
    server = Server(adapter, "--fs-root", str(root))
    try:
        c = server.client()
        got = listed(walk(c, root, followDirectorySymlinks=True), root)
        assert got == [("in", "directory")]
        outer = c.call("fs/walk", {"path": uri(tmp_path), "options": OPTIONS})
        assert outer["error"]["code"] == -32600
    finally:
        server.stop()


def test_walk_honours_the_sandbox(client: Client, tree: Path) -> None:
    sandbox = {"permissions": {"type": "managed", "network": "restricted", "file_system": {
        "type": "restricted", "entries": [
            {"path": {"type": "path", "path": uri(tree)}, "access": "read"},
            {"path": {"type": "path", "path": uri(tree / "b")}, "access": "none"}]}},
        "windowsSandboxLevel": "disabled"}
    result = client.result("fs/walk", {"path": uri(tree), "options": OPTIONS, "sandbox": sandbox})
    got = listed(result, tree)
    assert ("a.txt", "file") in got and not any(p == "b" or p.startswith("b/") for p, _ in got)
    denied = client.call("fs/walk", {"path": uri(tree / "b"), "options": OPTIONS,
                                     "sandbox": sandbox})
    assert denied["error"] == {"code": -32600, "message": "Permission denied (os error 13)"}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_replace_and_write_blocks(client: Client, tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"old contents")
    f.chmod(0o600)
    inode = f.stat().st_ino
    assert client.result("fs/open", {"handleId": "w", "path": uri(f), "mode": "replace"}) == {
        "handleId": "w"}
    assert f.read_bytes() == b"" and f.stat().st_ino == inode
    for offset, data in ((0, b"hello "), (6, b"world"), (0, b"again"), (20, b"gap")):
        assert client.result("fs/writeBlock", {"handleId": "w", "offset": offset,
                                               "chunk": b64(data)}) == {}
    assert client.result("fs/close", {"handleId": "w"}) == {}
    assert f.read_bytes() == b"again world" + b"\0" * 9 + b"gap"
    assert f.stat().st_mode & 0o777 == 0o600
    new = tmp_path / "new"
    client.result("fs/open", {"handleId": "n", "path": uri(new), "mode": {"replace": None}})
    assert new.stat().st_mode & 0o777 == 0o666 & ~current_umask()
    bad = client.call("fs/readBlock", {"handleId": "n", "offset": 0, "len": 1})
    assert bad["error"] == {"code": -32603, "message": "Bad file descriptor (os error 9)"}
    client.result("fs/open", {"handleId": "r", "path": uri(f)})
    bad = client.call("fs/writeBlock", {"handleId": "r", "offset": 0, "chunk": "YQ=="})
    assert bad["error"] == {"code": -32603, "message": "Bad file descriptor (os error 9)"}
    assert client.call("fs/open", {"handleId": "d", "path": uri(tmp_path), "mode": "replace"})[
        "error"] == {"code": -32603, "message": "Is a directory (os error 21)"}
    assert client.call("fs/open", {"handleId": "m", "path": uri(tmp_path / "no" / "f"),
                                   "mode": "replace"})["error"]["code"] == -32004


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_watch_missing_fires_once(server: Server, tmp_path: Path) -> None:
    c = server.client()
    other = server.client()
    target = tmp_path / "x" / "y"
    assert c.result("fs/watchMissing", {"watchId": 5, "missing": [uri(target)]}) == {
        "watching": True}
    assert other.result("fs/watchMissing", {"watchId": 6, "missing": [uri(target)]}) == {
        "watching": True}
    began = time.monotonic()
    (tmp_path / "x").mkdir()  # the first missing component appearing is enough
    assert c.notification(lambda m: m["method"] == "fs/missingChanged")["params"] == {"watchId": 5}
    assert other.notification(lambda m: m["method"] == "fs/missingChanged")["params"] == {
        "watchId": 6}
    assert time.monotonic() - began < 5
    target.mkdir()
    assert c.result("environment/status") == {"status": "ready"}  # and no second notification
    assert not [m for m in c.inbox if m.get("method") == "fs/missingChanged"]
    # Not watching: a missing path that exists, or a present one that does not.
    assert c.result("fs/watchMissing", {"watchId": 7, "missing": [uri(target)]}) == {
        "watching": False}
    assert c.result("fs/watchMissing", {"watchId": 8, "missing": [uri(tmp_path / "z")],
                                        "present": uri(tmp_path / "none")}) == {"watching": False}
    # Present going away fires; an unwatch (missing: []) stops a watch.
    (tmp_path / "p").mkdir()
    assert c.result("fs/watchMissing", {"watchId": 9, "missing": [uri(tmp_path / "z")],
                                        "present": uri(tmp_path / "p")}) == {"watching": True}
    (tmp_path / "p").rmdir()
    assert c.notification(lambda m: m["method"] == "fs/missingChanged")["params"] == {"watchId": 9}
    assert c.result("fs/watchMissing", {"watchId": 10, "missing": [uri(tmp_path / "q")]}) == {
        "watching": True}
    assert c.result("fs/watchMissing", {"watchId": 11, "missing": []}) == {"watching": False}
    (tmp_path / "q").mkdir()
    time.sleep(0.3)
    assert c.result("environment/status") == {"status": "ready"}
    assert not [m for m in c.inbox if m.get("method") == "fs/missingChanged"]


@pytest.fixture
def homes(adapter: str, tmp_path: Path) -> Iterator[tuple[Client, Path]]:
    home = tmp_path / "codex-home"
    (home / "skills" / "demo").mkdir(parents=True)
    (home / "skills" / "demo" / "SKILL.md").write_text(
        "---\nname: demo\ndescription: A demo skill\n---\nBody\n")
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    (project / "sub").mkdir()
    (project / ".codex" / "skills" / "s").mkdir(parents=True)
    (project / ".codex" / "skills" / "s" / "SKILL.md").write_text("---\nname: s\n---\n")
    (project / ".codex" / "config.toml").write_text(
        'model = "proj"\n[mcp_servers.bar]\ncommand = "b"\n')
    (home / "config.toml").write_text(
        'model = "gpt-test"\napproval_policy = "never"\n[sandbox_workspace_write]\n'
        'network_access = true\n[mcp_servers.foo]\ncommand = "echo"\nargs = ["hi"]\n'
        f'[projects."{project}"]\ntrust_level = "trusted"\n')
    server = Server(adapter, env={"CODEX_HOME": str(home)})
    yield server.client(), tmp_path
    server.stop()


def test_environment_config_read(homes: tuple[Client, Path]) -> None:
    c, tmp_path = homes
    home, project = tmp_path / "codex-home", tmp_path / "proj"
    result = c.result("environmentConfig/read", {
        "cwd": uri(project / "sub"), "configPaths": [["model"], ["mcp_servers"]],
        "requirementsPaths": [["allowed_approval_policies"]]})
    assert result["codexHomeDir"] == uri(home) and result["hostname"] == os.uname().nodename
    layers = [layer for layer in result["config"]["layers"]
              if not layer["source"].startswith("system")]
    assert layers == [
        {"source": f"user ({home}/config.toml)", "baseDir": uri(home),
         "toml": 'model = "gpt-test"\n\n[mcp_servers.foo]\ncommand = "echo"\nargs = ["hi"]\n'},
        {"source": f"project ({project}/.codex/config.toml)", "baseDir": uri(project / ".codex"),
         "toml": 'model = "proj"\n\n[mcp_servers.bar]\ncommand = "b"\n'}]
    deep = c.result("environmentConfig/read", {
        "cwd": uri(tmp_path), "configPaths": [["mcp_servers", "foo", "command"],
                                              ["sandbox_workspace_write", "network_access"],
                                              ["nonexistent"]], "requirementsPaths": []})
    assert [layer["toml"] for layer in deep["config"]["layers"]
            if layer["source"].startswith("user")] == [
        '[sandbox_workspace_write]\nnetwork_access = true\n\n[mcp_servers.foo]\ncommand = "echo"\n']


def test_capability_discovery(homes: tuple[Client, Path]) -> None:
    c, tmp_path = homes
    home = tmp_path / "codex-home"
    skills = c.result("capabilities/discoverV2", {"cwd": uri(tmp_path / "proj")})["skills"]
    assert skills == [{"name": "demo", "description": "A demo skill", "shortDescription": None,
                       "path": uri(home / "skills" / "demo" / "SKILL.md"),
                       "discoveryRoot": {"id": "codex-home-skills", "path": uri(home / "skills")},
                       "dependencies": None, "policy": None}]
    roots = c.result("capabilityRoots/discoverV1", {"roots": [
        {"id": "p", "path": uri(tmp_path / "proj")}, {"id": "n", "path": uri(tmp_path / "none")}]})
    found, none = roots["roots"]
    assert [s["instructions"]["path"] for s in found["skills"]] == [
        uri(tmp_path / "proj" / ".codex" / "skills" / "s" / "SKILL.md")]
    assert found["skills"][0]["instructions"]["contents"] == "---\nname: s\n---\n"
    assert none["error"].endswith("No such file or directory (os error 2)")


def test_environment_config_and_skills_obey_the_fs_root(adapter: str, tmp_path: Path) -> None:
    """The executor's Codex config and skills are files like any other: with ``--fs-root``
    they are read only inside it, so a client confined to its workspace cannot read the
    operator's config (tokens of MCP servers, say) through these calls."""
    home, root = tmp_path / "codex-home", tmp_path / "root"
    (home / "skills" / "demo").mkdir(parents=True)
    (home / "skills" / "demo" / "SKILL.md").write_text("---\nname: d\ndescription: x\n---\n")
    (home / "config.toml").write_text('[mcp_servers.db]\nenv = { TOKEN = "s3cret" }\n')
    root.mkdir()
    asked = {"cwd": uri(root), "configPaths": [["mcp_servers"]], "requirementsPaths": []}
    for roots, seen in (((), True), (("--fs-root", str(root)), False)):
        server = Server(adapter, *roots, env={"CODEX_HOME": str(home)})
        try:
            c = server.client()
            layers = c.result("environmentConfig/read", asked)["config"]["layers"]
            user = [layer for layer in layers if layer["source"].startswith("user")]
            assert bool(user) is seen and ("s3cret" in str(layers)) is seen, (roots, layers)
            skills = c.result("capabilities/discoverV2", {"cwd": uri(root)})["skills"]
            assert bool(skills) is seen, (roots, skills)
        finally:
            server.stop()
