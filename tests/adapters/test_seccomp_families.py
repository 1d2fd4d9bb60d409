"""Which sockets a sandboxed command can make: every family and type, made for real inside.

With the network restricted the filter is an allow-list: AF_UNIX stream and seqpacket, with
or without SOCK_NONBLOCK/SOCK_CLOEXEC, and nothing else; in particular no AF_UNIX datagram
socket, SOCK_RAW included (Linux takes it for SOCK_DGRAM), since one sends to a named socket
with `sendmsg` and no `connect`. AF_VSOCK is denied with the network allowed too. The probe
makes the raw system calls, so it can also set the register bits the kernel ignores. The
effect test checks the host: a datagram socket bound beside the workspace receives nothing.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server
from .sandboxes import needs_bwrap, profile, read_only, run, workspace_write
from .wsclient import Client

# AF_MAX on this kernel (6.18) and in glibc's headers: AF_MCTP (45) is the last family.
FAMILIES = range(46)
# Every value of the kernel's SOCK_TYPE_MASK (0xF): 1..10 are named, the rest refused by it.
TYPES = range(16)
NONBLOCK, CLOEXEC = socket.SOCK_NONBLOCK, socket.SOCK_CLOEXEC
FLAGS = (0, NONBLOCK, CLOEXEC, NONBLOCK | CLOEXEC)
AF_VSOCK = 40
HIGH = 1 << 32  # above the int the kernel reads: seccomp sees it, the kernel drops it

PROBE = r"""
import ctypes, errno, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SOCKET, SOCKETPAIR = 41, 53  # x86_64
families, types, flags, pair_families, high = json.loads(sys.argv[1])

def outcome(number, family, kind, pair=False):
    fds = (ctypes.c_int * 2)(-1, -1)
    args = [ctypes.c_long(number), ctypes.c_long(family), ctypes.c_long(kind), ctypes.c_long(0)]
    result = libc.syscall(*args, fds) if pair else libc.syscall(*args)
    if result < 0:
        return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    for fd in (fds[0], fds[1]) if pair else (result,):
        os.close(fd)
    return "ok"

seen = {"socket": {}, "socketpair": {}, "high": {}}
for family in families:
    for kind in types:
        for flag in flags:
            seen["socket"][f"{family},{kind},{flag}"] = outcome(SOCKET, family, kind | flag)
for family in pair_families:
    for kind in types:
        for flag in flags:
            seen["socketpair"][f"{family},{kind},{flag}"] = outcome(
                SOCKETPAIR, family, kind | flag, pair=True)
for name, family, kind in high:
    seen["high"][name] = outcome(SOCKET, family, kind)
print(json.dumps(seen))
"""

# Raw register values: what the kernel would make of each is in its name.
HIGH_CASES = [("unix_stream_high_type", 1, socket.SOCK_STREAM | HIGH),
              ("unix_dgram_high_type", 1, socket.SOCK_DGRAM | HIGH),
              ("unix_raw_high_type", 1, socket.SOCK_RAW | HIGH),
              ("inet_high_family", socket.AF_INET | HIGH, socket.SOCK_STREAM),
              ("vsock_high_family", AF_VSOCK | HIGH, socket.SOCK_STREAM)]

pytestmark = [needs_bwrap, pytest.mark.skipif(platform.machine() != "x86_64",
                                              reason="the probe uses x86_64 numbers")]


@pytest.fixture(scope="module")
def asyncio_server() -> Iterator[tuple[Server, Client]]:
    server = Server("asyncio")
    yield server, server.client()
    log = server.stop()
    assert "Traceback" not in log, log


@pytest.fixture
def workspace() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="execproto-families-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


Key = tuple[int, int, int]


def _probe(client: Client, sandbox: Any, workspace: Path) -> dict[str, dict[Any, str]]:
    (workspace / "probe.py").write_text(PROBE)
    plan = [list(FAMILIES), list(TYPES), list(FLAGS), [socket.AF_UNIX, AF_VSOCK], HIGH_CASES]
    ran = run(client, f"python3 probe.py '{json.dumps(plan)}'", sandbox, cwd=str(workspace))
    lines = ran.stdout.strip().splitlines()
    assert ran.exit_code == 0 and lines, ran
    raw = json.loads(lines[-1])
    seen: dict[str, dict[Any, str]] = {"high": raw["high"]}
    for call in ("socket", "socketpair"):
        seen[call] = {tuple(map(int, key.split(","))): value for key, value in raw[call].items()}
    return seen


def _made(seen: dict[Key, str]) -> set[Key]:
    return {key for key, value in seen.items() if value == "ok"}


UNIX_ALLOWED = {(socket.AF_UNIX, kind, flag)
                for kind in (socket.SOCK_STREAM, socket.SOCK_SEQPACKET) for flag in FLAGS}


def _check_restricted(seen: dict[str, dict[Any, str]]) -> None:
    for call in ("socket", "socketpair"):
        assert _made(seen[call]) == UNIX_ALLOWED, (call, sorted(_made(seen[call])))
        others = {key: value for key, value in seen[call].items()
                  if key not in UNIX_ALLOWED and value != "EPERM"}
        assert not others, (call, others)  # the filter's answer, before the kernel's
    assert seen["high"] == {"unix_stream_high_type": "ok", "unix_dgram_high_type": "EPERM",
                            "unix_raw_high_type": "EPERM", "inet_high_family": "EPERM",
                            "vsock_high_family": "EPERM"}, seen["high"]


@pytest.mark.every_adapter
@pytest.mark.parametrize("mode", ["read_only", "workspace_write"])
def test_without_the_network_only_unix_stream_and_seqpacket_sockets_are_made(
        adapter: str, mode: str, workspace: Path) -> None:
    """Every adapter, though the filter is the backend's: the restricted network must reach
    it as such from each (the other tests here run on asyncio, as test_sandbox_layers.py)."""
    sandbox = {"read_only": read_only, "workspace_write": workspace_write}[mode](str(workspace))
    server = Server(adapter)
    try:
        client = server.client()
        seen = _probe(client, sandbox, workspace)
        client.close()
    finally:
        log = server.stop()
    assert "Traceback" not in log, log
    _check_restricted(seen)


@pytest.mark.skipif(shutil.which("pasta") is None, reason="pasta (Debian's passt) is not installed")
def test_with_the_network_vsock_is_still_denied(asyncio_server: tuple[Server, Client],
                                                 workspace: Path) -> None:
    """On a kernel with loadable modules, a family's first socket() may load its module here,
    as any sandboxed command with the network can; without the network the filter answers
    first and nothing is loaded."""
    _, client = asyncio_server
    root = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
    seen = _probe(client, profile(str(workspace), [root], network="enabled"), workspace)
    made = sorted({key[0] for key in _made(seen["socket"])})
    vsock = {key: value for call in ("socket", "socketpair") for key, value in seen[call].items()
             if key[0] == AF_VSOCK and value != "EPERM"}
    assert not vsock, (vsock, made)
    assert seen["high"]["vsock_high_family"] == "EPERM", seen["high"]
    # The rest is the network namespace's to allow: datagrams, inet, netlink.
    for key in ((socket.AF_UNIX, socket.SOCK_DGRAM, 0), (socket.AF_UNIX, socket.SOCK_RAW, 0),
                (socket.AF_INET, socket.SOCK_STREAM, CLOEXEC),
                (socket.AF_INET6, socket.SOCK_DGRAM, 0),
                (socket.AF_NETLINK, socket.SOCK_RAW, CLOEXEC)):
        assert seen["socket"][key] == "ok", (key, seen["socket"][key], made)
    assert seen["high"]["inet_high_family"] == "ok", seen["high"]


def test_the_control_without_a_sandbox_makes_what_the_filter_denies(
        asyncio_server: tuple[Server, Client], workspace: Path) -> None:
    """The probe can tell: unsandboxed, a unix SOCK_RAW (a datagram socket) is made, and so is
    a vsock wherever the kernel has vsock, also with bits above the family's int."""
    _, client = asyncio_server
    seen = _probe(client, None, workspace)
    assert seen["socket"][(socket.AF_UNIX, socket.SOCK_RAW, 0)] == "ok", seen["socket"]
    assert seen["high"]["unix_dgram_high_type"] == "ok", seen["high"]
    if seen["socket"][(AF_VSOCK, socket.SOCK_STREAM, 0)] == "ok":
        assert seen["high"]["vsock_high_family"] == "ok", seen["high"]


SEND = r"""
import os, socket, sys
path = sys.argv[1]
for name, kind in (("raw", socket.SOCK_RAW), ("dgram", socket.SOCK_DGRAM)):
    try:
        s = socket.socket(socket.AF_UNIX, kind)
    except OSError as exc:
        print(name, "socket", exc.errno)
        continue
    with s, open("/etc/hostname", "rb") as passed:
        for how in ("sendto", "sendmsg", "sendmsg_fd"):
            data = f"{name} {how}".encode()
            try:
                if how == "sendto":
                    s.sendto(data, path)
                else:
                    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                               passed.fileno().to_bytes(4, sys.byteorder))]
                    s.sendmsg([data], rights if how == "sendmsg_fd" else [], 0, path)
                print(name, how, "sent")
            except OSError as exc:
                print(name, how, exc.errno)
"""


def _received(listener: socket.socket) -> list[bytes]:
    """What reached the host's socket, without waiting: the sender has ended."""
    got = []
    for _ in range(16):  # the sender sends at most 6
        try:
            data, ancillary, _, _ = listener.recvmsg(256, socket.CMSG_SPACE(16))
        except BlockingIOError:
            break
        for level, kind, fds in ancillary:
            if (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS):
                for at in range(0, len(fds) - len(fds) % 4, 4):
                    os.close(int.from_bytes(fds[at:at + 4], "little"))
        got.append(data)
    return got


def _send_to_host_socket(client: Client, sandbox: Any, workspace: Path) -> tuple[Any, list[bytes]]:
    (workspace / "send.py").write_text(SEND)
    path = workspace / "log.sock"  # a host daemon's datagram socket, as journald's or /dev/log
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(path))
        listener.setblocking(False)
        ran = run(client, f"python3 send.py {path}", sandbox, cwd=str(workspace))
        path.unlink()
        return ran, _received(listener)


@pytest.mark.parametrize("mode", ["read_only", "workspace_write"])
def test_no_datagram_reaches_a_host_socket_without_the_network(
        asyncio_server: tuple[Server, Client], mode: str, workspace: Path) -> None:
    _, client = asyncio_server
    sandbox = {"read_only": read_only, "workspace_write": workspace_write}[mode](str(workspace))
    ran, got = _send_to_host_socket(client, sandbox, workspace)
    assert ran.exit_code == 0, ran
    assert got == [], (got, ran)
    assert ran.stdout.split("\n")[:2] == ["raw socket 1", "dgram socket 1"], ran  # EPERM


def test_the_control_without_a_sandbox_reaches_the_host_socket(
        asyncio_server: tuple[Server, Client], workspace: Path) -> None:
    _, client = asyncio_server
    ran, got = _send_to_host_socket(client, None, workspace)
    assert sorted(got) == sorted(f"{name} {how}".encode() for name in ("raw", "dgram")
                                 for how in ("sendto", "sendmsg", "sendmsg_fd")), (got, ran)
