"""Capability discovery under the client's sandbox, beside the reference.

`capabilityRoots/discoverV1` scans each root under the sandbox sent with it: a directory the
sandbox denies is found and its scan fails with a warning (`failed to scan capability path
<uri>: Permission denied (os error 13)`), a path it does not show is skipped without a word,
a root it does not show is the root's error. The walk itself is the reference's: breadth
first, links to directories followed, each directory once, six directories deep, a SKILL.md
taken only as a regular file and only as UTF-8. `capabilities/discoverV2` reads
$CODEX_HOME/skills through the request's sandbox (the reference lists no skill there, so that
one is execproto's alone).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from reference import CACHE, REFERENCE, WHY_MISSING

from .conftest import Server, uri
from .sandboxes import path_entry, profile
from .test_reference import Reference, answer
from .wsclient import Client


def _special(kind: str) -> dict[str, Any]:
    return {"path": {"type": "special", "value": {"kind": kind}}, "access": "read"}


def make_tree(t: Path) -> None:
    if t.exists():
        shutil.rmtree(t)
    for name in ("r1/a", "r1/secret/b", "r1/pub/c", "r2/d"):
        (t / name).mkdir(parents=True)
        (t / name / "SKILL.md").write_text(f"---\nname: {name}\ndescription: d\n---\nbody\n")
    (t / "r1" / "l_secret").symlink_to("secret")  # reached first, by its name
    (t / "r1" / "l_out").symlink_to("../r2")
    deep = t / "r1" / "deep"
    for level in range(8):  # six directories down is scanned, seven is not
        deep = deep / str(level)
        deep.mkdir(parents=True)
        (deep / "SKILL.md").write_text(f"level {level}")
    (t / "r1" / "z").mkdir()
    (t / "r1" / "z" / "SKILL.md").write_text("z")
    (t / "r1" / "a" / "to_z").symlink_to("../z")  # z is scanned once, as z
    (t / "r1" / "linked").mkdir()
    (t / "r1" / "linked" / "SKILL.md").symlink_to("../z/SKILL.md")  # not taken
    (t / "r1" / "latin").mkdir()
    (t / "r1" / "latin" / "SKILL.md").write_bytes(b"caf\xe9")  # a warning, not a skill
    (t / "r1" / "latin2").mkdir()
    (t / "r1" / "latin2" / "SKILL.md").write_bytes(b"\xe9t\xe9")
    (t / "file-root").write_text("not a directory")


def shapes(t: Path) -> dict[str, dict[str, Any] | None]:
    def sandbox(*entries: dict[str, Any]) -> dict[str, Any]:
        return profile(str(t), list(entries))
    return {
        "none": None,
        "read-deny": sandbox(_special("root"), path_entry(str(t / "r1" / "secret"), "none")),
        "minimal-pub": sandbox(_special("minimal"), path_entry(str(t / "r1" / "pub"), "read")),
        "minimal-deny": sandbox(_special("minimal"), path_entry(str(t / "r1"), "read"),
                                path_entry(str(t / "r1" / "secret"), "none")),
        "root-denied": sandbox(_special("root"), path_entry(str(t / "r1"), "none")),
    }


def discover(client: Client, t: Path, shape: str) -> Any:
    sandbox = shapes(t)[shape]
    roots = []
    for n, name in enumerate(("r1", "r2", "file-root", "missing")):
        root: dict[str, Any] = {"id": str(n), "path": uri(t / name)}
        if sandbox is not None:
            root["sandbox"] = sandbox
        roots.append(root)
    reply = answer(client.call("capabilityRoots/discoverV1", {"roots": roots}))
    return json.loads(json.dumps(reply).replace(str(t), "T"))


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Callable[[], Client], Callable[[], Client]]]:
    if REFERENCE is None:
        pytest.skip(WHY_MISSING)
    reference, ours = Reference(REFERENCE), Server("asyncio")
    try:
        yield reference.client, ours.client
    finally:
        reference.stop()
        ours.stop()


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    CACHE.parent.mkdir(parents=True, exist_ok=True)  # not /tmp: the reference's helper
    made = Path(tempfile.mkdtemp(prefix="discovery-", dir=CACHE.parent))
    yield made
    shutil.rmtree(made, ignore_errors=True)


def _both(servers: Any, base: Path, shape: str) -> tuple[Any, Any]:
    found = []
    for client_of in servers:
        make_tree(base / "t")
        client = client_of()
        try:
            found.append(discover(client, base / "t", shape))
        finally:
            client.close()
    return found[0], found[1]


@pytest.mark.parametrize("shape", ["none", "read-deny", "minimal-pub", "minimal-deny",
                                   "root-denied"])
def test_roots_are_scanned_as_the_reference_scans_them(servers: Any, base: Path,
                                                       shape: str) -> None:
    expected, actual = _both(servers, base, shape)
    assert actual == expected


def test_what_the_reference_still_does(servers: Any, base: Path) -> None:
    """The facts the comparison rests on, so that a reference that changed is noticed."""
    denied, _ = _both(servers, base, "read-deny")
    r1 = denied["result"]["roots"][0]
    assert r1["warnings"] == [
        "failed to scan capability path file://T/r1/l_secret: Permission denied (os error 13)",
        "capability file file://T/r1/latin/SKILL.md is not UTF-8: incomplete utf-8 byte "
        "sequence from index 3",
        "capability file file://T/r1/latin2/SKILL.md is not UTF-8: invalid utf-8 sequence of 1 "
        "bytes from index 0"]
    paths = [skill["instructions"]["path"] for skill in r1["skills"]]
    assert "file://T/r1/deep/0/1/2/3/4/SKILL.md" in paths
    assert "file://T/r1/deep/0/1/2/3/4/5/SKILL.md" not in paths
    assert "file://T/r1/z/SKILL.md" in paths and "file://T/r1/linked/SKILL.md" not in paths
    hidden, _ = _both(servers, base, "minimal-pub")
    r1, r2 = hidden["result"]["roots"][:2]
    assert [skill["instructions"]["path"] for skill in r1["skills"]] == [
        "file://T/r1/pub/c/SKILL.md"]
    assert r1["warnings"] == [] and r2["error"] == (
        "failed to inspect capability root file://T/r2: No such file or directory (os error 2)")


def test_a_deny_pattern_hides_its_directory_whole(servers: Any, base: Path) -> None:
    """Kept: execproto's `dir/**` denies the directory too (test_fs_stream_parity.py's KEPT),
    so its scan is refused where the reference lists it and refuses each file."""
    t = base / "t"
    _, ours = servers
    make_tree(t)
    sandbox = profile(str(t), [_special("root"), {
        "path": {"type": "glob_pattern", "pattern": f"{t}/r1/secret/**"}, "access": "none"}])
    client = ours()
    try:
        reply = client.call("capabilityRoots/discoverV1", {"roots": [
            {"id": "1", "path": uri(t / "r1"), "sandbox": sandbox}]})
    finally:
        client.close()
    r1 = reply["result"]["roots"][0]
    assert r1["warnings"][0] == (f"failed to scan capability path {uri(t / 'r1' / 'l_secret')}:"
                                 " Permission denied (os error 13)")
    assert not any("secret" in skill["instructions"]["path"] for skill in r1["skills"])


def test_discover_v2_reads_the_home_skills_through_the_requests_sandbox(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for name in ("a", "b", "c"):
        (home / "skills" / name).mkdir(parents=True)
        (home / "skills" / name / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: about {name}\n---\n")
    (tmp_path / "w").mkdir()
    server = Server("asyncio", env={"CODEX_HOME": str(home)})
    try:
        client = server.client()

        def names(*entries: dict[str, Any]) -> list[str]:
            params: dict[str, Any] = {"cwd": uri(tmp_path / "w")}
            if entries:
                params["sandbox"] = profile(str(tmp_path / "w"), list(entries))
            found = client.result("capabilities/discoverV2", params)
            assert found["warnings"] == [] and found["plugins"] == []
            return [skill["name"] for skill in found["skills"]]

        assert names() == ["a", "b", "c"]
        assert names(_special("root"), path_entry(str(home / "skills" / "b"), "none")) == [
            "a", "c"]
        assert names(_special("root"), path_entry(str(home / "skills"), "deny")) == []
        assert names(_special("minimal")) == []
        assert names(_special("minimal"), path_entry(str(home / "skills" / "c"), "read")) == [
            "c"]
    finally:
        server.stop()
