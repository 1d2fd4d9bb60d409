"""fs streams under every sandbox shape Codex sends, against the reference and execproto.

`fs/getMetadata`, `fs/open` (read, then `fs/readBlock`) and `fs/open` `mode: "replace"` (then
`fs/writeBlock`), each with a `sandbox`, on a tree of files, directories, symlinks (into and
out of denied and unreadable places, dangling, a loop), a FIFO, special paths and missing
ones: the answers must be the reference's, and so must the files left behind. What differs on
purpose is in `KEPT`, with why, and checked to be execproto's own answer.
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from reference import CACHE, REFERENCE, WHY_MISSING

from .conftest import Server, uri
from .test_reference import Reference, answer
from .wsclient import Client

pytestmark = pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)
ROOT = os.geteuid() == 0

DIRECTORIES = ("pub/dir", "secret/sub", "ro/sub", "w/sub", "w/.git")
FILES = ("pub/a.txt", "secret/s.txt", "secret/sub/deep.txt", "ro/r.txt", "w/x.txt",
         "secret.txt", "w/a.env", "pub/b.env", "w/.git/config")
LINKS = {  # name -> target
    "w/l_secret": "../secret/s.txt", "w/l_secretdir": "../secret", "secret/l_out": "../pub/a.txt",
    "w/l_ro": "../ro/r.txt", "w/l_rodir": "../ro", "w/l_pub": "../pub/a.txt",
    "w/l_out": "OUT/o.txt", "w/dangling": "nowhere", "w/loop": "loop",
    "w/l_secretfile": "../secret.txt", "w/l_x": "x.txt", "w/l_ronew": "../ro/new.txt",
    "w/l_secretnew": "../secret/new.txt",
}
PATHS = (
    "pub/a.txt", "pub/dir", "secret", "secret/s.txt", "secret/sub/deep.txt", "secret/l_out",
    "secret.txt", "ro/r.txt", "ro/new.txt", "ro/sub", "w/x.txt", "w/new.txt", "w/sub",
    *LINKS, "w/l_secretdir/s.txt", "w/l_rodir/r.txt", "w/fifo", "w/a.env", "pub/b.env",
    "w/.git/config", "w/.codex/config.toml", "w/x.txt/y", "missing/x", "nothere/f",
    "w/ro444", "w/theirs600", "/proc/version", "/proc/self/status", "/dev/null", "/dev/sda",
)


def _special(kind: str, access: str, subpath: str | None = None,
             skip: bool = False) -> dict[str, Any]:
    value: dict[str, Any] = {"kind": kind}
    if subpath is not None:
        value["subpath"] = subpath
    entry: dict[str, Any] = {"path": {"type": "special", "value": value}, "access": access}
    if skip:
        entry["missing_path_behavior"] = "skip"
    return entry


def _path(path: Path, access: str, skip: bool = False) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": {"type": "path", "path": uri(path)}, "access": access}
    if skip:
        entry["missing_path_behavior"] = "skip"
    return entry


def _glob(pattern: str) -> dict[str, Any]:
    return {"path": {"type": "glob_pattern", "pattern": pattern}, "access": "none"}


def _sandbox(entries: list[dict[str, Any]], cwd: Path,
             roots: tuple[Path, ...] = ()) -> dict[str, Any]:
    return {"permissions": {"type": "managed", "network": "restricted",
                            "file_system": {"type": "restricted", "entries": entries}},
            "cwd": uri(cwd), "workspaceRoots": [uri(r) for r in roots or (cwd,)],
            "windowsSandboxLevel": "disabled", "windowsSandboxProxySettingsMode": "reconcile",
            "useLegacyLandlock": False}


def shapes(t: Path) -> dict[str, dict[str, Any]]:
    """Codex's read-only and workspace-write profiles (as 0.171 sends them), a root-write
    profile with read-only and denied paths, restricted reads, deny-only, glob denials, and
    entries for missing paths with and without `missing_path_behavior`."""
    w = t / "w"
    return {
        "read-only": _sandbox([_special("root", "read")], w),
        "workspace-write": _sandbox(
            [_special("root", "read"), _special("project_roots", "write"),
             _special("slash_tmp", "write"), _special("tmpdir", "write")]
            + [_special("project_roots", "read", name, skip=True)
               for name in (".git", ".agents", ".codex", ".aws")], w),
        "root-write": _sandbox([_special("root", "write"), _path(t / "ro", "read"),
                                _path(t / "secret", "none"), _path(t / "secret.txt", "none")], w),
        "restricted-read": _sandbox([_special("minimal", "read"), _path(t / "pub", "read"),
                                     _path(w, "write"), _path(t / "secret", "deny")], w),
        "deny-only": _sandbox([_special("root", "read"), _path(t / "secret", "none")], w),
        "glob": _sandbox([_special("root", "read"), _path(w, "write"), _glob("**/*.env")], w),
        "glob-absolute": _sandbox([_special("root", "read"), _path(w, "write"),
                                   _glob(f"{t}/secret/**")], w),
        "missing": _sandbox([_special("root", "read"), _path(w, "write"),
                             _path(t / "nothere", "write"), _path(t / "nothere2", "none")], w),
        "missing-skip": _sandbox([_special("root", "read"), _path(w, "write"),
                                  _path(t / "nothere", "write", skip=True),
                                  _path(t / "nothere2", "none", skip=True)], w),
    }


DENIED = {"code": -32600, "message": "Permission denied (os error 13)"}
MISSING = {"code": -32004, "message": "No such file or directory (os error 2)"}
_OPAQUE = ("a path a rule denies is opaque to every call: the reference's getMetadata shows "
           "the empty directory or file its sandbox masks it with, and its replace says "
           "EISDIR or EROFS of that mask")
_NO_PROCESS = ("an fs call under a sandbox finds no process in /proc (the reference finds its "
               "own helper there; execproto's server is not the sandbox's to show)")
_GLOB_DIR = "a deny pattern `dir/**` denies the directory itself too"
_VOID = ("a write under no rule, in a directory the reference's sandbox makes only to lead to "
         "a mount: the reference writes into its throwaway root and says it succeeded")
# (shape, path) -> (why, what execproto answers to each call).
KEPT: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
for _shape in ("root-write", "restricted-read", "deny-only"):
    for _name in ("secret", "w/l_secretdir"):
        KEPT[_shape, _name] = (_OPAQUE, {"meta": DENIED, "open": DENIED, "replace": DENIED})
for _name in ("secret.txt", "w/l_secretfile"):
    KEPT["root-write", _name] = (_OPAQUE, {"meta": DENIED, "open": DENIED, "replace": DENIED})
    KEPT["restricted-read", _name] = (_VOID, {"meta": MISSING, "open": MISSING,
                                              "replace": MISSING})
for _shape in shapes(Path("/")):
    KEPT[_shape, "/proc/self/status"] = (_NO_PROCESS, {"meta": MISSING, "open": MISSING,
                                                       "replace": MISSING})
    KEPT[_shape, "/dev/sda"] = (_VOID + " (its /dev)", {"meta": MISSING, "open": MISSING,
                                                        "replace": MISSING})
for _name in ("secret", "w/l_secretdir"):
    KEPT["glob-absolute", _name] = (_GLOB_DIR, {"meta": DENIED, "open": DENIED,
                                                "replace": DENIED})
# The same glob: the reference masks each file it matches at the start (a symlink is left
# leading where it leads, a file made later is not covered); execproto matches names.
KEPT["glob-absolute", "secret/l_out"] = ("a deny pattern denies a symlink it matches, not "
                                         "only a file", {"meta": DENIED, "open": DENIED,
                                                         "replace": DENIED})
KEPT["glob-absolute", "w/l_secretnew"] = ("a deny pattern denies a name that does not exist "
                                          "yet", {"meta": DENIED, "open": DENIED,
                                                  "replace": DENIED})
for _name in ("secret/s.txt", "secret/sub/deep.txt", "w/l_secret", "w/l_secretdir/s.txt"):
    KEPT["glob-absolute", _name] = (_OPAQUE, {"meta": DENIED, "open": DENIED,
                                              "replace": DENIED})
KEPT["glob", "w/a.env"] = (_OPAQUE, {"meta": DENIED, "open": DENIED, "replace": DENIED})
KEPT["restricted-read", "w/l_rodir"] = (_VOID + " (through a link whose target it lacks)",
                                        {"meta": MISSING, "open": MISSING, "replace": MISSING})
# Under a profile that reads everything and denies nothing the reference reads with the
# server's own rights (a root server reads another user's 0600 file); execproto reads as a
# sandboxed process would, without capabilities.
for _shape in ("read-only", "workspace-write"):
    KEPT[_shape, "w/theirs600"] = ("reads go as a sandboxed process's, without capabilities",
                                   {"open": DENIED})


def make_tree(t: Path) -> None:
    if t.exists():
        shutil.rmtree(t)
    outside = t.parent / (t.name + "-out")
    outside.mkdir(exist_ok=True)
    (outside / "o.txt").write_text("outside")
    for name in DIRECTORIES:
        (t / name).mkdir(parents=True)
    for name in FILES:
        (t / name).write_text(f"data:{name}")
    for name, target in LINKS.items():
        (t / name).symlink_to(target.replace("OUT", str(outside)))
    os.mkfifo(t / "w" / "fifo")
    (t / "w" / "ro444").write_text("read only")
    (t / "w" / "ro444").chmod(0o444)
    if ROOT:  # another user's private file: a sandbox has no capability to read it
        (t / "w" / "theirs600").write_text("theirs")
        os.chown(t / "w" / "theirs600", 1000, 1000)
        (t / "w" / "theirs600").chmod(0o600)


def snapshot(t: Path) -> dict[str, str]:
    found = {}
    for here, dirs, files in os.walk(t):
        for name in dirs + files:
            path = Path(here) / name
            key = str(path.relative_to(t))
            if path.is_symlink():
                found[key] = "-> " + os.readlink(path)
            elif path.is_dir():
                found[key] = "dir"
            elif path.is_file():
                found[key] = path.read_bytes().decode(errors="replace")
    return found


def calls(c: Client, t: Path, sandbox: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every path's answers: metadata, a read, a replace-write."""
    out: dict[str, dict[str, Any]] = {}
    for n, name in enumerate(PATHS):
        path = name if name.startswith("/") else str(t / name)
        got: dict[str, Any] = {}
        meta = answer(c.call("fs/getMetadata", {"path": uri(path), "sandbox": sandbox}))
        meta.get("result", {}).pop("modifiedAtMs", None)
        got["meta"] = meta
        got["open"] = answer(c.call("fs/open", {"path": uri(path), "handleId": f"r{n}",
                                                "sandbox": sandbox}))
        if "result" in got["open"]:
            got["read"] = answer(c.call("fs/readBlock", {"handleId": f"r{n}", "offset": 0,
                                                         "len": 4096}))
            c.call("fs/close", {"handleId": f"r{n}"})
        got["replace"] = answer(c.call("fs/open", {"path": uri(path), "handleId": f"w{n}",
                                                   "mode": "replace", "sandbox": sandbox}))
        if "result" in got["replace"]:
            got["write"] = answer(c.call("fs/writeBlock", {
                "handleId": f"w{n}", "offset": 0, "chunk": base64.b64encode(b"W").decode()}))
            c.call("fs/close", {"handleId": f"w{n}"})
        out[name] = got
    return out


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    # Not under /tmp: the workspace-write shape makes /tmp writable, and the trees must be
    # where only the shapes' own rules reach them.
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    made = Path(tempfile.mkdtemp(prefix="fs-parity-", dir=CACHE.parent))
    yield made
    shutil.rmtree(made, ignore_errors=True)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Callable[[], Client], Callable[[], Client]]]:
    assert REFERENCE is not None
    reference, ours = Reference(REFERENCE), Server("asyncio")
    try:
        yield reference.client, ours.client
    finally:
        reference.stop()
        ours.stop()


def _run(client: Client, t: Path, shape: str) -> tuple[dict[str, Any], dict[str, str]]:
    make_tree(t)
    try:
        return calls(client, t, shapes(t)[shape]), snapshot(t)
    finally:
        client.close()


@pytest.mark.parametrize("shape", list(shapes(Path("/"))))
def test_fs_streams_answer_as_the_reference(servers: Any, base: Path, shape: str) -> None:
    reference, ours = servers
    t = base / "t"
    expected, left = _run(reference(), t, shape)
    actual, ours_left = _run(ours(), t, shape)
    differences = []
    for name in PATHS:
        kept = KEPT.get((shape, name))
        if kept is not None:
            why, answers = kept
            for call, error in answers.items():
                assert actual[name][call] == {"error": error}, (name, call, why, actual[name])
            # And a difference still: when the reference changes, the entry must go.
            assert any(expected[name].get(call) != {"error": error}
                       for call, error in answers.items()), (shape, name, expected[name])
            continue
        if actual[name] != expected[name]:
            differences.append(f"{name}:\n  reference: {expected[name]}\n  execproto: "
                               f"{actual[name]}")
    assert not differences, "\n".join(differences)
    assert ours_left == left
