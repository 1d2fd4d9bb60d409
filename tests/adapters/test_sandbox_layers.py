"""What a command sees inside Codex's two sandbox modes, with its workspace under /tmp.

The reference (codex-linux-sandbox, measured here: ../shared/SANDBOX-NOTES.md) lets such a
command read its cwd and /tmp, write only where the profile says, and fails unix-socket
connect, ptrace, io_uring_setup and socket(AF_INET) with EPERM when the network is
restricted. execproto must observe the same, and beyond the reference keep the server's
session keyring out of reach. Each probe is a real call made inside the sandbox.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server
from .sandboxes import needs_bwrap, needs_pasta, profile, read_only, run, workspace_write
from .wsclient import Client

PROBE = r"""
import ctypes, errno, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
unix_path, key_name = sys.argv[1:3]
seen = {}

def outcome(call):
    try:
        result = call()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "ok" if result is None or result >= 0 else errno.errorcode[ctypes.get_errno()]

def write(path):
    with open(path, "w") as file:
        file.write("x")

def connect_unix():
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(unix_path)

def inet():
    socket.socket(socket.AF_INET).close()

def unix(kind, pair=False):
    if pair:
        made = socket.socketpair(socket.AF_UNIX, kind)
    else:
        made = [socket.socket(socket.AF_UNIX, kind)]
    for each in made:
        each.close()

seen["cwd_read"] = outcome(lambda: os.listdir(".") and None)
seen["tmp_read"] = outcome(lambda: os.listdir("/tmp") and None)
seen["cwd_write"] = outcome(lambda: write("probe-written"))
seen["unix_connect"] = outcome(connect_unix)
seen["inet_socket"] = outcome(inet)
seen["unix_datagram"] = outcome(lambda: unix(socket.SOCK_DGRAM))
seen["unix_datagram_pair"] = outcome(lambda: unix(socket.SOCK_DGRAM, pair=True))
seen["unix_stream_pair"] = outcome(lambda: unix(socket.SOCK_STREAM, pair=True))
seen["ptrace"] = outcome(lambda: libc.ptrace(2, os.getpid(), None, None))  # PEEKDATA: ESRCH
seen["io_uring_setup"] = outcome(
    lambda: libc.syscall(425, 1, ctypes.byref(ctypes.create_string_buffer(120))))
seen["keyctl"] = outcome(lambda: libc.syscall(250, 0, -3, 0))  # GET_KEYRING_ID of @s
keys = open("/proc/keys").read() if os.path.exists("/proc/keys") else ""
seen["server_key_listed"] = key_name in keys
print(json.dumps(seen))
"""

# x86_64 numbers in the probe (keyctl 250, io_uring_setup 425).
pytestmark = [needs_bwrap, pytest.mark.skipif(
    __import__("platform").machine() != "x86_64", reason="the probe uses x86_64 numbers")]


def _add_session_key(name: str) -> int:
    """A key in a new session keyring of this process, which the server it starts inherits."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    assert libc.syscall(250, 1, None) >= 0  # KEYCTL_JOIN_SESSION_KEYRING: a fresh one
    key = libc.syscall(248, b"user", name.encode(), b"s3cr3t", 6, -3)  # add_key to @s
    assert key >= 0, ctypes.get_errno()
    return int(key)


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[tuple[Server, Client, str]]:
    name = f"execproto-probe-{uuid.uuid4().hex[:8]}"
    _add_session_key(name)
    server = Server("asyncio")
    yield server, server.client(), name
    server.stop()


@pytest.fixture
def workspace() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="execproto-layers-", dir="/tmp"))
    (path / "file").write_text("here\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _probe(client: Client, sandbox: object, workspace: Path, key: str) -> dict[str, object]:
    listener_path = str(workspace / "listener.sock")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(listener_path)
        listener.listen(4)
        script = f"python3 -c '{PROBE}' {listener_path} {key}"
        ran = run(client, script, sandbox, cwd=str(workspace))
    lines = ran.stdout.strip().splitlines()
    assert lines, ran
    result: dict[str, object] = json.loads(lines[-1])
    return result


# A datagram socket could sendmsg to a named socket without connect: denied too, beyond the
# reference; a stream pair (a pipe between two of the command's own processes) still works.
DENIED_WITHOUT_NETWORK = {"unix_connect": "EPERM", "inet_socket": "EPERM", "ptrace": "EPERM",
                          "unix_datagram": "EPERM", "unix_datagram_pair": "EPERM",
                          "unix_stream_pair": "ok",
                          "io_uring_setup": "EPERM", "keyctl": "EPERM",
                          "server_key_listed": False}


def test_the_read_only_profile_under_tmp_observes_what_the_reference_does(
        keyed_server: tuple[Server, Client, str], workspace: Path) -> None:
    _, client, key = keyed_server
    seen = _probe(client, read_only(str(workspace)), workspace, key)
    assert seen == {"cwd_read": "ok", "tmp_read": "ok", "cwd_write": "EROFS",
                    **DENIED_WITHOUT_NETWORK}, seen


def test_the_workspace_write_profile_under_tmp_writes_its_workspace(
        keyed_server: tuple[Server, Client, str], workspace: Path) -> None:
    _, client, key = keyed_server
    seen = _probe(client, workspace_write(str(workspace)), workspace, key)
    assert seen == {"cwd_read": "ok", "tmp_read": "ok", "cwd_write": "ok",
                    **DENIED_WITHOUT_NETWORK}, seen
    assert (workspace / "probe-written").read_text() == "x"


@needs_pasta
def test_with_the_network_only_the_processes_and_keys_stay_out_of_reach(
        keyed_server: tuple[Server, Client, str], workspace: Path) -> None:
    _, client, key = keyed_server
    root = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
    seen = _probe(client, profile(str(workspace), [root], network="enabled"), workspace, key)
    assert seen["inet_socket"] == "ok" and seen["unix_connect"] == "ok", seen
    assert seen["ptrace"] == seen["io_uring_setup"] == seen["keyctl"] == "EPERM", seen
    assert seen["server_key_listed"] is False, seen


def test_the_control_without_a_sandbox_sees_the_key_and_makes_the_calls(
        keyed_server: tuple[Server, Client, str], workspace: Path) -> None:
    """The probe itself can tell: unsandboxed, every call works and the key is there."""
    _, client, key = keyed_server
    seen = _probe(client, None, workspace, key)
    assert seen["server_key_listed"] is True, seen
    assert seen["keyctl"] == seen["inet_socket"] == seen["unix_connect"] == "ok", seen
    assert seen["unix_datagram"] == seen["unix_datagram_pair"] == "ok", seen


I386_GETPID = r"""
import ctypes, mmap
code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"  # mov eax, 20 (getpid on i386); int 0x80; ret
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
call = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
print("pid", call())
"""


def test_a_call_through_the_32_bit_abi_is_killed(keyed_server: tuple[Server, Client, str],
                                                 workspace: Path) -> None:
    """The filter checks the architecture first: the i386 ABI (int 0x80), where every call has
    another number, is no way around it."""
    _, client, _ = keyed_server
    script = f"python3 -c '{I386_GETPID}'"
    control = run(client, script, None)
    if control.exit_code != 0:
        pytest.skip(f"this kernel runs no i386 calls: {control}")
    assert control.stdout.startswith("pid "), control
    ran = run(client, script, read_only(str(workspace)))
    assert ran.exit_code == 128 + 31 and "pid" not in ran.stdout, ran  # SIGSYS
