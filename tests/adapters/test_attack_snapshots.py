"""Attack: shell snapshots, with a login profile that is hostile (it runs inside the sandbox,
so what it leaves is the sandbox's to choose) and a client that tries to hold the server.

- What the capture exports never overrides what the server sets for the command: the managed
  proxy's variables, the CA bundle's, the broker's marker; nor the snapshot's own carriers.
- Names and values of any bytes the shell can export (newlines, quotes, ``$(...)``, ``=`` in
  a value, a name a shell cannot read back) reach the command's environment as data, or not
  at all, and never as code outside the command's own shell.
- A capture that hangs holds up its own scope's starts only: another client's start and
  capture go on meanwhile.
- What the profile leaves running (a daemon in a session of its own) does not outlive the
  capture.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server, eventually
from .test_shell_snapshot import home, run, runs
from .wsclient import output_of

PROXY: dict[str, Any] = {
    "enabled": True, "enableSocks5": True, "enableSocks5Udp": False, "allowUpstreamProxy": False,
    "dangerouslyAllowAllUnixSockets": False, "mode": "full", "allowLocalBinding": False,
    "domains": {"127.0.0.1": "allow"}, "credentialMasking": True,
}
SERVER_SET = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE",
              "CODEX_NETWORK_PROXY_ACTIVE", "CODEX_CA_CERTIFICATE")


def test_the_capture_cannot_override_what_the_server_sets(tmp_path: Path) -> None:
    planted = "".join(f"export {name}=planted-by-profile\n" for name in SERVER_SET)
    planted += ("export CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE=1\n"
                "export CODEX_NETWORK_PROXY_BROKERED_CREDENTIALS='[[\"GH_TOKEN\",\"x\"]]'\n"
                "export __EXECPROTO_SHELL_STATE_0='echo from-a-planted-state'\n"
                "export __EXECPROTO_SHELL_STATE_9='echo from-a-planted-state'\n")
    path = home(tmp_path, during_capture=planted.replace("\n", "; "))
    script = ('for v in ' + " ".join(SERVER_SET) + ' CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE'
              ' CODEX_NETWORK_PROXY_BROKERED_CREDENTIALS __EXECPROTO_SHELL_STATE_0'
              ' __EXECPROTO_SHELL_STATE_9; do printf "%s=%s\\n" "$v" "$(printenv "$v")"; done')
    server = Server("asyncio")
    try:
        client = server.client()
        outputs = []
        for _ in range(2):  # the first captures, the second replays
            _, out, err = run(client, path, script, enforceManagedNetwork=True,
                              networkProxy={"proxy": PROXY})
            outputs.append((out, err))
        assert runs(path, "captures") == 1 and runs(path) == 1, outputs
    finally:
        server.stop()
    for out, err in outputs:
        seen = dict(line.split("=", 1) for line in out.splitlines())
        assert "planted-by-profile" not in out, out
        assert seen["HTTP_PROXY"].startswith("http://127.0.0.1:"), seen
        assert seen["CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE"] == "", seen
        assert seen["CODEX_NETWORK_PROXY_BROKERED_CREDENTIALS"] == "", seen
        assert seen["__EXECPROTO_SHELL_STATE_0"] == seen["__EXECPROTO_SHELL_STATE_9"] == ""
        assert "from-a-planted-state" not in out + err


ODD = {
    "ATTACK_NEWLINE": "a\nb=c\nATTACK_INJECTED=1",
    "ATTACK_QUOTES": "'\"$(touch {canary})`touch {canary}`\\",
    "ATTACK_EQUALS": "x=y=z",
}


def test_odd_names_and_values_stay_data(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    exports = "".join(f"export {name}={_sh_quote(value.format(canary=canary))}; "
                      for name, value in ODD.items())
    # And a function whose output holds the capture's marker, and an alias over a command.
    functions = ("evil() { printf '%s' \"\\0execproto-shell-snapshot\\0\"; }; "
                 "alias ls='touch " + str(canary) + "'; ")
    path = home(tmp_path, during_capture=exports + functions)
    script = ('for v in ' + " ".join(ODD) + ' ATTACK_INJECTED; do printf "%s=[%s]\\n" "$v" '
              '"$(printenv "$v")"; done')
    server = Server("asyncio")
    try:
        client = server.client()
        outs = [run(client, path, script)[1] for _ in range(2)]
    finally:
        server.stop()
    assert runs(path) == 1
    assert not canary.exists()
    for out in outs:
        assert f"ATTACK_QUOTES=[{ODD['ATTACK_QUOTES'].format(canary=canary)}]" in out, out
        assert "ATTACK_EQUALS=[x=y=z]" in out and "ATTACK_INJECTED=[]" in out, out


def _sh_quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def test_a_hanging_capture_holds_no_other_clients_start(tmp_path: Path) -> None:
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
    hanging = home(tmp_path / "a", during_capture="sleep 20")
    quick = home(tmp_path / "b")
    server = Server("asyncio")
    try:
        held = server.client()
        held.request("process/start", {
            "processId": "held", "argv": ["/bin/bash", "-lc", "true"],
            "cwd": hanging.as_uri(), "env": {"PATH": "/usr/bin:/bin", "HOME": str(hanging)},
            "tty": False, "shellSnapshot": {"scopeId": "hang",
                                            "shell": {"name": "bash", "path": "/bin/bash"}}})
        assert eventually(lambda: runs(hanging, "captures") == 1, wait=10)
        other = server.client()
        began = time.monotonic()
        _, out, _ = run(other, quick, timeout=30)  # a capture of its own, then its command
        took = time.monotonic() - began
        assert out.splitlines()[1] == "hello you" and took < 8, (took, out)
    finally:
        stopping = time.monotonic()
        server.stop()
    # The stop ends the capture at once, not when its 10 s are up.
    assert time.monotonic() - stopping < 5


def _cgroups_tracked(log: str) -> bool:
    return "descendants that leave its process group are not tracked" not in log


def test_a_daemon_the_profile_starts_does_not_outlive_the_capture(tmp_path: Path) -> None:
    marker = f"sleep 7{os.getpid() % 1000:03d}"
    path = home(tmp_path, during_capture=f"setsid -f {marker} </dev/null >/dev/null 2>&1")
    server = Server("asyncio")
    try:
        client = server.client()
        _, out, _ = run(client, path)
        assert runs(path, "captures") == 1 and out.splitlines()[1] == "hello you"
        gone = eventually(lambda: subprocess.run(["pgrep", "-fx", marker]).returncode != 0,
                          wait=5)
    finally:
        subprocess.run(["pkill", "-fx", marker])  # only what this test's profile started
        log = server.stop()
    if not gone and not _cgroups_tracked(log):
        pytest.skip("no cgroups here: a setsid daemon outlives any process, as the log warns")
    assert gone, "the capture's daemon outlived it"


def test_a_capture_that_floods_stdout_and_stderr_from_a_daemon_ends_in_bounds(
        tmp_path: Path) -> None:
    # The shell exits at once; what it left writes without end on both pipes.
    flood = ("( yes xxxxxxxxxxxxxxxx & yes yyyyyyyyyyyyyyyy >&2 & ) ; ")
    path = home(tmp_path, during_capture=flood)
    server = Server("asyncio")
    try:
        client = server.client()
        began = time.monotonic()
        _, out, _ = run(client, path, timeout=40)
        assert time.monotonic() - began < 20
        assert out.splitlines()[1] == "hello you"
        alive = server.client()
        reply = alive.call("process/start", {"processId": "p", "argv": ["true"],
                                              "cwd": path.as_uri(), "env": {}, "tty": False})
        assert "result" in reply and output_of(alive.events_until_closed("p", 20)) is not None
    finally:
        log = server.stop()
    assert "shell snapshot" in log
