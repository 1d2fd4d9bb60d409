"""A symlink one sandboxed command plants where it may write decides nothing for the next one.

Each attack is two commands of one client on a live server: the first (sandboxed, as Codex's
workspace-write profile lets it) replaces a path a rule of the second names with a symlink; the
second then tries to use the grant. The effect is checked on the host. Without a floor (Codex's
profiles alone) and with one (`--sandbox bwrap --writable-root`), for each kind of path a rule
names: the tmpdir, a project root under /tmp, a protected subpath, a deny pattern's match; and
the same for an fs call.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import ADAPTERS, Server, uri
from .sandboxes import Ran, needs_bwrap, path_entry, profile, run, workspace_write
from .wsclient import Client

pytestmark = needs_bwrap

CHANGED = "changed while the sandbox was set up"
ROOT_READ = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
WORKSPACE = {"path": {"type": "special", "value": {"kind": "project_roots"}}, "access": "write"}
TMPDIR = {"path": {"type": "special", "value": {"kind": "tmpdir"}}, "access": "write"}


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    # Under /var/tmp: the workspace-write profile makes /tmp writable, the outside must not be.
    path = Path(tempfile.mkdtemp(prefix="execproto-links-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def places(base: Path) -> Iterator[dict[str, Path]]:
    here = base / uuid.uuid4().hex[:8]
    found = {name: here / name for name in ("workspace", "outside", "floor")}
    for path in found.values():
        path.mkdir(parents=True)
    found["tmp"] = Path(tempfile.mkdtemp(prefix="execproto-links-", dir="/tmp"))
    yield found
    shutil.rmtree(found["tmp"], ignore_errors=True)


@pytest.fixture(scope="module", params=ADAPTERS)
def plain(request: pytest.FixtureRequest) -> Iterator[Client]:
    server = Server(request.param)
    yield server.client()
    log = server.stop()
    assert "Traceback" not in log, log


@pytest.fixture(scope="module")
def floored(base: Path) -> Iterator[tuple[Client, Path]]:
    floor = base / "floor"
    floor.mkdir()
    server = Server("asyncio", "--sandbox", "bwrap", "--writable-root", str(floor))
    yield server.client(), floor
    log = server.stop()
    assert "Traceback" not in log, log


def _refused(ran: Ran, path: Path) -> None:
    reply = ran.reply
    assert reply.get("error", {}).get("code") == -32602, ran
    assert f"{path} {CHANGED}" in reply["error"]["message"], ran


def test_a_tmpdir_made_a_symlink_carries_no_write_out(plain: Client,
                                                      places: dict[str, Path]) -> None:
    tmpdir, outside = places["tmp"], places["outside"]
    env = {"TMPDIR": str(tmpdir)}
    sandbox = workspace_write(str(places["workspace"]))
    # The sandbox cannot remove its tmpdir (its .git and the like are covered): a command of
    # another, unsandboxed, plants the link where a sandbox could write.
    kept = run(plain, f"rm -rf {tmpdir}", sandbox, env=env)
    assert kept.exit_code != 0 and tmpdir.is_dir(), kept
    planted = run(plain, f"rm -rf {tmpdir} && ln -s {outside} {tmpdir}", None, env=env)
    assert planted.exit_code == 0 and tmpdir.is_symlink(), planted
    ran = run(plain, f"echo x > {tmpdir}/written", sandbox, env=env)
    assert not (outside / "written").exists(), ran
    _refused(ran, tmpdir)


def test_a_workspace_under_tmp_made_a_symlink_carries_no_write_out(
        plain: Client, places: dict[str, Path]) -> None:
    workspace, outside = places["tmp"] / "ws", places["outside"]
    workspace.mkdir()
    sandbox = workspace_write(str(workspace))
    planted = run(plain, f"mv {workspace} {workspace}.old && ln -s {outside} {workspace}",
                  sandbox)
    assert planted.exit_code == 0 and workspace.is_symlink(), planted
    ran = run(plain, f"echo x > {workspace}/written", sandbox)
    assert not (outside / "written").exists(), ran
    _refused(ran, workspace)
    # An fs call with the same profile is refused the same way.
    wrote = plain.call("fs/writeFile", {"path": uri(workspace / "written"),
                                        "dataBase64": "eA==", "sandbox": sandbox})
    assert CHANGED in wrote.get("error", {}).get("message", ""), wrote
    assert not (outside / "written").exists()


def test_a_protected_subpath_made_a_symlink_uncovers_nothing(plain: Client,
                                                             places: dict[str, Path]) -> None:
    workspace, secret = places["workspace"], places["outside"] / "secret"
    (secret / "sub").mkdir(parents=True)
    (secret / "sub" / "key").write_text("hunter2")
    (workspace / ".git").mkdir()
    # Codex's workspace-write, its .git read-only, and the secret denied by an explicit entry.
    sandbox = workspace_write(str(workspace))
    sandbox["permissions"]["file_system"]["entries"].append(path_entry(str(secret), "none"))
    # Planted by an unsandboxed command (every writable profile holds .git read-only).
    planted = run(plain, f"rm -rf .git && ln -s {secret}/sub .git", None, cwd=str(workspace))
    assert planted.exit_code == 0 and (workspace / ".git").is_symlink(), planted
    ran = run(plain, "cat .git/key", sandbox, cwd=str(workspace))
    assert "hunter2" not in ran.stdout, ran
    read = plain.call("fs/readFile", {"path": uri(workspace / ".git" / "key"),
                                      "sandbox": sandbox})
    # The link could be replaced by the command: the reference refuses such a sandbox, and so
    # does execproto, its processes and its fs calls (test_root_write_devices.py).
    git = workspace / ".git"
    assert read.get("error", {}).get("message") == (
        f"cannot enforce sandbox read-only path {git} because it crosses writable symlink "
        f"{git}"), read


def test_a_deny_patterns_match_made_a_symlink_hides_nothing_outside(
        plain: Client, places: dict[str, Path]) -> None:
    workspace, visible = places["workspace"], places["outside"] / "visible"
    visible.write_text("still here")
    deny = {"path": {"type": "glob_pattern", "pattern": "**/*.env"}, "access": "deny"}
    sandbox = profile(str(workspace), [ROOT_READ, WORKSPACE, deny])
    planted = run(plain, f"ln -s {visible} planted.env", sandbox, cwd=str(workspace))
    assert planted.exit_code == 0, planted
    ran = run(plain, f"cat {visible}", sandbox, cwd=str(workspace))
    assert ran.stdout == "still here", ran


def test_under_the_floor_a_tmpdir_made_a_symlink_stays_in_the_clients_grant(
        floored: tuple[Client, Path]) -> None:
    # The floor lets every sandbox write its root; this client's profile only its workspace
    # and tmpdir there. Another path in the root is the floor's to grant, not this client's.
    client, floor = floored
    here = floor / uuid.uuid4().hex[:8]
    workspace, tmpdir, other = here / "ws", here / "t", here / "other"
    for path in (workspace, tmpdir, other):
        path.mkdir(parents=True)
    sandbox = profile(str(workspace), [ROOT_READ, WORKSPACE, TMPDIR])
    env = {"TMPDIR": str(tmpdir)}
    planted = run(client, f"rm -rf {tmpdir} && ln -s {other} {tmpdir}",
                  profile(str(here), [ROOT_READ, WORKSPACE]), env=env)
    assert planted.exit_code == 0 and tmpdir.is_symlink(), planted
    ran = run(client, f"echo x > {tmpdir}/written", sandbox, env=env)
    assert not (other / "written").exists(), ran
    _refused(ran, tmpdir)


def test_an_operators_symlink_to_the_workspace_is_followed(plain: Client,
                                                           places: dict[str, Path]) -> None:
    # A link in a place no sandbox writes (here the test's own directory) is the operator's.
    workspace = places["workspace"]
    link = places["outside"] / "ws-link"
    link.symlink_to(workspace)
    ran = run(plain, "echo x > written", workspace_write(str(link)), cwd=str(link))
    assert ran.exit_code == 0, ran
    assert (workspace / "written").read_text() == "x\n"


def test_a_placeholder_made_deep_cannot_be_carried_off_by_renaming_its_new_parent(
        plain: Client, places: dict[str, Path]) -> None:
    # A protected path whose parents are missing too: the stage makes them, and pins them as
    # the server pins those that were there, so `mv a a2` cannot take the cover along and let
    # the command make the protected path afresh for the next command to trust.
    workspace = places["workspace"]
    protected = workspace / "a" / "b" / ".codex"
    sandbox = profile(str(workspace), [ROOT_READ, WORKSPACE, path_entry(str(protected), "read")])
    ran = run(plain, "mv a a2; mkdir -p a/b/.codex && echo planted > a/b/.codex/config",
              sandbox, cwd=str(workspace))
    assert not (protected / "config").exists(), ran
    assert not (workspace / "a2").exists(), ran
