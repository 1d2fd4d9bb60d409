"""Attacks on the sweep of placeholders a killed server left (`_processes._leftovers`): what a
sandbox, a sandboxed fs call or an embedder's server can write, tried against the rule that
nothing of theirs may decide what this server or the next one of the user removes, or make
its starts hang. Real servers, real bubblewrap.

Each test runs its servers in a private mount namespace of its own (a holder process; the
servers enter it with nsenter) where the user's `~/.cache`, or the whole home, is a tmpfs:
what the attack writes, loosens or swaps there is never the user's real cache, which other
tests' servers use meanwhile. So they need root (a mount namespace), as the holes are the
same for any user.

The xfail tests are holes found and not yet fixed, each with its reason; the others are
defences that held.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server, eventually, start, uri
from .sandboxes import (
    IS_ROOT,
    _special,
    needs_bwrap,
    path_entry,
    profile,
    read_only,
    run,
    workspace_write,
)
from .wsclient import Client, output_of

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(not IS_ROOT or None in (shutil.which("unshare"), shutil.which("nsenter")),
                       reason="the servers run in a mount namespace of the test's own: root, "
                              "unshare and nsenter"),
]

HOME = Path(pwd.getpwuid(os.geteuid()).pw_dir)
RECORDS = HOME / ".cache" / "execproto" / "placeholders"
DEAD = 999_999_999  # a pid no process has: its record's server is gone


class Holder:
    """A private mount namespace kept by a sleeping process: servers started with `prefix`
    run in it, and the test reaches its files through `/proc/PID/root`."""

    def __init__(self, script: str) -> None:
        self.process = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             f"{script} && echo ready && exec sleep 60"],
            stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "ready"
        self.prefix = ("nsenter", "-t", str(self.process.pid), "-m", "--")

    def seen(self, path: Path) -> Path:
        """``path`` as the servers see it."""
        return Path(f"/proc/{self.process.pid}/root{path}")

    def server(self, *prefix: str) -> Server:
        return Server("asyncio", prefix=(*self.prefix, *prefix))

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


@contextlib.contextmanager
def _own_cache() -> Iterator[Holder]:
    """The user's `~/.cache` a fresh tmpfs (root's, 0755): the records are made there."""
    holder = Holder(f"mount -t tmpfs -o mode=0755 attack {HOME}/.cache")
    try:
        yield holder
    finally:
        holder.close()


@contextlib.contextmanager
def _home_with_a_cache_link(real: Path) -> Iterator[Holder]:
    """The user's home a fresh tmpfs (0700) holding what the real one holds (bound from it,
    ``real`` its mount there), but with `.cache` a symlink to `data/cache`, as many users
    have it (a cache on another disk)."""
    steps = [f"mount --bind {HOME} {real}", f"mount -t tmpfs -o mode=0700 home {HOME}"]
    for entry in sorted(os.listdir(HOME)):
        if entry == ".cache":
            continue
        source, there = real / entry, HOME / entry  # ``real`` is bound in the namespace only
        if there.is_symlink():
            steps.append(f"ln -s '{os.readlink(there)}' '{there}'")
        elif there.is_dir():
            steps.append(f"mkdir '{there}' && mount --bind '{source}' '{there}'")
        else:
            steps.append(f"touch '{there}' && mount --bind '{source}' '{there}'")
    steps += [f"mkdir -p {HOME}/data/cache", f"ln -s data/cache {HOME}/.cache"]
    holder = Holder(" && ".join(steps))
    try:
        yield holder
    finally:
        holder.close()


def _record_text(made: Path | tuple[int, int], path: Path) -> str:
    """A record as a server of `DEAD` writes it, naming the directory ``path`` made (its
    device and inode: read from ``made``, or given)."""
    with open("/proc/sys/kernel/random/boot_id") as file:
        boot = file.read().strip()
    if isinstance(made, Path):
        found = made.stat()
        made = (found.st_dev, found.st_ino)
    named = os.fsencode(str(path)).hex()
    return f"execproto placeholders 1 {DEAD} 1 {boot}\n? {named}\n+ {made[0]} {made[1]} {named}\n"


def _forged(where: Path, target: Path) -> Path:
    """A forged record in ``where`` (made, private, as a server makes its own) naming the
    empty directory ``target``."""
    where.mkdir(parents=True, exist_ok=True)
    where.chmod(0o700)
    record = where / f"{DEAD}-forged"
    record.write_text(_record_text(target, target))
    record.chmod(0o600)
    return record


def _swept(server: Server, workspace: Path) -> None:
    """Wait for ``server``'s sweep: its first sandboxed start waits for it."""
    ran = run(server.client(), "true", read_only(str(workspace)), cwd=str(workspace))
    assert ran.exit_code == 0, ran


# -- holes ---------------------------------------------------------------------------------


@pytest.mark.xfail(strict=True, reason=(
    "A sandbox granted write on ~/.cache (or ~, or /) may chmod the records' parents: they are "
    "pinned read-write, and only the records directory itself is read-only. A server started "
    "while a parent is group- or world-writable finds the records not private "
    "(_leftovers.directory() is None, cached for its life) and then holds nothing read-only: "
    "neither _bwrap._records() nor serve's _placeholder_records() adds the path. A sandbox of "
    "that server writes a forged record (and restores the mode); the next server sweeps it "
    "and removes what it names: here that server's live .git placeholder, whose mount in the "
    "running sandbox goes with it, so the sandboxed command then makes .git/config in its "
    "workspace"))
def test_a_loosened_parent_lets_a_later_sandbox_forge_a_record(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    cache = profile(str(tmp_path), [_special("root", "read"),
                                    path_entry(str(HOME / ".cache"), "write")])
    with _own_cache() as holder:
        loosening = holder.server()
        try:
            run(loosening.client(), f"chmod 0777 {HOME}/.cache", cache, cwd=str(tmp_path))
        finally:
            loosening.stop()
        forging = holder.server()
        try:
            client = forging.client()
            # Waits (at most 5 s) for its .git cover to go, then makes one of its own.
            waiter = ("i=0; while [ -d .git ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); "
                      "done; mkdir .git && echo planted > .git/config")
            reply = start(client, "waiter", ["sh", "-c", waiter], cwd=uri(workspace),
                          env={"PATH": "/usr/bin:/bin"}, sandbox=workspace_write(str(workspace)))
            assert "result" in reply, reply
            git = os.fsencode(str(workspace / ".git")).hex()
            forge = (f"R={RECORDS}; set -- $(stat -c '%d %i' {workspace}/.git); "
                     f"printf 'execproto placeholders 1 {DEAD} 1 %s\\n+ %s %s {git}\\n' "
                     f"$(cat /proc/sys/kernel/random/boot_id) $1 $2 > $R/{DEAD}-forged; "
                     f"chmod 600 $R/{DEAD}-forged; chmod 0755 {HOME}/.cache")
            run(client, forge, cache, cwd=str(tmp_path))
            sweeping = holder.server()
            try:
                _swept(sweeping, tmp_path)
            finally:
                log = sweeping.stop()
            planted = eventually(lambda: (workspace / ".git" / "config").exists(), 2)
        finally:
            forging.stop()
    assert not planted, log


@pytest.mark.xfail(strict=True, reason=(
    "The records are held read-only by their real path (_leftovers.directory() resolves "
    "~/.cache/execproto/placeholders with realpath), but the next server finds them by that "
    "name: where ~/.cache is a symlink (a cache on another disk), the link is on no held "
    "way, so a sandbox granted write on ~ replaces it with one to a directory of its own "
    "holding a forged record, and the next server follows it and sweeps what it names"))
def test_a_sandbox_retargeting_the_cache_link_has_the_next_server_sweep_its_record(
        tmp_path: Path) -> None:
    target = tmp_path / "kept"  # empty, and nothing the sandbox may remove
    target.mkdir()
    home = profile(str(tmp_path), [_special("root", "read"), path_entry(str(HOME), "write")])
    real = tmp_path / "real"
    real.mkdir()
    with _home_with_a_cache_link(real) as holder:
        forging = holder.server()
        try:
            records = "evil/execproto/placeholders"
            ran = run(forging.client(),
                      f"cd {HOME} && rm .cache && mkdir -p {records} && chmod 700 {records} && "
                      f"printf '{_record_text(target, target)}' > {records}/{DEAD}-forged && "
                      f"chmod 600 {records}/{DEAD}-forged && ln -s evil .cache",
                      home, cwd=str(tmp_path))
        finally:
            forging.stop()
        sweeping = holder.server()
        try:
            _swept(sweeping, tmp_path)
        finally:
            log = sweeping.stop()
    assert target.is_dir(), (ran, log)


@pytest.mark.xfail(strict=True, reason=(
    "As with a sandbox's process, by sandboxed fs calls alone: where ~/.cache is a symlink, "
    "fs/remove (granted /) removes the link (only the records' real path is protected, "
    "Config.protected), and fs/copy puts a tree there whose records directory (0700) and "
    "forged record (0600) keep their modes; the next server makes nothing new, trusts it, "
    "and sweeps what it names"))
def test_sandboxed_fs_calls_replacing_the_cache_link_have_the_next_server_sweep(
        tmp_path: Path) -> None:
    target = tmp_path / "kept"
    target.mkdir()
    evil = tmp_path / "evil"
    _forged(evil / "execproto" / "placeholders", target)
    everything = profile(str(tmp_path), [_special("root", "write")])
    real = tmp_path / "real"
    real.mkdir()
    with _home_with_a_cache_link(real) as holder:
        forging = holder.server()
        try:
            client = forging.client()
            removed = client.call("fs/remove", {"path": uri(HOME / ".cache"), "recursive": False,
                                                "force": True, "sandbox": everything})
            copied = client.call("fs/copy", {"sourcePath": uri(evil),
                                             "destinationPath": uri(HOME / ".cache"),
                                             "recursive": True, "sandbox": everything})
        finally:
            forging.stop()
        sweeping = holder.server()
        try:
            _swept(sweeping, tmp_path)
        finally:
            log = sweeping.stop()
    assert target.is_dir(), (removed, copied, log)


EMBEDDED = ("import asyncio\n"
            "from execproto.adapters.asyncio import serve\n"
            "asyncio.run(serve('ws://127.0.0.1:0', ready=lambda address: print(address, "
            "flush=True)))\n")


@pytest.mark.xfail(strict=True, reason=(
    "Only `execproto serve` adds the records to Config.protected (_command/_serve.py "
    "_placeholder_records); an embedder's serve() (embedding.md's example, no `protect`) "
    "writes records and sweeps them all the same (LocalBackend), and its sandboxes' processes "
    "hold them read-only (_bwrap._records), but its sandboxed fs calls do not: fs/copy (which "
    "keeps the mode) puts a forged record among them, and the next server sweeps it"))
def test_an_embedded_servers_sandboxed_fs_call_cannot_forge_a_record(tmp_path: Path) -> None:
    target = tmp_path / "kept"
    target.mkdir()
    forged = _forged(tmp_path / "forged", target)
    everything = profile(str(tmp_path), [_special("root", "write")])
    with _own_cache() as holder:
        # Server's command line follows the script, which ignores it
        embedded = holder.server(sys.executable, "-c", EMBEDDED)
        try:
            client = embedded.client()
            _swept(embedded, tmp_path)  # its records are made by now
            copied = client.call("fs/copy", {"sourcePath": uri(forged),
                                             "destinationPath": uri(RECORDS / forged.name),
                                             "recursive": False, "sandbox": everything})
        finally:
            embedded.stop()
        sweeping = holder.server()
        try:
            _swept(sweeping, tmp_path)
        finally:
            log = sweeping.stop()
    assert target.is_dir(), (copied, log)


def _start_once(client: Client, sandbox: dict[str, Any], cwd: Path, done: list[object]
                ) -> None:
    with contextlib.suppress(Exception):  # Closed, by the stop that ends a hung one
        done.append(run(client, "true", sandbox, cwd=str(cwd)))


LOCKER = """\
import ctypes, fcntl, os, struct, sys, time
where = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
events = libc.inotify_init1(0)
assert libc.inotify_add_watch(events, where.encode(), 0x100) >= 0  # IN_CREATE
directory = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
print("watching", flush=True)
ends = time.monotonic() + 10
while time.monotonic() < ends:
    read = os.read(events, 65536)
    at = 0
    while at < len(read):
        _, _, _, size = struct.unpack_from("iIII", read, at)
        name = read[at + 16:at + 16 + size].rstrip(b"\\0").decode()
        at += 16 + size
        if name.startswith("."):  # a record in the making
            try:
                fd = os.open(name, os.O_RDONLY, dir_fd=directory)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue
            print("locked", name, flush=True)
            time.sleep(10)
"""


@pytest.mark.xfail(strict=True, reason=(
    "A sandbox may read the records directory, so open a record and flock it (read-only is "
    "no bar to a lock). Journal._new makes each new record (the first, and every compaction "
    "past COMPACT_AT) under a fresh name and only then takes its lock, blocking "
    "(fcntl.flock LOCK_EX): a sandbox that watches the directory (inotify) and locks the "
    "new name first wins that race in a few tries, and the server's thread waits for it "
    "holding the Placeholders lock, so every later sandboxed start and finalize of the "
    "server hangs for as long as that sandbox lives"))
def test_a_sandbox_cannot_hang_the_starts_by_locking_a_record_in_the_making(
        tmp_path: Path) -> None:
    (tmp_path / "locker.py").write_text(LOCKER)
    kept = tmp_path / "kept"  # a placeholder live throughout: a long record compacts
    kept.mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    # Many long placeholders a start: each start's record passes COMPACT_AT at its finalize.
    deep = workspace / ("x" * 200) / ("y" * 200) / ("z" * 200)
    many = profile(str(workspace), [_special("root", "read"), path_entry(str(workspace), "write"),
                                    *(path_entry(str(deep / f"{n:02d}" / ".git"), "read")
                                      for n in range(26))])
    with _own_cache() as holder:
        server = holder.server()
        hung = None
        try:
            client = server.client()
            reply = start(client, "kept", ["sleep", "10"], cwd=uri(kept),
                          sandbox=workspace_write(str(kept)))
            assert "result" in reply, reply
            reply = start(client, "locker", ["python3", str(tmp_path / "locker.py"),
                                             str(RECORDS)],
                          cwd=uri(tmp_path), sandbox=read_only(str(tmp_path)))
            assert "result" in reply, reply
            assert client.notification(lambda m: m["params"].get("processId") == "locker")
            starts = server.client()
            ends = time.monotonic() + 2
            for attempt in range(40):
                if time.monotonic() > ends:
                    break
                done: list[object] = []
                going = threading.Thread(target=_start_once, args=(starts, many, workspace, done),
                                         daemon=True)
                going.start()
                going.join(1.5)
                if not done:
                    hung = attempt
                    break
            locker = output_of([message for message in client.inbox
                                if message["params"].get("processId") == "locker"])
        finally:
            server.stop()
    assert hung is None, (hung, locker)


@pytest.mark.xfail(strict=True, reason=(
    "_leftovers._find resolves ~/.cache/execproto/placeholders with realpath: a symlink "
    "planted there before any server made the directory (by a sandbox of an earlier version, "
    "of another tool, or of a server that held nothing) is followed to any directory private "
    "to the user, and the forged records it holds are swept (a plain directory planted so is "
    "trusted all the same: nothing tells it from one a server made)"))
def test_a_records_directory_planted_as_a_link_is_not_trusted(tmp_path: Path) -> None:
    target = tmp_path / "kept"
    target.mkdir()
    with _own_cache() as holder:
        cache = holder.seen(HOME / ".cache")
        _forged(cache / "elsewhere", target)
        (cache / "execproto").mkdir()
        (cache / "execproto" / "placeholders").symlink_to(HOME / ".cache" / "elsewhere")
        sweeping = holder.server()
        try:
            _swept(sweeping, tmp_path)
        finally:
            log = sweeping.stop()
    assert target.is_dir(), log


# -- defences that held -------------------------------------------------------------------


def test_a_sandbox_cannot_move_or_open_up_the_records_directory(tmp_path: Path) -> None:
    """Granted write on ~/.cache: the records directory and the ones between are pinned (a
    rename is EBUSY), and the records directory is read-only (no chmod, no new entry)."""
    cache = profile(str(tmp_path), [_special("root", "read"),
                                    path_entry(str(HOME / ".cache"), "write")])
    with _own_cache() as holder:
        server = holder.server()
        try:
            tries = [f"mv {RECORDS.parent} {HOME}/.cache/moved", f"mv {RECORDS} {HOME}/.cache/x",
                     f"chmod 0777 {RECORDS}", f"touch {RECORDS}/{DEAD}-new"]
            ran = run(server.client(), "; ".join(f"{line} && echo done" for line in tries),
                      cache, cwd=str(tmp_path))
        finally:
            server.stop()
        records = holder.seen(RECORDS)
        assert records.is_dir() and (records.stat().st_mode & 0o777) == 0o700, ran
        assert not holder.seen(HOME / ".cache" / "moved").exists(), ran
    assert "done" not in ran.stdout, ran
    moved = HOME / ".cache" / "moved"
    busy = f"cannot move '{RECORDS.parent}' to '{moved}': Device or resource busy"
    assert busy in ran.stderr, ran
    assert f"cannot touch '{RECORDS}/{DEAD}-new': Read-only file system" in ran.stderr, ran


def test_sandboxed_fs_calls_cannot_remove_or_copy_over_the_records(tmp_path: Path) -> None:
    """Granted /: removing a directory above the records, or copying a directory onto one
    (a merge sets its mode), is refused whole; so is a copy, a directory, a write or an open
    for writing into the records, through a symlink too."""
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o777)
    loose.chmod(0o777)
    forged = _forged(tmp_path / "forged", tmp_path)
    link = tmp_path / "link"  # followed by fs/open and fs/writeFile: to a new record
    link.symlink_to(RECORDS / f"{DEAD}-linked")
    everything = profile(str(tmp_path), [_special("root", "write")])
    calls: list[tuple[str, dict[str, Any]]] = [
        ("fs/remove", {"path": uri(RECORDS.parent), "recursive": True, "force": True}),
        ("fs/remove", {"path": uri(HOME / ".cache"), "recursive": True, "force": True}),
        ("fs/copy", {"sourcePath": uri(loose), "destinationPath": uri(HOME / ".cache"),
                     "recursive": True}),
        ("fs/copy", {"sourcePath": uri(loose), "destinationPath": uri(RECORDS),
                     "recursive": True}),
        ("fs/copy", {"sourcePath": uri(forged), "destinationPath": uri(RECORDS / forged.name),
                     "recursive": False}),
        ("fs/createDirectory", {"path": uri(RECORDS / "made"), "recursive": True}),
        ("fs/open", {"handleId": "h", "path": uri(RECORDS / "opened"), "mode": "replace"}),
        ("fs/open", {"handleId": "h", "path": uri(link), "mode": "replace"}),
        ("fs/writeFile", {"path": uri(link), "dataBase64": "eA=="}),
    ]
    with _own_cache() as holder:
        server = holder.server()
        try:
            client = server.client()
            answers = [client.call(method, {**params, "sandbox": everything})
                       for method, params in calls]
        finally:
            server.stop()
        cache = holder.seen(HOME / ".cache")
        assert sorted(os.listdir(holder.seen(RECORDS))) == [], answers
        assert (cache.stat().st_mode & 0o777) == 0o755, answers
    assert all(answer.get("error", {}).get("message") == "Read-only file system (os error 30)"
               for answer in answers), answers


def test_a_record_that_is_a_fifo_huge_or_locked_is_left_at_once(tmp_path: Path) -> None:
    """What a sweep opens never blocks it (a FIFO), what it reads is bounded (a record past
    MAX_RECORD is left unread), and a record someone holds locked is left, not waited for:
    none of them removes the empty directory it names."""
    from execproto.adapters._processes import _leftovers

    target = tmp_path / "kept"
    target.mkdir()
    where = tmp_path / "records"
    forged = _forged(where, target)
    os.mkfifo(where / f"{DEAD}-fifo", 0o600)
    huge = where / f"{DEAD}-huge"
    huge.write_text(_record_text(target, target) + "\n" * _leftovers.MAX_RECORD)
    huge.chmod(0o600)
    at = os.open(where, os.O_PATH | os.O_DIRECTORY)
    holder = os.open(forged, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        ends = time.monotonic() + _leftovers.MAX_SECONDS
        swept: list[bool] = []
        sweeping = threading.Thread(target=lambda: swept.extend(
            _leftovers._sweep_record(at, name, ends) for name in sorted(os.listdir(where))),
            daemon=True)  # a sweep that blocked would hold the test no longer than this
        sweeping.start()
        sweeping.join(1)
    finally:
        os.close(holder)
    assert not sweeping.is_alive()
    os.close(at)
    assert swept == [False, False, False]
    assert target.is_dir() and sorted(os.listdir(where)) == sorted(
        [forged.name, f"{DEAD}-fifo", huge.name])
