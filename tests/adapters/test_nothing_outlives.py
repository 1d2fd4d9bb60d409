"""Nothing a process starts outlives its terminate or its server, sandbox or not.

The command leaves its process group every way a shell can: a child that calls `setsid`, and a
grandchild that does so after its parent exited (an orphan, reparented away from the
command's tree). After `process/terminate` and after SIGKILL of the server, none of them is
left. Each sleeper carries a number unique to the test, so the host's other processes are never
counted. Bounded: every wait is a poll of at most a few seconds.
"""

from __future__ import annotations

import base64
import random
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from .conftest import Server, eventually, start
from .sandboxes import BWRAP_PROBLEM, IS_ROOT, profile, read_only, run

pytestmark = pytest.mark.skipif(not IS_ROOT, reason="cgroups are made by a root server here")

SANDBOXES: dict[str, Callable[[], Any]] = {"unsandboxed": lambda: None,
                                           "sandboxed": lambda: read_only("/tmp")}


def _tree(tag: str) -> str:
    """A command whose descendants leave its process group; it prints `up` once all started."""
    return (f"(setsid sleep 301.{tag} &); setsid sleep 302.{tag} & sleep 303.{tag} & "
            f"sleep 0.2; echo up; sleep 304.{tag}")


def _left(tag: str) -> list[str]:
    found = subprocess.run(["pgrep", "-f", f"sleep 30[1-4][.]{tag}"], capture_output=True,
                           text=True, timeout=10)
    return found.stdout.split()


def _none_left(tag: str, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while _left(tag):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _started(server: Server, sandbox: Any, tag: str) -> Any:
    client = server.client()
    reply = start(client, "tree", ["sh", "-c", _tree(tag)], sandbox=sandbox)
    assert "result" in reply, reply
    client.notification(lambda m: m["method"] == "process/output", timeout=10)
    # The orphan's sleep may still be on its way to exec on a loaded machine: wait for all four.
    assert eventually(lambda: len(_left(tag)) >= 4), "the tree did not start: nothing to show"
    return client


@pytest.mark.parametrize("kind", list(SANDBOXES))
def test_a_terminate_leaves_no_descendant(kind: str) -> None:
    if kind == "sandboxed" and BWRAP_PROBLEM is not None:
        pytest.skip(BWRAP_PROBLEM)
    tag = str(random.randrange(10**6, 10**7))
    server = Server("asyncio", "--kill-grace", "0.5")
    try:
        client = _started(server, SANDBOXES[kind](), tag)
        client.call("process/terminate", {"processId": "tree"})
        client.events_until_closed("tree")
        assert _none_left(tag), _left(tag)
    finally:
        server.stop()


def test_a_sandboxed_process_cannot_leave_its_cgroup_even_with_every_path_writable() -> None:
    # Its cgroup namespace is rooted at its own cgroup and it has no capabilities, so the
    # host's cgroup files it can write (a profile granting write on `/`) move it nowhere. (An
    # unsandboxed process running as root can leave, as it can kill the server: docs/serving.md.)
    if BWRAP_PROBLEM is not None:
        pytest.skip(BWRAP_PROBLEM)
    tag = str(random.randrange(10**6, 10**7))
    root_write = profile("/tmp", [{"path": {"type": "special", "value": {"kind": "root"}},
                                   "access": "write"}])
    # To the root of the cgroup v2 hierarchy, where the server's cgroups are.
    leave = ("for top in $(awk '$3 == \"cgroup2\" {print $2}' /proc/mounts); do "
             "echo $$ > $top/cgroup.procs 2>/dev/null && echo moved $top; done; ")
    server = Server("asyncio", "--kill-grace", "0.5")
    try:
        client = server.client()
        reply = start(client, "tree", ["sh", "-c", leave + _tree(tag)], sandbox=root_write)
        assert "result" in reply, reply
        said = client.notification(lambda m: m["method"] == "process/output", timeout=10)
        assert b"moved" not in base64.b64decode(said["params"]["chunk"]), said
        assert eventually(lambda: len(_left(tag)) >= 4), "the tree did not start"
        client.call("process/terminate", {"processId": "tree"})
        client.events_until_closed("tree")
        assert _none_left(tag), _left(tag)
    finally:
        server.stop()


@pytest.mark.parametrize("adapter", ["asyncio", "threads"])
@pytest.mark.parametrize("kind", list(SANDBOXES))
def test_a_sigkilled_server_leaves_no_descendant(kind: str, adapter: str) -> None:
    if kind == "sandboxed" and BWRAP_PROBLEM is not None:
        pytest.skip(BWRAP_PROBLEM)
    tag = str(random.randrange(10**6, 10**7))
    server = Server(adapter)
    try:
        _started(server, SANDBOXES[kind](), tag)
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(10)
        assert _none_left(tag), _left(tag)
    finally:
        server.stop()


def test_a_process_that_ends_on_its_own_may_leave_a_daemon_until_the_server_stops() -> None:
    """As without cgroups: only a terminate or the server's end takes its daemons."""
    tag = str(random.randrange(10**6, 10**7))
    server = Server("asyncio")
    try:
        client = server.client()
        ran = run(client, f"setsid sleep 301.{tag} > /dev/null 2>&1 < /dev/null & echo up", None)
        assert ran.exit_code == 0 and len(_left(tag)) == 1, ran
    finally:
        server.stop()
    assert _none_left(tag), _left(tag)


def test_an_unsandboxed_process_still_sees_and_signals_the_host_as_before() -> None:
    server = Server("asyncio")
    try:
        client = server.client()
        ran = run(client, "sleep 100 & kill $! && wait $!; echo killed $?; "
                          f"ps -p {server.process.pid} -o pid= | tr -d ' '", None)
        assert ran.stdout.split() == ["killed", "143", str(server.process.pid)], ran
    finally:
        server.stop()


def test_two_servers_in_one_process_keep_their_own_trees() -> None:
    """An application may embed two servers: one's stop takes nothing of the other's."""
    from execproto.adapters._processes._cgroups import Tree, wrapper

    first, second = Tree.create()[0], Tree.create()[0]
    assert isinstance(first, Tree) and isinstance(second, Tree) and first.base != second.base
    tag = str(random.randrange(10**6, 10**7))
    sleeper = subprocess.Popen([*wrapper(second.place(1), ()), "sleep", f"301.{tag}"])
    try:
        assert eventually(lambda: len(_left(tag)) == 1)
        first.close()
        time.sleep(0.2)
        assert len(_left(tag)) == 1, "the first server's stop killed the second's process"
        second.close()
        assert _none_left(tag), _left(tag)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_servers_tree_is_made_at_its_first_process() -> None:
    """A start spends nothing on the tree (its watchdog's start is ~1.5 ms): `Later` makes it
    at the first place, and what `Tree.problem` foresaw at start holds."""
    import os

    from execproto.adapters._processes._cgroups import Later, Tree, _hierarchy, _own

    assert Tree.problem() is None  # root, with cgroup v2: the tree can be made
    mount = _hierarchy()
    assert mount is not None
    own = os.path.normpath(os.path.join(mount, _own().lstrip("/")))
    # This process's trees only: the other shard's servers make and remove theirs meanwhile.
    def ours() -> list[str]:
        return [name for name in os.listdir(own) if name.startswith(f"execproto-{os.getpid()}-")]

    before = ours()
    heard: list[str] = []
    later = Later(heard.append)
    later.signalled(1, "TERM")
    later.finished(1)
    assert ours() == before, "a tree was made before any process"
    place = later.place(1)
    try:
        assert place is not None and os.path.isdir(place)
        assert os.path.dirname(os.path.dirname(place)) == own and heard == []
    finally:
        later.finished(1)
        later.close()
    assert not os.path.exists(os.path.dirname(place))
