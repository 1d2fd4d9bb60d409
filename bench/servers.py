"""The exec-servers `bench/compare.py` measures, and what it reads of their processes.

A server is launched listening on ``ws://127.0.0.1:0`` and its bound address read from its first
line of stdout. The reference gets a CODEX_HOME of its own outside /tmp: under /tmp it skips
the helpers it makes at start, and without them it cannot sandbox a process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from children import children, resident  # noqa: E402,F401  (see tests/children.py)
from reference import CACHE  # noqa: E402

REFERENCE_HOMES = CACHE.parent / "reference-homes"


class Server:
    def __init__(self, name: str, argv: list[str], env: dict[str, str] | None = None,
                 home: str | None = None) -> None:
        self.name = name
        self.home = home  # a scratch directory the server used, removed when it stops
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True, env={**os.environ, **(env or {})})
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith("ws://"):
            self.stop()
            raise RuntimeError(f"{name} did not start")
        self.pid = self.process.pid

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)


def execproto(adapter: str, python: str = sys.executable) -> Callable[[], Server]:
    """execproto serving on ``adapter``, as installed for ``python`` (by default this one)."""
    # --drain-grace 0: stopped at once, as the reference is, not after a drain.
    argv = [python, "-m", "execproto.adapters", "serve", "--listen", "ws://127.0.0.1:0",
            "--adapter", adapter, "--log-level", "WARNING", "--drain-grace", "0"]
    return lambda: Server(f"execproto-{adapter}", argv)


def reference(binary: str) -> Callable[[], Server]:
    def start() -> Server:
        REFERENCE_HOMES.mkdir(parents=True, exist_ok=True)
        home = tempfile.mkdtemp(prefix="codex-home-", dir=REFERENCE_HOMES)
        return Server("reference", [binary, "exec-server", "--listen", "ws://127.0.0.1:0"],
                      env={"CODEX_HOME": home}, home=home)

    return start


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total / 1024


class PeakRss:
    """Samples the RSS of ``pids()`` every few ms while the block runs; ``peak`` in MB."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self._pids = pids
        self.peak = 0.0
        self._done = threading.Event()

    def __enter__(self) -> PeakRss:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._done.wait(0.003):
            self.peak = max(self.peak, rss_mb(self._pids()))

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb(self._pids()))


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes (all their threads) so far."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except FileNotFoundError:
            pass
    return total / os.sysconf("SC_CLK_TCK")


def written(pid: int) -> int:
    with open(f"/proc/{pid}/io") as io:
        for line in io:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0
