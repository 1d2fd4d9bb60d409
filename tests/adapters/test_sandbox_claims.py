"""docs/sandbox.md's "What a sandboxed process gets", attacked claim by claim on a live server.

Each test makes the real call or runs the real command inside a sandbox and checks what came
of it (bytes moved or not, a key listed or not, a file on the host or not), and each has a
control: the same probe unsandboxed (or on the host) gets another result, so the probe can
tell. The claims: the seccomp filter's EPERM for the always-denied calls and, with the network
restricted, for the socket calls; no nested user namespaces; no capabilities and
no_new_privs, a setuid-root program included; the client's variables on no command line;
Codex's read-only profile skipping the stage; `.agents` (with `.git` and `.codex`) read-only
or uncreatable in the workspace-write profile; no hard link across the sandbox's mounts.

One asyncio server for the module: the sandbox is the backend's, the same under every
adapter, and test_sandbox.py already carries policies through each adapter; here the
attacks are on the sandbox itself. Workspaces live under /var/tmp (the workspace-write
profile makes /tmp writable), on the same file system as the places outside them.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server, eventually, start, uri
from .sandboxes import IS_ROOT, needs_bwrap, profile, read_only, run, workspace_write
from .wsclient import Client, output_of

pytestmark = needs_bwrap
x86_64_only = pytest.mark.skipif(platform.machine() != "x86_64",
                                 reason="the probe uses x86_64 system-call numbers")


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[Server, Client]]:
    server = Server("asyncio", "--kill-grace", "0.5")
    client = server.client()
    yield server, client
    client.close()
    log = server.stop()
    assert "Traceback" not in log, log


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="execproto-claims-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def workspace(base: Path) -> Path:
    path = base / f"ws-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    return path


def _json_line(ran: Any) -> dict[str, Any]:
    lines = [line for line in ran.stdout.splitlines() if line.startswith("{")]
    assert lines, ran
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _enabled(workspace: Path) -> dict[str, Any]:
    root = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
    return profile(str(workspace), [root], network="enabled")


# -- 1. the seccomp filter ------------------------------------------------------------------------

# Raw x86_64 numbers. Every call is made for real, with arguments under which it would
# succeed (or fail for another reason) unfiltered; where it has an effect, the effect is looked
# at too: bytes moved, a key listed, a name bound, a message delivered or consumed, an EOF.
SECCOMP_PROBE = r"""
import ctypes, errno, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
tag = sys.argv[1]
seen = {}

def call(number, *args):
    args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    if libc.syscall(ctypes.c_long(number), *args) < 0:
        return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    return "ok"

class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

class msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(iovec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]

class mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", msghdr), ("len", ctypes.c_uint)]

def vec(buffer):
    return iovec(ctypes.cast(buffer, ctypes.c_void_p), len(buffer))

def messages(buffer):
    found = (mmsghdr * 1)()
    found[0].hdr.iov = ctypes.pointer(vec(buffer))
    found[0].hdr.iovlen = 1
    return found

# Always denied. process_vm_readv/writev on the probe's own pid: did the bytes move?
source = ctypes.create_string_buffer(b"moved!!!", 8)
into = ctypes.create_string_buffer(8)
local, remote = vec(into), vec(source)
seen["process_vm_readv"] = call(310, os.getpid(), ctypes.byref(local), 1,
                                ctypes.byref(remote), 1, 0)
seen["readv_moved"] = into.raw == source.raw
into = ctypes.create_string_buffer(8)
local, remote = vec(source), vec(into)
seen["process_vm_writev"] = call(311, os.getpid(), ctypes.byref(local), 1,
                                 ctypes.byref(remote), 1, 0)
seen["writev_moved"] = into.raw == source.raw
seen["io_uring_enter"] = call(426, -1, 1, 0, 0, None, 0)
seen["io_uring_register"] = call(427, -1, 0, None, 0)
seen["add_key"] = call(248, b"user", tag.encode(), b"v", 1, -2)  # to the process keyring
try:
    seen["key_listed"] = tag in open("/proc/keys").read()
except OSError as exc:
    seen["key_listed"] = errno.errorcode[exc.errno]
seen["request_key"] = call(249, b"user", (tag + "-absent").encode(), None, 0)  # no callout

# Denied with the network restricted, on AF_UNIX stream sockets (which it may make).
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.setblocking(False)
fd = listener.fileno()
address = ctypes.create_string_buffer(b"\x01\x00\x00" + tag.encode())  # abstract @tag
seen["bind"] = call(49, fd, address, 3 + len(tag))
seen["bound_listed"] = "@" + tag in open("/proc/net/unix").read()
seen["listen"] = call(50, fd, 1)
seen["accept4"] = call(288, fd, None, None, socket.SOCK_NONBLOCK)
name, size = ctypes.create_string_buffer(128), ctypes.c_uint32(128)
seen["getsockname"] = call(51, fd, name, ctypes.byref(size))
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
a.setblocking(False)
b.setblocking(False)
size = ctypes.c_uint32(128)
seen["getpeername"] = call(52, a.fileno(), name, ctypes.byref(size))
value, size = ctypes.c_int(0), ctypes.c_uint32(4)
seen["getsockopt"] = call(55, a.fileno(), socket.SOL_SOCKET, socket.SO_TYPE,
                          ctypes.byref(value), ctypes.byref(size))
seen["getsockopt_value"] = value.value
one = ctypes.c_int(1)
seen["setsockopt"] = call(54, a.fileno(), socket.SOL_SOCKET, socket.SO_PASSCRED,
                          ctypes.byref(one), 4)

def at_b():
    try:
        return os.read(b.fileno(), 16).decode()
    except BlockingIOError:
        return "EAGAIN"

outgoing = ctypes.create_string_buffer(b"m", 1)
seen["sendmmsg"] = call(307, a.fileno(), messages(outgoing), 1, 0)
seen["sendmmsg_arrived"] = at_b()
os.write(a.fileno(), b"r")
incoming = ctypes.create_string_buffer(4)
seen["recvmmsg"] = call(299, b.fileno(), messages(incoming), 1, socket.MSG_DONTWAIT, None)
seen["recvmmsg_left"] = at_b()
seen["shutdown"] = call(48, a.fileno(), socket.SHUT_WR)
seen["after_shutdown"] = at_b()  # "" is the end of the stream
print(json.dumps(seen))
"""

ALWAYS = ("process_vm_readv", "process_vm_writev", "io_uring_enter", "io_uring_register",
          "add_key", "request_key")
SOCKET_CALLS = ("bind", "listen", "accept4", "getsockname", "getpeername", "getsockopt",
                "setsockopt", "shutdown", "sendmmsg", "recvmmsg")


@pytest.fixture(scope="module")
def seccomp_seen(live: tuple[Server, Client], base: Path) -> dict[str, dict[str, Any]]:
    """The probe's findings unsandboxed, and in a sandbox with the network restricted and one
    with it enabled (None where the server cannot give one the network)."""
    _, client = live
    workspace = base / "seccomp"
    workspace.mkdir()
    (workspace / "probe.py").write_text(SECCOMP_PROBE)
    found: dict[str, dict[str, Any]] = {}
    for mode, sandbox in (("none", None), ("restricted", read_only(str(workspace))),
                          ("network", _enabled(workspace))):
        tag = f"execproto-claims-{uuid.uuid4().hex[:12]}"
        ran = run(client, f"timeout 10 python3 probe.py {tag}", sandbox, cwd=str(workspace))
        if mode == "network" and "result" not in ran.reply:
            found[mode] = {"refused": ran.reply}
            continue
        assert ran.sandbox_type == ("none" if sandbox is None else "linuxSeccomp"), ran
        found[mode] = _json_line(ran)
    return found


@x86_64_only
def test_seccomp_always_denies_process_vm_io_uring_and_key_calls_with_eperm(
        seccomp_seen: dict[str, dict[str, Any]]) -> None:
    control = seccomp_seen["none"]
    # Unsandboxed the probe reads and writes its own memory, adds a key it then sees listed,
    # and io_uring and request_key fail for their own reasons (io_uring_register on fd -1:
    # EINVAL on kernels with "blind" registration, EBADF before).
    assert control["process_vm_readv"] == control["process_vm_writev"] == "ok", control
    assert control["readv_moved"] is control["writev_moved"] is True, control
    assert control["add_key"] == "ok" and control["key_listed"] is True, control
    assert control["io_uring_enter"] == "EBADF", control
    assert control["request_key"] == "ENOKEY", control
    assert all(control[call] != "EPERM" for call in ALWAYS), control
    modes = ["restricted"]
    if "refused" not in seccomp_seen["network"]:
        modes.append("network")
    for mode in modes:
        seen = seccomp_seen[mode]
        assert {call: seen[call] for call in ALWAYS} == dict.fromkeys(ALWAYS, "EPERM"), (mode, seen)
        assert seen["readv_moved"] is seen["writev_moved"] is False, (mode, seen)
        assert seen["key_listed"] is False, (mode, seen)
    if "refused" in seccomp_seen["network"]:
        pytest.skip(f"the always-denied calls held with the network restricted; the server "
                    f"gives no sandbox the network here: {seccomp_seen['network']}")


@x86_64_only
def test_seccomp_denies_the_socket_calls_with_eperm_when_the_network_is_restricted(
        seccomp_seen: dict[str, dict[str, Any]]) -> None:
    control = seccomp_seen["none"]
    assert {call: control[call] for call in SOCKET_CALLS} == {
        **dict.fromkeys(SOCKET_CALLS, "ok"), "accept4": "EAGAIN"}, control
    assert control["bound_listed"] is True and control["getsockopt_value"] == 1, control
    assert control["sendmmsg_arrived"] == "m", control  # delivered
    assert control["recvmmsg_left"] == "EAGAIN", control  # consumed by recvmmsg
    assert control["after_shutdown"] == "", control  # the peer sees the end of the stream

    seen = seccomp_seen["restricted"]
    assert {call: seen[call] for call in SOCKET_CALLS} == dict.fromkeys(SOCKET_CALLS, "EPERM"), seen
    assert seen["bound_listed"] is False, seen  # no name bound
    assert seen["getsockopt_value"] == 0, seen  # nothing written back
    assert seen["sendmmsg_arrived"] == "EAGAIN", seen  # nothing sent
    assert seen["recvmmsg_left"] == "r", seen  # nothing taken
    assert seen["after_shutdown"] == "EAGAIN", seen  # the stream still open

    # With the network allowed the same calls go through: the filter is what stops them.
    network = seccomp_seen["network"]
    if "refused" in network:
        pytest.skip(f"the server gives no sandbox the network here: {network}")
    assert {call: network[call] for call in SOCKET_CALLS} == {
        call: control[call] for call in SOCKET_CALLS}, network
    assert network["bound_listed"] is True and network["sendmmsg_arrived"] == "m", network


# -- 2. no nested user namespaces -----------------------------------------------------------------

USERNS_PROBE = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
before = os.readlink("/proc/self/ns/user")
seen = {}
def failed():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
# clone(CLONE_NEWUSER) with no stack, like fork: the child says whether its namespace is new.
pid = libc.syscall(ctypes.c_long(56), ctypes.c_long(CLONE_NEWUSER | SIGCHLD), None, None,
                   None, None)
if pid == 0:
    os._exit(0 if os.readlink("/proc/self/ns/user") != before else 1)
if pid < 0:
    seen["clone"] = failed()
else:
    seen["clone"] = "ok" if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0 else "same"
seen["unshare"] = "ok" if libc.syscall(ctypes.c_long(272), ctypes.c_long(CLONE_NEWUSER)) == 0 \
    else failed()
seen["namespace_changed"] = os.readlink("/proc/self/ns/user") != before
print(json.dumps(seen))
"""


@x86_64_only
def test_no_nested_user_namespace_by_unshare_or_clone(live: tuple[Server, Client],
                                                      workspace: Path) -> None:
    _, client = live
    (workspace / "probe.py").write_text(USERNS_PROBE)
    cli = shutil.which("unshare") is not None
    script = "timeout 10 python3 probe.py" + (
        "; timeout 10 unshare -Ur true; echo unshare_cli=$?" if cli else "")
    control = run(client, script, None, cwd=str(workspace))
    assert _json_line(control) == {"clone": "ok", "unshare": "ok", "namespace_changed": True}, \
        control
    assert not cli or "unshare_cli=0" in control.stdout, control
    for sandbox in (read_only(str(workspace)), workspace_write(str(workspace))):
        ran = run(client, script, sandbox, cwd=str(workspace))
        seen = _json_line(ran)
        assert seen["clone"] not in ("ok", "same") and seen["unshare"] != "ok", ran
        assert seen["namespace_changed"] is False, ran
        if cli:
            assert "unshare_cli=0" not in ran.stdout and "unshare_cli=" in ran.stdout, ran


# -- 3. no capabilities, no_new_privs ------------------------------------------------------------


def _status(text: str) -> dict[str, str]:
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key: value.strip() for key, value in fields.items()}


CAPS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


def test_no_capabilities_and_no_new_privs_even_through_a_setuid_root_program(
        live: tuple[Server, Client], workspace: Path) -> None:
    """The sandboxed process, and a setuid-root copy of cat it runs, hold no capability and
    have no_new_privs. As root the server's uid is 0 inside too (0 maps to 0), so a changed
    euid shows nothing; what shows is the power: a root-owned file with mode 000, which root
    with CAP_DAC_OVERRIDE reads, stays unreadable to the setuid program inside. The controls:
    on the host the same file runs setuid (nobody gets euid 0 and reads it), and root reads
    it. (Inside, the setuid bit meets three layers: no_new_privs, an empty bounding set and
    bubblewrap's nosuid mounts; the test backs that the program gains nothing, not which.)"""
    if not IS_ROOT:
        pytest.skip("making a setuid-root program, and the control as nobody, need root")
    _, client = live
    secret = f"locked-{uuid.uuid4().hex}"
    locked = workspace / "locked"
    locked.write_text(secret + "\n")
    locked.chmod(0o000)
    program = workspace / "suid-cat"
    shutil.copy("/usr/bin/cat", program)
    os.chown(program, 0, 0)
    program.chmod(0o4755)
    script = ("grep -E '^(Cap|NoNewPrivs|Uid)' /proc/self/status; echo ==; "
              "./suid-cat /proc/self/status; echo ==; ./suid-cat locked; cat locked; exit 0")

    as_nobody = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
         str(program), "/proc/self/status", str(locked)],
        capture_output=True, text=True, timeout=10)
    nobody = _status(as_nobody.stdout)
    assert nobody["Uid"].split()[:2] == ["65534", "0"], as_nobody  # the setuid bit works here
    assert secret in as_nobody.stdout, as_nobody
    control = run(client, script, None, cwd=str(workspace))
    shell, suid, _ = control.stdout.split("==\n")
    assert _status(shell)["CapEff"] != "0000000000000000", control
    assert _status(suid)["CapEff"] != "0000000000000000", control
    assert control.stdout.count(secret) == 2, control

    ran = run(client, script, read_only(str(workspace)), cwd=str(workspace))
    assert ran.sandbox_type == "linuxSeccomp", ran
    shell, suid, _ = ran.stdout.split("==\n")
    for text in (shell, suid):
        status = _status(text)
        assert {cap: status[cap] for cap in CAPS} == dict.fromkeys(CAPS, "0" * 16), ran
        assert status["NoNewPrivs"] == "1", ran
        real, effective, saved, fs = status["Uid"].split()
        assert real == effective == saved == fs, ran  # the setuid bit changed nothing
    assert secret not in ran.stdout, ran
    assert ran.stderr.count("Permission denied") == 2, ran


# -- 4. the client's variables on no command line ------------------------------------------------


def _pids() -> list[str]:
    return [name for name in os.listdir("/proc") if name.isdigit()]


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:  # gone, or a kernel thread's
        return b""


def _started(pid: str) -> bytes:
    """When ``pid`` started (stat's field 22, in clock ticks since boot), b"" once it is gone:
    with the pid, it names one process, whatever it execs, never another that reuses the pid."""
    stat = _read(f"/proc/{pid}/stat")
    return stat.rsplit(b")", 1)[1].split()[19] if stat else b""


def test_the_clients_variables_are_on_no_command_line(live: tuple[Server, Client],
                                                      workspace: Path) -> None:
    """While a sandboxed process starts and runs, every command line on the host is read over
    and over: the value of its variable is on none, the sandboxed sh's own argument (the
    control: the scan sees the sandbox's command lines) is, and the variable is in the
    program's environment (it was passed), in no wrapper's."""
    _, client = live
    value, marker = f"uniq-{uuid.uuid4().hex}", f"argv-{uuid.uuid4().hex}"
    msg_id = client.request("process/start", {
        "processId": "env-scan", "argv": ["sh", "-c", "sleep 2; exit 0", marker],
        "cwd": uri(workspace), "env": {"PATH": "/usr/bin:/bin", "S": value}, "tty": False,
        "sandbox": read_only(str(workspace))})
    on_cmdline: set[str] = set()
    marker_seen = False
    # argv[0] of each process with the value in its environment, by pid and start time
    holders: dict[tuple[str, bytes], bytes] = {}
    # From the request on, through the wrappers' lives, until the program has run a while
    # (0.5 s after the sleep is first seen; 10 s at most, for a loaded machine).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if b"sleep" in holders.values() and deadline - time.monotonic() > 0.5:
            deadline = time.monotonic() + 0.5
        for pid in _pids():
            began = _started(pid)
            cmdline = _read(f"/proc/{pid}/cmdline")
            if value.encode() in cmdline:
                on_cmdline.add(pid)
            marker_seen = marker_seen or marker.encode() in cmdline
            # A child sh forks shows sh's command line until it execs: the last one counts.
            # Its pid, once it ended, may be another process's, which is not it.
            process = (pid, began)
            if cmdline and (process in holders
                            or value.encode() in _read(f"/proc/{pid}/environ")):
                if began and _started(pid) == began:  # the same one throughout
                    holders[process] = cmdline.split(b"\0")[0]
    reply = client.response(msg_id)
    assert reply.get("result", {}).get("sandboxType") == "linuxSeccomp", reply
    client.events_until_closed("env-scan")
    assert not on_cmdline, f"the value was on the command line of {on_cmdline}"
    assert marker_seen, "the scan never saw the sandboxed process's command line"
    assert b"sleep" in holders.values(), holders  # passed to the program
    assert set(holders.values()) <= {b"sh", b"sleep"}, holders  # and to no wrapper


# -- 5. Codex's read-only profile skips the stage ------------------------------------------------


def _mount_points(mountinfo: str) -> set[str]:
    # Field 5 is the mount point (octal escapes such as \040 left as they are).
    return {line.split()[4] for line in mountinfo.splitlines() if line.strip()}


def _beyond_bubblewrap(points: set[str], host: set[str]) -> set[str]:
    """Mount points that are neither `/`, nor bubblewrap's `/dev` and `/proc` and what lies in
    them, nor the host's own (which the recursive bind of `/` brings along)."""
    return {point for point in points
            if point != "/" and point not in host
            and not any(point == top or point.startswith(top + "/") for top in ("/dev", "/proc"))}


def _parent(pid: int) -> int:
    """``pid``'s parent; 0 once it is gone."""
    stat = _read(f"/proc/{pid}/stat")
    return int(stat.rsplit(b")", 1)[1].split()[1]) if stat else 0


def _outer_namespace(server: Server, marker: str) -> tuple[str, str]:
    """The mount namespace of the server and of its child through which the sandboxed program,
    a ``sleep`` whose environment holds ``marker``, was started (the stage, or bwrap without
    it). The program sleeps until the test ends it, so it and every process between it and
    the server live through the walk: no link of the chain can vanish, nor its pid be reused
    by another process."""
    found: list[str] = []

    def sandboxed() -> bool:  # sh exec'd sleep: one process, never cat nor a forked child
        found[:] = [pid for pid in _pids() if _read(f"/proc/{pid}/cmdline").startswith(b"sleep\0")
                    and marker.encode() in _read(f"/proc/{pid}/environ")]
        return bool(found)

    assert eventually(sandboxed, wait=10)
    assert len(found) == 1, found
    pid = int(found[0])
    while (parent := _parent(pid)) > 1 and parent != server.process.pid:
        pid = parent
    assert parent == server.process.pid, f"no child of the server leads to {found}"
    namespaces = (os.readlink(f"/proc/{parent}/ns/mnt"), os.readlink(f"/proc/{pid}/ns/mnt"))
    assert marker.encode() in _read(f"/proc/{found[0]}/environ"), "the program ended too soon"
    return namespaces


def test_the_read_only_profile_skips_the_stage(live: tuple[Server, Client],
                                               workspace: Path) -> None:
    """Under Codex's read-only profile the only mount points are `/`, bubblewrap's `/dev` and
    `/proc`, and the host's own: none beneath the workspace or /tmp. And bubblewrap was
    started in the server's mount namespace: no stage made a private one for it first. The
    control is the workspace-write profile on the same workspace, which needs the stage: its
    workspace, /tmp and placeholders are mount points, and its bubblewrap starts in another
    namespace."""
    server, client = live
    host = _mount_points(Path("/proc/self/mountinfo").read_text())
    found: dict[str, tuple[set[str], set[str], tuple[str, str]]] = {}
    for name, sandbox in (("read_only", read_only(str(workspace))),
                          ("workspace_write", workspace_write(str(workspace)))):
        marker = f"mark-{uuid.uuid4().hex}"
        process_id = f"mounts-{name}"
        reply = start(client, process_id,
                      ["sh", "-c", "cat /proc/self/mountinfo; exec sleep 60"],
                      cwd=uri(workspace), env={"PATH": "/usr/bin:/bin", "M": marker},
                      sandbox=sandbox)
        assert reply.get("result") == {"processId": process_id,
                                        "sandboxType": "linuxSeccomp"}, reply
        namespaces = _outer_namespace(server, marker)
        client.result("process/terminate", {"processId": process_id})
        events = client.events_until_closed(process_id)
        mountinfo = output_of(events).get("stdout", b"").decode()
        assert " / / " in mountinfo, mountinfo
        points = _mount_points(mountinfo)
        found[name] = (points, _beyond_bubblewrap(points, host), namespaces)

    points, beyond, (server_ns, outer_ns) = found["read_only"]
    assert beyond == set(), beyond
    assert not [point for point in points if point == "/tmp" or point.startswith("/tmp/")
                or point == str(workspace) or point.startswith(f"{workspace}/")], points
    assert server_ns == outer_ns, "the read-only profile's bubblewrap ran in a stage's namespace"

    _, beyond, (server_ns, outer_ns) = found["workspace_write"]
    assert {str(workspace), "/tmp", str(workspace / ".agents")} <= beyond, beyond
    assert server_ns != outer_ns, "the control's stage made no mount namespace"


# -- 6. .agents, .git and .codex in the workspace-write profile ----------------------------------

PROTECTED = (".agents", ".git", ".codex")


def _absent(path: Path) -> Callable[[], bool]:
    return lambda: not path.exists()


def test_agents_git_and_codex_are_read_only_in_the_workspace_write_profile(
        live: tuple[Server, Client], workspace: Path) -> None:
    _, client = live
    for name in (*PROTECTED, "plain"):
        (workspace / name).mkdir()
        (workspace / name / "keep").write_text("kept\n")
    attacks = "; ".join(
        f"echo x > {name}/new; echo x > {name}/keep; rm -f {name}/keep; mkdir {name}/sub; "
        f"mv {name} {name}-moved" for name in (*PROTECTED, "plain"))
    ran = run(client, attacks + "; exit 0", workspace_write(str(workspace)), cwd=str(workspace))
    assert ran.sandbox_type == "linuxSeccomp", ran
    for name in PROTECTED:
        assert sorted(os.listdir(workspace / name)) == ["keep"], (name, ran)
        assert (workspace / name / "keep").read_text() == "kept\n", (name, ran)
        assert not (workspace / f"{name}-moved").exists(), (name, ran)
    # The control: the same attacks on a plain directory beside them all work.
    assert not (workspace / "plain").exists(), ran
    assert sorted(os.listdir(workspace / "plain-moved")) == ["new", "sub"], ran


def test_a_missing_agents_git_or_codex_cannot_be_created(live: tuple[Server, Client],
                                                         workspace: Path) -> None:
    """`mkdir .agents; echo x > .agents/a` (and the same for .git, .codex) leaves nothing on
    the host: an empty read-only placeholder held the name, and it is gone after."""
    _, client = live
    attacks = "; ".join(
        f"mkdir {name}; mkdir -p {name}/sub; echo x > {name}/a; mv {name} {name}-moved; "
        f"mkdir {name}; echo x > {name}/a" for name in (*PROTECTED, "plain"))
    ran = run(client, attacks + "; exit 0", workspace_write(str(workspace)), cwd=str(workspace))
    assert ran.sandbox_type == "linuxSeccomp", ran
    for name in PROTECTED:
        assert f"mkdir: cannot create directory '{name}'" in ran.stderr, ran
        assert not (workspace / f"{name}-moved").exists(), (name, ran)
        assert eventually(_absent(workspace / name)), (name, ran)
    # The control: a plain name is made, moved, and made again.
    assert (workspace / "plain" / "a").read_text() == "x\n", ran
    assert (workspace / "plain-moved" / "a").read_text() == "x\n", ran


# -- 7. no hard link across the sandbox's mounts -------------------------------------------------


def test_no_hard_link_across_the_sandboxs_mounts(live: tuple[Server, Client], base: Path,
                                                 workspace: Path) -> None:
    """A file outside the workspace-write profile's writable places, linked into the
    workspace, would be writable through the link: the link fails with EXDEV and nothing
    appears on the host. The controls: on the host the same link works (one file system),
    and inside a link within the workspace does."""
    _, client = live
    outside = base / f"outside-{uuid.uuid4().hex[:8]}"
    outside.write_text("original\n")
    outside.chmod(0o666)
    (workspace / "inner").write_text("inner\n")
    host_link = workspace / "host-link"
    os.link(outside, host_link)  # the control: one file system, no mounts between
    assert host_link.stat().st_ino == outside.stat().st_ino
    host_link.unlink()

    script = (f"python3 -c \"import os\ntry:\n os.link('{outside}', 'hl')\n"
              f"except OSError as e:\n print('link', e.errno == 18)\n\"; "
              f"ln {outside} hl2; echo pwned > hl; echo pwned > hl2; echo pwned >> {outside}; "
              f"ln inner inner-link && echo inner_linked; exit 0")
    ran = run(client, script, workspace_write(str(workspace)), cwd=str(workspace))
    assert ran.sandbox_type == "linuxSeccomp", ran
    assert "link True" in ran.stdout, ran  # EXDEV
    assert "inner_linked" in ran.stdout, ran
    assert outside.read_text() == "original\n", ran
    assert outside.stat().st_nlink == 1, ran
    for name in ("hl", "hl2"):
        path = workspace / name
        assert not path.exists() or path.stat().st_ino != outside.stat().st_ino, (name, ran)
