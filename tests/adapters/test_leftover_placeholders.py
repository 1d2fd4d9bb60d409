"""A server killed with SIGKILL leaves the placeholders its sandboxes used on the host (an empty
`.git` in a workspace); the next server's start removes them (`_processes._leftovers`), and
nothing else: not one filled, turned to a link or replaced since, not one a live server still
uses, and nothing a record it cannot trust names. Real servers, real bubblewrap.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from .conftest import Server, eventually, start, uri
from .sandboxes import _special, needs_bwrap, profile, read_only, run, workspace_write

pytestmark = needs_bwrap

RECORDS = Path(pwd.getpwuid(os.geteuid()).pw_dir, ".cache", "execproto", "placeholders")
PLACES = (".git", ".codex", ".agents")  # workspace-write's read-only places in a workspace


@contextlib.contextmanager
def _killed(workspace: Path, meanwhile: Callable[[], None] = lambda: None) -> Iterator[int]:
    """A server whose sandboxed `sleep` mounts on placeholders in ``workspace``, killed with
    SIGKILL while it runs (after ``meanwhile``); its pid. Its record is held locked, as if
    it lived, till the block ends: servers other tests start meanwhile sweep nothing of it."""
    killed = Server("asyncio")
    holder = None
    try:
        client = killed.client()
        reply = start(client, "sleeper", ["sleep", "30"], cwd=uri(workspace),
                      sandbox=workspace_write(str(workspace)))
        assert "result" in reply, reply
        assert eventually(lambda: all((workspace / place).is_dir() for place in PLACES))
        meanwhile()
        records = _record_of(killed.process.pid)
        assert len(records) == 1, records  # written down
        holder = os.open(records[0], os.O_RDONLY)
        waiting = threading.Thread(target=fcntl.flock, args=(holder, fcntl.LOCK_EX),
                                   daemon=True)
        waiting.start()  # the lock is the killed server's till it dies
    finally:
        killed.process.send_signal(signal.SIGKILL)
        killed.stop()
    try:
        waiting.join(5)
        assert not waiting.is_alive()
        assert all((workspace / place).is_dir() for place in PLACES)  # left by the kill
        yield killed.process.pid
    finally:
        os.close(holder)


def _record_of(pid: int) -> list[Path]:
    return list(RECORDS.glob(f"{pid}-*")) if RECORDS.is_dir() else []


def test_the_next_server_removes_what_a_killed_one_left(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    def another_server_starts() -> None:
        """It sweeps nothing of a live server's (its first sandboxed start waits for its
        sweep)."""
        other = Server("asyncio")
        try:
            assert run(other.client(), "true", read_only(str(tmp_path))).exit_code == 0
        finally:
            log = other.stop()
        assert all((workspace / place).is_dir() for place in PLACES), log

    with _killed(workspace, another_server_starts) as pid:
        pass
    sweeping = Server("asyncio")  # or one another test starts meanwhile: either will do
    try:
        assert eventually(lambda: not any((workspace / place).exists() for place in PLACES))
        assert eventually(lambda: not _record_of(pid))
    finally:
        log = sweeping.stop()
    assert sorted(os.listdir(workspace)) == [], log


def test_a_placeholder_changed_since_is_left(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    git, codex, agents = (workspace / place for place in PLACES)
    elsewhere = tmp_path / "elsewhere"  # an empty directory a link leads to
    elsewhere.mkdir()
    with _killed(workspace) as pid:
        (git / "config").write_text("planted\n")  # filled
        codex.rmdir()
        codex.symlink_to(elsewhere)
        replaced = workspace / "new"  # made while the old one is there: another inode
        replaced.mkdir()
        before = agents.stat().st_ino
        agents.rmdir()
        replaced.rename(agents)
        assert agents.stat().st_ino != before
    sweeping = Server("asyncio")
    try:
        assert eventually(lambda: not _record_of(pid))  # swept
    finally:
        log = sweeping.stop()
    assert (git / "config").read_text() == "planted\n", log
    assert codex.is_symlink() and elsewhere.is_dir(), log
    assert agents.is_dir(), log


def test_no_sandbox_can_write_the_records(tmp_path: Path) -> None:
    """Granted the whole file system, a sandbox still cannot add a record, or change one."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Server("asyncio")
    try:
        client = server.client()
        everything = profile(str(workspace), [_special("root", "write")])
        ran = run(client, f"mkdir -p {RECORDS} && echo forged > {RECORDS}/forged; "
                  f"ls -ld {RECORDS}", everything, cwd=str(workspace))
    finally:
        server.stop()
    try:
        assert not (RECORDS / "forged").exists(), ran
        assert "Read-only file system" in ran.stderr, ran
    finally:
        (RECORDS / "forged").unlink(missing_ok=True)


def _dead_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def _record(path: Path, made: Path, pid: int) -> None:
    """A record as a killed server of ``pid`` writes it, naming the empty directory ``made``."""
    with open("/proc/sys/kernel/random/boot_id") as file:
        boot = file.read().strip()
    found = made.stat()
    path.write_text(f"execproto placeholders 1 {pid} 1 {boot}\n"
                    f"? {os.fsencode(str(made)).hex()}\n"
                    f"+ {found.st_dev} {found.st_ino} {os.fsencode(str(made)).hex()}\n")


def test_a_record_it_cannot_trust_removes_nothing(tmp_path: Path) -> None:
    """A record another could have written (writable by others, a link, a hard link) names
    an empty directory with its device and inode: it stays. A sound record beside them shows
    the sweep ran."""
    pid = _dead_pid()
    RECORDS.mkdir(parents=True, mode=0o700, exist_ok=True)
    names = {kind: f"{pid}-test-{kind}-{os.getpid()}" for kind in
             ("sound", "open", "link", "hardlink")}
    places = {kind: tmp_path / kind for kind in names}
    for place in places.values():
        place.mkdir()
    elsewhere = tmp_path / "records"
    elsewhere.mkdir()
    planted = [RECORDS / name for name in names.values()]
    try:
        _record(RECORDS / names["sound"], places["sound"], pid)
        os.chmod(RECORDS / names["sound"], 0o600)
        _record(RECORDS / names["open"], places["open"], pid)
        os.chmod(RECORDS / names["open"], 0o666)
        _record(elsewhere / "link", places["link"], pid)
        os.chmod(elsewhere / "link", 0o600)
        (RECORDS / names["link"]).symlink_to(elsewhere / "link")
        _record(elsewhere / "hardlink", places["hardlink"], pid)
        os.chmod(elsewhere / "hardlink", 0o600)
        try:
            os.link(elsewhere / "hardlink", RECORDS / names["hardlink"])
        except OSError:  # another file system: the hard link is not tried
            places.pop("hardlink").rmdir()
        sweeping = Server("asyncio")
        try:
            assert eventually(lambda: not places["sound"].exists())
        finally:
            log = sweeping.stop()
        assert [kind for kind, place in places.items() if not place.is_dir()] == ["sound"], log
    finally:
        for path in planted:
            if path.is_symlink() or path.exists():
                path.unlink()


def test_the_directories_made_on_the_way_to_a_placeholder_are_pinned(tmp_path: Path) -> None:
    """The server makes a placeholder and its missing parents before the stage runs (so that
    they are written down); those parents are pinned all the same, as the stage pinned those
    it made: renaming one would carry the cover off, and the command could make the protected
    path anew beneath a fresh one."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    protected = workspace / "a" / "b" / ".git"
    sandbox = profile(str(workspace), [_special("root", "read"),
                                       _special("project_roots", "write"),
                                       _special("project_roots", "read", "a/b/.git")])
    server = Server("asyncio")
    try:
        for parent in ("a", "a/b"):
            ran = run(server.client(), f"mv {parent} moved; mkdir -p a/b/.git && "
                      "echo planted > a/b/.git/config", sandbox, cwd=str(workspace))
            assert ran.exit_code != 0, ran
            assert "busy" in ran.stderr, ran  # mv's rename, and its fallback's remove
            # (walked as the sandbox's placeholders are removed: os.walk skips what vanished)
            assert [names for _, _, names in os.walk(workspace) if "config" in names] == [], ran
    finally:
        log = server.stop()
    assert not protected.exists(), log  # removed at the sandbox's end, and never written


def test_only_a_directory_private_to_the_user_holds_records(tmp_path: Path) -> None:
    """Not one others may write in or above (`/tmp`), nor one others may read, nor a link."""
    from execproto.adapters._processes._leftovers import _open_private

    RECORDS.parent.mkdir(parents=True, exist_ok=True)
    private = RECORDS.parent / f"test-private-{os.getpid()}"
    private.mkdir(mode=0o700)
    link = RECORDS.parent / f"test-link-{os.getpid()}"
    link.symlink_to(private)
    under_tmp = tmp_path / "records"
    under_tmp.mkdir(mode=0o700)
    try:
        fd = _open_private(str(private))
        assert fd is not None
        os.close(fd)
        assert _open_private(str(under_tmp)) is None  # /tmp above it: anyone's
        assert _open_private(str(link)) is None
        private.chmod(0o750)
        assert _open_private(str(private)) is None
    finally:
        link.unlink()
        private.rmdir()


def test_a_record_cut_short_reads_as_far_as_it_goes() -> None:
    """A kill can cut the last line short: what came before stands, the rest is left."""
    from execproto.adapters._processes._leftovers import HEADER, _read

    made, gone, cut = (os.fsencode(path).hex() for path in ("/w/.git", "/w/.codex", "/w/x"))
    text = (f"{HEADER} 41 12345 boot\n? {made}\n? {gone}\n? {cut}\n+ 1 2 {made}\n"
            f"+ 1 3 {gone}\n- 1 3 {gone}\n+ 1 4 {cut[:6]}")  # "/w/": a path too
    writer, live, unsure = _read(text)
    assert writer == (41, "12345", "boot")
    assert live == {"/w/.git": (1, 2)}
    assert unsure == {"/w/x"}  # about to be made, never said made: left
    assert _read("execproto placeholders 1 4")[0] is None  # no whole header: no writer


def test_a_server_with_the_operators_sandbox_sweeps_too(tmp_path: Path) -> None:
    """`--sandbox bwrap` probes bubblewrap before it listens, with no probe thread: the sweep
    runs there (at the first set-up of a sandbox, the probe's)."""
    RECORDS.mkdir(parents=True, mode=0o700, exist_ok=True)
    left = tmp_path / "left"
    left.mkdir()
    record = RECORDS / f"{_dead_pid()}-test-floor-{os.getpid()}"
    try:
        _record(record, left, int(record.name.split("-")[0]))
        record.chmod(0o600)
        server = Server("asyncio", "--sandbox", "bwrap", "--writable-root", str(tmp_path))
        try:
            assert eventually(lambda: not left.exists())
        finally:
            log = server.stop()
        assert not record.exists(), log
    finally:
        record.unlink(missing_ok=True)


def test_no_sandboxed_fs_call_can_write_the_records(tmp_path: Path) -> None:
    """A record could be copied in (a copy keeps a file's mode) or an existing one rewritten:
    granted the whole file system, a sandboxed fs call is refused there too."""
    import base64

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    RECORDS.mkdir(parents=True, mode=0o700, exist_ok=True)
    forged = RECORDS / f"forged-{os.getpid()}"
    server = Server("asyncio")
    try:
        client = server.client()
        everything = profile(str(workspace), [_special("root", "write")])
        wrote = client.call("fs/writeFile", {"path": uri(forged), "sandbox": everything,
                                             "dataBase64": base64.b64encode(b"x").decode()})
    finally:
        server.stop()
    try:
        assert wrote.get("error", {}).get("message") == "Read-only file system (os error 30)", wrote
        assert not forged.exists()
    finally:
        forged.unlink(missing_ok=True)
