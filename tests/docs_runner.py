"""Run fenced blocks of the docs as a reader would paste them, inside a network namespace of
their own (``unshare -n``, entered by tests/test_docs.py), so that ``ws://127.0.0.1:8765`` is
free whatever else the machine runs.

    python docs_runner.py SETTING DIRECTORY...

Each DIRECTORY holds one block, ``block.sh`` or ``block.py``; it runs there, one after another,
with ``sh -e`` or this Python, and its exit status and output are left beside it (``status``,
``output``). SETTING is what the blocks' marker asks for (docs/contributing.md, "Runnable
examples"): ``alone``: nothing; ``server``: ``execproto serve --listen ws://127.0.0.1:8765``
running, as ``make serve`` runs it; ``server with token``: the same with ``--auth-token-file
token``, the file in every block's directory. The server is stopped after the last block.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import selectors
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

URL = "ws://127.0.0.1:8765"
SETTINGS = {"alone": None, "server": [], "server with token": ["--auth-token-file", "token"]}
RUNNERS = {"block.sh": ["sh", "-e"], "block.py": [sys.executable]}
BLOCK_SECONDS = 30.0  # a runnable block is quick: this bounds a hung one
READY_SECONDS = 30.0

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up() -> None:
    """``ip link set lo up`` without iproute2: a new network namespace's loopback is down."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


def start_server(flags: list[str], places: list[Path]) -> subprocess.Popen[bytes]:
    """The server the blocks expect, once it listens (it prints its address when it does)."""
    if flags:
        token = secrets.token_hex(32) + "\n"
        for place in (Path(), *places):
            (place / "token").write_text(token)
            os.chmod(place / "token", 0o600)
    server = subprocess.Popen(["execproto", "serve", "--listen", URL, *flags],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert server.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(server.stdout, selectors.EVENT_READ)
        ready = selector.select(READY_SECONDS) and server.stdout.readline().decode().strip()
    if ready != URL:
        server.kill()
        sys.exit(f"the server did not start on {URL} (it printed {ready!r})")
    return server


def run(place: Path) -> None:
    (block,) = [name for name in RUNNERS if (place / name).exists()]
    with open(place / "output", "wb") as output:
        try:
            status = subprocess.run([*RUNNERS[block], block], cwd=place, stdout=output,
                                    stderr=subprocess.STDOUT, timeout=BLOCK_SECONDS).returncode
        except subprocess.TimeoutExpired:
            output.write(f"the block ran over {BLOCK_SECONDS:g} s\n".encode())
            status = 124
    (place / "status").write_text(str(status))


def main() -> int:
    setting, *places = sys.argv[1:]
    loopback_up()
    flags = SETTINGS[setting]
    server = None if flags is None else start_server(flags, [Path(p) for p in places])
    try:
        for place in places:
            run(Path(place))
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
