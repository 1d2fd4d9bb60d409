"""What the real client expects of a remote host, beside the reference (codex 0.171.0).

Four things the Codex CLI saw differ: the directories the server puts at the front of the PATH
its processes inherit and names in `prependPathDirs`, the exit code of a terminal's process
killed by a signal, SHELL on a terminal when the env policy dropped it, and a terminal's `cwd`
that is a file. Where execproto keeps its own behaviour (docs/protocol.md, "Where execproto
differs on purpose"), the test pins both sides, so the difference stays a documented one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reference import REFERENCE, WHY_MISSING

from .conftest import Server, start, uri
from .wsclient import Client, output_of

needs_reference = pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)
EXECPROTO = [sys.executable, "-m", "execproto.adapters"]
POLICY = {"inherit": "all", "ignoreDefaultExcludes": False, "exclude": [], "set": {},
          "includeOnly": []}
KILLED_BY = ["TERM", "KILL", "INT", "HUP"]


@pytest.fixture
def reference() -> Iterator[Any]:
    assert REFERENCE is not None
    from .test_reference import Reference

    ref = Reference(REFERENCE)
    yield ref
    ref.stop()


def run(c: Client, process_id: str, argv: list[str], **extra: Any) -> tuple[dict[str, bytes],
                                                                           int | None]:
    """Start a process, wait for it to close: its output and its exit code."""
    reply = start(c, process_id, argv, **extra)
    assert "result" in reply, reply
    events = c.events_until_closed(process_id)
    # From a read, not the process/exited notification: the reference sometimes sends that
    # one after process/closed (seen under load), where the events above stop.
    read = c.call("process/read", {"processId": process_id, "afterSeq": 0})["result"]
    assert read["closed"], read
    return output_of(events), read["exitCode"]


# -- prependPathDirs ------------------------------------------------------------------------------


SHOW_PATH = ["/bin/sh", "-c", 'printf %s "$PATH"']


def test_path_prepend_is_announced_and_leads_the_inherited_path(adapter: str,
                                                                tmp_path: Path) -> None:
    first, second = tmp_path / "tools", tmp_path / "more tools"
    first.mkdir()
    second.mkdir()
    server = Server(adapter, "--log-level", "warning", "--path-prepend", str(first),
                    "--path-prepend", str(second))
    try:
        c = Client(server.url)
        init = c.handshake()["result"]
        # The server's own directory (apply_patch, rg) first, then the operator's in order.
        own = init["environmentInfo"]["prependPathDirs"][0]
        assert os.path.isfile(os.path.join(own[len("file://"):], "apply_patch")), own
        wanted = [own, uri(first), uri(second)]
        assert init["environmentInfo"]["prependPathDirs"] == wanted
        assert c.result("environment/info", {})["prependPathDirs"] == wanted
        # What the Codex CLI sends: a policy and no PATH. The directories lead the inherited one.
        out, code = run(c, "i", SHOW_PATH, env={}, envPolicy=POLICY)
        leading = f"{own[len('file://'):]}:{first}:{second}"
        assert (out.get("stdout"), code) == (f"{leading}:{os.environ['PATH']}".encode(), 0)
        # A PATH the request gives stands as given, as under the reference.
        out, code = run(c, "p", SHOW_PATH, env={"PATH": "/usr/bin:/bin"})
        assert (out.get("stdout"), code) == (b"/usr/bin:/bin", 0)
    finally:
        server.stop()


def test_without_path_prepend_and_apply_patch_the_list_is_empty(adapter: str) -> None:
    server = Server(adapter, "--log-level", "warning", "--no-apply-patch")
    try:
        assert Client(server.url).handshake()["result"]["environmentInfo"]["prependPathDirs"] == []
    finally:
        server.stop()


@needs_reference
def test_the_reference_puts_its_directories_before_the_inherited_path(reference: Any) -> None:
    c = reference.client()
    dirs = [d[len("file://"):] for d in c.result("environment/info", {})["prependPathDirs"]]
    assert dirs and all(os.path.isdir(d) for d in dirs), dirs
    out, _ = run(c, "i", SHOW_PATH, env={}, envPolicy=POLICY)
    inherited = out["stdout"].decode()
    # Its apply_patch alias directory comes first, then the announced ones, then its own PATH.
    assert inherited.endswith(":" + os.environ["PATH"]), inherited
    entries = inherited.split(":")
    assert all(d in entries[:len(dirs) + 1] for d in dirs), inherited
    out, _ = run(c, "p", SHOW_PATH, env={"PATH": "/usr/bin:/bin"})
    assert out.get("stdout") == b"/usr/bin:/bin"


@pytest.mark.parametrize("given", ["relative/dir", "/does/not/exist", "FILE"])
def test_path_prepend_must_be_an_absolute_directory(given: str, tmp_path: Path) -> None:
    if given == "FILE":
        given = str(tmp_path / "a-file")
        Path(given).write_text("")
    done = subprocess.run([*EXECPROTO, "serve", "--path-prepend", given], capture_output=True,
                          text=True, timeout=30)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"--path-prepend: {given} is not an absolute path to a directory" in lines[0], lines


# -- a terminal's process killed by a signal ------------------------------------------------------


@pytest.mark.parametrize("tty", [True, False])
def test_killed_by_a_signal_exits_128_plus_its_number(adapter: str, tty: bool) -> None:
    server = Server(adapter, "--log-level", "warning")
    try:
        c = server.client()
        for name in KILLED_BY:
            _, code = run(c, f"k{name}", ["/bin/sh", "-c", f"kill -{name} $$"], tty=tty)
            assert code == 128 + signal.Signals[f"SIG{name}"], name
    finally:
        server.stop()


@needs_reference
def test_the_reference_says_1_for_a_terminal_and_128_plus_n_without(reference: Any) -> None:
    c = reference.client()
    for name in KILLED_BY:
        _, on_terminal = run(c, f"t{name}", ["/bin/sh", "-c", f"kill -{name} $$"], tty=True)
        _, on_pipes = run(c, f"p{name}", ["/bin/sh", "-c", f"kill -{name} $$"], tty=False)
        assert (on_terminal, on_pipes) == (1, 128 + signal.Signals[f"SIG{name}"]), name


# -- a cwd that is a file, or missing -------------------------------------------------------------

# The reference's answers without a terminal, which execproto gives with one too.
REFUSALS = {
    "a-file": {"code": -32603, "message": "Not a directory (os error 20)",
               "data": {"kind": "spawnFailed"}},
    "missing": {"code": -32603, "message": "No such file or directory (os error 2)",
                "data": {"kind": "spawnNotFound"}},
}


def bad_cwd(tmp_path: Path, kind: str) -> str:
    path = tmp_path / kind
    if kind == "a-file":
        path.write_text("")
    return uri(path)


@pytest.mark.parametrize("kind", list(REFUSALS))
@pytest.mark.parametrize("tty", [True, False])
def test_a_bad_cwd_is_refused_with_or_without_a_terminal(adapter: str, tty: bool, kind: str,
                                                         tmp_path: Path) -> None:
    server = Server(adapter, "--log-level", "warning")
    try:
        reply = start(server.client(), "f", ["/bin/sh", "-c", "pwd"], cwd=bad_cwd(tmp_path, kind),
                      tty=tty)
        assert reply.get("error") == REFUSALS[kind], reply
    finally:
        server.stop()


@needs_reference
@pytest.mark.parametrize("kind", list(REFUSALS))
def test_the_reference_runs_a_terminal_in_home_for_a_bad_cwd(reference: Any, kind: str,
                                                            tmp_path: Path) -> None:
    cwd = bad_cwd(tmp_path, kind)
    c = reference.client()
    refused = start(c, "pipes", ["/bin/sh", "-c", "pwd"], cwd=cwd, tty=False)
    assert refused.get("error") == REFUSALS[kind], refused
    out, code = run(c, "term", ["/bin/sh", "-c", "pwd"], cwd=cwd, tty=True)
    assert (out.get("pty"), code) == (os.path.expanduser("~").encode() + b"\r\n", 0)


# -- SHELL on a terminal --------------------------------------------------------------------------

SHOW_SHELL = ["/bin/sh", "-c", 'printf "[%s]" "${SHELL-unset}"']
DROPS_SHELL = {**POLICY, "includeOnly": ["HOME"]}


@needs_reference
def test_the_reference_gives_a_terminal_shell_the_policy_dropped(reference: Any) -> None:
    c = reference.client()
    out, _ = run(c, "t", SHOW_SHELL, tty=True, envPolicy=DROPS_SHELL)
    assert out.get("pty", b"").startswith(b"[/"), out
    out, _ = run(c, "p", SHOW_SHELL, tty=False, envPolicy=DROPS_SHELL)
    assert out.get("stdout") == b"[unset]", out


@pytest.mark.parametrize("tty", [True, False])
def test_a_terminal_gets_shell_the_policy_dropped(adapter: str, tty: bool) -> None:
    server = Server(adapter, "--log-level", "warning")
    try:
        c = server.client()
        out, _ = run(c, "s", SHOW_SHELL, tty=tty, envPolicy=DROPS_SHELL)
        if tty:
            assert out.get("pty", b"").startswith(b"[/"), out
        else:
            assert out.get("stdout") == b"[unset]", out
    finally:
        server.stop()
