"""Shell snapshots, for the adapter that captures and replays them (``SpawnSpec.snapshot``).

The core decides when a start runs from a snapshot and what one capture serves
(`ShellSnapshot.key`); the adapter runs the capture (`capture_spec`, read by `read_capture`),
within the bounds below, keeps at most MAX_CACHED of them (MAX_SESSION_CACHED a session), and
spawns `replay_spec` instead of the command, or the command as sent when no capture works.
"""

from __future__ import annotations

from ._snapshot import ShellSnapshot
from ._snapshot_shells import (
    CAPTURE_SECONDS,
    MAX_ATTEMPTS,
    MAX_CACHED,
    MAX_CAPTURE_BYTES,
    MAX_SESSION_CACHED,
    RETRY_SECONDS,
    Captured,
    capture_spec,
    read_capture,
    replay_spec,
)

__all__ = [
    "CAPTURE_SECONDS",
    "MAX_ATTEMPTS",
    "MAX_CACHED",
    "MAX_CAPTURE_BYTES",
    "MAX_SESSION_CACHED",
    "RETRY_SECONDS",
    "Captured",
    "ShellSnapshot",
    "capture_spec",
    "read_capture",
    "replay_spec",
]
