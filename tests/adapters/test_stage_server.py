"""The stage server (`_zygote`, `_forker`) attacked: what it starts gets nothing of the server's
or of its own, it holds nothing of the server's, a request it cannot read is refused and it
goes on, it is started again when killed (a bounded number of times), a child whose start the
server did not confirm does nothing, and it and its children die with the server.

Most run in this process, which plays the server (the children are cloned as its own); the
last ones run a real server with bubblewrap and look at the sandboxed processes from outside.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from execproto import SpawnSpec
from execproto.adapters._processes import _forker, _zygote
from execproto.adapters._processes._posix import STAGED, Child, SpawnError

from .conftest import Server, eventually, start, uri
from .sandboxes import BWRAP_PROBLEM, IS_ROOT, read_only, workspace_write

pytestmark = pytest.mark.skipif(_forker.SYS_CLONE is None, reason="no clone number known here")

ENV = (("PATH", "/usr/bin:/bin"),)


def spec(*argv: str, cwd: str = "/", tty: bool = False, plan: str = "") -> SpawnSpec:
    return SpawnSpec(argv=(STAGED, plan, *argv), arg0=None, cwd=cwd, env=ENV, tty=tty,
                     pipe_stdin=False, session_id="s", process_id="p")


@pytest.fixture
def zygote() -> Iterator[_zygote.Zygote]:
    """A stage server of the test's own (not the process's), killed at the end."""
    made = _zygote.Zygote()
    yield made
    pid = made.pid
    if pid is not None:
        os.kill(pid, signal.SIGKILL)


def finish(child: Child, wait: float = 10) -> tuple[int | None, bytes]:
    """Its exit status and all it wrote (the pty's, or stdout then stderr)."""
    said = {fd: bytearray() for fd in child.outputs.values()}
    ends = time.monotonic() + wait
    open_ = set(said)
    while open_ and time.monotonic() < ends:
        ready, _, _ = select.select(list(open_), [], [], 0.2)
        for fd in ready:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            except OSError:  # a pty whose other side is closed
                chunk = b""
            if chunk:
                said[fd] += chunk
            else:
                open_.discard(fd)
    select.select([child.pidfd], [], [], max(0.0, ends - time.monotonic()))
    status = child.exit_status()
    child.reap()
    return status, b"".join(bytes(part) for part in said.values())


def fds_of(pid: int) -> dict[int, str]:
    found = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            found[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
        except FileNotFoundError:
            pass
    return found


def _execed(pid: int, program: bytes) -> bool:
    return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(program + b"\0")


def status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise KeyError(name)


def stat_fields(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def memfd(data: bytes, at_least: int = 0) -> int:
    fd = os.memfd_create("test-passed")
    os.write(fd, data)
    if at_least:
        import fcntl
        moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, at_least)
        os.close(fd)
        fd = moved
    return fd


# -- what a child gets ---------------------------------------------------------------------------

def test_a_child_ignores_no_signal_the_server_was_started_ignoring(
        zygote: _zygote.Zygote) -> None:
    # A server started by nohup, or by a harness ignoring some signal (one run of the suite had
    # glibc's signal 32 ignored): the stage server inherits that, and a program would too.
    ignored = (signal.SIGHUP, signal.SIGUSR1, signal.SIGTERM)
    before = {number: signal.signal(number, signal.SIG_IGN) for number in ignored}
    try:
        child = zygote.spawn(spec("/bin/sleep", "30"), (), ())  # the stage server starts now
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
    try:
        assert zygote.pid is not None
        assert int(status_field(zygote.pid, "SigIgn"), 16) & (1 << (signal.SIGHUP - 1))
        assert eventually(lambda: _execed(child.pid, b"/bin/sleep")
                          and stat_fields(child.pid)[0] == "S")
        assert int(status_field(child.pid, "SigIgn"), 16) == 0
    finally:
        child.signal_group("KILL")
        child.reap()


def test_a_child_has_its_stdio_and_its_descriptors_at_their_numbers_and_nothing_else(
        zygote: _zygote.Zygote) -> None:
    low, high = memfd(b"low"), memfd(b"high", at_least=47)
    # Something of the server's own that is inheritable: no child may get it.
    leak_read, leak_write = os.pipe()
    os.set_inheritable(leak_read, True)
    try:
        child = zygote.spawn(spec("/bin/sleep", "30"), (low, high), ())
    finally:
        os.close(low)
        os.close(high)
    try:
        # Exec'd (its gate closed too), the loader done with the libraries: asleep.
        assert eventually(lambda: _execed(child.pid, b"/bin/sleep")
                          and stat_fields(child.pid)[0] == "S")
        fds = fds_of(child.pid)
        assert set(fds) == {0, 1, 2, low, high}, fds
        assert fds[0] == "/dev/null" and fds[1].startswith("pipe:") and fds[2].startswith("pipe:")
        assert fds[low].startswith("/memfd:test-passed") and fds[high].startswith("/memfd:")
        # The server's own child (CLONE_PARENT), leading a session of its own, with a fresh
        # process's signals, and the pidfd is for it.
        fields = stat_fields(child.pid)
        assert int(fields[1]) == os.getpid(), fields
        assert int(fields[2]) == child.pid and int(fields[3]) == child.pid, fields  # group, session
        assert int(status_field(child.pid, "SigBlk"), 16) == 0
        assert int(status_field(child.pid, "SigIgn"), 16) == 0
        info = Path(f"/proc/self/fdinfo/{child.pidfd}").read_text()
        assert f"Pid:\t{child.pid}\n" in info, info
    finally:
        child.signal_group("KILL")
        finish(child)
        os.close(leak_read)
        os.close(leak_write)


def test_a_terminal_child_leads_its_session_with_the_terminal_as_its_own(
        zygote: _zygote.Zygote) -> None:
    child = zygote.spawn(spec("/bin/sh", "-c", "tty; exec sleep 30", tty=True), (), ())
    said = bytearray()
    try:
        ends = time.monotonic() + 10
        while b"\n" not in said and time.monotonic() < ends:
            if select.select([child.outputs["pty"]], [], [], 0.2)[0]:
                said += os.read(child.outputs["pty"], 4096)
        fields = stat_fields(child.pid)
        assert int(fields[3]) == child.pid and int(fields[4]) != 0, fields  # session, tty_nr
        # Once the shell has exec'd sleep and its loader has closed the libraries, the
        # terminal's three are all it holds (a loader's fd 3 comes and goes; a leak stays).
        assert eventually(lambda: set(fds_of(child.pid)) == {0, 1, 2}), fds_of(child.pid)
    finally:
        child.signal_group("KILL")
        finish(child)
    assert said.startswith(b"/dev/pts/"), said


def test_a_missing_cwd_fails_the_spawn_with_the_words_of_an_exec(
        zygote: _zygote.Zygote, tmp_path: Path) -> None:
    with pytest.raises(SpawnError) as raised:
        zygote.spawn(spec("/bin/true", cwd=str(tmp_path / "gone")), (), ())
    assert str(raised.value) == "No such file or directory (os error 2)"
    assert raised.value.kind == "spawnNotFound"


def test_a_missing_program_is_the_process_s_own_failure(zygote: _zygote.Zygote) -> None:
    # The program is bubblewrap, which the server found at its start: were it gone, the
    # process exits 127 saying so.
    status, said = finish(zygote.spawn(spec("/nonexistent/bwrap"), (), ()))
    assert status == 127 and b"/nonexistent/bwrap" in said, (status, said)


def test_the_stage_server_holds_nothing_of_the_server(zygote: _zygote.Zygote) -> None:
    secret = f"secret-{uuid.uuid4().hex}"
    os.environ["EXECPROTO_TEST_SECRET"] = secret
    leak_read, leak_write = os.pipe()
    os.set_inheritable(leak_read, True)
    try:
        finish(zygote.spawn(spec("/bin/true"), (), ()))
        pid = zygote.pid
        assert pid is not None
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert environ == b"PATH=/usr/sbin:/usr/bin:/sbin:/bin\0LC_ALL=C\0", environ
        assert secret.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        fds = fds_of(pid)
        assert fds[0] == "/dev/null" and fds[1] == "/dev/null", fds
        others = {fd: target for fd, target in fds.items() if fd > 2}
        assert len(others) == 1 and next(iter(others.values())).startswith("socket:"), fds
        # Its parent-death signal is set, so it dies with the server.
        assert int(stat_fields(pid)[1]) == os.getpid()
    finally:
        del os.environ["EXECPROTO_TEST_SECRET"]
        os.close(leak_read)
        os.close(leak_write)


# -- requests it cannot read, children it does not confirm ---------------------------------------

def _exchange(zygote: _zygote.Zygote, word: bytes, fds: list[int]) -> tuple[bytes, list[int]]:
    link = zygote._running()
    with zygote._exchange:
        socket.send_fds(link.control, [word], fds)
        said, got, _, _ = socket.recv_fds(link.control, 256, 1, socket.MSG_CMSG_CLOEXEC)
    return said, got


def _request(body: bytes) -> tuple[list[int], socket.socket, list[int]]:
    """The descriptors of a request with ``body``; the server's gate; what to close."""
    gate, their_gate = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    body_fd = memfd(body)
    os.lseek(body_fd, 0, os.SEEK_SET)
    fds = [body_fd, their_gate.detach(), null, null, null]
    return fds, gate, [body_fd, fds[1], null]


def test_a_malformed_request_is_refused_and_the_stage_server_goes_on(
        zygote: _zygote.Zygote) -> None:
    finish(zygote.spawn(spec("/bin/true"), (), ()))
    pid = zygote.pid
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        for word, fds in ((b"nonsense", []), (b"start", [null]), (b"start", [null] * 3),
                          (b"start" * 40, [null] * 6),
                          (b"start", [null] * (_forker.MAX_FDS + 8))):
            said, got = _exchange(zygote, word, fds)
            assert said.startswith(b"error ") and got == [], (word, len(fds), said)
    finally:
        os.close(null)
    # A body it cannot read: the child says so on the gate, having done nothing.
    for body in (b"garbage", b"/\0\0\0\0x\0", b"/\0\0\0\0" + b"1\0" + b"7\0" + b"1\0/bin/true",
                 b"/\0\0" + b"9\0" + b"\x000\0" + b"1\0/bin/true"):
        fds, gate, mine = _request(body)
        try:
            said, got = _exchange(zygote, b"start", fds)
        finally:
            for fd in mine:
                os.close(fd)
        assert said.startswith(b"ok ") and len(got) == 1, said
        with gate:
            gate.settimeout(10)
            assert gate.recv(64) == said[3:] + b" 22 body", body  # its pid, then why
        os.waitid(os.P_PIDFD, got[0], os.WEXITED)
        os.close(got[0])
    assert zygote.pid == pid, "the stage server was started again"
    status, said = finish(zygote.spawn(spec("/bin/sh", "-c", "echo still"), (), ()))
    assert (status, said) == (0, b"still\n") and zygote.pid == pid


def test_a_child_whose_start_the_server_did_not_confirm_does_nothing(
        zygote: _zygote.Zygote, tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    body = b"\0".join([b"/", b"", b"", b"", b"0", b"2", b"/usr/bin/touch", str(mark).encode(),
                       b"PATH=/usr/bin:/bin"])
    fds, gate, mine = _request(body)
    try:
        said, got = _exchange(zygote, b"start", fds)
    finally:
        for fd in mine:
            os.close(fd)
    assert said.startswith(b"ok "), said
    gate.settimeout(10)
    assert gate.recv(64) == said[3:] + b" ok"  # set up, waiting
    gate.close()  # as the server does when it lost the answer
    info = os.waitid(os.P_PIDFD, got[0], os.WEXITED)
    os.close(got[0])
    assert info is not None and (info.si_code, info.si_status) == (os.CLD_EXITED, 1)
    assert not mark.exists()


# -- its life ----------------------------------------------------------------------------------

def test_a_killed_stage_server_is_started_again_and_the_start_goes_on(
        zygote: _zygote.Zygote) -> None:
    assert finish(zygote.spawn(spec("/bin/true"), (), ()))[0] == 0
    first = zygote.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)  # the start below may find it dead, or dying mid-exchange
    assert finish(zygote.spawn(spec("/bin/true"), (), ()))[0] == 0
    assert zygote.pid not in (None, first)


def test_a_stage_server_that_keeps_dying_is_started_a_bounded_number_of_times(
        zygote: _zygote.Zygote, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_zygote, "STARTS_WINDOW", 8.0)
    began = time.monotonic()
    failed = None
    for _ in range(2 * _zygote.MAX_STARTS + 2):
        try:
            finish(zygote.spawn(spec("/bin/true"), (), ()))
        except OSError as exc:
            failed = exc
            break
        pid = zygote.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert eventually(lambda pid=pid: zygote.pid != pid)  # type: ignore[misc]
    assert failed is not None and f"ended {_zygote.MAX_STARTS} times" in str(failed), failed
    assert time.monotonic() - began < 60
    # Once the window has passed, it is started again.
    time.sleep(max(0.0, began + 8.5 - time.monotonic()))
    assert finish(zygote.spawn(spec("/bin/true"), (), ()))[0] == 0


def _losing(zygote: _zygote.Zygote, monkeypatch: pytest.MonkeyPatch, cloned: bool
            ) -> list[int]:
    """Its first exchange lost, the stage server killed: after the clone and its answer (which
    the server then never read: its pidfd closed), or before the request. The lost child's
    pid, if one was cloned, is put in the list returned."""
    lost: list[int] = []
    ask = zygote._ask

    def losing(fds: list[int], cgroup: bool) -> tuple[int, int]:
        zygote._ask = ask  # type: ignore[method-assign]  # the retry's exchange is real
        if cloned:
            pid, pidfd = ask(fds, cgroup)
            os.close(pidfd)
            lost.append(pid)
        link = zygote._link
        assert link is not None
        zygote._lose(link)
        raise _zygote.Lost

    monkeypatch.setattr(zygote, "_ask", losing)
    return lost


def test_a_child_cloned_for_a_lost_exchange_does_nothing_and_is_reaped(
        zygote: _zygote.Zygote, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert finish(zygote.spawn(spec("/bin/true"), (), ()))[0] == 0
    lost = _losing(zygote, monkeypatch, cloned=True)
    status, said = finish(zygote.spawn(spec("/bin/sh", "-c", f"echo ran >> {tmp_path}/ran"),
                                       (), ()))
    assert (status, said) == (0, b""), said
    assert (tmp_path / "ran").read_text() == "ran\n"  # once: the lost child did nothing
    assert len(lost) == 1 and not Path(f"/proc/{lost[0]}").exists(), lost  # no zombie


def test_a_start_lost_before_any_clone_is_tried_again_at_once(
        zygote: _zygote.Zygote, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate's end, not a set-up's wait, says that no child was cloned."""
    assert finish(zygote.spawn(spec("/bin/true"), (), ()))[0] == 0
    monkeypatch.setattr(_zygote, "SETUP_WAIT", 30.0)
    lost = _losing(zygote, monkeypatch, cloned=False)
    began = time.monotonic()
    child = zygote.spawn(spec("/bin/true"), (), ())
    took = time.monotonic() - began
    assert finish(child)[0] == 0 and lost == []
    assert took < 15, took


DYING_SERVER = textwrap.dedent("""
    import sys, time
    from execproto import SpawnSpec
    from execproto.adapters._processes._posix import STAGED
    from execproto.adapters._processes._zygote import ZYGOTE
    spec = SpawnSpec(argv=(STAGED, "", "/bin/sleep", sys.argv[1]), arg0=None, cwd="/",
                     env=(("PATH", "/bin"),), tty=False, pipe_stdin=False, session_id="s",
                     process_id="p")
    child = ZYGOTE.spawn(spec, (), ())
    print(ZYGOTE.pid, child.pid, flush=True)
    time.sleep(300)
""")


def test_the_stage_server_and_its_children_die_with_a_killed_server() -> None:
    """No cgroup here: the parent-death signals alone (the server's `_cgroups` tree is the
    other guard, test_nothing_outlives.py)."""
    tag = f"{300 + os.getpid() % 100}.{uuid.uuid4().int % 10**6}"
    server = subprocess.Popen([sys.executable, "-c", DYING_SERVER, tag],
                              stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    zygote_pid, child_pid = map(int, server.stdout.readline().split())
    assert _alive(zygote_pid) and _alive(child_pid)
    server.kill()
    server.wait()
    assert eventually(lambda: not _alive(zygote_pid) and not _alive(child_pid)), (
        zygote_pid, child_pid)


def _alive(pid: int) -> bool:
    try:
        return stat_fields(pid)[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


# -- a real server's sandboxes, seen from outside --------------------------------------------------

needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=BWRAP_PROBLEM or "")


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _chain(server: int, marker: str) -> list[int]:
    """The processes from the server's child down to the one whose environment has
    ``marker``, that one last."""
    found: list[int] = []

    def marked() -> bool:
        for pid in _pids():
            try:
                if marker.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                    found[:] = [pid]
                    return True
            except OSError:
                pass
        return False

    assert eventually(marked, wait=10), marker
    chain = found[:]
    while True:
        parent = int(stat_fields(chain[0])[1])
        if parent == server:
            return chain
        assert parent > 1, chain
        chain.insert(0, parent)


def _sockets(pid: int) -> set[str]:
    return {target for target in fds_of(pid).values() if target.startswith("socket:")}


@needs_bwrap
def test_no_descriptor_of_the_server_or_the_stage_server_reaches_a_sandbox() -> None:
    server = Server("asyncio")
    workspace = tempfile.mkdtemp(prefix="execproto-fds-", dir="/tmp")
    try:
        client = server.client()
        for name, sandbox, tty in (("ro", read_only(workspace), False),
                                   ("ww", workspace_write(workspace), False),
                                   ("tty", workspace_write(workspace), True)):
            marker = f"mark-{uuid.uuid4().hex}"
            reply = start(client, name, ["sleep", "30"], cwd=uri(workspace), tty=tty,
                          env={"PATH": "/usr/bin:/bin", "M": marker}, sandbox=sandbox)
            assert "result" in reply, reply
            chain = _chain(server.process.pid, marker)
            stage_server = [pid for pid in _pids() if _is_stage_server(pid, server.process.pid)]
            assert len(stage_server) == 1, stage_server
            theirs = _sockets(server.process.pid) | _sockets(stage_server[0])
            for pid in chain:
                fds = fds_of(pid)
                assert not set(fds.values()) & theirs, (name, pid, fds)
                assert not [t for t in fds.values() if "execproto-start" in t
                            or "pidfd" in t], (name, pid, fds)
            # The loader's descriptors come and go while the program starts; a leak stays.
            program = chain[-1]
            assert eventually(lambda: set(fds_of(program)) == {0, 1, 2}), (  # noqa: B023
                name, fds_of(program))
            client.call("process/terminate", {"processId": name})
            client.events_until_closed(name)
        client.close()
    finally:
        log = server.stop()
        os.rmdir(workspace) if not os.listdir(workspace) else None
    assert "Traceback" not in log, log


def _is_stage_server(pid: int, server: int) -> bool:
    """The stage server, not a child it cloned that has not exec'd yet: those are the server's
    children too, with its command line. One is in the stage server's process group till it
    leads its own session, and it gives up the interpreter's SIGINT handler before that."""
    try:
        fields = stat_fields(pid)
        return (int(fields[1]) == server and int(fields[2]) == pid
                and b'The stage server ("zygote")' in Path(f"/proc/{pid}/cmdline").read_bytes()
                and int(status_field(pid, "SigCgt"), 16) & (1 << (signal.SIGINT - 1)) != 0)
    except (OSError, IndexError, KeyError, ValueError):
        return False


@needs_bwrap
@pytest.mark.skipif(not IS_ROOT, reason="cgroups are made by a root server here")
def test_a_sandboxed_process_is_born_in_its_own_cgroup() -> None:
    server = Server("asyncio")
    try:
        client = server.client()
        marker = f"mark-{uuid.uuid4().hex}"
        reply = start(client, "cg", ["sleep", "30"], env={"PATH": "/usr/bin:/bin", "M": marker},
                      sandbox=read_only("/tmp"))
        assert "result" in reply, reply
        chain = _chain(server.process.pid, marker)
        own = Path(f"/proc/{server.process.pid}/cgroup").read_text().strip()
        for pid in chain:
            mine = Path(f"/proc/{pid}/cgroup").read_text().strip()
            assert mine != own and mine.startswith(own.rstrip("/") + "/execproto-"), (mine, own)
        client.call("process/terminate", {"processId": "cg"})
        client.events_until_closed("cg")
    finally:
        server.stop()


# -- its cgroup, either way in -------------------------------------------------------------------

@pytest.fixture
def tree() -> Iterator[object]:
    from execproto.adapters._processes._cgroups import Tree

    made, problem = Tree.create()
    if not isinstance(made, Tree):
        pytest.skip(f"no cgroup can be made here: {problem}")
    yield made
    made.close()


def _cgroup_of(pid: int) -> str:
    line = next(line for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                if line.startswith("0::"))
    return line[3:]


def test_a_child_is_born_in_its_cgroup(zygote: _zygote.Zygote, tree: object) -> None:
    from execproto.adapters._processes._cgroups import Tree, wrapper

    assert isinstance(tree, Tree)
    place = tree.place(1)
    assert place is not None
    child = zygote.spawn(spec("/bin/sleep", "30"), (), wrapper(place, ()))
    try:
        assert place.endswith(_cgroup_of(child.pid)), (place, _cgroup_of(child.pid))
    finally:
        child.signal_group("KILL")
        finish(child)
        tree.finished(1)


def test_a_child_not_born_there_joins_its_cgroup_by_itself(zygote: _zygote.Zygote,
                                                           tree: object) -> None:
    """The way where clone3 is filtered: a plain ``start`` with a cgroup in the body."""
    from execproto.adapters._processes._cgroups import Tree

    assert isinstance(tree, Tree)
    place = tree.place(2)
    assert place is not None
    directory = os.open(place, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    body = b"\0".join([b"/", b"", b"", b"1", b"0", b"2", b"/bin/sleep", b"30", b"PATH=/bin"])
    fds, gate, mine = _request(body)
    try:
        said, got = _exchange(zygote, b"start", [*fds, directory])
    finally:
        for fd in [*mine, directory]:
            os.close(fd)
    assert said.startswith(b"ok "), said
    pid = int(said[3:])
    with gate:
        gate.settimeout(10)
        assert gate.recv(64) == said[3:] + b" ok"  # set up
        gate.send(b"g")
    child = Child(pid, got[0], {}, None)
    try:
        assert place.endswith(_cgroup_of(pid)), (place, _cgroup_of(pid))
    finally:
        child.signal_group("KILL")
        finish(child)
        tree.finished(2)


@needs_bwrap
def test_a_stage_server_killed_among_starts_loses_none_and_leaks_nothing() -> None:
    """Starts from four clients at once while the stage server is killed twice: each start
    runs its command or fails as a start (never hangs, never runs twice), the next ones run,
    and nothing is left: no child of the server but the new stage server, no placeholder."""
    import threading

    server = Server("asyncio")
    workspace = tempfile.mkdtemp(prefix="execproto-killed-", dir="/tmp")
    outcomes: list[str] = []
    try:
        from .sandboxes import run

        def starts(n: int) -> None:
            client = server.client()
            for i in range(8):
                ran = run(client, f"echo {n}-{i}", workspace_write(workspace), cwd=workspace)
                outcomes.append("ran" if ran.stdout == f"{n}-{i}\n" else
                                "failed" if "error" in ran.reply or ran.exit_code else "odd")
            client.close()

        run(server.client(), "true", read_only(workspace))  # the stage server is up
        threads = [threading.Thread(target=starts, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        killed = 0
        for _ in range(2):
            time.sleep(0.05)
            for pid in _pids():
                if _is_stage_server(pid, server.process.pid):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
        assert killed >= 1  # the first time at least: it was up
        for thread in threads:
            thread.join(60)
        assert len(outcomes) == 32 and "odd" not in outcomes, outcomes
        after = run(server.client(), "echo after", workspace_write(workspace), cwd=workspace)
        assert after.stdout == "after\n", after
        time.sleep(0.5)
        children = [pid for pid in _pids() if _parent(pid) == server.process.pid]
        assert len(children) == 1 and _is_stage_server(children[0], server.process.pid), [
            (pid, Path(f"/proc/{pid}/stat").read_text()[:60]) for pid in children]
        assert os.listdir(workspace) == []
    finally:
        log = server.stop()
        shutil.rmtree(workspace, ignore_errors=True)
    assert "Traceback" not in log, log


def _parent(pid: int) -> int:
    try:
        return int(stat_fields(pid)[1])
    except (OSError, IndexError):
        return 0
