"""The TCP ports this process listens on: the server's own, which no forwarded stream on the
host's loopback may reach (the core refuses them; see `ForwardUnrouted.listening`)."""

from __future__ import annotations

import os

_LISTEN = "0A"  # the kernel's TCP_LISTEN, in /proc/net/tcp's `st` column


def listening() -> tuple[int, ...]:
    """Every port a TCP socket of this process listens on, in its network, on any address.
    Blocking (it reads /proc): call it off the owner."""
    inodes: set[str] = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed meanwhile
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports: set[int] = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as file:
                rows = file.read().splitlines()[1:]
        except OSError:  # no IPv6 here
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == _LISTEN and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return tuple(sorted(ports))
