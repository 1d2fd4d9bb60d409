"""A closed connection is freed at once, by reference counting: nothing of it waits in a
reference cycle for a full garbage collection, which an idle server may not run for a long time
(after a flood of connections, dozens of them, each with its websocket's buffers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = Path(__file__).with_name("cycle_probe.py")
ROOT = Path(__file__).resolve().parents[2]


def test_closed_connections_are_freed_without_a_collection(adapter: str) -> None:
    probe = subprocess.run([sys.executable, str(PROBE), adapter, str(ROOT), "20"],
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "0", (probe.stdout, probe.stderr)
