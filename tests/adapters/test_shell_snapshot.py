"""Shell snapshots with real processes: a login profile runs once per scope, not per command.

The profile (a ``.bash_profile`` in a HOME of the test's) appends a line to a counter file each
time it runs, exports a marker that differs per run, and defines a function; while a capture
runs it (its script names execproto-shell-snapshot), it can also fail, hang or flood, to show
that the command then runs as sent, within the capture's bounds.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server, eventually
from .sandboxes import needs_bwrap, workspace_write
from .wsclient import Client, output_of

PROFILE = """\
echo "$$" >> "$HOME/ran"
case "${{BASH_EXECUTION_STRING-}}" in *execproto-shell-snapshot*)
  echo capture >> "$HOME/captures"
  {during_capture}
esac
export SNAP_MARKER="marker-$$-$RANDOM"
export FROM_PROFILE_TOKEN=secret
greet() {{ echo "hello $1"; }}
"""
SCRIPT = 'echo "$SNAP_MARKER"; greet you; echo "token=${FROM_PROFILE_TOKEN-}"'


def home(tmp_path: Path, during_capture: str = ":") -> Path:
    path = tmp_path / "home"
    path.mkdir(exist_ok=True)
    (path / ".bash_profile").write_text(PROFILE.format(during_capture=during_capture))
    return path


def runs(path: Path, name: str = "ran") -> int:
    """How many times the profile ran (or, with "captures", ran for a capture)."""
    try:
        return len((path / name).read_text().splitlines())
    except FileNotFoundError:
        return 0


def snapshot(scope: str = "thread-1:remote") -> dict[str, Any]:
    return {"scopeId": scope, "shell": {"name": "bash", "path": "/bin/bash"}}


_count = 0


def run(client: Client, path: Path, script: str = SCRIPT, scope: str = "thread-1:remote",
        timeout: float = 30, **extra: Any) -> tuple[dict[str, Any], str, str]:
    """``bash -lc script`` with a snapshot of ``scope``: (the start's reply, stdout, stderr)."""
    global _count
    _count += 1
    process_id = f"snap-{_count}"
    extra.setdefault("env", {"PATH": "/usr/bin:/bin", "HOME": str(path)})
    reply = client.call("process/start", {
        "processId": process_id, "argv": ["/bin/bash", "-lc", script],
        "cwd": path.as_uri(), "tty": False, "shellSnapshot": snapshot(scope), **extra},
        timeout=timeout)
    assert "result" in reply, reply
    output = output_of(client.events_until_closed(process_id, timeout))
    return reply, output.get("stdout", b"").decode(), output.get("stderr", b"").decode()


def lines(stdout: str) -> list[str]:
    return stdout.splitlines()


def test_two_commands_of_a_scope_run_the_profile_once(server: Server, tmp_path: Path) -> None:
    path = home(tmp_path)
    client = server.client()
    _, first, errors = run(client, path)
    _, second, _ = run(client, path)
    assert runs(path) == 1, (first, errors)
    marker, greeting, token = lines(first)
    assert marker.startswith("marker-") and greeting == "hello you"
    assert token == "token=secret"  # no env policy: the profile's variables as they are
    assert lines(second) == lines(first)  # the same marker: the profile did not run again
    assert errors == ""
    # The snapshot's own variables are gone before the command runs.
    _, env, _ = run(client, path, "env | grep -c EXECPROTO || true")
    assert env.strip() == "0"


def test_other_scope_cwd_or_env_policy_captures_again(tmp_path: Path) -> None:
    path = home(tmp_path)
    server = Server("asyncio")
    try:
        client = server.client()
        run(client, path)
        run(client, path, scope="thread-2:remote")
        assert runs(path) == 2
        other = tmp_path / "elsewhere"
        other.mkdir()
        run(client, path, cwd=other.as_uri())
        assert runs(path) == 3
        policy = {"inherit": "none", "ignoreDefaultExcludes": False, "exclude": [], "set": {},
                  "includeOnly": []}
        _, out, _ = run(client, path, envPolicy=policy)
        assert runs(path) == 4
        assert lines(out)[2] == "token="  # the policy's excludes leave the profile's *TOKEN* out
        # The request's own variables win over the profile's.
        _, out, _ = run(client, path, env={"PATH": "/usr/bin:/bin", "HOME": str(path),
                                           "SNAP_MARKER": "mine"})
        assert lines(out)[0] == "mine" and runs(path) == 4
        # Another session (another client) never shares a capture.
        run(server.client(), path)
        assert runs(path) == 5
    finally:
        server.stop()


def test_a_command_the_snapshot_does_not_apply_to_runs_as_sent(tmp_path: Path) -> None:
    path = home(tmp_path)
    server = Server("asyncio")
    try:
        client = server.client()
        reply = client.call("process/start", {
            "processId": "plain", "argv": ["/bin/bash", "-c", 'echo "${SNAP_MARKER-none}"'],
            "cwd": path.as_uri(), "env": {"PATH": "/usr/bin:/bin", "HOME": str(path)},
            "tty": False, "shellSnapshot": snapshot()})
        assert "result" in reply, reply
        assert output_of(client.events_until_closed("plain"))["stdout"] == b"none\n"
        assert runs(path) == 0
        reply = client.call("process/start", {
            "processId": "bad", "argv": ["/bin/bash", "-lc", "true"], "cwd": path.as_uri(),
            "env": {}, "tty": False,
            "shellSnapshot": {"scopeId": "s", "shell": {"name": "fish", "path": "/bin/bash"}}})
        assert reply["error"] == {"code": -32602,
                                  "message": "shell snapshots are unsupported for shell `fish`"}
    finally:
        server.stop()


def test_concurrent_starts_of_a_scope_wait_for_one_capture(tmp_path: Path) -> None:
    path = home(tmp_path, during_capture="sleep 1")
    server = Server("asyncio")
    try:
        client = server.client()
        ids = [client.request("process/start", {
            "processId": f"c{n}", "argv": ["/bin/bash", "-lc", SCRIPT], "cwd": path.as_uri(),
            "env": {"PATH": "/usr/bin:/bin", "HOME": str(path)}, "tty": False,
            "shellSnapshot": snapshot()}) for n in range(3)]
        for msg_id in ids:
            assert "result" in client.response(msg_id, 30)
        outputs = {output_of(client.events_until_closed(f"c{n}", 30))["stdout"]
                   for n in range(3)}
        assert len(outputs) == 1 and runs(path, "captures") == 1 and runs(path) == 1
    finally:
        server.stop()


@pytest.mark.parametrize("during_capture, why", [
    ("exit 7", "its shell exited with status 7"),
    ("head -c 600000 /dev/zero | tr '\\0' x", "it wrote more than 524288 bytes"),
    ("echo '# not a capture'; exec sleep 0", "its output is not a complete capture"),
])
def test_a_failed_capture_runs_the_command_as_sent(tmp_path: Path, during_capture: str,
                                                   why: str) -> None:
    path = home(tmp_path, during_capture)
    server = Server("asyncio")
    try:
        client = server.client()
        _, out, _ = run(client, path)
        # The capture ran the profile, then the command ran it again, as sent.
        assert runs(path, "captures") == 1 and runs(path) == 2
        assert lines(out)[1] == "hello you"
        # Tried again by a start a second later, at most three times in all.
        for attempt in (2, 3, 3):
            time.sleep(1.1)
            run(client, path)
            assert runs(path, "captures") == attempt
    finally:
        log = server.stop()
    assert why in log, log


def test_a_hanging_capture_is_killed_in_time(tmp_path: Path) -> None:
    # Sleeps only this test runs (the other shard's tests run many a `sleep 60`).
    tag = str(random.randrange(10**6, 10**7))
    path = home(tmp_path, f"sleep 60.{tag} & sleep 60.{tag}")
    server = Server("asyncio")
    try:
        client = server.client()
        began = time.monotonic()
        _, out, _ = run(client, path, timeout=60)
        took = time.monotonic() - began
        assert 9 < took < 30, took
        assert lines(out)[1] == "hello you" and runs(path) == 2
        # Nothing of the capture is left: no sleep of its own still runs.
        assert eventually(lambda: not _sleeping(tag), wait=5)
    finally:
        log = server.stop()
    assert "it took too long" in log, log


def _sleeping(tag: str) -> bool:
    found = subprocess.run(["pgrep", "-f", f"^sleep 60[.]{tag}$"], capture_output=True)
    return found.returncode == 0


@needs_bwrap
def test_under_a_sandbox_the_capture_is_the_sandbox_s(tmp_path: Path) -> None:
    path = home(tmp_path)
    server = Server("asyncio")
    try:
        client = server.client()
        sandbox = workspace_write(str(path))
        reply, first, errors = run(client, path, sandbox=sandbox)
        assert reply["result"]["sandboxType"] == "linuxSeccomp"
        _, second, _ = run(client, path, sandbox=sandbox)
        assert runs(path) == 1, (first, errors)
        assert lines(first)[1] == "hello you" and lines(second) == lines(first)
        # Unsandboxed, the same scope is another capture: a sandbox's is never used outside it.
        _, third, _ = run(client, path)
        assert runs(path) == 2 and lines(third)[0] != lines(first)[0]
    finally:
        server.stop()


def test_a_session_keeps_eight_and_cannot_evict_another_sessions(tmp_path: Path) -> None:
    """The cache is shared: a session keeps at most 8 captures (its least recently used goes),
    so one client's many scopes never cost another its captures."""
    path = home(tmp_path)
    server = Server("asyncio")
    try:
        mine, flood = server.client(), server.client()
        for n in range(4):
            run(mine, path, scope=f"mine-{n}")
        for n in range(20):
            run(flood, path, scope=f"flood-{n}")
        assert runs(path) == 24
        for n in range(4):
            run(mine, path, scope=f"mine-{n}")
        assert runs(path) == 24  # all kept
        run(flood, path, scope="flood-19")
        assert runs(path) == 24  # kept: among its newest 8
        run(flood, path, scope="flood-0")
        assert runs(path) == 25  # gone when its 9th came
    finally:
        server.stop()


@pytest.mark.parametrize(("shell", "profile"), [("sh", ".profile"), ("zsh", ".zprofile")])
def test_other_shells(tmp_path: Path, shell: str, profile: str) -> None:
    program = shutil.which(shell)
    if program is None:
        pytest.skip(f"{shell} is not installed")
    path = home(tmp_path)
    (path / profile).write_text('echo ran >> "$HOME/ran"\nexport SNAP_MARKER="m-$$"\n'
                                "set -o noglob\n")
    server = Server("asyncio")
    try:
        client = server.client()
        outputs = []
        for n in range(2):
            reply = client.call("process/start", {
                "processId": f"{shell}{n}", "argv": [program, "-lc", 'echo "$SNAP_MARKER"; '
                                                     "set -o | grep noglob"],
                "cwd": path.as_uri(), "env": {"PATH": "/usr/bin:/bin", "HOME": str(path)},
                "tty": False,
                "shellSnapshot": {"scopeId": "s", "shell": {"name": shell, "path": program}}})
            assert "result" in reply, reply
            out = output_of(client.events_until_closed(f"{shell}{n}"))
            outputs.append(out.get("stdout", b"").decode())
        assert runs(path) == 1 and outputs[0] == outputs[1], outputs
        assert outputs[0].startswith("m-") and "on" in outputs[0], outputs
    finally:
        server.stop()
