"""Replays the attacks of issues 16, 22 and 32 at a live server, each for a bounded time.

For each adapter: a server on loopback with a bearer token (and ``--sandbox bwrap`` where
bubblewrap runs, see ``--sandbox``), then one attack after another. While an attack runs, the
server's RSS, descriptors and threads are sampled every 0.1 s, and a well-behaved probe client
does one round after another: connect, initialize, ``fs/getMetadata`` of /tmp, start ``true``
and wait for ``process/closed``. Each round is timed (connecting included), and so is the
getMetadata call on its own, so that a starved fs pool shows. When the attackers leave, the
server gets 10 s, and its RSS and descriptors are measured again (the RSS when the attack began
is shown too: what an earlier attack left is not this one's).

Targets: the server survives every attack, peak RSS under 600 MB, the probe's p99 round under
1 s (the worst round is reported too, but not judged: one slow round in a hundred is allowed),
RSS within 50 MB of what it was when the attack began (after every attack, of the adapter's
baseline), descriptors within 4 of the baseline after, and what an attack checks itself (the
pre-auth flood: 90 % of honest clients get in). What the server keeps by design for 30 s (the
retained-output attack's detached session and closed output) is measured after 35 s.

The managed-proxy and port-forwarding attacks (`NETWORK_ATTACKS`) each run at a server of their
own, started with ``--allow-network`` (the others' servers give sandboxes no network), and time
what an honest program of another session sees meanwhile (target: its p99 under 1 s too). They
need bubblewrap (the forward flood, pasta too) and say why they are skipped without it; their
sessions' networks live on for the session TTL, so they are measured after 35 s as well.

    .venv/bin/python bench/attack.py [--adapters asyncio,trio,threads] [--seconds 10]
                                     [--only SUBSTRING] [--list] [--sandbox auto|bwrap|none]

Loopback only. Prints one markdown table, an attack's own findings as ``<!-- ... -->`` lines
under its row; exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import base64
import http.server
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

TOKEN = "attack-bench-token"
SETTLE = 10.0  # seconds after the attackers leave before RSS is measured again
# Attacks whose leftovers the server keeps by design for 30 s (a detached session's processes,
# closed output readable for closed_ttl): measured after those have run out.
LONG_SETTLE = 35.0
KEPT_30_S = ("retained output, 1,500 x 1 MiB", "processes left behind, 4 x 256 sleep",
             "proxy hoard, 10 x 100 idle connections", "forward flood, every stream pumped")
RSS_LIMIT, PROBE_LIMIT, AFTER_LIMIT, FDS_SLACK = 600.0, 1.0, 50.0, 4
MIB = 1 << 20
PROBE_PAUSE = 0.05  # between probe rounds
# The servers' --writable-root (under --sandbox bwrap), where the sandbox-setup attack's
# missing paths get placeholders made on the host; set by main().
WRITABLE = Path(tempfile.gettempdir())


# -- a minimal client: frames with a zero mask, parsed by hand ------------------------------------


def frame_head(n: int, opcode: int = 0x1, fin: bool = True) -> bytes:
    first = (0x80 if fin else 0) | opcode
    if n < 126:
        head = struct.pack("!BB", first, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", first, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", first, 0x80 | 127, n)
    return head + b"\0\0\0\0"


def frame(payload: bytes, opcode: int = 0x1, fin: bool = True) -> bytes:
    return frame_head(len(payload), opcode, fin) + payload


def upgrade(token: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (f"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Authorization: Bearer {token}\r\n\r\n").encode()


def rpc(msg_id: int, method: str, params: object) -> bytes:
    return frame(json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method,
                             "params": params}).encode())


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname == "127.0.0.1" and parts.port
    return parts.hostname, parts.port


def uri(path: str | Path) -> str:
    return Path(path).as_uri()


def upgraded(url: str, timeout: float = 30.0,
             source: str | None = None) -> tuple[socket.socket, bytes]:
    """A socket past its websocket upgrade (the valid token), and what came after the 101;
    from the loopback address ``source`` if given (another host, to the server)."""
    sock = socket.create_connection(address(url), timeout=timeout,
                                    source_address=(source, 0) if source else None)
    try:
        sock.sendall(upgrade(TOKEN))
        got = b""
        while b"\r\n\r\n" not in got:
            data = sock.recv(4096)
            if not data:
                raise EOFError("closed during the upgrade")
            got += data
        head, _, rest = got.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise EOFError(head.split(b"\r\n")[0].decode(errors="replace"))
        return sock, rest
    except BaseException:
        sock.close()
        raise


def hang_up(sock: socket.socket) -> None:
    """Closes at once; a shutdown first, so that a thread blocked sending on it wakes up."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class Client:
    """Blocking; reads frames one by one; answers pings. A read that times out (the socket's
    timeout) raises TimeoutError and loses nothing: the frame is taken once it is whole."""

    def __init__(self, url: str, timeout: float = 30.0, initialize: bool = True,
                 source: str | None = None) -> None:
        self.sock, rest = upgraded(url, timeout, source)
        self.buf = bytearray(rest)
        self.lock = threading.Lock()  # sends come from more than one thread in some attacks
        self.ids = 0
        if initialize:
            reply = self.call("initialize", {"clientName": "attack"})
            assert "result" in reply, reply
            self.send(frame(b'{"jsonrpc":"2.0","method":"initialized","params":{}}'))

    def send(self, data: bytes) -> None:
        with self.lock:
            self.sock.sendall(data)

    def _fill(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise EOFError("closed by the server")
        self.buf += data

    def _frame(self) -> tuple[int, bytes] | None:
        """The next whole frame in the buffer, taken out of it; None if there is none yet."""
        buf = self.buf
        if len(buf) < 2:
            return None
        n, at = buf[1] & 0x7F, 2
        if n == 126:
            if len(buf) < 4:
                return None
            n, at = struct.unpack_from("!H", buf, 2)[0], 4
        elif n == 127:
            if len(buf) < 10:
                return None
            n, at = struct.unpack_from("!Q", buf, 2)[0], 10
        if len(buf) < at + n:
            return None
        opcode, payload = buf[0] & 0x0F, bytes(buf[at:at + n])
        del buf[:at + n]
        return opcode, payload

    def text(self) -> bytes:
        """The next text message, unparsed."""
        while True:
            got = self._frame()
            if got is None:
                self._fill()
                continue
            opcode, payload = got
            if opcode == 0x9:
                self.send(frame(payload, 0xA))
            elif opcode == 0x8:
                raise EOFError(f"closed by the server: {payload[:2].hex()} {payload[2:80]!r}")
            elif opcode == 0x1:
                return payload

    def message(self) -> dict[str, Any]:
        """The next message; ``process/output`` notifications are skipped unparsed: the
        attackers share the machine's two cores with the server, and parsing 40 MB/s of output
        nobody looks at would slow the probe for reasons that are the bench's, not the
        server's."""
        while True:
            text = self.text()
            if b'"method":"process/output"' not in text[:64]:
                return json.loads(text)  # type: ignore[no-any-return]

    def request(self, method: str, params: object) -> int:
        self.ids += 1
        self.send(rpc(self.ids, method, params))
        return self.ids

    def call(self, method: str, params: object) -> dict[str, Any]:
        msg_id = self.request(method, params)
        while True:
            message = self.message()
            if message.get("id") == msg_id:
                return message

    def start(self, process_id: str, argv: list[str], **extra: object) -> None:
        reply = self.call("process/start", start_params(process_id, argv, extra))
        assert "result" in reply, reply

    def until_closed(self, process_id: str) -> None:
        while True:
            message = self.message()
            if closed_id(message) == process_id:
                return


def start_params(process_id: str, argv: list[str], extra: dict[str, object] | None = None
                 ) -> dict[str, object]:
    params: dict[str, object] = {
        "processId": process_id, "argv": argv, "cwd": "file:///tmp", "tty": False,
        "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}}
    params.update(extra or {})
    return params


def closed_id(message: dict[str, Any]) -> str | None:
    """The processId of a process/closed notification, else None."""
    params = message.get("params")
    if message.get("method") == "process/closed" and isinstance(params, dict):
        return params.get("processId")
    return None


def error_text(reply: dict[str, Any]) -> str:
    error = reply.get("error")
    if isinstance(error, dict):
        return f"{error.get('code')} {str(error.get('message'))[:80]}"
    return str(error)[:80]


def profile(workspace: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """A Codex 0.171 permission profile (``sandbox`` of process/start) restricting the file
    system to ``entries``, without the network."""
    return {
        "permissions": {"type": "managed",
                        "file_system": {"type": "restricted", "entries": entries},
                        "network": "restricted"},
        "cwd": uri(workspace),
        "workspaceRoots": [uri(workspace)],
        "windowsSandboxLevel": "disabled",
        "windowsSandboxProxySettingsMode": "reconcile",
        "useLegacyLandlock": False,
    }


ROOT_READ = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
WALK = {"maxDepth": 64, "maxDirectories": 10_000, "maxEntries": 50_000,
        "followDirectorySymlinks": False}


# -- the server and what is measured --------------------------------------------------------------


class Server:
    def __init__(self, adapter: str, token_file: Path, sandbox: str,
                 allow_network: bool = False) -> None:
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "execproto.adapters", "serve", "--listen", "ws://127.0.0.1:0",
             "--adapter", adapter, "--auth-token-file", str(token_file), "--kill-grace", "0.5",
             "--sandbox", sandbox, "--log-level", "ERROR",
             *(("--writable-root", str(WRITABLE)) if sandbox == "bwrap" else ()),
             *(("--allow-network",) if allow_network else ()),
             "--drain-grace", "0"],  # the attacks leave processes running at the stop
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith("ws://"), self.logged()
        self.pid = self.process.pid

    def logged(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def _status(self, key: str) -> int:
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith(key):
                    return int(line.split()[1])
        return 0

    def rss(self) -> float:
        return self._status("VmRSS:") / 1024

    def threads(self) -> int:
        return self._status("Threads:")

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> int:
        self.process.terminate()
        try:
            return self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return -9


@dataclass
class Note:
    """What an attack found itself, printed under its row; ``met`` False misses a target."""
    text: str
    met: bool = True


@dataclass
class Result:
    attack: str
    peak_rss: float = 0.0
    peak_fds: int = 0
    peak_threads: int = 0
    rounds: list[float] = field(default_factory=list)  # each probe round, in seconds
    worst_metadata: float = 0.0
    probe_failures: list[str] = field(default_factory=list)
    rss_before: float = 0.0  # when the attack began: what an earlier attack left shows
    rss_after: float = 0.0
    fds_after: int = 0
    survived: bool = True
    notes: list[Note] = field(default_factory=list)


def percentile(values: list[float], fraction: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def watch(server: Server, result: Result, stop: threading.Event) -> None:
    while not stop.is_set() and server.alive():
        try:
            result.peak_rss = max(result.peak_rss, server.rss())
            result.peak_fds = max(result.peak_fds, server.fds())
            result.peak_threads = max(result.peak_threads, server.threads())
        except OSError:
            break
        stop.wait(0.1)


def probe_round(url: str, result: Result) -> None:
    """Connect, initialize, fs/getMetadata of /tmp (timed on its own), start `true`, closed."""
    client = Client(url, timeout=10)
    try:
        asked = time.monotonic()
        try:
            reply = client.call("fs/getMetadata", {"path": "file:///tmp"})
        finally:
            result.worst_metadata = max(result.worst_metadata, time.monotonic() - asked)
        assert "result" in reply, reply
        client.start("probe", ["true"])
        client.until_closed("probe")
    finally:
        client.sock.close()


def probe(server: Server, result: Result, stop: threading.Event) -> None:
    while not stop.is_set():
        began = time.monotonic()
        try:
            probe_round(server.url, result)
        except Exception as exc:  # noqa: BLE001 (reported, not raised: the table says)
            result.probe_failures.append(f"{type(exc).__name__}: {exc}")
        result.rounds.append(time.monotonic() - began)
        stop.wait(PROBE_PAUSE)


# -- helpers of the attacks ----------------------------------------------------------------------


def run_threads(target: Callable[[], None], count: int, stop: threading.Event) -> None:
    threads = [threading.Thread(target=target, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    stop.wait()
    for thread in threads:
        thread.join(10)


def send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.settimeout(None)
        sock.sendall(data)
    except OSError:
        pass


def in_background(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


class Tally:
    """Answers counted by kind (a result's status, or an error's code and message)."""

    def __init__(self) -> None:
        self.kinds: dict[str, int] = {}
        self.lock = threading.Lock()

    def add(self, reply: dict[str, Any]) -> None:
        if "error" in reply:
            kind = error_text(reply)
        else:
            result = reply.get("result")
            status = result.get("status") if isinstance(result, dict) else None
            kind = f"result {status}" if status else "result"
        with self.lock:
            self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def __str__(self) -> str:
        with self.lock:
            return "; ".join(f"{n} x {kind}" for kind, n in self.kinds.items()) or "no answers"


def drain(client: Client, tally: Tally) -> None:
    """Reads every message until the connection ends, counting the answers."""
    try:
        while True:
            message = client.message()
            if "id" in message:
                tally.add(message)
    except (OSError, EOFError, ValueError):
        pass


def start_many(url: str, stop: threading.Event, total: int, window: int, argv: list[str],
               extra: dict[str, object] | None = None) -> Note:
    """Starts ``argv`` ``total`` times (or until stop) on one connection, with at most
    ``window`` processes not yet closed (or refused); reads every answer and close."""
    client = Client(url)
    client.sock.settimeout(0.5)
    tally, sent, closed = Tally(), 0, 0
    pending: set[str] = set()  # the processIds neither closed nor refused
    began = time.monotonic()
    ending = ""
    try:
        while not stop.is_set() and (sent < total or pending):
            while sent < total and len(pending) < window:
                sent += 1
                client.send(rpc(sent, "process/start", start_params(f"p{sent}", argv, extra)))
                pending.add(f"p{sent}")
            try:
                message = client.message()
            except TimeoutError:
                continue
            if "id" in message:
                tally.add(message)
                if "error" in message:
                    pending.discard(f"p{message['id']}")
            elif closed_id(message) in pending:
                pending.discard(closed_id(message))
                closed += 1
    except (OSError, EOFError) as exc:
        ending = f"; the connection ended: {type(exc).__name__} {exc}"
    finally:
        hang_up(client.sock)
    took = time.monotonic() - began
    return Note(f"{sent} starts sent in {took:.1f} s, {closed} closed; answers: {tally}{ending}")


# -- the attacks: each runs until `stop` (or its count) and cleans up after itself ---------------


def half_open(url: str, stop: threading.Event) -> None:
    """1,100 connections that never finish their upgrade, reopened as the server closes them."""
    socks = []
    for i in range(1100):
        if stop.is_set():
            break
        try:
            sock = socket.create_connection(address(url), timeout=5)
            if i % 2:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            socks.append(sock)
        except OSError:
            pass
    stop.wait()
    for sock in socks:
        sock.close()


def wrong_tokens(url: str, stop: threading.Event) -> None:
    """50 guessers, each trying a wrong token as fast as it is answered."""
    def guess() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(address(url), timeout=5) as sock:
                    sock.sendall(upgrade("wrong"))
                    sock.recv(4096)
            except OSError:
                pass

    run_threads(guess, 50, stop)


def unread_answers(url: str, stop: threading.Event) -> None:
    """3,000 process/read calls of a full MiB each (1.33 MB answers), never read."""
    client = Client(url)
    client.start("big", ["head", "-c", str(MIB), "/dev/urandom"])
    client.until_closed("big")
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    frames = b"".join(rpc(10 + i, "process/read", {"processId": "big"}) for i in range(3000))
    in_background(lambda: send_quietly(client.sock, frames))
    stop.wait()
    hang_up(client.sock)


def hung_http(url: str, stop: threading.Event) -> None:
    """40 http/request calls to a loopback listener that never answers, then fs calls."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(128)
    target = f"http://127.0.0.1:{silent.getsockname()[1]}/"
    client = Client(url)
    for i in range(40):
        client.send(rpc(100 + i, "http/request", {
            "method": "GET", "url": target, "requestId": f"h{i}", "headers": []}))
    stop.wait()
    hang_up(client.sock)
    silent.close()


def ping_flood(url: str, stop: threading.Event) -> None:
    """Pings as fast as they go, their pongs never read, from 4 connections, reconnecting."""
    ping = frame(b"x" * 125, 0x9) * 256

    def flood() -> None:
        while not stop.is_set():
            try:
                client = Client(url)
                client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
                client.sock.settimeout(1)
                while not stop.is_set():
                    client.sock.sendall(ping)
            except (OSError, EOFError, AssertionError):
                pass

    run_threads(flood, 4, stop)


def fragments(url: str, stop: threading.Event) -> None:
    """3M one-byte fragments of one message, reconnecting when closed."""
    batch = frame(b" ", 0x1, fin=False) + frame(b" ", 0x0, fin=False) * 65535

    def flood() -> None:
        while not stop.is_set():
            try:
                client = Client(url)
                client.sock.settimeout(1)
                for _ in range(3_000_000 // 65536):
                    if stop.is_set():
                        break
                    client.sock.sendall(batch)
                client.sock.close()
            except (OSError, EOFError, AssertionError):
                pass

    run_threads(flood, 2, stop)


def fs_open_leak(url: str, stop: threading.Event) -> None:
    """Issue 22, fs/open after a hang-up: 10 rounds of 4 walks of /usr (they kept the one fs pool
    busy; walks now have threads of their own) and 128 fs/open calls, which queue behind the
    connection's share of the fs pool, then the client hangs up without reading. An open that
    runs after its connection is gone must not keep its descriptor (`fds after`)."""
    with tempfile.TemporaryDirectory(prefix="attack-open-") as tmp:
        target = Path(tmp) / "file"
        target.write_text("contents\n")
        for round_ in range(10):
            if stop.is_set():
                break
            client = Client(url)
            for _ in range(4):
                client.request("fs/walk", {"path": "file:///usr", "options": WALK})
            for number in range(128):
                client.request("fs/open", {"handleId": f"h{round_}-{number}",
                                           "path": uri(target)})
            hang_up(client.sock)
            stop.wait(0.5)
        stop.wait()


def still_open(sock: socket.socket) -> bool:
    """Whether the server has not closed a (non-blocking) socket: nothing to read, or a ping."""
    try:
        data = sock.recv(65536)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return bool(data) and data[0] & 0x0F != 0x8


def connection_hog(url: str, stop: threading.Event) -> Note:
    """Issue 22, connection hog: as many websocket connections as the server admits (upgraded
    with the valid token, never initialized), reopened as they are closed; 300 at most."""
    held: list[socket.socket] = []
    tried = refused = most = 0
    try:
        while not stop.is_set():
            for _ in range(min(50, 300 - len(held))):  # at most 50 new ones per 0.2 s
                if stop.is_set():
                    break
                tried += 1
                try:
                    sock, _ = upgraded(url, timeout=2)
                except (OSError, EOFError):
                    refused += 1
                    continue
                sock.setblocking(False)
                held.append(sock)
            for sock in [sock for sock in held if not still_open(sock)]:
                sock.close()
                held.remove(sock)
            most = max(most, len(held))
            stop.wait(0.2)
    finally:
        for sock in held:
            sock.close()
    return Note(f"{tried} upgrades tried, {refused} refused, at most {most} held at once")


def pre_auth_flood(url: str, stop: threading.Event) -> Note:
    """Issue 22, pre-auth flood: 300 half-open upgrades a second (a TCP connect and part of a
    request) while honest clients (the whole upgrade, the valid token, initialize) try 10 a
    second, each given 5 s. Target: 90 % of the honest clients get in."""
    tried, admitted = [0], [0]
    lock = threading.Lock()

    def honest() -> None:
        try:
            Client(url, timeout=5).sock.close()
            ok = 1
        except (OSError, EOFError, AssertionError, ValueError):
            ok = 0
        with lock:
            tried[0] += 1
            admitted[0] += ok

    half: deque[tuple[float, socket.socket]] = deque()
    honest_threads = []
    began, tick = time.monotonic(), 0
    while not stop.is_set():
        tick += 1
        honest_threads.append(in_background(honest))
        for _ in range(30):
            try:
                sock = socket.create_connection(address(url), timeout=1)
                sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n")
                half.append((time.monotonic(), sock))
            except OSError:
                pass
        while half and half[0][0] < time.monotonic() - 15:  # the server's 10 s, and more
            half.popleft()[1].close()
        stop.wait(max(0.0, began + tick * 0.1 - time.monotonic()))
    for thread in honest_threads:
        thread.join(6)
    for _, sock in half:
        sock.close()
    ratio = admitted[0] / tried[0] if tried[0] else 0.0
    return Note(f"honest clients: {admitted[0]} of {tried[0]} got in ({ratio:.0%}, target 90 %); "
                f"{tick * 30} half-open sent", met=ratio >= 0.9)


def deny_glob_setup(url: str, stop: threading.Event) -> Note:
    """Issue 22, deny-glob setup stall: process/start of `true` under a sandbox with 254 deny
    globs (`**/x{i}*.env`, from a cwd of /usr), each expanded over the tree when the sandbox is
    set up; 4 at a time, 1,000 at most."""
    globs = [{"path": {"type": "glob_pattern", "pattern": f"**/x{i}*.env"}, "access": "none"}
             for i in range(254)]
    sandbox = profile("/usr", [ROOT_READ, *globs])
    return start_many(url, stop, total=1000, window=4, argv=["true"],
                      extra={"sandbox": sandbox, "cwd": "file:///usr"})


def long_subpath_setup(url: str, stop: threading.Event) -> Note:
    """Issue 22, long subpath setup: process/start of `true` under a sandbox with a 48 KB
    subpath of the project root (past PATH_MAX); 4 at a time, 1,000 at most."""
    with tempfile.TemporaryDirectory(prefix="attack-subpath-") as tmp:
        subpath = "/".join(["s" * 255] * 188)  # 48 KB
        entries = [ROOT_READ,
                   {"path": {"type": "special",
                             "value": {"kind": "project_roots", "subpath": subpath}},
                    "access": "read", "missing_path_behavior": "skip"}]
        return start_many(url, stop, total=1000, window=4, argv=["true"],
                          extra={"sandbox": profile(tmp, entries)})


def missing_paths_setup(url: str, stop: threading.Event) -> Note:
    """Issue 22, missing paths setup: process/start of `true` under a sandbox with 254 denied
    4 KB paths that do not exist (components of 255 bytes, each under PATH_MAX); 4 at a time,
    1,000 at most. Under a temporary directory, removed after."""
    with tempfile.TemporaryDirectory(prefix="attack-missing-") as tmp:
        deep = "/".join(["m" * 255] * 15)  # 4 KB with its directory: under PATH_MAX
        entries = [ROOT_READ]
        entries += [{"path": {"type": "path", "path": uri(f"{tmp}/missing-{i}/{deep}")},
                     "access": "none"} for i in range(254)]
        return start_many(url, stop, total=1000, window=4, argv=["true"],
                          extra={"sandbox": profile(tmp, entries)})


def prep_sessions(url: str, stop: threading.Event) -> Note:
    """Issue 32, sandbox setup shared: four sessions, 6 starts in flight each, 600 at most:
    two of `true` under the dearest sandbox the budget allows (60 missing paths under the
    writable root, placeholders made on the host; 70 rules 120 components deep; 120 deny
    patterns looking at ~46,000 entries), two past it (254 missing 4 KB paths)."""
    with tempfile.TemporaryDirectory(prefix="attack-prep-", dir=WRITABLE) as tmp:
        (Path(tmp) / "tree").mkdir()
        for i in range(190):
            (Path(tmp) / "tree" / f"f{i}").touch()
        writable = [ROOT_READ, {"path": {"type": "special", "value": {"kind": "project_roots"}},
                                "access": "write"}]
        deep = "/".join(["a"] * 120)
        costly = [*writable, *({"path": {"type": "path", "path": uri(f"{tmp}/p{i}-{'q' * 200}")},
                                "access": "none"} for i in range(60)),
                  *({"path": {"type": "path", "path": uri(f"/nonexistent-{i}/{deep}")},
                     "access": "read"} for i in range(70)),
                  *({"path": {"type": "glob_pattern", "pattern": f"{tmp}/tree/**/x{i}*.env"},
                     "access": "none"} for i in range(120))]
        long = "/".join(["m" * 255] * 15)
        past = [*writable, *({"path": {"type": "path", "path": uri(f"{tmp}/s{i}/{long}")},
                              "access": "none"} for i in range(254))]
        notes: list[Note] = []

        def session(entries: list[dict[str, Any]]) -> None:
            notes.append(start_many(url, stop, total=600, window=6, argv=["true"],
                                    extra={"sandbox": profile(tmp, entries), "cwd": uri(tmp)}))

        threads = [threading.Thread(target=session, args=(entries,), daemon=True)
                   for entries in (costly, costly, past, past)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        for _ in range(100):  # the last sandboxes' cleanups, after their sessions left
            left = [name for name in os.listdir(tmp) if name != "tree"]
            if not left:
                break
            time.sleep(0.1)
    return Note("; ".join(note.text for note in notes)
                + f"; placeholders left on the host: {len(left)}", met=not left)


def start_flood(url: str, stop: threading.Event) -> Note:
    """Issue 22, start flood: `true` started as fast as answered, 16 at a time, 10,000 in all,
    every processId new; the closes read."""
    return start_many(url, stop, total=10_000, window=16, argv=["true"])


def huge_json(url: str, stop: threading.Event) -> Note:
    """Issue 22, huge JSON message: one 57 MiB message, a JSON array of empty objects (a batch
    of 19M requests), sent 3 times, on a new connection each time; never read."""
    count = 57 * MIB // 3
    payload = b"[" + b"{}," * (count - 1) + b"{}]"
    head = frame_head(len(payload))
    endings = []
    for _ in range(3):
        if stop.is_set():
            break
        try:
            client = Client(url)
        except (OSError, EOFError, AssertionError) as exc:
            endings.append(f"connect {type(exc).__name__}")
            continue
        client.sock.settimeout(5)
        try:
            client.sock.sendall(head)
            for at in range(0, len(payload), MIB):
                if stop.is_set():
                    break
                client.sock.sendall(payload[at:at + MIB])
            endings.append("sent")
        except OSError as exc:
            endings.append(type(exc).__name__)
        stop.wait(2)
        hang_up(client.sock)
    return Note(f"{len(payload) / MIB:.0f} MiB messages: {', '.join(endings)}")


def retained_output(url: str, stop: threading.Event) -> Note:
    """Issue 22, retained output: 1,500 processes each writing 1 MiB (`head -c 1048576
    /dev/zero`) and closing, 16 at a time, their output never read."""
    return start_many(url, stop, total=1500, window=16,
                      argv=["head", "-c", str(MIB), "/dev/zero"])


def unread_fs_answers(url: str, stop: threading.Event) -> None:
    """Issue 22, unread fs answers: 90 fs/readFile of a 16 MiB file (22 MB answers) pipelined
    on a connection with a small receive buffer, never read."""
    with tempfile.TemporaryDirectory(prefix="attack-read-") as tmp:
        big = Path(tmp) / "big"
        big.write_bytes(b"\0" * (16 * MIB))
        client = Client(url)
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        frames = b"".join(rpc(10 + i, "fs/readFile", {"path": uri(big)}) for i in range(90))
        in_background(lambda: send_quietly(client.sock, frames))
        stop.wait()
        hang_up(client.sock)


def stdin_backlog(url: str, stop: threading.Event) -> Note:
    """Issue 22, stdin backlog: `sleep 1000` started with a stdin pipe it never reads, and
    process/write of 1 MiB chunks (base64) as fast as they are taken, 1 GiB at most; the
    answers read. The process terminated after."""
    chunk = base64.b64encode(b"\0" * MIB).decode()
    return write_flood(url, stop, count=1024, make=lambda i: {
        "processId": "sleeper", "chunk": chunk, "writeId": f"w{i}"})


def huge_write_ids(url: str, stop: threading.Event) -> Note:
    """Issue 22, huge writeIds: process/write of one byte with a 24 MiB writeId, each different
    (kept for idempotence?), to `sleep 1000` with a stdin pipe; 100 at most."""
    filler = "x" * (24 * MIB)
    return write_flood(url, stop, count=100, make=lambda i: {
        "processId": "sleeper", "chunk": "eA==", "writeId": f"{i:04d}{filler}"})


def write_flood(url: str, stop: threading.Event, count: int,
                make: Callable[[int], dict[str, object]]) -> Note:
    """``count`` process/write calls (params ``make(i)``) to a `sleep 1000` that never reads
    its stdin, sent as fast as the server takes them; answers read by another thread."""
    client = Client(url)
    client.start("sleeper", ["sleep", "1000"], pipeStdin=True)
    tally = Tally()
    reader = in_background(lambda: drain(client, tally))
    sent, began, ending = 0, time.monotonic(), ""
    client.sock.settimeout(None)
    try:
        for i in range(count):
            if stop.is_set():
                break
            client.send(rpc(100 + i, "process/write", make(i)))
            sent += 1
    except OSError as exc:
        ending = f"; sending ended: {type(exc).__name__} {exc}"
    took = time.monotonic() - began
    stop.wait()
    try:
        client.sock.settimeout(2)
        client.send(rpc(1, "process/terminate", {"processId": "sleeper"}))
        time.sleep(1)  # for the terminate to arrive before the hang-up
    except OSError:
        pass
    hang_up(client.sock)
    reader.join(5)
    return Note(f"{sent} writes sent in {took:.1f} s; answers: {tally}{ending}")


def walks_then_leave(url: str, stop: threading.Event) -> None:
    """Issue 22, fs pool starvation: 60 fs/walk calls of /usr queued by a client that then
    hangs up; again every 2 s, 6 times at most."""
    for _ in range(6):
        if stop.is_set():
            break
        client = Client(url)
        for _ in range(60):
            client.request("fs/walk", {"path": "file:///usr", "options": WALK})
        hang_up(client.sock)
        stop.wait(2)
    stop.wait()


def walks_in_flight(url: str, stop: threading.Event) -> Note:
    """Issue 22, fs pool starvation (the client stays): 60 fs/walk calls of /usr kept in
    flight, a new one sent as each answer is read; 2,000 at most."""
    client = Client(url)
    client.sock.settimeout(0.5)
    sent = answered = 0
    try:
        while not stop.is_set() and answered < 2000:
            while sent - answered < 60 and sent < 2000:
                sent += 1
                client.request("fs/walk", {"path": "file:///usr", "options": WALK})
            try:
                client.text()  # only walk answers come: not parsed, to spare the bench's CPU
                answered += 1
            except TimeoutError:
                pass
    except (OSError, EOFError):
        pass
    finally:
        hang_up(client.sock)
    return Note(f"{sent} walks sent, {answered} answered")


def trickle(conn: socket.socket, stop: threading.Event) -> None:
    """An HTTP answer, one byte every 5 s, until stop."""
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 64\r\n\r\n" + b"x" * 64
    try:
        for at in range(len(answer)):
            if stop.wait(5):
                break
            conn.sendall(answer[at:at + 1])
    except OSError:
        pass
    finally:
        conn.close()


def trickling_server(listener: socket.socket, stop: threading.Event) -> None:
    listener.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        in_background(lambda conn=conn: trickle(conn, stop))  # type: ignore[misc]


def trickling_http(url: str, stop: threading.Event) -> None:
    """Issue 22, trickling http: 8 http/request calls to a loopback server (a thread here)
    that answers one byte every 5 s, so no call ever times out for lack of progress."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    server = in_background(lambda: trickling_server(listener, stop))
    target = f"http://127.0.0.1:{listener.getsockname()[1]}/"
    client = Client(url)
    for i in range(8):
        client.request("http/request", {"method": "GET", "url": target, "requestId": f"t{i}",
                                        "headers": []})
    stop.wait()
    hang_up(client.sock)
    server.join(2)
    listener.close()


def base64_before_initialize(url: str, stop: threading.Event) -> None:
    """Issue 22, base64 before initialize: a connection past its upgrade that never sends
    initialize sends 4 process/write messages of 45 MiB of base64 each."""
    sock, _ = upgraded(url)
    head = b'{"jsonrpc":"2.0","id":1,"method":"process/write","params":{"processId":"p",'
    body = b'"writeId":"w","chunk":"' + b"A" * (45 * MIB) + b'"}}'

    def send_all() -> None:
        try:
            for _ in range(4):
                sock.sendall(frame_head(len(head) + len(body)) + head)
                sock.sendall(body)
        except OSError:
            pass

    sender = in_background(send_all)
    stop.wait()
    hang_up(sock)
    sender.join(5)


# -- issue 32, item 7: handshakes cannot starve token holders -------------------------------------

ATTACKER = "127.0.0.2"  # Linux answers all of 127/8 on loopback: the attacker is another host
ADAPTER = ["asyncio"]  # the adapter under test, for the attacks that start a server of their own


def from_attacker(port: int, timeout: float = 1.0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.bind((ATTACKER, 0))
        sock.connect(("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    return sock


def honest_rounds(connect: Callable[[], None], stop: threading.Event,
                  what: Callable[[], str]) -> Note:
    """Honest clients, 10 a second until stop, each given 5 s by ``connect``: how many got in,
    and their p50 and p99, then ``what()`` the attack says of itself. Target: 90 % in."""
    times: list[float] = []
    tried = [0]
    lock = threading.Lock()

    def one() -> None:
        began = time.monotonic()
        try:
            connect()
        except (OSError, EOFError, AssertionError, ValueError):
            return
        finally:
            with lock:
                tried[0] += 1
        with lock:
            times.append(time.monotonic() - began)

    threads, began, tick = [], time.monotonic(), 0
    while not stop.is_set() and tick < 10_000:
        tick += 1
        threads.append(in_background(one))
        stop.wait(max(0.0, began + tick * 0.1 - time.monotonic()))
    for thread in threads:
        thread.join(6)
    ratio = len(times) / tried[0] if tried[0] else 0.0
    return Note(f"honest clients: {len(times)} of {tried[0]} got in ({ratio:.0%}, target 90 %), "
                f"p50 {percentile(times, 0.5):.3f} s, p99 {percentile(times, 0.99):.3f} s; "
                f"{what()}", met=ratio >= 0.9)


def client_hello() -> bytes:
    """Python's own ClientHello, captured once: replayed, each costs the server a signature."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    outgoing = ssl.MemoryBIO()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname="127.0.0.1")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def client_hello_flood(url: str, stop: threading.Event) -> Note:
    """Issue 32, item 7: canned ClientHellos from 127.0.0.2 (2 threads: connect, send, read a
    bit, close) at a wss:// server of the same adapter with an RSA-2048 key (cert-manager's
    default), started for this attack, while honest clients (TLS, the valid token,
    initialize) try 10 a second. The probe columns are the ws:// server's, not this one's."""
    import ssl

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-keyout", "key.pem", "-out", "cert.pem", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"],
                       cwd=tmp, check=True, capture_output=True, timeout=60)
        (Path(tmp) / "token").write_text(TOKEN + "\n")
        server = subprocess.Popen(
            [sys.executable, "-m", "execproto.adapters", "serve", "--listen",
             "wss://127.0.0.1:0", "--adapter", ADAPTER[0], "--tls-cert", f"{tmp}/cert.pem",
             "--tls-key", f"{tmp}/key.pem", "--auth-token-file", f"{tmp}/token",
             "--log-level", "ERROR", "--drain-grace", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline().strip().rsplit(":", 1)[1])
            context = ssl.create_default_context(cafile=f"{tmp}/cert.pem")
            hello = client_hello()
            counts = [0, 0]  # sent, answered with the server's first flight

            def flood() -> None:
                for _ in range(1_000_000):
                    if stop.is_set():
                        return
                    try:
                        with from_attacker(port) as sock:
                            sock.sendall(hello)
                            counts[1] += bool(sock.recv(4096))
                    except OSError:
                        pass
                    counts[0] += 1

            def honest() -> None:
                raw = socket.create_connection(("127.0.0.1", port), timeout=5)
                with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                    sock.sendall(upgrade(TOKEN))
                    got = b""
                    for want in (b"\r\n\r\n", b'"sessionId"'):  # the 101, then initialize
                        if want != b"\r\n\r\n":
                            assert got.startswith(b"HTTP/1.1 101"), got[:40]
                            sock.sendall(rpc(1, "initialize", {"clientName": "honest"}))
                        while want not in got:
                            more = sock.recv(65536)
                            if not more:
                                raise EOFError("closed by the server")
                            got += more

            attackers = [in_background(flood) for _ in range(2)]
            note = honest_rounds(honest, stop, lambda: f"{counts[0]} hellos sent, "
                                 f"{counts[1]} answered")
            for thread in attackers:
                thread.join(10)
            return note
        finally:
            server.terminate()
            server.wait(20)


def wrong_token_flood(url: str, stop: threading.Event) -> Note:
    """Issue 32, item 7: wrong tokens from 127.0.0.2 (2 threads), each connection left open
    for its late answer, 200 held at most per thread, while honest clients (the valid token,
    initialize) try 10 a second."""
    port = address(url)[1]
    sent = [0]

    def flood() -> None:
        held: deque[socket.socket] = deque()
        try:
            for _ in range(1_000_000):
                if stop.is_set():
                    return
                try:
                    sock = from_attacker(port)
                    sock.sendall(upgrade("wrong"))
                    held.append(sock)
                except OSError:
                    pass
                sent[0] += 1
                if len(held) > 200:
                    held.popleft().close()
        finally:
            for sock in held:
                sock.close()

    attackers = [in_background(flood) for _ in range(2)]
    note = honest_rounds(lambda: Client(url, timeout=5).sock.close(), stop,
                         lambda: f"{sent[0]} wrong tokens sent")
    for thread in attackers:
        thread.join(10)
    return note


Attack = Callable[[str, threading.Event], Note | None]
# -- issue 32, item 5: one client holds none of the server-wide caps others need ----------------


def address_hog(url: str, stop: threading.Event) -> Note:
    """Issue 32, item 5: initialized connections from 127.0.0.2, as many as the server admits
    (300 at most), reopened as they are closed. Target: the probe (from 127.0.0.1) gets in."""
    held: list[Client] = []
    tried = refused = most = 0
    try:
        while not stop.is_set():
            for _ in range(min(50, 300 - len(held))):
                if stop.is_set():
                    break
                tried += 1
                try:
                    held.append(Client(url, timeout=2, source=ATTACKER))
                except (OSError, EOFError, AssertionError):
                    refused += 1
            for client in [c for c in held if not still_open(c.sock)]:
                client.sock.close()
                held.remove(client)
            most = max(most, len(held))
            stop.wait(0.2)
    finally:
        for client in held:
            client.sock.close()
    return Note(f"{tried} connections tried, {refused} refused, at most {most} held at once")


def processes_left_behind(url: str, stop: threading.Event) -> Note:
    """Issue 32, item 5: 4 sessions from 127.0.0.2 start 256 `sleep 60` each, then leave
    (their sessions detach, the processes run on). Target: the probe still starts `true`."""
    started = refused = 0
    clients = []
    try:
        for _ in range(4):
            if stop.is_set():
                break
            client = Client(url, source=ATTACKER)
            clients.append(client)
            for n in range(256):
                reply = client.call("process/start", start_params(f"s{n}", ["sleep", "60"]))
                if "result" in reply:
                    started += 1
                else:
                    refused += 1
    finally:
        for client in clients:
            hang_up(client.sock)
    stop.wait()
    return Note(f"{started} sleeps started from {len(clients)} sessions, {refused} refused; "
                "the sessions left")


# -- issue 32, item 8: fs calls shared by cost, not count -----------------------------------------


def costly_walks(url: str, stop: threading.Event) -> Note:
    """Issue 32, item 8: 4 connections each keep 2 fs/walk calls in flight over a tree of
    20,000 entries, each carrying 250 deny patterns. Target: the probe's getMetadata."""
    tree = Path(tempfile.mkdtemp(prefix="attack-walk-", dir="/dev/shm"))
    for d in range(100):
        (tree / f"d{d}").mkdir()
        for f in range(199):
            (tree / f"d{d}" / f"f{f}").touch()
    patterns = [{"path": {"type": "glob_pattern", "pattern": f"**/x{i}*.env"},
                 "access": "deny"} for i in range(250)]
    params = {"path": uri(tree), "options": WALK,
              "sandbox": profile(str(tree), [ROOT_READ, *patterns])}
    answered = [0]
    lock = threading.Lock()

    def walker() -> None:
        client = Client(url)
        client.sock.settimeout(0.5)
        sent = done = 0
        try:
            while not stop.is_set() and done < 200:
                while sent - done < 2:
                    sent += 1
                    client.request("fs/walk", params)
                try:
                    client.text()
                    done += 1
                except TimeoutError:
                    pass
        except (OSError, EOFError):
            pass
        finally:
            hang_up(client.sock)
            with lock:
                answered[0] += done

    try:
        run_threads(walker, 4, stop)
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    return Note(f"{answered[0]} walks of 250 patterns answered")


# -- the managed proxy and port forwarding: one session's load, another session's latency ------

SANDBOX_MODE = ["none"]  # the servers' --sandbox, set by main()
# A sandbox in its session's network (pasta), reading everything, writing nothing.
NETWORK_SANDBOX: dict[str, Any] = {
    **profile("/tmp", [ROOT_READ]),
    "permissions": {"type": "managed", "network": "enabled",
                    "file_system": {"type": "restricted", "entries": [ROOT_READ]}}}
# The managed proxy, letting its process reach the bench's origin on the host's loopback only.
LOCAL_PROXY: dict[str, Any] = {
    "enabled": True, "enableSocks5": True, "enableSocks5Udp": False, "allowUpstreamProxy": False,
    "dangerouslyAllowAllUnixSockets": False, "mode": "full", "allowLocalBinding": True,
    "domains": {"localhost": "allow", "127.0.0.1": "allow"}, "unixSockets": None}
_FORWARD_DATA = re.compile(rb'"streamId":(\d+),"seq":(\d+),"dataBase64":"')

# Holds as many idle connections to its HTTP proxy as it can (argv[1] at most), reopening those
# the proxy closes (it gives a connection 10 s to send its request); a line of counts a second.
HOARD = r"""
import os, select, socket, sys, time
port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
want, until = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
held, opened, closed, said = [], 0, 0, 0.0
while time.monotonic() < until:
    while len(held) < want:
        try:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=1))
            opened += 1
        except OSError:
            break
    ready = select.select(held, [], [], 0.2)[0] if held else time.sleep(0.2) or []
    for sock in ready:
        try:
            gone = not sock.recv(4096)
        except OSError:
            gone = True
        if gone:
            sock.close()
            held.remove(sock)
            closed += 1
    if time.monotonic() - said >= 1:
        said = time.monotonic()
        print("held", len(held), "opened", opened, "closed", closed, flush=True)
"""
# An honest program: GETs argv[1] through its HTTP proxy one after another (a new connection
# each, as urllib would; a raw socket, since NO_PROXY names the loopback), printing each time.
TIMED_GETS = r"""
import os, socket, sys, time
proxy = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
request = ("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
           % (sys.argv[1], sys.argv[1].split("/")[2])).encode()
until = time.monotonic() + float(sys.argv[2])
while time.monotonic() < until:
    began = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", proxy), timeout=20) as sock:
            sock.settimeout(20)
            sock.sendall(request)
            got = b""
            while b"\r\n\r\n" not in got:
                more = sock.recv(65536)
                if not more:
                    raise EOFError("closed before the answer's head")
                got += more
            head, _, body = got.partition(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise EOFError(head.split(b"\r\n")[0].decode())
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(body) < length:
                more = sock.recv(65536)
                if not more:
                    raise EOFError("closed in the body")
                body += more
        print("took", time.monotonic() - began, flush=True)
    except Exception as exc:
        print("failed", time.monotonic() - began, type(exc).__name__, exc, flush=True)
    time.sleep(0.02)
"""
# A dev server on 127.0.0.1:argv[1] in the session's network. "pump": each connection is sent
# 64 KiB blocks as fast as taken and what it sends is read and dropped; "small": each is
# answered a 2-byte HTTP response, then closed. Ends after argv[3] seconds.
DEV_SERVER = r"""
import socket, sys, threading, time
port, mode, lifetime = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
block = b"x" * 65536
def pump(conn):
    def send():
        try:
            while True:
                conn.sendall(block)
        except OSError:
            pass
    threading.Thread(target=send, daemon=True).start()
    try:
        while conn.recv(1 << 20):
            pass
    except OSError:
        pass
    conn.close()
def small(conn):
    try:
        got = b""
        while b"\r\n\r\n" not in got:
            more = conn.recv(4096)
            if not more:
                break
            got += more
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    except OSError:
        pass
    conn.close()
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(128)
print("listening", flush=True)
threading.Timer(lifetime, lambda: __import__("os")._exit(0)).start()
while True:
    conn, _ = listener.accept()
    threading.Thread(target=pump if mode == "pump" else small, args=(conn,), daemon=True).start()
"""
DEV_PORT = 3000


def network_problem(needs_pasta: bool) -> str | None:
    """Why an attack needing a sandbox (and with ``needs_pasta`` a session network) cannot
    run here, or None."""
    if SANDBOX_MODE[0] != "bwrap":
        return "the server runs with --sandbox none (bubblewrap does not run here)"
    if needs_pasta and shutil.which("pasta") is None:
        return "pasta is not installed: sandboxes get no session network to forward into"
    return None


class Session:
    """A `Client` read by a thread of its own: each reply goes to its caller (`call`) or its
    callback (`request`); ``forward/data`` to ``on_data(stream, seq, text)`` unparsed; the
    other messages, parsed, to ``on_message``."""

    def __init__(self, url: str) -> None:
        self.client = Client(url)
        self.client.sock.settimeout(None)
        self.lock = threading.Lock()
        self.waiting: dict[int, Callable[[dict[str, Any]], None]] = {}
        self.on_data: Callable[[int, int, bytes], None] = lambda stream, seq, text: None
        self.on_message: Callable[[dict[str, Any]], None] = lambda message: None
        self.ended = threading.Event()
        self.reader = in_background(self._read)

    def _read(self) -> None:
        try:
            while True:
                text = self.client.text()
                if text.startswith(b'{"jsonrpc":"2.0","method":"forward/data"'):
                    found = _FORWARD_DATA.search(text, 0, 120)
                    if found:
                        self.on_data(int(found[1]), int(found[2]), text)
                    continue
                message = json.loads(text)
                if "id" in message and "method" not in message:
                    with self.lock:
                        then = self.waiting.pop(message["id"], None)
                    if then is not None:
                        then(message)
                else:
                    self.on_message(message)
        except (OSError, EOFError, ValueError):
            pass
        finally:
            self.ended.set()

    def request(self, method: str, params: object,
                then: Callable[[dict[str, Any]], None] = lambda reply: None) -> None:
        with self.lock:
            self.client.ids += 1
            msg_id = self.client.ids
            self.waiting[msg_id] = then
        self.client.send(rpc(msg_id, method, params))

    def call(self, method: str, params: object, timeout: float = 30.0) -> dict[str, Any]:
        got: list[dict[str, Any]] = []
        answered = threading.Event()
        self.request(method, params, lambda reply: (got.append(reply), answered.set()))
        if not answered.wait(timeout):
            raise TimeoutError(f"{method}: no answer in {timeout:g} s")
        return got[0]

    def start(self, process_id: str, argv: list[str], **extra: object) -> dict[str, Any]:
        return self.call("process/start", start_params(process_id, argv, {
            "env": {"PATH": "/usr/bin:/bin"}, "sandbox": NETWORK_SANDBOX, **extra}))

    def end(self, process_ids: list[str], closed: set[str]) -> None:
        """Terminates ``process_ids``, waits (10 s at most) for each to be in ``closed`` (which
        ``on_message`` fills), then hangs up."""
        try:
            for process_id in process_ids:
                self.request("process/terminate", {"processId": process_id})
            deadline = time.monotonic() + 10
            while set(process_ids) - closed and time.monotonic() < deadline:
                time.sleep(0.05)
        except OSError:
            pass
        hang_up(self.client.sock)
        self.reader.join(5)


def output_lines(message: dict[str, Any]) -> tuple[str, list[str]] | None:
    """A process/output notification's processId and lines (each chunk is whole lines here:
    the programs print a line at a time, flushed)."""
    params = message.get("params")
    if message.get("method") != "process/output" or not isinstance(params, dict):
        return None
    text = base64.b64decode(params.get("chunk", "")).decode(errors="replace")
    return params.get("processId", ""), text.splitlines()


def latency_note(times: list[float], failures: list[str], what: str) -> Note:
    """The honest program's p99 and worst (target: p99 under 1 s, no failure), then ``what``."""
    p99 = percentile(times, 0.99)
    failed = f", {len(failures)} failed ({failures[0][:120]})" if failures else ""
    return Note(f"the other session's {len(times)} requests: p50 {percentile(times, 0.5):.3f} s, "
                f"p99 {p99:.3f} s, worst {max(times, default=0.0):.3f} s{failed}; {what}",
                met=bool(times) and p99 < PROBE_LIMIT and not failures)


class Origin(http.server.BaseHTTPRequestHandler):
    """The bench's HTTP origin on the host's loopback: 2 bytes for any GET."""
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *_: Any) -> None:
        pass


def proxy_hoard(url: str, stop: threading.Event) -> Note:
    """One session starts 10 sandboxed processes behind the managed proxy, each holding as
    many idle connections to its HTTP proxy as it can (100 at most), reopened as the proxy
    closes them; meanwhile another session's sandboxed process, behind its own proxy, GETs a
    2-byte answer from an origin the bench runs on the host's loopback, one request after
    another (20 ms apart), each timed. Target: that process's p99 under 1 s. Needs bwrap."""
    problem = network_problem(needs_pasta=False)
    if problem is not None:
        return Note(f"skipped: {problem}")
    http.server.ThreadingHTTPServer.request_queue_size = 128
    origin = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    origin.daemon_threads = True
    serving = in_background(origin.serve_forever)
    target = f"http://127.0.0.1:{origin.server_address[1]}/"
    hoarders = [f"hoard-{i}" for i in range(10)]
    counts: dict[str, str] = {}
    times: list[float] = []
    failures: list[str] = []
    closed: set[str] = set()
    lock = threading.Lock()

    def heard(message: dict[str, Any]) -> None:
        if closed_id(message) is not None:
            closed.add(closed_id(message) or "")
        said = output_lines(message)
        if said is None:
            return
        process_id, lines = said
        with lock:
            for line in lines:
                if line.startswith("held "):
                    counts[process_id] = line
                elif line.startswith("took "):
                    times.append(float(line.split()[1]))
                elif line.startswith("failed "):
                    failures.append(line)

    proxy = {"proxy": LOCAL_PROXY}
    sessions: list[tuple[Session, list[str]]] = []
    try:
        attacker = Session(url)
        attacker.on_message = heard
        sessions.append((attacker, hoarders))
        refused = []
        for process_id in hoarders:
            reply = attacker.start(process_id, ["python3", "-c", HOARD, "100", "600"],
                                   enforceManagedNetwork=True, networkProxy=proxy)
            if "error" in reply:
                refused.append(error_text(reply))
        if len(refused) == len(hoarders):
            return Note(f"the attack itself failed: every hoarder refused: {refused[0]}", False)
        deadline = time.monotonic() + 10  # every hoarder holds what it can before the probe
        while len(counts) < len(hoarders) - len(refused) and time.monotonic() < deadline:
            stop.wait(0.1)
        honest = Session(url)
        honest.on_message = heard
        sessions.append((honest, ["timed"]))
        reply = honest.start("timed", ["python3", "-c", TIMED_GETS, target, "600"],
                             enforceManagedNetwork=True, networkProxy=proxy)
        if "error" in reply:
            return Note(f"the honest process was refused: {error_text(reply)}", False)
        stop.wait()
    finally:
        for session, process_ids in sessions:
            session.end(process_ids, closed)
        origin.shutdown()
        origin.server_close()
        serving.join(5)
    with lock:  # each count line: held N opened N closed N
        sums = [sum(int(line.split()[at]) for line in counts.values()) for at in (1, 3, 5)]
        return latency_note(times, failures, f"{len(counts)} hoarders held {sums[0]} connections "
                            f"at the end (the proxy's backlog included), {sums[1]} opened, "
                            f"{sums[2]} closed by the proxy"
                            + (f"; {len(refused)} refused: {refused[0]}" if refused else ""))


def forward_flood(url: str, stop: threading.Event) -> Note:
    """One session starts a dev server in its session network (127.0.0.1:3000, inside a
    sandbox) that sends each connection 64 KiB blocks as fast as taken, opens as many forward
    streams to it as the server allows (1,100 tries at most), and pumps: every stream's data
    acknowledged each 256 KiB, and two 256 KiB writes in flight on each. Meanwhile another
    session, with a dev server of its own on the same port in its own network, times small
    requests through its own forward, one after another (20 ms apart): open, write the request
    with EOF, read the answer to its EOF. Target: its p99 under 1 s. Needs bwrap and pasta."""
    problem = network_problem(needs_pasta=True)
    if problem is not None:
        return Note(f"skipped: {problem}")
    closed: set[str] = set()
    sessions: list[tuple[Session, list[str]]] = []
    streams: list[int] = []
    in_flight: dict[int, int] = {}
    unacked: dict[int, int] = {}
    to_ack: dict[int, int] = {}  # the latest seq to acknowledge, by stream
    tally = Tally()
    moved = [0, 0]  # bytes received (base64, as sent), bytes written (acknowledged writes)
    lock = threading.Condition()
    chunk = base64.b64encode(os.urandom(256 << 10)).decode()
    times: list[float] = []
    failures: list[str] = []

    def heard(message: dict[str, Any]) -> None:
        if closed_id(message) is not None:
            closed.add(closed_id(message) or "")

    def opened(session: Session, stopping: threading.Event) -> tuple[int | None, str]:
        """A stream to the session's dev server, retried (10 s at most) while it starts."""
        deadline = time.monotonic() + 10
        while True:
            reply = session.call("forward/open", {"port": DEV_PORT})
            if "result" in reply:
                return int(reply["result"]["streamId"]), ""
            if ("refused (os error" not in error_text(reply) or time.monotonic() > deadline
                    or stopping.is_set()):
                return None, error_text(reply)
            stopping.wait(0.1)

    def data(stream: int, seq: int, text: bytes) -> None:
        """The reader's: acks are sent by the pump, so the reader never waits to send."""
        moved[0] += len(text)
        unacked[stream] = unacked.get(stream, 0) + len(text)
        if unacked[stream] >= 256 << 10:
            unacked[stream] = 0
            with lock:
                to_ack[stream] = seq
                lock.notify()

    def written(stream: int) -> Callable[[dict[str, Any]], None]:
        def then(reply: dict[str, Any]) -> None:
            tally.add(reply)
            with lock:
                in_flight[stream] -= 1
                moved[1] += (256 << 10) if "result" in reply else 0
                lock.notify()
        return then

    def pump() -> None:
        try:
            while not stop.is_set():
                with lock:
                    acks = list(to_ack.items())
                    to_ack.clear()
                    ready = [s for s in in_flight if in_flight[s] < 2]
                    if not ready and not acks:
                        lock.wait(0.1)
                        continue
                    for stream in ready:
                        in_flight[stream] += 1
                for stream, seq in acks:
                    attacker.request("forward/ack", {"streamId": stream, "seq": seq})
                for stream in ready:
                    attacker.request("forward/write", {"streamId": stream, "dataBase64": chunk},
                                     written(stream))
        except OSError:
            pass

    setting_up = time.monotonic()
    timed_from = 0.0
    try:
        # The other session first: its dev server up and its forward warm before the flood.
        honest = Session(url)
        honest.on_message = heard
        sessions.append((honest, ["dev"]))
        reply = honest.start("dev", ["python3", "-c", DEV_SERVER, str(DEV_PORT), "small", "600"])
        if "error" in reply:
            return Note(f"the other session's dev server was refused: {error_text(reply)}",
                        False)
        got: dict[int, list[str]] = {}  # each stream's end: "forward/eof None", ...
        news = threading.Condition()

        def told(message: dict[str, Any]) -> None:
            heard(message)
            method, params = message.get("method"), message.get("params") or {}
            if method in ("forward/eof", "forward/closed"):
                with news:
                    got.setdefault(params.get("streamId"), []).append(
                        f"{method} {params.get('error')}")
                    news.notify_all()

        honest.on_message = told
        warm, why = opened(honest, stop)
        if warm is None:
            if "forward refused" in why:
                return Note(f"skipped: {why}")
            return Note(f"the other session's forward failed: {why}", False)
        honest.request("forward/close", {"streamId": warm})
        # The attacker: its dev server, every stream it may open, pumped.
        attacker = Session(url)
        attacker.on_message = heard
        attacker.on_data = data
        sessions.append((attacker, ["pump"]))
        reply = attacker.start("pump", ["python3", "-c", DEV_SERVER, str(DEV_PORT), "pump",
                                        "600"])
        if "error" in reply:
            return Note(f"the attack itself failed: the dev server: {error_text(reply)}", False)
        first, why = opened(attacker, stop)
        if first is None:
            return Note(f"the attack itself failed: forward/open: {why}", False)
        streams.append(first)
        refusals: list[str] = []
        answers = threading.Semaphore(0)

        def answered(reply: dict[str, Any]) -> None:
            if "result" in reply:
                streams.append(int(reply["result"]["streamId"]))
            else:
                refusals.append(error_text(reply))
            answers.release()

        while not refusals and not stop.is_set() and len(streams) < 1100:  # 64 at a time
            batch = min(64, 1100 - len(streams))
            for _ in range(batch):
                attacker.request("forward/open", {"port": DEV_PORT}, answered)
            for _ in range(batch):
                if not answers.acquire(timeout=30):
                    refusals.append("no answer to forward/open in 30 s")
                    break
        refusal = f"{len(refusals)} refused: {refusals[0]}" if refusals else ""
        with lock:
            in_flight.update((stream, 0) for stream in streams)
        pumping = in_background(pump)
        timed_from = time.monotonic() - setting_up
        request = base64.b64encode(b"GET /n HTTP/1.1\r\nHost: dev\r\n\r\n").decode()
        while not stop.is_set():
            began = time.monotonic()
            try:
                reply = honest.call("forward/open", {"port": DEV_PORT}, timeout=20)
                if "error" in reply:
                    raise EOFError(error_text(reply))
                stream = int(reply["result"]["streamId"])
                honest.request("forward/write", {"streamId": stream, "dataBase64": request,
                                                 "eof": True})
                with news:
                    if not news.wait_for(lambda s=stream: s in got, 20):
                        raise TimeoutError("no EOF in 20 s")
                    ending = got.pop(stream)
                if ending[0] != "forward/eof None" and ending[0] != "forward/closed None":
                    raise EOFError(ending[0])
                times.append(time.monotonic() - began)
                honest.request("forward/close", {"streamId": stream})
            except (OSError, EOFError) as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
            stop.wait(0.02)
        pumping.join(10)
    finally:
        for session, process_ids in sessions:
            session.end(process_ids, closed)
    return latency_note(times, failures,
                        f"timed from {timed_from:.1f} s; "
                        f"{len(streams)} streams opened, then {refusal or 'no refusal'}; "
                        f"{moved[0] / MIB:.0f} MiB received (base64), "
                        f"{moved[1] / MIB:.0f} MiB written; writes: {tally}")


ATTACKS: dict[str, Attack] = {
    "1,100 half-open connections": half_open,
    "wrong tokens, 50 guessers": wrong_tokens,
    "3,000 reads of 1.33 MB, unread": unread_answers,
    "40 hung http/request": hung_http,
    "ping flood, pongs unread": ping_flood,
    "3M one-byte fragments": fragments,
    "fs/open leak after hang-up": fs_open_leak,
    "connection hog, 300 upgraded": connection_hog,
    "pre-auth flood, 300 a second": pre_auth_flood,
    "deny-glob setup stall": deny_glob_setup,
    "long subpath setup": long_subpath_setup,
    "254 missing 4 KB paths setup": missing_paths_setup,
    "sandbox setup, 4 sessions of costly starts": prep_sessions,
    "start flood, 10,000 true": start_flood,
    "huge JSON message, 57 MiB": huge_json,
    "retained output, 1,500 x 1 MiB": retained_output,
    "unread fs answers, 90 x 16 MiB": unread_fs_answers,
    "stdin backlog, 1 GiB": stdin_backlog,
    "huge writeIds, 24 MiB": huge_write_ids,
    "fs pool starvation, client leaves": walks_then_leave,
    "fs pool starvation, 60 walks in flight": walks_in_flight,
    "trickling http, 8 calls": trickling_http,
    "base64 before initialize, 4 x 45 MiB": base64_before_initialize,
    "ClientHello flood, RSA-2048": client_hello_flood,
    "wrong-token flood, held open": wrong_token_flood,
    "initialized connections from another address": address_hog,
    "processes left behind, 4 x 256 sleep": processes_left_behind,
    "costly walks, 4 x 250 deny patterns": costly_walks,
    "proxy hoard, 10 x 100 idle connections": proxy_hoard,
    "forward flood, every stream pumped": forward_flood,
}
# Run at a server of their own, started with --allow-network (the others' servers give their
# sandboxes no network): the probe and the columns are that server's.
NETWORK_ATTACKS = ("proxy hoard, 10 x 100 idle connections", "forward flood, every stream pumped")


# -- running them ---------------------------------------------------------------------------------


def attack(server: Server, name: str, seconds: float) -> Result:
    result = Result(name, rss_before=server.rss())
    stop, done = threading.Event(), threading.Event()

    def run_attack() -> None:
        try:
            note = ATTACKS[name](server.url, stop)
        except Exception as exc:  # noqa: BLE001 (an attack that broke says so in the report)
            note = Note(f"the attack itself failed: {type(exc).__name__}: {exc}")
        if note is not None:
            result.notes.append(note)

    attacker = threading.Thread(target=run_attack, daemon=True)
    watcher = threading.Thread(target=watch, args=(server, result, done), daemon=True)
    watcher.start()
    attacker.start()
    time.sleep(1)  # the attack under way before the first probe
    prober = threading.Thread(target=probe, args=(server, result, stop), daemon=True)
    prober.start()
    time.sleep(seconds)
    stop.set()
    stopping = time.monotonic()
    prober.join(30)
    attacker.join(30)
    if attacker.is_alive():
        result.notes.append(Note("the attack did not stop within 30 s", met=False))
    elif time.monotonic() - stopping > 5:
        result.notes.append(Note(f"stopping took {time.monotonic() - stopping:.1f} s"))
    time.sleep(LONG_SETTLE if name in KEPT_30_S else SETTLE)
    done.set()
    watcher.join()
    result.survived = server.alive()
    if result.survived:
        result.rss_after, result.fds_after = server.rss(), server.fds()
    return result


@dataclass
class Baseline:
    rss: float
    fds: int


def warm_up(server: Server) -> Baseline:
    warm = Client(server.url)
    warm.start("warm", ["true"])
    warm.until_closed("warm")
    warm.sock.close()
    time.sleep(3)
    return Baseline(server.rss(), server.fds())


HEADER = ("| adapter | attack | survived | peak RSS MB | peak fds | peak threads | probe p99 s "
          "| probe worst s (n) | getMetadata worst s | RSS after MB (before; baseline) "
          "| fds after − baseline |\n|---|---|---|---|---|---|---|---|---|---|---|")


def missed(r: Result, base: Baseline) -> bool:
    return (not r.survived or r.peak_rss > RSS_LIMIT or bool(r.probe_failures)
            or percentile(r.rounds, 0.99) > PROBE_LIMIT
            or r.rss_after > r.rss_before + AFTER_LIMIT
            or r.fds_after > base.fds + FDS_SLACK or any(not n.met for n in r.notes))


def report(adapter: str, r: Result, base: Baseline) -> None:
    failures = f", {len(r.probe_failures)} failed" if r.probe_failures else ""
    fds_after = f"{r.fds_after - base.fds:+d}" if r.survived else "-"
    print(f"| {adapter} | {r.attack} | {'yes' if r.survived else '**no**'} "
          f"| {r.peak_rss:.0f} | {r.peak_fds} | {r.peak_threads} "
          f"| {percentile(r.rounds, 0.99):.3f} "
          f"| {max(r.rounds, default=0.0):.3f} ({len(r.rounds)}{failures}) "
          f"| {r.worst_metadata:.3f} | {r.rss_after:.0f} ({r.rss_before:.0f}; {base.rss:.0f}) "
          f"| {fds_after} ({base.fds}){' **missed**' if missed(r, base) else ''} |", flush=True)
    for note in r.notes:
        print(f"<!-- {r.attack}: {note.text}{'' if note.met else ' (missed)'} -->", flush=True)
    for failure in sorted(set(r.probe_failures))[:3]:
        print(f"<!-- probe: {failure[:200]} -->", flush=True)


def network_attack(adapter: str, token_file: Path, name: str, seconds: float) -> bool:
    """Runs an attack of `NETWORK_ATTACKS` at a server of its own, whose sandboxes may have
    the network (``--allow-network``), and reports it; True if it missed a target."""
    server = Server(adapter, token_file, "bwrap", allow_network=True)
    try:
        base = warm_up(server)
        r = attack(server, name, seconds)
        report(adapter, r, base)
        if not r.survived:
            print(f"<!-- the server died; its log's end: {server.logged()[-1500:]!r} -->",
                  flush=True)
        return missed(r, base)
    finally:
        server.stop()


def bwrap_runs() -> bool:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False
    ran = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net",
                          "--unshare-uts", "--unshare-ipc", "true"], capture_output=True)
    return ran.returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapters", default="asyncio,trio,threads")
    parser.add_argument("--seconds", type=float, default=10.0, help="per attack")
    parser.add_argument("--only", help="run only the attacks whose name contains this")
    parser.add_argument("--list", action="store_true", help="list the attacks and exit")
    parser.add_argument("--sandbox", choices=("auto", "bwrap", "none"), default="auto",
                        help="the servers' --sandbox; auto: bwrap where it runs (default)")
    args = parser.parse_args()
    names = [name for name in ATTACKS if not args.only or args.only in name]
    if args.list:
        for name in names:
            print(f"{name}: {' '.join((ATTACKS[name].__doc__ or '').split())}")
        return 0
    sandbox = args.sandbox if args.sandbox != "auto" else "bwrap" if bwrap_runs() else "none"
    print(f"<!-- servers run with --sandbox {sandbox}; {args.seconds:g} s per attack -->")
    print(HEADER)
    any_missed = False
    global WRITABLE
    with tempfile.TemporaryDirectory() as tmp:
        WRITABLE = Path(tmp) / "writable"
        WRITABLE.mkdir()
        token_file = Path(tmp) / "token"
        token_file.write_text(TOKEN + "\n")
        for adapter in args.adapters.split(","):
            ADAPTER[0], SANDBOX_MODE[0] = adapter, sandbox
            server = Server(adapter, token_file, sandbox)
            try:
                base = warm_up(server)
                for name in names:
                    if name in NETWORK_ATTACKS and sandbox == "bwrap":
                        any_missed = network_attack(adapter, token_file, name,
                                                    args.seconds) or any_missed
                        continue
                    r = attack(server, name, args.seconds)
                    any_missed = missed(r, base) or any_missed
                    report(adapter, r, base)
                    if not r.survived:  # a new server for the attacks left
                        print(f"<!-- the server died; its log's end: "
                              f"{server.logged()[-1500:]!r} -->", flush=True)
                        server.stop()
                        server = Server(adapter, token_file, sandbox)
                        base = warm_up(server)
                if server.alive():  # and after all of them, against the first baseline
                    end = server.rss()
                    kept = end > base.rss + AFTER_LIMIT
                    any_missed = any_missed or kept
                    print(f"<!-- {adapter}: RSS after every attack {end:.0f} MB, baseline "
                          f"{base.rss:.0f} MB{' (missed)' if kept else ''} -->", flush=True)
            finally:
                server.stop()
    return 1 if any_missed else 0


if __name__ == "__main__":
    sys.exit(main())
