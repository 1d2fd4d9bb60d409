"""The sandboxed-start workload of `bench/compare.py`: process/start of `true` until its
process/closed under the sandboxes the real Codex CLI 0.171 asks for by default.

Codex runs every command sandboxed unless told otherwise, so this is the start its users wait
for. The requests are the client's own (shared/codex-0.171-samples.md): its environment policy
and variables, and the `sandbox` object of each default profile; the workspace is a fresh
directory under /tmp, one per server and profile.

  read-only            read everything, write nothing
  workspace-write      write the workspace, /tmp and $TMPDIR; .git, .agents, .codex and .aws
                       under the workspace stay read-only
  workspace-write+net  the same with the network enabled (codex's network access on): the
                       reference shares the host's network, execproto gives the sandbox a
                       network of its own (one pasta per sandbox)

Before the timed starts, each server runs one command per profile that tries to write the
workspace and a directory outside it (not under /tmp, which workspace-write may write), and to
route a UDP socket out; the host is checked afterwards. A profile that does not confine the
command as it says (or gives it the network it denies, or not the network it allows) is
reported, not timed: its figure would not be that profile's. That start also warms the server.

The servers take turns, one start each, so a change in the machine's load falls on all of them
alike.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servers import Server
from wsbench import WsClient


def special(kind: str, access: str, subpath: str | None = None) -> dict[str, Any]:
    """One entry of a profile's file-system rules: a path codex names by its kind."""
    value: dict[str, Any] = {"kind": kind}
    entry: dict[str, Any] = {"path": {"type": "special", "value": value}, "access": access}
    if subpath is not None:
        value["subpath"] = subpath
        entry["missing_path_behavior"] = "skip"
    return entry


READ_ONLY = [special("root", "read")]
WORKSPACE_WRITE = [
    special("root", "read"), special("project_roots", "write"), special("slash_tmp", "write"),
    special("tmpdir", "write"),
    *(special("project_roots", "read", name) for name in (".git", ".agents", ".codex", ".aws")),
]


@dataclass(frozen=True)
class Profile:
    entries: list[dict[str, Any]]
    network: str  # "restricted" or "enabled"
    writes_workspace: bool  # what the check expects of a write to the workspace


PROFILES = {
    "read-only": Profile(READ_ONLY, "restricted", writes_workspace=False),
    "workspace-write": Profile(WORKSPACE_WRITE, "restricted", writes_workspace=True),
    "workspace-write+net": Profile(WORKSPACE_WRITE, "enabled", writes_workspace=True),
}


def sandbox(profile: Profile, workspace: str) -> dict[str, Any]:
    """The `sandbox` of a Codex 0.171 process/start for this profile and workspace."""
    return {
        "permissions": {"type": "managed",
                        "file_system": {"type": "restricted", "entries": profile.entries},
                        "network": profile.network},
        "cwd": f"file://{workspace}",
        "workspaceRoots": [f"file://{workspace}"],
        "windowsSandboxLevel": "disabled",
        "windowsSandboxProxySettingsMode": "reconcile",
        "useLegacyLandlock": False,
    }


# What the client sets in every command's environment (its captured read-only start).
CODEX_ENV = {
    "NO_COLOR": "1", "LC_CTYPE": "C.UTF-8", "GIT_PAGER": "cat", "PAGER": "cat", "CODEX_CI": "1",
    "GH_PAGER": "cat", "CODEX_APPLY_PATCH_PRESERVE_LINE_ENDINGS": "1", "CODEX_VERSION": "0.171.0",
    "LC_ALL": "C.UTF-8", "COLORTERM": "", "LANG": "C.UTF-8",
}
THREAD = "01a230b8-e74f-7101-82f8-eea69b185aeb"  # the reference insists on a UUID
ENV_POLICY = {
    "inherit": "all", "ignoreDefaultExcludes": True,
    "exclude": ["CODEX_PERMISSION_PROFILE", "CODEX_VERSION",
                "CODEX_APPLY_PATCH_PRESERVE_LINE_ENDINGS", "CODEX_PLUGIN_METRICS_OUTPUT"],
    "set": {}, "includeOnly": [],
}


def start_params(process_id: str, argv: list[str], name: str, workspace: str) -> dict[str, Any]:
    profile = PROFILES[name]
    env = {**CODEX_ENV, "CODEX_PERMISSION_PROFILE": f":{name.split('+')[0]}"}
    if profile.network == "restricted":
        env["CODEX_SANDBOX_NETWORK_DISABLED"] = "1"
    return {
        "processId": process_id, "metadata": {"threadId": THREAD, "toolCallId": process_id},
        "argv": argv, "cwd": f"file://{workspace}", "envPolicy": ENV_POLICY, "env": env,
        "tty": False, "pipeStdin": False, "arg0": None, "sandbox": sandbox(profile, workspace),
        "enforceManagedNetwork": False, "managedNetwork": None,
    }


@dataclass
class Ran:
    sandbox_type: str
    exit_code: int | None
    output: bytes


def run(client: WsClient, params: dict[str, Any]) -> Ran:
    """Start a process and read until its process/closed; an error answer raises."""
    msg_id = client.request("process/start", params)
    ran = Ran("", None, b"")
    for raw in client.messages():
        message = json.loads(raw)
        method = message.get("method")
        if message.get("id") == msg_id:
            if "error" in message:
                raise RuntimeError(f"process/start failed: {message['error']}")
            ran.sandbox_type = message["result"].get("sandboxType", "")
        elif method == "process/output":
            ran.output += base64.b64decode(message["params"]["chunk"])
        elif method == "process/exited":
            ran.exit_code = message["params"]["exitCode"]
        elif method == "process/closed":
            return ran
    raise EOFError("the connection ended before process/closed")


# Writes a file in the workspace ($1) and one outside it ($2), and connects a UDP socket to a
# documentation address (a route lookup: nothing is sent), saying which were allowed.
CHECKS = itertools.count()  # process ids of the checks, unique on a connection
PROBE = ('touch "$1/inside" && echo inside; touch "$2/outside" && echo outside; '
         '(exec 3<>/dev/udp/198.51.100.1/9) 2>/dev/null && echo network; true')


def confinement(client: WsClient, name: str, workspace: str, outside: str) -> str | None:
    """Why the command of this profile was not confined as it should be, or None."""
    argv = ["bash", "-c", PROBE, "bash", workspace, outside]
    ran = run(client, start_params(f"check-{next(CHECKS)}", argv, name, workspace))
    said = ran.output.decode(errors="replace").split()
    inside, beyond = Path(workspace, "inside").exists(), Path(outside, "outside").exists()
    wanted = PROFILES[name].writes_workspace
    if ran.sandbox_type != "linuxSeccomp":
        return f"answered sandboxType {ran.sandbox_type!r}"
    if beyond or "outside" in said:
        return f"a write outside the workspace ({outside}) succeeded"
    if inside != wanted or ("inside" in said) != wanted:
        return f"a write in the workspace {'failed' if wanted else 'succeeded'}"
    if ("network" in said) != (PROFILES[name].network == "enabled"):
        return f"the network was {'reachable' if 'network' in said else 'unreachable'}"
    return None


# Seconds of quiet before each timed start. What a server does after a process/closed (its
# sandbox's cleanup) would otherwise land in the next start timed, another server's when they
# take turns: back to back, both servers measured up to twice as slow as alone. Codex never
# starts commands back to back (a model's turn lies between), so the pause costs no realism.
SETTLE = 0.1


def timed(client: WsClient, name: str, workspace: str, index: int) -> float:
    time.sleep(SETTLE)
    t0 = time.perf_counter()
    ran = run(client, start_params(f"{name}-{index}", ["true"], name, workspace))
    elapsed = time.perf_counter() - t0
    if ran.exit_code != 0:
        raise RuntimeError(f"`true` under {name} exited {ran.exit_code}: {ran.output[:200]!r}")
    return elapsed


def spread(times: list[float]) -> dict[str, float]:
    ms = sorted(t * 1e3 for t in times)
    tenth = max(len(ms) // 10, 1)
    return {"median_ms": statistics.median(ms), "p10_ms": ms[tenth - 1],
            "p90_ms": ms[-tenth], "min_ms": ms[0], "max_ms": ms[-1], "runs": len(ms)}


def measure(starts: dict[str, Callable[[], Server]], runs: int,
            profiles: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """For each profile, each server's spread of ``runs`` sandboxed starts, or why not measured:
    {profile: {server: figures | {"skipped": why}}}."""
    results: dict[str, dict[str, Any]] = {}
    scratch = Path(tempfile.mkdtemp(prefix="bench-outside-", dir=Path.home() / ".cache"))
    servers: dict[str, Server] = {}
    try:
        for who, start in starts.items():
            servers[who] = start()
        clients = {who: WsClient(server.url) for who, server in servers.items()}
        for client in clients.values():
            client.handshake()
        for name in profiles or list(PROFILES):
            results[name] = one_profile(clients, name, runs, scratch)
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return results


def one_profile(clients: dict[str, WsClient], name: str, runs: int,
                scratch: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    workspaces = {who: tempfile.mkdtemp(prefix=f"bench-{name}-") for who in clients}
    try:
        turns: dict[str, list[float]] = {}
        for who, client in clients.items():
            outside = tempfile.mkdtemp(dir=scratch)
            try:
                why = confinement(client, name, workspaces[who], outside)
            except (RuntimeError, EOFError, OSError) as error:
                why = str(error)
            if why is None:
                turns[who] = []
            else:
                found[who] = {"skipped": f"not confined: {why}"}
        for index in range(runs):
            for who, times in turns.items():
                times.append(timed(clients[who], name, workspaces[who], index))
        found.update({who: spread(times) for who, times in turns.items()})
    finally:
        for workspace in workspaces.values():
            shutil.rmtree(workspace, ignore_errors=True)
    return found


if __name__ == "__main__":  # a quick look: .venv/bin/python bench/sandboxed.py [RUNS]
    import sys

    from servers import execproto, reference

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from reference import REFERENCE

    servers = {"execproto-asyncio": execproto("asyncio")}
    if REFERENCE:
        servers["reference"] = reference(REFERENCE)
    print(json.dumps(measure(servers, int(sys.argv[1]) if sys.argv[1:] else 20), indent=1))
