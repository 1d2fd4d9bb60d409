"""Deny patterns mean one thing: to a process, to fs calls, and as the reference has them.

A workspace with files named to catch each reading of a pattern (dot files, `*` across a
`/`, `**` as zero directories, a denied directory's contents); for each pattern, which files a
sandboxed process can read is compared with what fs/readFile gives under the same profile, and,
where the reference is installed, with what its own sandbox lets the same command read. Then
fs/remove and fs/copy of a tree holding a denied file: refused, and nothing touched.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reference import REFERENCE

from execproto._globs import matches

from .conftest import Server, uri
from .sandboxes import needs_bwrap, profile, run
from .test_reference import Reference
from .wsclient import Client

pytestmark = needs_bwrap

FILES = [".env", "app.env", "notes.txt", "a.env.bak", "sub/x.env", "sub/keep.txt",
         "sub/deep/y.env", "sub/deep/z.txt", ".hidden/b.env", "env.d/conf"]
PATTERNS = ["**/*.env", "*.env", "sub/*", "**/deep/**", "sub/**/*.txt", ".*"]
ROOT_READ = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}


@pytest.fixture(scope="module")
def workspace() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="execproto-globs-", dir="/var/tmp"))
    base.chmod(0o755)
    for name in FILES:
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_text(f"contents of {name}\n")
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def ours() -> Iterator[Client]:
    server = Server("asyncio")
    yield server.client()
    server.stop()


def _denying(workspace: Path, pattern: str) -> dict[str, Any]:
    deny = {"path": {"type": "glob_pattern", "pattern": pattern}, "access": "deny"}
    return profile(str(workspace), [ROOT_READ, deny])


READ_EACH = ("for f in " + " ".join(FILES) + '; do cat "$f" >/dev/null 2>&1 && echo "$f"; done; '
             "true")


def _process_reads(client: Client, workspace: Path, pattern: str) -> set[str]:
    ran = run(client, READ_EACH, _denying(workspace, pattern), cwd=str(workspace))
    assert ran.exit_code == 0, ran
    return set(ran.stdout.split())


def _fs_reads(client: Client, workspace: Path, pattern: str) -> set[str]:
    sandbox = _denying(workspace, pattern)
    return {name for name in FILES if "result" in client.call(
        "fs/readFile", {"path": uri(workspace / name), "sandbox": sandbox})}


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_process_and_fs_calls_see_the_same_files(ours: Client, workspace: Path,
                                                   pattern: str) -> None:
    process = _process_reads(ours, workspace, pattern)
    assert process != set(FILES), "the pattern denied nothing: the case tests nothing"
    assert _fs_reads(ours, workspace, pattern) == process


def test_the_patterns_mean_what_the_reference_means(ours: Client, workspace: Path) -> None:
    """The same files denied, but for one deliberate difference (docs/protocol.md): a pattern
    that matches a directory hides what it holds here, where the reference leaves it readable
    (`**/secrets` would leave the secrets readable there)."""
    if REFERENCE is None:
        pytest.skip("the reference is not installed")
    reference = Reference(REFERENCE)
    try:
        theirs = reference.client()
        for pattern in PATTERNS + ["sub/d*", "**/sub"]:
            absolute = f"{workspace}/{pattern}"
            theirs_denied = set(FILES) - _process_reads(theirs, workspace, pattern)
            ours_denied = set(FILES) - _process_reads(ours, workspace, pattern)
            assert theirs_denied <= ours_denied, pattern
            for extra in ours_denied - theirs_denied:
                ancestors = Path(workspace / extra).parents
                assert any(matches(absolute, str(up)) for up in ancestors), (pattern, extra)
            assert {f for f in FILES if matches(absolute, f"{workspace}/{f}")} == theirs_denied
    finally:
        reference.stop()


def test_a_tree_holding_a_denied_file_is_neither_removed_nor_copied(ours: Client,
                                                                    workspace: Path) -> None:
    tree = workspace / "tree"
    (tree / "inner").mkdir(parents=True)
    (tree / "inner" / "secret.env").write_text("s3cr3t\n")
    (tree / "plain.txt").write_text("plain\n")
    writable = {"path": {"type": "path", "path": uri(workspace)}, "access": "write"}
    deny = {"path": {"type": "glob_pattern", "pattern": "**/*.env"}, "access": "deny"}
    sandbox = profile(str(workspace), [ROOT_READ, writable, deny])
    try:
        copied = ours.call("fs/copy", {"sourcePath": uri(tree), "destinationPath":
                                       uri(workspace / "copy"), "recursive": True,
                                       "sandbox": sandbox})
        assert "error" in copied and "Permission denied" in copied["error"]["message"], copied
        assert not (workspace / "copy").exists()
        removed = ours.call("fs/remove", {"path": uri(tree), "recursive": True, "force": False,
                                          "sandbox": sandbox})
        assert "error" in removed, removed
        assert (tree / "inner" / "secret.env").read_text() == "s3cr3t\n"
        assert (tree / "plain.txt").exists()
        # The control: without the deny pattern the same calls go through.
        allowed = profile(str(workspace), [ROOT_READ, writable])
        assert "result" in ours.call("fs/copy", {
            "sourcePath": uri(tree), "destinationPath": uri(workspace / "copy"),
            "recursive": True, "sandbox": allowed})
        assert "result" in ours.call("fs/remove", {"path": uri(tree), "recursive": True,
                                                   "force": False, "sandbox": allowed})
        assert not tree.exists()
    finally:
        shutil.rmtree(tree, ignore_errors=True)
        shutil.rmtree(workspace / "copy", ignore_errors=True)
