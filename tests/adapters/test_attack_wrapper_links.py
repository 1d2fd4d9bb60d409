"""The programs the server runs outside every sandbox (the cgroup wrapper's shell, setpriv,
setsid, bubblewrap, pasta) are run as the files they are, found once at start: a sandbox with
a writable root may replace a link to one (`/usr/bin/pasta -> passt`, `/bin/sh -> dash`, or
an operator's PATH directory of links), never the file, which is held read-only; had the
server run the link, the next start would have run the sandbox's program as the server."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from execproto.adapters._command import _own_files
from execproto.adapters._processes import _cgroups, _posix

from .conftest import Server
from .sandboxes import _special, needs_bwrap, profile, run, workspace_write

WRAPPERS = ("setpriv", "setsid", "bwrap", "pasta")


def test_every_wrapper_is_a_file_and_held() -> None:
    held = set(_own_files.protected())
    for path in (_cgroups.SHELL, _cgroups.SETSID, _posix._SETPRIV, _posix._SETSID):
        if path is None:
            continue
        assert not os.path.islink(path) and os.path.realpath(path) == path, path
        assert path in held, f"{path} runs outside every sandbox and is not held read-only"


@needs_bwrap
def test_a_writable_root_cannot_turn_a_link_the_server_runs(tmp_path: Path) -> None:
    links = tmp_path / "bin"  # the operator's PATH leads with links to the wrappers
    links.mkdir()
    for name in WRAPPERS:
        found = shutil.which(name)
        if found is None:
            pytest.skip(f"{name} is not installed")
        (links / name).symlink_to(os.path.realpath(found))
    marker = tmp_path / "ran-outside"
    fake = tmp_path / "fake"
    fake.write_text(f"#!/bin/sh\necho \"$0\" >> {marker}\nexit 1\n")
    fake.chmod(0o755)
    workspace = tmp_path / "work"
    workspace.mkdir()
    server = Server("asyncio", env={"PATH": f"{links}:{os.environ['PATH']}"})
    try:
        turn = "; ".join(f"ln -sfn {fake} {links}/{name}" for name in WRAPPERS)
        root_write = profile(str(workspace), [_special("root", "write")])
        turned = run(server.client(), f"{turn} && echo turned", root_write, cwd=str(workspace))
        # Turned, or refused: the links on the way to what the server runs are pinned now.
        assert "turned" in turned.stdout or "busy" in turned.stderr, turned
        # The next starts, in another session: a sandbox (setpriv, setsid, bubblewrap) and
        # one with the network, whose session network starts pasta.
        with_network = profile(str(workspace), [_special("root", "read")], network="enabled")
        for sandbox in (workspace_write(str(workspace)), with_network):
            ran = run(server.client(), "echo ran", sandbox, cwd=str(workspace))
            assert "ran" in ran.stdout, ran
    finally:
        server.stop()
    assert not marker.exists(), f"the server ran a sandbox's program: {marker.read_text()}"
