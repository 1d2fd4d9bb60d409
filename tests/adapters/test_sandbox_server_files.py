"""Nothing a sandbox may write runs outside it: the server's interpreter and code, attacked.

The server runs from an environment laid out as a wheel in a venv would be, placed where
Codex's workspace-write profile lets a sandboxed command write (under /tmp, as a `.venv` in
the workspace would be). What the server runs is read-only in every sandbox, whatever the
profile grants; and, should a file it runs change all the same, the stage still runs from
what the server opened at its start: the interpreter replaced, or the stage's source edited,
would run as the server before any namespace exists, so the test checks the host for what
either would have left.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import ADAPTERS, Server, uri
from .sandboxes import needs_bwrap, profile, run, workspace_write
from .wsclient import Client

pytestmark = needs_bwrap

SOURCES = Path(__file__).resolve().parents[2] / "src"


def _install(venv: Path) -> Path:
    """A venv at ``venv`` whose site-packages holds a copy of execproto (as a wheel installs
    it) and links to the test environment's other packages; returns its python."""
    here = Path(sysconfig.get_paths()["purelib"])
    site = venv / here.relative_to(sys.prefix)
    site.mkdir(parents=True)
    for entry in here.iterdir():
        if "execproto" not in entry.name and not entry.name.endswith(".pth"):
            (site / entry.name).symlink_to(entry)
    shutil.copytree(SOURCES / "execproto", site / "execproto",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(SOURCES / "adapters", site / "execproto" / "adapters",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(Path(sys.prefix) / "pyvenv.cfg", venv / "pyvenv.cfg")
    (venv / "bin").mkdir()
    python = venv / "bin" / "python"
    python.symlink_to(os.path.realpath(sys.executable))
    return python


@pytest.fixture(scope="module", params=ADAPTERS)
def installed(request: pytest.FixtureRequest) -> Iterator[tuple[Client, Path, Path]]:
    venv = Path(tempfile.mkdtemp(prefix="execproto-venv-", dir="/tmp"))
    outside = Path(tempfile.mkdtemp(prefix="execproto-outside-", dir="/var/tmp"))
    python = _install(venv)
    # The test's own interpreter is the prefix's next word: the shell drops it.
    server = Server(request.param,
                    prefix=("/bin/sh", "-c", 'shift; exec "$0" "$@"', str(python)))
    yield server.client(), venv, outside
    log = server.stop()
    shutil.rmtree(venv, ignore_errors=True)
    shutil.rmtree(outside, ignore_errors=True)
    assert "Traceback" not in log, log


def _workspace(outside: Path, name: str) -> Path:
    path = outside / name
    path.mkdir()
    return path


def test_what_the_server_runs_is_read_only_in_every_sandbox(
        installed: tuple[Client, Path, Path]) -> None:
    client, venv, outside = installed
    stage = next(venv.rglob("_processes/_stage.py"))
    before = stage.read_bytes()
    root_write = [{"path": {"type": "special", "value": {"kind": "root"}}, "access": "write"}]
    for sandbox in (workspace_write(str(_workspace(outside, "ws-read-only"))),
                    profile(str(outside), root_write)):
        ran = run(client, f"echo x >> {stage}; rm -f {venv}/bin/python; "
                  f"touch {venv}/planted.pth", sandbox)
        assert ran.exit_code != 0, ran
        wrote = client.call("fs/writeFile", {"path": uri(stage), "dataBase64": "eA==",
                                             "sandbox": sandbox})
        assert "error" in wrote, wrote
    assert stage.read_bytes() == before
    assert (venv / "bin" / "python").is_symlink() and not (venv / "planted.pth").exists()


def test_a_writable_root_over_what_the_server_runs_is_refused(
        installed: tuple[Client, Path, Path]) -> None:
    _, venv, _ = installed
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "execproto.adapters", "serve",
                           "--listen", "ws://127.0.0.1:0", "--sandbox", "bwrap",
                           "--writable-root", str(venv)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert f"--writable-root {venv} overlaps {venv}" in done.stderr, done.stderr


def test_path_prepend_is_read_only_in_every_sandbox(tmp_path: Path) -> None:
    prepended = Path(tempfile.mkdtemp(prefix="execproto-prepend-", dir="/tmp"))
    server = Server("asyncio", "--path-prepend", str(prepended))
    try:
        ran = run(server.client(), f"echo 'echo planted' > {prepended}/ls",
                  workspace_write(str(tmp_path)))
        assert ran.exit_code != 0 and not (prepended / "ls").exists(), ran
    finally:
        server.stop()
        shutil.rmtree(prepended, ignore_errors=True)


def test_a_replaced_interpreter_never_runs_outside(installed: tuple[Client, Path, Path]) -> None:
    client, venv, outside = installed
    python, mark = venv / "bin" / "python", outside / "interpreter-ran"
    real = os.path.realpath(sys.executable)
    script = f'#!/bin/sh\ntouch {mark}\nexec {real} "$@"\n'
    # Planted from outside: every sandbox now finds it read-only (the test above), and this
    # holds even where that did not (a file the server runs that no list foresaw).
    python.unlink()
    python.write_text(script)
    python.chmod(0o755)
    sandbox = workspace_write(str(_workspace(outside, "ws-interpreter")))
    ran = run(client, "echo started", sandbox)
    assert ran.stdout == "started\n", ran
    assert not mark.exists(), "a sandbox's interpreter ran outside it"


def test_an_edited_stage_never_runs_outside(installed: tuple[Client, Path, Path]) -> None:
    client, venv, outside = installed
    stage = next(venv.rglob("_processes/_stage.py"))
    mark = outside / "stage-ran"
    line = f"open({str(mark)!r}, 'w').close()"
    # At the module's top level, which the stage server runs when it compiles the stage.
    # Planted from outside, as above.
    edited = stage.read_text().replace("\ndef build(", f"\n{line}\ndef build(")
    assert line in edited
    stage.write_text(edited)
    sandbox = workspace_write(str(_workspace(outside, "ws-stage")))
    ran = run(client, "echo started", sandbox)
    assert ran.stdout == "started\n", ran
    assert not mark.exists(), "a sandbox's edit of the stage ran outside it"


def test_nothing_inside_inherits_the_interpreters_descriptor(
        installed: tuple[Client, Path, Path]) -> None:
    client, _, outside = installed
    sandbox = workspace_write(str(_workspace(outside, "ws-descriptors")))
    ran = run(client, "ls -l /proc/self/fd", sandbox)
    assert ran.exit_code == 0 and "pipe:" in ran.stdout, ran
    assert "python" not in ran.stdout, ran
