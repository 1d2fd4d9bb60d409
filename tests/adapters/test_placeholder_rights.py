"""A missing protected path where the server's user may not make it: no placeholder, and the
start goes on; none the sandbox could make either.

A server run as an unprivileged user cannot make the empty directory that holds a missing
protected path (`/etc/ld.so.preload`, a `.codex` under a writable root) in another user's
directory it may not write, and neither can its sandboxes, which run as its user with no
capability over the host's inodes: the start goes on without it (it used to fail: "Permission
denied"). In a directory of the server's own user the sandbox could open the directory up
(chmod) and make the path, so there the placeholder is still made: the stage, in a user
namespace of its own, may write what its user owns whatever the mode.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server
from .sandboxes import IS_ROOT, _special, needs_bwrap, path_entry, profile, run
from .test_denied_masks import NOBODY, _nobody_problem

pytestmark = [needs_bwrap, pytest.mark.skipif(not IS_ROOT, reason="runs a server as nobody")]
NOBODY_ID = 65534


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    if (problem := _nobody_problem()) is not None:
        pytest.skip(problem)
    served = Server("asyncio", prefix=NOBODY)
    yield served
    log = served.stop()
    assert "Traceback" not in log, log


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A workspace of nobody's, with a directory of root's (`theirs`, 0755) and one of
    nobody's that nobody may not write (`own`, 0555)."""
    base = Path(tempfile.mkdtemp(prefix="placeholder-rights-", dir="/var/tmp"))
    base.chmod(0o755)
    w = base / "w"
    (w / "theirs").mkdir(parents=True)
    (w / "own").mkdir()
    for path in (w, w / "own"):
        os.chown(path, NOBODY_ID, NOBODY_ID)
    (w / "own").chmod(0o555)
    yield w
    shutil.rmtree(base, ignore_errors=True)


def _try(server: Server, w: Path, where: str) -> tuple[str, str]:
    """Run, protecting ``w/where/.codex``, a command that opens ``where`` up if it can and
    makes the path: what it said, and what the host has there afterwards."""
    protected = w / where / ".codex"
    sandbox = profile(str(w), [_special("root", "read"), path_entry(str(w), "write"),
                               path_entry(str(protected), "read")])
    client = server.client()
    try:
        ran = run(client, f"chmod 755 '{w / where}' 2>/dev/null; "
                  f"if mkdir '{protected}' 2>/dev/null; then echo made; else echo refused; fi",
                  sandbox, cwd=str(w))
    finally:
        client.close()
    there = "dir" if protected.is_dir() else "missing" if not protected.exists() else "file"
    return ran.stdout + (f"exit {ran.exit_code}: {ran.stderr}" if ran.exit_code else ""), there


def test_no_placeholder_where_the_server_may_not_make_one(server: Server,
                                                           workspace: Path) -> None:
    said, there = _try(server, workspace, "theirs")
    assert (said, there) == ("refused\n", "missing")


def test_a_placeholder_in_the_servers_own_closed_directory_is_still_required(
        server: Server, workspace: Path) -> None:
    said, _ = _try(server, workspace, "own")
    assert said == "refused\n"  # the placeholder's (the server removes it at the finalize)
