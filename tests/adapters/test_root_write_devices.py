"""A writable root that keeps its restrictions, beside the reference: what
`linuxRootWritePreservesDevices` and `linuxApprovedRootWritePreservesRestrictions` announce.

The profile is the one an approved root write gives (`permissions.file_system` entries `:root`
write, a path read, paths denied, and the protected metadata of the project root): the
standard devices work (/dev/null, /dev/zero, /dev/urandom, /dev/random, /dev/full), /dev/shm
is writable and /dev/pts there, a process with a terminal runs, a read-only subpath is
EROFS, a denied one "Permission denied". And a read-only or denied path that goes through a
symlink the command could replace (a project's `.codex` that is a link) is not trusted: the
reference refuses the sandbox, its process exits 1 naming the path and the link, and so does
execproto's (`execproto.policy.crossing`); before, execproto held the link's target only and
the command could put a `.codex` of its own in the link's place.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from reference import CACHE, REFERENCE, WHY_MISSING

from .conftest import Server, start, uri
from .sandboxes import needs_bwrap, path_entry, profile
from .test_reference import Reference
from .wsclient import Client, output_of

pytestmark = [needs_bwrap, pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)]

DEVICES = """
cd "$T"
for d in null zero urandom random full; do
  echo "$d: read=$(head -c 4 /dev/$d 2>&1 | wc -c)" \
    "write=$( (echo x > /dev/$d) 2>&1 | sed 's/.*: //')"
done
echo "shm: $(echo x > /dev/shm/probe && cat /dev/shm/probe && rm /dev/shm/probe 2>&1)"
echo "pts: $(test -d /dev/pts && echo dir) ptmx: $(test -c /dev/ptmx && echo char)"
echo "dev: $(ls /dev | tr '\\n' ' ')"
echo "ro: $( (echo x > ro/r.txt) 2>&1 | sed 's/.*: //') $(cat ro/r.txt)"
echo "w: $(echo x > w/new.txt && cat w/new.txt)"
echo "secret: $(cat secret/s.txt 2>&1 | sed 's/.*: //') $(cat secret.txt 2>&1 | sed 's/.*: //')"
echo "tty: $(tty 2>&1 | sed 's/.*: //')"
"""
TERMINAL = """
test -t 0 && test -t 1 && echo "a terminal: $(tty)"
stty size
echo x > /dev/null && echo "null from a terminal"
"""


def _special(kind: str, access: str, subpath: str | None = None) -> dict[str, Any]:
    value: dict[str, Any] = {"kind": kind}
    entry: dict[str, Any] = {"path": {"type": "special", "value": value}, "access": access}
    if subpath is not None:
        value["subpath"] = subpath
        entry["missing_path_behavior"] = "skip"
    return entry


def root_write(t: Path, denials: bool = True) -> dict[str, Any]:
    """`:root` write, a read-only path, a denied directory and file, and the metadata a
    project root keeps read-only, as Codex 0.171 sends them."""
    entries = [_special("root", "write"), path_entry(str(t / "ro"), "read")]
    if denials:
        entries += [path_entry(str(t / "secret"), "none"),
                    path_entry(str(t / "secret.txt"), "deny")]
    entries += [_special("project_roots", "read", name) for name in (".git", ".agents", ".codex")]
    return profile(str(t / "w"), entries)


def make_tree(t: Path) -> None:
    if t.exists():
        shutil.rmtree(t)
    for name in ("w/.git", "ro", "secret", "elsewhere"):
        (t / name).mkdir(parents=True)
    for name in ("ro/r.txt", "secret/s.txt", "secret.txt", "w/.git/config",
                 "elsewhere/config.toml"):
        (t / name).write_text(f"data:{name}")


def ran(client: Client, t: Path, script: str, tty: bool = False) -> dict[str, Any]:
    """``sh -c script`` under the root-write profile: its output, exit code and whether the
    server called it a sandbox denial."""
    try:
        reply = start(client, "p", ["sh", "-c", script], cwd=uri(t / "w"), tty=tty,
                      env={"PATH": "/usr/bin:/bin", "T": str(t)}, sandbox=root_write(t))
        assert "result" in reply, reply
        events = client.events_until_closed("p")
    finally:
        client.close()
    exited = [e["params"] for e in events if e["method"] == "process/exited"][0]
    output = {stream: data.decode(errors="replace").replace(str(t), "T")
              for stream, data in output_of(events).items()}
    return {"output": output, "exit": exited["exitCode"]}


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Callable[[], Client], Callable[[], Client]]]:
    assert REFERENCE is not None
    reference, ours = Reference(REFERENCE), Server("asyncio")
    try:
        yield reference.client, ours.client
    finally:
        reference.stop()
        ours.stop()


@pytest.fixture
def tree() -> Iterator[Path]:
    # Not under /tmp: the reference will not make its helper there.
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    made = Path(tempfile.mkdtemp(prefix="root-write-", dir=CACHE.parent))
    yield made / "t"
    shutil.rmtree(made, ignore_errors=True)


def test_devices_subpaths_and_denials_under_a_writable_root(servers: Any, tree: Path) -> None:
    reference, ours = servers
    make_tree(tree)
    expected = ran(reference(), tree, DEVICES)
    make_tree(tree)
    actual = ran(ours(), tree, DEVICES)
    assert actual == expected
    said = expected["output"]["stdout"]
    for line in ("null: read=0 write=", "zero: read=4 write=", "urandom: read=4 write=",
                 "random: read=4 write=", "full: read=4 write=I/O error",  # dash's ENOSPC
                 "shm: x", "pts: dir ptmx: char", "ro: Read-only file system data:ro/r.txt",
                 "w: x", "secret: Permission denied Permission denied"):
        assert line + "\n" in said, said  # what the reference still does, so both do


def test_a_terminal_under_a_writable_root(servers: Any, tree: Path) -> None:
    reference, ours = servers
    make_tree(tree)
    expected = ran(reference(), tree, TERMINAL, tty=True)
    make_tree(tree)
    actual = ran(ours(), tree, TERMINAL, tty=True)
    assert actual == expected
    # bubblewrap's /dev shows the terminal it was given as /dev/console
    assert "a terminal: /dev/console" in expected["output"]["pty"], expected


PLANT = ("echo ran; mv .codex .codex-moved && mkdir .codex && echo planted > "
         ".codex/config.toml; echo done")


@pytest.mark.parametrize("target", ["../elsewhere", "sub"])
def test_a_protected_name_that_is_a_link_refuses_the_sandbox(servers: Any, tree: Path,
                                                             target: str) -> None:
    reference, ours = servers
    results = []
    for client in (reference, ours):
        make_tree(tree)
        (tree / "w" / "sub").mkdir()
        (tree / "w" / ".codex").symlink_to(target)
        result = ran(client(), tree, PLANT)
        # Nothing ran: the link is where it was, and no `.codex` of the command's is there.
        assert (tree / "w" / ".codex").is_symlink(), result
        assert not (tree / "w" / ".codex-moved").exists(), result
        results.append(result)
    expected, actual = results
    assert expected["exit"] == actual["exit"] == 1, results
    assert "stdout" not in expected["output"] and "stdout" not in actual["output"], results
    why = ("cannot enforce sandbox read-only path T/w/.codex because it crosses writable "
           "symlink T/w/.codex\n")
    assert expected["output"]["stderr"].endswith(why), expected
    assert actual["output"]["stderr"] == "execproto sandbox: " + why, actual


@pytest.mark.parametrize("denials", [True, False])
def test_fs_calls_under_such_a_sandbox_fail(servers: Any, tree: Path, denials: bool) -> None:
    """The reference's fs calls that run in its sandbox (writes; reads too where the profile
    denies a path) fail as its processes do. execproto says the same, in its own words."""
    answers = []
    for client_of in servers:
        make_tree(tree)
        (tree / "w" / "sub").mkdir()
        (tree / "w" / ".codex").symlink_to("sub")
        client = client_of()
        try:
            sandbox = root_write(tree, denials)
            read = client.call("fs/readFile", {"path": uri(tree / "ro" / "r.txt"),
                                               "sandbox": sandbox})
            write = client.call("fs/writeFile", {"path": uri(tree / "w" / "new.txt"),
                                                 "dataBase64": "eA==", "sandbox": sandbox})
        finally:
            client.close()
        assert not (tree / "w" / "new.txt").exists(), write
        answers.append([{key: value.replace(str(tree), "T") if isinstance(value, str) else value
                         for key, value in reply.get("error", reply.get("result")).items()}
                        for reply in (read, write)])
    why = ("cannot enforce sandbox read-only path T/w/.codex because it crosses writable "
           "symlink T/w/.codex")
    helper = ("fs sandbox helper failed with status exit status: 1: error building bubblewrap "
              "command: Fatal error: ")
    expected, actual = answers
    assert expected[1] == {"code": -32603, "message": helper + why}, answers
    assert actual[1] == {"code": -32603, "message": why}, answers
    if denials:
        assert (expected[0], actual[0]) == (expected[1], actual[1]), answers
    else:
        assert expected[0] == actual[0] == {"dataBase64": "ZGF0YTpyby9yLnR4dA=="}, answers
