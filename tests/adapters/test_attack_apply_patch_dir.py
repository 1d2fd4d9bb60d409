"""Attack: the apply_patch directory (`_codex_path`) and its parent, as a sandbox that can write
that parent leaves them. Codex's workspace-write profile makes ``/tmp`` (and ``$TMPDIR``)
writable, and the directory goes in the temporary directory: whatever a sandbox plants there
is what the next server's start sweeps, and what another server's processes run.

- A ``.lock`` planted as a FIFO must not hang the next server's start (the sweep opens it).
- The sweep removes a planted directory without following the links in it.
- A sandbox of another server on the host (or any Codex sandbox with /tmp writable, a local
  ``codex`` of the same user's) must not be able to change the programs this server's
  processes run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from execproto import path_from_uri

from .conftest import Server, start, uri
from .sandboxes import needs_bwrap, workspace_write
from .wsclient import Client, output_of

MAKE = ("import sys, tempfile; tempfile.tempdir = sys.argv[1]; "
        "from execproto.adapters._command import _codex_path; print(_codex_path.make())")


def _make_in(parent: Path) -> subprocess.CompletedProcess[str]:
    """A server's start making its directory in ``parent`` (the sweep first), bounded in time:
    a start that hangs fails the test rather than the run. ``parent`` is both the temporary
    directory and the cache's (it is named ``execproto``), wherever the directory goes."""
    assert parent.name == "execproto"
    env = {**os.environ, "XDG_CACHE_HOME": str(parent.parent)}
    env.pop("XDG_RUNTIME_DIR", None)
    return subprocess.run([sys.executable, "-c", MAKE, str(parent)], capture_output=True,
                          text=True, timeout=30, env=env)


def test_a_fifo_planted_as_a_lock_does_not_hang_the_next_start(tmp_path: Path) -> None:
    parent = tmp_path / "execproto"
    planted = parent / "execproto-path-planted"
    planted.mkdir(parents=True)
    os.mkfifo(planted / ".lock")
    try:
        made = _make_in(parent)
    except subprocess.TimeoutExpired:
        raise AssertionError("the sweep blocked opening a FIFO planted as .lock") from None
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip().startswith(str(parent / "execproto-path-"))


def test_the_sweep_follows_no_link_out_of_a_planted_directory(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("kept")
    parent = tmp_path / "execproto"
    parent.mkdir()
    planted = parent / "execproto-path-planted"
    (planted / "sub").mkdir(parents=True)
    (planted / ".lock").write_text("")
    (planted / "into-victim").symlink_to(victim)
    (planted / "sub" / "deeper").symlink_to(victim / "keep.txt")
    (parent / "execproto-path-linked").symlink_to(victim)  # the directory itself a link
    made = _make_in(parent)
    assert made.returncode == 0, made.stderr
    assert not planted.exists()  # swept: nobody held its lock
    assert (victim / "keep.txt").read_text() == "kept"
    assert (parent / "execproto-path-linked").is_symlink()


def _ran(c: Client, process_id: str, argv: list[str], **extra: Any) -> tuple[bytes, bytes]:
    reply = start(c, process_id, argv, **extra)
    assert "result" in reply, reply
    output = output_of(c.events_until_closed(process_id, 60))
    return output.get("stdout", b""), output.get("stderr", b"")


@needs_bwrap
def test_another_servers_sandbox_cannot_change_what_this_server_runs(tmp_path: Path) -> None:
    """Two servers of one user, each with its temporary directory where the operator's is
    (here ``shared``, standing for /tmp): a workspace-write command of the second, whose
    profile makes that directory writable, tries every apply_patch directory in it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    env = {"TMPDIR": str(shared)}
    first = Server("asyncio", "--log-level", "warning", env=env)
    second = Server("asyncio", "--log-level", "warning", env=env)
    try:
        c = first.client()
        made = path_from_uri(c.result("environment/info", {})["prependPathDirs"][0])
        program = Path(made, "apply_patch")
        before = program.read_bytes()
        attack = ('for d in "$TMPDIR"/execproto-path-* "$HOME"/.cache/execproto/execproto-path-* '
                  '"${XDG_RUNTIME_DIR:-/nonexistent}"/execproto-path-*; do '
                  "printf '#!/bin/sh\\necho planted\\n' > \"$d/apply_patch\" 2>/dev/null; "
                  "chmod u+w \"$d\" 2>/dev/null; "
                  "mv \"$d/apply_patch\" \"$d/gone\" 2>/dev/null; "
                  "printf '#!/bin/sh\\necho planted\\n' > \"$d/apply_patch\" 2>/dev/null; "
                  "chmod 755 \"$d/apply_patch\" 2>/dev/null; done; true")
        other = second.client()
        _ran(other, "attack", ["bash", "-c", attack], cwd=uri(str(workspace)),
             env={"TMPDIR": str(shared), "HOME": os.environ.get("HOME", "/root"),
                  "PATH": "/usr/bin:/bin"},
             sandbox=workspace_write(str(workspace)))
        other.close()
        assert program.read_bytes() == before, program.read_text()
        out, err = _ran(c, "run", ["sh", "-c", "apply_patch </dev/null; true"],
                        cwd=uri(str(workspace)), env={"PATH": f"{made}:/usr/bin:/bin"})
        assert b"planted" not in out, (out, err)
        c.close()
    finally:
        second.stop()
        first.stop()
