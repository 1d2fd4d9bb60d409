"""The sandbox, attacked: each test tries an escape on a live server and checks the host.

Two servers per adapter: ``plain`` (no operator sandbox: the client's permission profile is
what confines) and ``floored`` (``--sandbox bwrap --writable-root W``: the operator's floor,
which no request can widen); and, when the tests run as root, the same on one adapter with the
server running as `nobody` (bubblewrap then works through a user namespace). Workspaces live
under /var/tmp, not /tmp, since the workspace-write profile makes /tmp writable, and are open
to everyone, so that only the sandbox stands between `nobody` and them. Every attack checks
its effect on the host (a file, a hostname, a live process), not a flag inside the sandbox.
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import ADAPTERS, Server, eventually, start, uri
from .sandboxes import (
    IS_ROOT,
    needs_bwrap,
    path_entry,
    profile,
    read_only,
    run,
    workspace_write,
)
from .wsclient import Client

pytestmark = needs_bwrap


@pytest.fixture(scope="module")
def places() -> Iterator[dict[str, Path]]:
    base = Path(tempfile.mkdtemp(prefix="execproto-sandbox-", dir="/var/tmp"))
    base.chmod(0o755)
    found = {name: base / name for name in ("workspace", "outside", "floor")}
    for path in found.values():
        path.mkdir()
        path.chmod(0o777)
    yield found
    shutil.rmtree(base, ignore_errors=True)


NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--")
# (adapter, the prefix the server runs under): every adapter as ourselves, one as nobody.
RUNS = [(adapter, ()) for adapter in ADAPTERS] + ([("asyncio", NOBODY)] if IS_ROOT else [])


def _nobody_problem() -> str | None:
    probe = subprocess.run([*NOBODY, sys.executable, "-c", "import execproto"],
                           capture_output=True, text=True)
    if probe.returncode == 0:
        return None
    said = (probe.stderr.strip().splitlines() or [""])[-1]
    return f"nobody cannot run execproto here (is the checkout private?): {said}"


@pytest.fixture(scope="module", params=RUNS, ids=lambda run: run[0] + ("-nobody" if run[1] else ""))
def server_run(request: pytest.FixtureRequest) -> tuple[str, tuple[str, ...]]:
    adapter, prefix = request.param
    if prefix and (problem := _nobody_problem()) is not None:
        pytest.skip(problem)
    return adapter, prefix


# The sandbox is the backend's, the same under every adapter: each attack runs on asyncio (as
# root and as nobody), and those marked so on trio and threads too, to show the adapters
# carry the same policy to the same backend.
every_adapter = pytest.mark.every_adapter


@pytest.fixture(autouse=True)
def _asyncio_unless_marked(request: pytest.FixtureRequest) -> None:
    callspec = getattr(request.node, "callspec", None)
    run = callspec.params.get("server_run") if callspec is not None else None
    marked = request.node.get_closest_marker("every_adapter") is not None
    if run is not None and run[0] != "asyncio" and not marked:
        pytest.skip(
            "the sandbox is the backend's: this attack runs on asyncio, as root and as nobody")


@pytest.fixture(scope="module")
def privileged(server_run: tuple[str, tuple[str, ...]]) -> bool:
    """Whether the server runs as root."""
    return IS_ROOT and not server_run[1]


@pytest.fixture(scope="module")
def plain(server_run: tuple[str, tuple[str, ...]]) -> Iterator[tuple[Server, Client]]:
    server = Server(server_run[0], prefix=server_run[1])
    yield server, server.client()
    log = server.stop()
    assert "Traceback" not in log, log


@pytest.fixture(scope="module")
def floored(server_run: tuple[str, tuple[str, ...]],
            places: dict[str, Path]) -> Iterator[tuple[Server, Client]]:
    server = Server(server_run[0], "--sandbox", "bwrap", "--writable-root", str(places["floor"]),
                    prefix=server_run[1])
    yield server, server.client()
    log = server.stop()
    assert "Traceback" not in log, log



def _target(places: dict[str, Path], where: str) -> Path:
    return places[where] / f"written-{uuid.uuid4().hex[:8]}"


# -- what a profile allows ------------------------------------------------------------------------


@every_adapter
def test_the_read_only_profile_denies_every_write(plain: tuple[Server, Client],
                                                  places: dict[str, Path]) -> None:
    _, client = plain
    inside, outside = _target(places, "workspace"), _target(places, "outside")
    tmp = Path("/tmp") / f"execproto-ro-{uuid.uuid4().hex[:8]}"
    ran = run(client, f"echo a > {inside}; echo b > {outside}; echo c > {tmp}; exit 1",
              read_only(str(places["workspace"])), cwd=str(places["workspace"]))
    assert ran.sandbox_type == "linuxSeccomp", ran
    assert ran.stderr.count("Read-only file system") == 3, ran
    assert ran.denied is True, ran
    assert not inside.exists() and not outside.exists() and not tmp.exists()


@every_adapter
def test_workspace_write_writes_the_workspace_and_tmp_only(plain: tuple[Server, Client],
                                                          places: dict[str, Path]) -> None:
    _, client = plain
    workspace = places["workspace"]
    (workspace / ".git").mkdir(exist_ok=True)
    inside, outside = _target(places, "workspace"), _target(places, "outside")
    tmp = Path("/tmp") / f"execproto-ww-{uuid.uuid4().hex[:8]}"
    try:
        ran = run(client, f"echo a > {inside} && echo b > {tmp}; echo c > {outside}; "
                          f"echo d > .git/config; mkdir .codex; true",
                  workspace_write(str(workspace)), cwd=str(workspace))
        assert inside.read_text() == "a\n", ran
        assert tmp.read_text() == "b\n", ran
    finally:
        tmp.unlink(missing_ok=True)
    assert not outside.exists(), ran
    assert not (workspace / ".git" / "config").exists(), ran
    # A missing .codex is protected too: it could not be made (an empty read-only placeholder
    # held its place), and the placeholder is gone once the process is.
    assert "mkdir: cannot create directory '.codex'" in ran.stderr, ran
    assert eventually(lambda: not (workspace / ".codex").exists()), ran


def test_a_denied_path_cannot_be_read(plain: tuple[Server, Client],
                                      places: dict[str, Path]) -> None:
    _, client = plain
    secret_dir = places["workspace"] / "secret"
    secret_dir.mkdir(exist_ok=True)
    (secret_dir / "key").write_text("hunter2\n")
    secret_file = places["workspace"] / "token.txt"
    secret_file.write_text("s3cr3t\n")
    entries = [{"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
               path_entry(str(secret_dir), "none"), path_entry(str(secret_file), "deny")]
    ran = run(client, f"cat {secret_dir}/key; ls {secret_dir}; cat {secret_file}; exit 1",
              profile(str(places["workspace"]), entries))
    assert "hunter2" not in ran.stdout and "key" not in ran.stdout, ran
    assert "s3cr3t" not in ran.stdout, ran
    assert ran.denied is True, ran


def test_no_sandbox_asked_runs_unconfined_and_says_none(plain: tuple[Server, Client],
                                                        places: dict[str, Path]) -> None:
    _, client = plain
    for sandbox in (None, profile(str(places["workspace"]), [], kind="disabled")):
        target = _target(places, "outside")
        ran = run(client, f"echo a > {target}", sandbox)
        assert ran.sandbox_type == "none" and ran.exit_code == 0, ran
        assert target.read_text() == "a\n"


# -- the network ----------------------------------------------------------------------------------


def _connect(port: int) -> str:
    return (f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), "
            f"timeout=2); print('CONNECTED')\"")


@every_adapter
def test_the_hosts_loopback_is_unreachable(plain: tuple[Server, Client],
                                           floored: tuple[Server, Client],
                                           places: dict[str, Path]) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        workspace = str(places["workspace"])
        network = profile(workspace, [
            {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}],
            network="enabled")
        for client, sandbox in ((plain[1], read_only(workspace)),
                                (plain[1], workspace_write(workspace)),
                                (plain[1], network),  # its own network, through pasta
                                (floored[1], None),
                                (floored[1], read_only(workspace))):
            ran = run(client, _connect(port), sandbox)
            assert "CONNECTED" not in ran.stdout and ran.exit_code != 0, ran
        # The control: without a sandbox the listener is there, so the test above can fail.
        allowed = run(plain[1], _connect(port), None)
        assert "CONNECTED" in allowed.stdout, allowed


def test_host_unix_sockets_are_hidden(plain: tuple[Server, Client],
                                      places: dict[str, Path]) -> None:
    _, client = plain
    tag = uuid.uuid4().hex[:8]
    paths = [f"/tmp/execproto-{tag}.sock", f"/run/execproto-{tag}.sock"]
    listeners = []
    try:
        for path in paths:
            listener = socket.socket(socket.AF_UNIX)
            listener.bind(path)
            Path(path).chmod(0o777)  # so that only the sandbox keeps `nobody` from it
            listener.listen(8)
            listeners.append(listener)
        abstract = socket.socket(socket.AF_UNIX)
        abstract.bind(f"\0execproto-{tag}")
        abstract.listen(8)
        listeners.append(abstract)
        probe = ("import socket, sys\n"
                 f"for name in {paths + ['@execproto-' + tag]!r}:\n"
                 "    s = socket.socket(socket.AF_UNIX)\n"
                 "    try:\n"
                 "        s.connect(name.replace('@', chr(0), 1)); print('REACHED', name)\n"
                 "    except OSError as e: print('BLOCKED', name, e)\n")
        script = f"python3 -c {_quote(probe)}"
        ran = run(client, script, read_only(str(places["workspace"])))
        assert "REACHED" not in ran.stdout and ran.stdout.count("BLOCKED") == 3, ran
        control = run(client, script, None)
        assert control.stdout.count("REACHED") == 3, control
    finally:
        for listener in listeners:
            listener.close()
        for path in paths:
            Path(path).unlink(missing_ok=True)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


# -- the operator's floor -------------------------------------------------------------------------


@every_adapter
def test_a_client_cannot_widen_the_operators_floor(floored: tuple[Server, Client],
                                                   places: dict[str, Path]) -> None:
    _, client = floored
    workspace = str(places["floor"])
    root_write = [{"path": {"type": "special", "value": {"kind": "root"}}, "access": "write"}]
    wide = [
        None,
        profile(workspace, [], kind="disabled"),
        profile(workspace, [], network="enabled", kind="external"),
        profile(workspace, root_write, network="enabled"),
    ]
    for sandbox in wide:
        inside, outside = _target(places, "floor"), _target(places, "outside")
        ran = run(client, f"echo a > {inside}; echo b > {outside}", sandbox)
        assert ran.sandbox_type == "linuxSeccomp", (sandbox, ran)
        assert inside.exists() and not outside.exists(), (sandbox, ran)
    # Asking for another workspace narrows: the floor's root is not the client's, so neither.
    inside, outside = _target(places, "floor"), _target(places, "outside")
    ran = run(client, f"echo a > {inside}; echo b > {outside}",
              workspace_write(str(places["outside"])))
    assert not inside.exists() and not outside.exists(), ran


def test_a_symlink_in_a_writable_root_carries_no_write_out(floored: tuple[Server, Client],
                                                           places: dict[str, Path]) -> None:
    _, client = floored
    link = places["floor"] / f"link-{uuid.uuid4().hex[:8]}"
    link.symlink_to(places["outside"])  # planted by an earlier sandboxed command
    target = f"evil-{uuid.uuid4().hex[:8]}"
    ran = run(client, f"echo a > {link}/{target}", workspace_write(str(link)), cwd="/")
    assert not (places["outside"] / target).exists(), ran


# -- what the sandbox itself must hold ------------------------------------------------------------


def test_the_wrappers_run_with_a_fixed_environment(floored: tuple[Server, Client],
                                                   places: dict[str, Path],
                                                   tmp_path: Path) -> None:
    """LD_PRELOAD from the client must reach only the sandboxed program: a library that, when
    loaded outside the sandbox, writes a file outside the writable root."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the preload library")
    _, client = floored
    marker = places["outside"] / f"preloaded-{uuid.uuid4().hex[:8]}"
    source = tmp_path / "evil.c"
    source.write_text(
        "#include <stdio.h>\n"
        "__attribute__((constructor)) static void evil(void) {\n"
        f"  FILE *f = fopen(\"{marker}\", \"a\"); "
        "if (f) { fputs(\"outside\\n\", f); fclose(f); }\n"
        "}\n")
    library = places["floor"] / "evil.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    ran = run(client, "true", None, env={"LD_PRELOAD": str(library)})
    assert ran.exit_code == 0, ran
    assert not marker.exists(), f"the preload ran outside the sandbox: {marker.read_text()!r}"
    # The control: unsandboxed, the same library does write the marker.
    subprocess.run(["true"], env={"LD_PRELOAD": str(library), "PATH": "/usr/bin:/bin"})
    assert marker.exists()


def test_no_capabilities_inside_even_as_root(floored: tuple[Server, Client], privileged: bool,
                                             places: dict[str, Path]) -> None:
    if not privileged:
        pytest.skip("the server runs unprivileged: it has no capabilities to drop")
    _, client = floored
    outside = _target(places, "outside")
    ran = run(client, f"grep CapEff /proc/self/status; mount -o remount,rw / ; "
                      f"echo a > {outside}", None)
    assert "CapEff:\t0000000000000000" in ran.stdout, ran
    assert not outside.exists(), ran


def test_the_hosts_hostname_and_kernel_settings_are_untouched(
        floored: tuple[Server, Client]) -> None:
    _, client = floored
    before = Path("/proc/sys/kernel/hostname").read_text()
    try:
        ran = run(client, "echo evil > /proc/sys/kernel/hostname; hostname evil2; "
                          "echo 1 > /proc/sys/kernel/sysrq; cat /proc/sys/kernel/hostname", None)
        assert Path("/proc/sys/kernel/hostname").read_text() == before, ran
        assert "Read-only file system" in ran.stderr, ran
    finally:
        if Path("/proc/sys/kernel/hostname").read_text() != before and IS_ROOT:
            Path("/proc/sys/kernel/hostname").write_text(before)


def test_sysv_ipc_is_not_shared(floored: tuple[Server, Client]) -> None:
    if shutil.which("ipcmk") is None:
        pytest.skip("util-linux's ipcmk is not installed")
    _, client = floored
    made = subprocess.run(["ipcmk", "-Q"], capture_output=True, text=True, check=True)
    queue = made.stdout.split(":")[-1].strip()
    try:
        ran = run(client, "ipcs -q", None)
        assert ran.exit_code == 0, ran
        assert queue not in ran.stdout.split(), ran
        assert queue in subprocess.run(["ipcs", "-q"], capture_output=True, text=True).stdout
    finally:
        subprocess.run(["ipcrm", "-q", queue], capture_output=True)


def test_the_servers_processes_cannot_be_seen_or_signalled(floored: tuple[Server, Client]) -> None:
    server, client = floored
    pid = server.process.pid
    ran = run(client, f"kill -0 {pid} && echo SEEN; kill -TERM {pid}; kill -KILL {pid}; "
                      f"ls /proc | grep -c '^[0-9]'", None)
    assert "SEEN" not in ran.stdout, ran
    assert server.process.poll() is None
    assert int(ran.stdout.split()[-1]) < 10, ran  # its own few processes, nothing of the host's


def test_no_terminal_outside_the_sandbox_is_reachable(floored: tuple[Server, Client]) -> None:
    _, client = floored
    probe = ("import fcntl, os, termios\n"
             "fds = [0, 1, 2]\n"
             "try: fds.append(os.open('/dev/tty', os.O_RDWR))\n"
             "except OSError as e: print('no /dev/tty:', e.errno)\n"
             "for fd in fds:\n"
             "    try: fcntl.ioctl(fd, termios.TIOCSTI, b'x'); print('INJECTED', fd)\n"
             "    except OSError as e: print('BLOCKED', fd, e.errno)\n")
    ran = run(client, f"python3 -c {_quote(probe)}", None)
    assert "INJECTED" not in ran.stdout and ran.stdout.count("BLOCKED") == 3, ran


def test_a_sandbox_that_cannot_be_enforced_is_refused(server_run: tuple[str, tuple[str, ...]],
                                                      places: dict[str, Path]) -> None:
    # No bwrap to be found on this PATH (setpriv, for the prefix, is looked up before it).
    server = Server(server_run[0], env={"PATH": "/nonexistent"},
                    prefix=tuple(shutil.which(word) or word for word in server_run[1][:1])
                    + server_run[1][1:])
    try:
        client = server.client()
        marker = _target(places, "outside")
        ran = run(client, f"echo a > {marker}", read_only(str(places["workspace"])))
        assert ran.reply["error"] == {
            "code": -32602, "message": "sandbox intent cannot be enforced on this executor"}
        assert not marker.exists()
        assert run(client, f"echo a > {marker}", None).exit_code == 0  # unsandboxed still runs
    finally:
        server.stop()


def test_a_malformed_sandbox_names_what_is_wrong(plain: tuple[Server, Client],
                                                 places: dict[str, Path]) -> None:
    _, client = plain
    bad = read_only(str(places["workspace"]))
    bad["permissions"]["network"] = "disabled"
    ran = run(client, "true", bad)
    assert ran.reply["error"] == {
        "code": -32602,
        "message": "unknown variant `disabled`, expected `restricted` or `enabled`"}


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first), or None if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid``, with its start time (pids are reused, start times not)."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            children.setdefault(int(fields[1]), []).append((int(entry.name), fields[19]))
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        for child, started in children.get(todo.pop(), []):
            found[child] = started
            todo.append(child)
    return found


def _running_sleep(tree: dict[int, str], server: int) -> bool:
    tree.update(_descendants(server))
    for pid in tree:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0"):
                return True
        except OSError:
            pass
    return False


def _still_running(pid: int, started: str) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[19] == started and fields[0] != "Z"


@every_adapter
def test_the_server_takes_its_sandboxed_processes_with_it(
        server_run: tuple[str, tuple[str, ...]], places: dict[str, Path]) -> None:
    server = Server(server_run[0], prefix=server_run[1])
    try:
        client = server.client()
        reply = client.call("process/start", {
            "processId": "sleeper", "argv": ["sleep", "60"], "cwd": "file:///", "tty": False,
            "env": {"PATH": "/usr/bin:/bin"}, "sandbox": read_only(str(places["workspace"]))})
        assert reply["result"]["sandboxType"] == "linuxSeccomp"
        tree: dict[int, str] = {}
        # The stage server, bwrap, bwrap inside its namespaces, and sleep: once sleep runs, as
        # a command killed while bubblewrap sets up may outlive it (bwrap's --die-with-parent
        # is set in its inner process only late, unchecked; the cgroup of a root server is the
        # guard then, test_nothing_outlives.py).
        assert eventually(lambda: _running_sleep(tree, server.process.pid))
    finally:
        server.stop(signal.SIGKILL)
    assert server.process.returncode == -signal.SIGKILL
    for pid, started in tree.items():
        assert eventually(
            lambda pid=pid, started=started: not _still_running(pid, started), wait=15
        ), f"sandboxed {pid} outlived the server"


# -- fs calls under the same policy ---------------------------------------------------------------


def _write(client: Client, path: Path, sandbox: object) -> dict[str, object]:
    return client.call("fs/writeFile",
                       {"path": uri(path), "dataBase64": "eA==", "sandbox": sandbox})


@every_adapter
def test_fs_calls_obey_the_clients_sandbox(plain: tuple[Server, Client],
                                           places: dict[str, Path]) -> None:
    _, client = plain
    workspace = places["workspace"]
    (workspace / ".git").mkdir(exist_ok=True)
    read_only_fs, writing = read_only(str(workspace)), workspace_write(str(workspace))
    erofs = {"code": -32603, "message": "Read-only file system (os error 30)"}
    inside, outside = _target(places, "workspace"), _target(places, "outside")
    assert _write(client, inside, read_only_fs)["error"] == erofs
    assert _write(client, outside, writing)["error"] == erofs
    assert _write(client, workspace / ".git" / "config", writing)["error"] == erofs
    assert not inside.exists() and not outside.exists()
    assert _write(client, inside, writing)["result"] == {}
    assert inside.read_bytes() == b"x"
    # Removing the workspace would remove its read-only .git with it.
    removed = client.call("fs/remove", {"path": uri(workspace), "recursive": True,
                                        "force": True, "sandbox": writing})
    assert removed["error"] == erofs and (workspace / ".git").is_dir()
    secret = workspace / "secret.txt"
    secret.write_text("hunter2")
    denying = profile(str(workspace), [
        {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
        path_entry(str(secret), "none")])
    read = client.call("fs/readFile", {"path": uri(secret), "sandbox": denying})
    assert read["error"] == {"code": -32600, "message": "Permission denied (os error 13)"}
    dynamic = dict(writing, cwd=None)
    assert _write(client, inside, dynamic)["error"] == {
        "code": -32602,
        "message": "file system sandbox context with dynamic permissions requires cwd"}


def test_fs_calls_obey_the_operators_floor(floored: tuple[Server, Client],
                                           places: dict[str, Path]) -> None:
    _, client = floored
    outside, inside = _target(places, "outside"), _target(places, "floor")
    erofs = {"code": -32603, "message": "Read-only file system (os error 30)"}
    assert _write(client, outside, None)["error"] == erofs
    disabled = profile(str(places["floor"]), [], kind="disabled")
    assert _write(client, outside, disabled)["error"] == erofs
    link = places["floor"] / f"out-{uuid.uuid4().hex[:8]}"
    link.symlink_to(places["outside"])
    assert _write(client, link / "x", None)["error"] == erofs
    assert not outside.exists() and not (places["outside"] / "x").exists()
    assert _write(client, inside, None)["result"] == {}


# -- found by attacking it: placeholders, renames, patterns ---------------------------------------


def _open_dir(path: Path) -> Path:
    """A directory anyone may write (so that only the sandbox stands in `nobody`'s way)."""
    path.mkdir()
    path.chmod(0o777)
    return path


def _start(client: Client, process_id: str, script: str, sandbox: object, cwd: Path) -> None:
    reply = client.call("process/start", {
        "processId": process_id, "argv": ["sh", "-c", script], "cwd": uri(cwd), "tty": False,
        "env": {"PATH": "/usr/bin:/bin"}, "sandbox": sandbox})
    assert "result" in reply, reply


def test_a_placeholder_stays_while_any_sandbox_mounts_on_it(plain: tuple[Server, Client],
                                                            places: dict[str, Path]) -> None:
    """A makes the read-only placeholder for a missing .git; B, started meanwhile, finds it
    there. A's end must not remove it from under B, or B could then create .git/hooks."""
    _, client = plain
    workspace = _open_dir(places["workspace"] / f"ws-{uuid.uuid4().hex[:8]}")
    profile_ = workspace_write(str(workspace))
    _start(client, "first", "sleep 0.5", profile_, workspace)
    assert eventually(lambda: (workspace / ".git").is_dir())
    _start(client, "second", "sleep 1.5; mkdir .git/hooks; echo x > .git/hooks/pre-commit",
           profile_, workspace)
    client.events_until_closed("first")
    client.events_until_closed("second")
    assert not (workspace / ".git" / "hooks").exists()
    assert eventually(lambda: not (workspace / ".git").exists())  # and gone once unused


def test_a_stopped_server_leaves_no_placeholder(server_run: tuple[str, tuple[str, ...]],
                                                places: dict[str, Path]) -> None:
    """Sandboxes are cleaned up off the owner thread: the stop still waits for it, so a
    SIGTERM while a sandboxed command runs leaves no placeholder behind."""
    server = Server(server_run[0], prefix=server_run[1])
    workspace = _open_dir(places["workspace"] / f"ws-{uuid.uuid4().hex[:8]}")
    try:
        _start(server.client(), "p", "sleep 30", workspace_write(str(workspace)), workspace)
        assert eventually(lambda: (workspace / ".git").is_dir())
    finally:
        log = server.stop()
    assert server.process.returncode == 0, log
    assert not (workspace / ".git").exists()


def test_removing_a_placeholder_follows_no_symlink(floored: tuple[Server, Client],
                                                   places: dict[str, Path]) -> None:
    """The command swaps the placeholder's parent for a link to elsewhere: the removal at its
    end must not reach through the link."""
    _, client = floored
    root = _open_dir(places["floor"] / f"ws-{uuid.uuid4().hex[:8]}")
    _open_dir(root / "x")
    victim = places["outside"] / ".git"
    victim.mkdir(exist_ok=True)
    sandbox = profile(str(root), [
        {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
        {"path": {"type": "special", "value": {"kind": "project_roots"}}, "access": "write"},
        {"path": {"type": "special", "value": {"kind": "project_roots", "subpath": "x/.git"}},
         "access": "read", "missing_path_behavior": "skip"}])
    ran = run(client, f"mv x x.old; ln -s {places['outside']} x", sandbox, cwd=str(root))
    assert ran.exit_code is not None, ran
    time.sleep(0.3)  # the finalize runs just after the close
    assert victim.is_dir(), "the server removed a directory through a symlink"


def test_a_denied_file_cannot_be_uncovered_by_renaming_its_parent(
        plain: tuple[Server, Client], places: dict[str, Path]) -> None:
    _, client = plain
    workspace = _open_dir(places["workspace"] / f"ws-{uuid.uuid4().hex[:8]}")
    _open_dir(workspace / "conf")
    secret = workspace / "conf" / "secret.env"
    secret.write_text("API_KEY=hunter2\n")
    sandbox = workspace_write(str(workspace))
    sandbox["permissions"]["file_system"]["entries"].append(path_entry(str(secret), "none"))
    moved = run(client, "mv conf conf2 || echo STUCK", sandbox, cwd=str(workspace))
    assert "STUCK" in moved.stdout, moved
    again = run(client, "cat conf2/secret.env conf/secret.env", sandbox, cwd=str(workspace))
    assert "hunter2" not in again.stdout, again


def test_deny_patterns_cover_dot_files_and_do_not_loop_on_symlinks(
        plain: tuple[Server, Client], places: dict[str, Path]) -> None:
    _, client = plain
    workspace = _open_dir(places["workspace"] / f"ws-{uuid.uuid4().hex[:8]}")
    _open_dir(workspace / "secrets")
    (workspace / "secrets" / ".key").write_text("dotted\n")
    (workspace / "a").symlink_to(".")  # `**` through links would never end
    (workspace / "b").symlink_to(".")
    sandbox = workspace_write(str(workspace))
    sandbox["permissions"]["file_system"]["entries"] += [
        {"path": {"type": "glob_pattern", "pattern": f"{workspace}/secrets/*"}, "access": "none"},
        {"path": {"type": "glob_pattern", "pattern": f"{workspace}/**/zzz"}, "access": "none"}]
    began = time.monotonic()
    ran = run(client, "cat secrets/.key", sandbox, cwd=str(workspace))
    assert time.monotonic() - began < 5, "setting the sandbox up took too long"
    assert "dotted" not in ran.stdout, ran
    too_broad = dict(sandbox)
    too_broad["permissions"] = {**sandbox["permissions"], "file_system": {
        "type": "restricted", "entries": [
            {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
            {"path": {"type": "glob_pattern", "pattern": "/**/zzz"}, "access": "none"}]}}
    refused = run(client, "true", too_broad)
    assert refused.reply["error"]["code"] == -32602, refused  # type: ignore[index]
    assert "cannot be enforced" in refused.reply["error"]["message"], refused  # type: ignore[index]


def test_user_keyrings_are_the_sandboxes_own(floored: tuple[Server, Client]) -> None:
    _, client = floored
    name = f"execproto-{uuid.uuid4().hex[:8]}"
    probe = ("import ctypes\n"
             "libc = ctypes.CDLL(None)\n"
             f"libc.syscall(248, b'user', b'{name}', b'secret', 6, ctypes.c_int(-4))\n")
    ran = run(client, f"python3 -c {_quote(probe)}", None)
    assert ran.exit_code == 0, ran
    # Searched for as the server's user: keyctl(KEYCTL_SEARCH, KEY_SPEC_USER_KEYRING, ...).
    libc = ctypes.CDLL(None, use_errno=True)
    found = libc.syscall(250, 10, ctypes.c_int(-4), b"user", name.encode(), 0)
    assert found == -1, "the sandbox wrote into the server user's keyring"
    control = libc.syscall(248, b"user", name.encode(), b"x", 1, ctypes.c_int(-4))  # add_key
    assert libc.syscall(250, 10, ctypes.c_int(-4), b"user", name.encode(), 0) == control
    libc.syscall(250, 21, control)  # KEYCTL_INVALIDATE: leave nothing behind


def test_a_spawn_error_tells_nothing_about_a_hidden_path(
        plain: tuple[Server, Client], places: dict[str, Path]) -> None:
    """The cwd and program are looked up on the host for a clean spawn error; what the policy
    hides must fail exactly as an absent path does, whatever is there."""
    _, client = plain
    workspace = _open_dir(places["workspace"] / f"ws-{uuid.uuid4().hex[:8]}")
    hidden = _open_dir(workspace / "hidden")
    _open_dir(hidden / "sub")
    (hidden / "prog").write_text("#!/bin/sh\necho ran\n")
    (hidden / "prog").chmod(0o755)
    (hidden / "plain").write_text("not a program\n")
    sandbox = read_only(str(workspace))
    sandbox["permissions"]["file_system"]["entries"].append(path_entry(str(hidden), "none"))
    count = iter(range(100))

    def error(argv: list[str], cwd: Path, path: str = "/usr/bin:/bin") -> object:
        reply = start(client, f"hidden-{next(count)}", argv, cwd=uri(cwd), env={"PATH": path},
                      sandbox=sandbox)
        assert "error" in reply, reply
        return reply["error"]

    absent = error(["true"], hidden / "absent")
    assert absent == {"code": -32603, "message": "No such file or directory (os error 2)",
                      "data": {"kind": "spawnNotFound"}}
    for argv, cwd, path in [
        (["true"], hidden / "sub", "/usr/bin:/bin"),  # a directory that is there
        ([str(hidden / "prog")], workspace, "/usr/bin:/bin"),  # a program that is there
        ([str(hidden / "plain")], workspace, "/usr/bin:/bin"),  # there, not executable
        ([str(hidden / "sub")], workspace, "/usr/bin:/bin"),  # there, a directory
        (["prog"], workspace, f"{hidden}:/usr/bin:/bin"),  # there, on the PATH
    ]:
        assert error(argv, cwd, path) == absent, (argv, cwd, path)


def test_under_the_floor_a_workspace_under_tmp_runs_and_a_hidden_cwd_is_absent(
        floored: tuple[Server, Client]) -> None:
    """The floor reads everything, /tmp included: a command in a workspace there runs (it was
    bwrap's raw `Can't chdir` when /tmp was an empty tmpfs), and a cwd the client's profile
    hides fails as an absent one does, not with a message of the sandbox's."""
    _, client = floored
    workspace = Path(tempfile.mkdtemp(prefix="execproto-floor-", dir="/tmp"))
    workspace.chmod(0o777)  # so that only the sandbox stands in `nobody`'s way
    try:
        (workspace / "notes").write_text("here\n")
        hidden = _open_dir(workspace / "hidden")
        ran = run(client, "cat notes", read_only(str(workspace)), cwd=str(workspace))
        assert ran.exit_code == 0 and ran.stdout == "here\n", ran
        sandbox = read_only(str(workspace))
        sandbox["permissions"]["file_system"]["entries"].append(path_entry(str(hidden), "none"))
        replies = [start(client, f"floor-cwd-{name}", ["true"], cwd=uri(cwd), sandbox=sandbox)
                   for name, cwd in (("hidden", hidden), ("absent", workspace / "absent"))]
        assert "error" in replies[0] and replies[0]["error"] == replies[1]["error"], replies
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
