"""The rotating-symlink attack on a sandbox's mount points, for a test and a bench script.

A sandboxed command in a writable root keeps swapping (RENAME_EXCHANGE) a name between a
regular file, a dangling symlink and symlinks to a victim outside every writable root (as the
host sees it and as a setup that still has the host root at `/oldroot` would), and a missing
directory name between absent and a dangling symlink; meanwhile the server starts sandboxed
processes whose policy puts a mount on both names (a deny rule or a deny glob on the file, a
placeholder for the missing `.codex`). A setup that makes or opens a mount point by path,
through the symlink, truncates the victim or makes a directory outside.
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from .conftest import Server, start, uri
from .sandboxes import path_entry, profile, workspace_write

# Two log lines a start would fill the server's stderr pipe, which the harness reads only at
# the end, within a minute of starts, and the server would wait on it.
QUIET = ("--log-level", "warning")

ROTATE = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
file_slot, dir_slot, dangling_dir, seconds = sys.argv[1:5]
spares = sys.argv[5:]
deadline = time.monotonic() + float(seconds)
swaps = 0
while time.monotonic() < deadline:
    for spare in spares:
        # RENAME_EXCHANGE; then the directory name absent, a dangling symlink, absent again
        # (or a placeholder a start made meanwhile, which a rename cannot replace).
        swaps += libc.renameat2(-100, file_slot.encode(), -100, spare.encode(), 2) == 0
        try:
            os.rename(dangling_dir, dir_slot)
            os.rename(dir_slot, dangling_dir)
            swaps += 2
        except OSError:
            pass
print(swaps)
"""


class Arena:
    """A workspace to attack, a victim outside it, and the names the attack rotates."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="execproto-race-", dir="/var/tmp"))
        self.base.chmod(0o755)
        self.workspace = self.base / "workspace"
        self.outside = self.base / "outside"
        self.workspace.mkdir(mode=0o777)
        self.outside.mkdir(mode=0o755)
        self.victim = self.outside / "victim.env"
        self.victim.write_text("intact\n")
        self.victim.chmod(0o400)
        self.tag = uuid.uuid4().hex[:8]
        self.made = [self.outside / f"made-{self.tag}", Path("/") / f"made-{self.tag}"]
        self.file_slot = self.workspace / "x.env"
        self.file_slot.write_text("decoy\n")
        self.dir_slot = self.workspace / ".codex"
        (self.workspace / "f").write_text("decoy\n")
        spares = {"d": f"/oldroot/nonexistent-{self.tag}", "v": f"/oldroot{self.victim}",
                  "h": str(self.victim), "dd": f"/oldroot{self.made[0]}"}
        for name, target in spares.items():
            os.symlink(target, self.workspace / name)
        self.spares = [str(self.workspace / name) for name in ("f", "d", "v", "h")]

    def intact(self) -> bool:
        return self.victim.read_text() == "intact\n" and not any(
            os.path.lexists(path) for path in self.made)

    def remove(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)

    def rotate_argv(self, seconds: float) -> list[str]:
        return ["python3", "-c", ROTATE, str(self.file_slot), str(self.dir_slot),
                str(self.workspace / "dd"), str(seconds), *self.spares]


def floor_profile(arena: Arena) -> dict[str, Any]:
    """What an honest client under the operator's floor might ask: a deny on the file."""
    entries = [{"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
               path_entry(str(arena.workspace), "write"), path_entry(str(arena.file_slot), "none")]
    return profile(str(arena.workspace), entries)


def attacker_profile(arena: Arena) -> dict[str, Any]:
    """A sandbox that may write the workspace, and protects nothing in it."""
    entries = [{"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
               path_entry(str(arena.workspace), "write")]
    return profile(str(arena.workspace), entries)


def codex_profile(arena: Arena) -> dict[str, Any]:
    """Codex's workspace-write profile (with its `.codex` placeholder) and a deny glob."""
    sandbox = workspace_write(str(arena.workspace))
    sandbox["permissions"]["file_system"]["entries"].append(
        {"path": {"type": "glob_pattern", "pattern": "**/*.env"}, "access": "deny"})
    return sandbox


def attack(server: Server, arena: Arena, victim_sandbox: dict[str, Any],
           attacker_sandbox: dict[str, Any] | None, seconds: float) -> dict[str, int]:
    """Rotate for ``seconds`` while starting sandboxed processes one after another; returns
    how many starts ran, failed in setup, and how many swaps the attacker made."""
    attacker, victims = server.client(), server.client()
    try:
        reply = start(attacker, "rotate", arena.rotate_argv(seconds), cwd=uri(arena.workspace),
                      env={"PATH": "/usr/bin:/bin"}, sandbox=attacker_sandbox)
        assert "result" in reply, reply
        counts = {"ran": 0, "setup_failed": 0, "refused": 0}
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            process_id = f"victim-{sum(counts.values())}"
            reply = start(victims, process_id, ["true"], cwd=uri(arena.workspace),
                          env={"PATH": "/usr/bin:/bin"}, sandbox=victim_sandbox)
            if "result" not in reply:
                counts["refused"] += 1  # a pattern that matched a symlink mid-swap, say
                continue
            events = victims.events_until_closed(process_id)
            exited = [e for e in events if e["method"] == "process/exited"]
            counts["ran" if exited and exited[0]["params"]["exitCode"] == 0
                   else "setup_failed"] += 1
        events = attacker.events_until_closed("rotate", timeout=seconds + 20)
        output = b"".join(_chunk(e) for e in events if e["method"] == "process/output")
        words = output.split()
        assert words and words[-1].isdigit(), output.decode(errors="replace")
        counts["swaps"] = int(words[-1])
        return counts
    finally:
        attacker.close()
        victims.close()


def _chunk(event: dict[str, Any]) -> bytes:
    return base64.b64decode(event["params"]["chunk"])
