"""Codex permission profiles as the real client sends them, and a way to run a command in one.

The profiles are the ones codex 0.171 sends in its read-only and workspace-write modes
(captured from the real client); `run` starts a process with one on a live server and returns
what came of it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest

from .conftest import start, uri
from .wsclient import Client, output_of


def _special(kind: str, access: str, subpath: str | None = None) -> dict[str, Any]:
    value: dict[str, Any] = {"kind": kind}
    entry: dict[str, Any] = {"path": {"type": "special", "value": value}, "access": access}
    if subpath is not None:
        value["subpath"] = subpath
        entry["missing_path_behavior"] = "skip"
    return entry


def profile(workspace: str, entries: list[dict[str, Any]], network: str = "restricted",
            kind: str = "managed") -> dict[str, Any]:
    permissions: dict[str, Any] = {"type": kind}
    if kind == "managed":
        permissions["file_system"] = {"type": "restricted", "entries": entries}
    if kind != "disabled":
        permissions["network"] = network
    return {
        "permissions": permissions,
        "cwd": uri(workspace),
        "workspaceRoots": [uri(workspace)],
        "windowsSandboxLevel": "disabled",
        "windowsSandboxProxySettingsMode": "reconcile",
        "useLegacyLandlock": False,
    }


def read_only(workspace: str) -> dict[str, Any]:
    return profile(workspace, [_special("root", "read")])


def workspace_write(workspace: str) -> dict[str, Any]:
    entries = [_special("root", "read"), _special("project_roots", "write"),
               _special("slash_tmp", "write"), _special("tmpdir", "write")]
    entries += [_special("project_roots", "read", sub) for sub in (".git", ".agents", ".codex")]
    return profile(workspace, entries)


def path_entry(path: str, access: str) -> dict[str, Any]:
    return {"path": {"type": "path", "path": uri(path)}, "access": access}


class Ran:
    def __init__(self, reply: dict[str, Any], events: list[dict[str, Any]]) -> None:
        self.reply = reply
        self.sandbox_type = reply.get("result", {}).get("sandboxType")
        output = output_of(events)
        self.stdout = output.get("stdout", b"").decode(errors="replace")
        self.stderr = output.get("stderr", b"").decode(errors="replace")
        exited = [e["params"] for e in events if e["method"] == "process/exited"]
        self.exit_code = exited[0]["exitCode"] if exited else None
        self.denied = exited[0]["sandboxDenied"] if exited else None

    def __repr__(self) -> str:
        return (f"Ran(type={self.sandbox_type}, exit={self.exit_code}, denied={self.denied}, "
                f"stdout={self.stdout!r}, stderr={self.stderr!r}, reply={self.reply})")


_count = 0


def run(client: Client, script: str, sandbox: Any, cwd: str = "/",
        env: dict[str, str] | None = None) -> Ran:
    """``sh -c script`` under ``sandbox`` (None: the request carries none)."""
    global _count
    _count += 1
    process_id = f"attack-{_count}"
    base = {"PATH": "/usr/bin:/bin"}
    reply = start(client, process_id, ["sh", "-c", script], cwd=uri(cwd),
                  env={**base, **(env or {})}, sandbox=sandbox)
    events = client.events_until_closed(process_id) if "result" in reply else []
    return Ran(reply, events)


def _bwrap_problem() -> str | None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed (make test installs it as root with apt-get)"
    probe = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net",
                            "--unshare-uts", "--unshare-ipc", "true"],
                           capture_output=True, text=True)
    return None if probe.returncode == 0 else f"bwrap cannot run here: {probe.stderr.strip()}"


BWRAP_PROBLEM = _bwrap_problem()
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=BWRAP_PROBLEM or "")
NO_PASTA = "pasta (Debian's passt) is not installed"
# A network of a sandbox's own: without pasta, a sandbox that asks for the network is refused.
needs_pasta = pytest.mark.skipif(shutil.which("pasta") is None, reason=NO_PASTA)
IS_ROOT = os.geteuid() == 0
