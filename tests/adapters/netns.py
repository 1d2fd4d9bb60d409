"""Network namespaces a test makes for itself: a server host and a test host joined by a veth.

    server host (execproto-srv-TAG)          test host (execproto-host-TAG)
      lo, 198.51.100.1/24 ---- veth ---- 198.51.100.2/24, lo
      default route via 198.51.100.2

The server runs in the server host (`ip netns exec`), so its loopback is its own and no
sandbox can reach anything of this machine's; the test host is the "outside" a sandbox with
the network allowed should reach. Addresses are TEST-NET-2 (RFC 5737), used only inside these
namespaces. A socket made in a thread that has joined a namespace (`setns`) stays in it, so
the test talks to both from its own process.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import threading
import uuid
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

SERVER_ADDRESS, HOST_ADDRESS = "198.51.100.1", "198.51.100.2"
CLONE_NEWNET = 0x40000000


def problem() -> str | None:
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Namespaces:
    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.server, self.host = f"execproto-srv-{tag}", f"execproto-host-{tag}"
        _ip("netns", "add", self.server)
        _ip("netns", "add", self.host)
        try:
            _ip("-n", self.server, "link", "add", "veth0", "type", "veth",
                "peer", "name", "veth1", "netns", self.host)
            for name, address in ((self.server, SERVER_ADDRESS), (self.host, HOST_ADDRESS)):
                device = "veth0" if name == self.server else "veth1"
                _ip("-n", name, "link", "set", "lo", "up")
                _ip("-n", name, "addr", "add", f"{address}/24", "dev", device)
                _ip("-n", name, "link", "set", device, "up")
            _ip("-n", self.server, "route", "add", "default", "via", HOST_ADDRESS)
        except BaseException:
            self.remove()
            raise

    def prefix(self) -> tuple[str, ...]:
        """The command prefix that runs a program in the server host."""
        return ("ip", "netns", "exec", self.server)

    def inside(self, name: str, make: Callable[[], T]) -> T:
        """``make()`` called on a thread that has joined namespace ``name``."""
        found: list[T] = []
        failed: list[BaseException] = []

        def run() -> None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(f"/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)
                try:
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns")
                finally:
                    os.close(fd)
                found.append(make())
            except BaseException as exc:  # handed to the caller
                failed.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(30)
        if failed:
            raise failed[0]
        assert found, "the namespace thread did not finish"
        return found[0]

    def listener(self) -> socket.socket:
        """A listening TCP socket on the test host."""
        return self.inside(self.host, lambda: socket.create_server((HOST_ADDRESS, 0)))

    def remove(self) -> None:
        for name in (self.server, self.host):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
