"""Nothing a sandbox may write runs outside it: the server's interpreter and code, attacked.

The server runs from an environment laid out as a wheel in a venv would be, placed where
Codex's workspace-write profile lets a sandboxed command write (under /tmp, as a `.venv` in
the workspace would be). A first command replaces the interpreter, or edits the stage's
source; then a second sandboxed command starts. Either would run as the server, before any
namespace exists: the test checks the host for what it would have left.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server
from .sandboxes import needs_bwrap, run, workspace_write
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


@pytest.fixture(scope="module")
def installed() -> Iterator[tuple[Client, Path, Path]]:
    venv = Path(tempfile.mkdtemp(prefix="execproto-venv-", dir="/tmp"))
    outside = Path(tempfile.mkdtemp(prefix="execproto-outside-", dir="/var/tmp"))
    python = _install(venv)
    # The test's own interpreter is the prefix's next word: the shell drops it.
    server = Server("asyncio", prefix=("/bin/sh", "-c", 'shift; exec "$0" "$@"', str(python)))
    yield server.client(), venv, outside
    log = server.stop()
    shutil.rmtree(venv, ignore_errors=True)
    shutil.rmtree(outside, ignore_errors=True)
    assert "Traceback" not in log, log


def _workspace(outside: Path, name: str) -> Path:
    path = outside / name
    path.mkdir()
    return path


def test_a_replaced_interpreter_never_runs_outside(installed: tuple[Client, Path, Path]) -> None:
    client, venv, outside = installed
    python, mark = venv / "bin" / "python", outside / "interpreter-ran"
    real = os.path.realpath(sys.executable)
    script = f'#!/bin/sh\ntouch {mark}\nexec {real} "$@"\n'
    sandbox = workspace_write(str(_workspace(outside, "ws-interpreter")))
    run(client, f"rm -f {python} && printf '%s' '{script}' > {python} && chmod +x {python}",
        sandbox)
    ran = run(client, "echo started", sandbox)
    assert ran.stdout == "started\n", ran
    assert not mark.exists(), "a sandbox's interpreter ran outside it"


def test_an_edited_stage_never_runs_outside(installed: tuple[Client, Path, Path]) -> None:
    client, venv, outside = installed
    stage = next(venv.rglob("_processes/_stage.py"))
    mark = outside / "stage-ran"
    line = f"open({str(mark)!r}, 'w').close()"
    sandbox = workspace_write(str(_workspace(outside, "ws-stage")))
    # Before main(), which execs bubblewrap: what follows it would never run.
    edit = run(client, f'sed -i "s|^def main()|{line}\\ndef main()|" {stage}', sandbox)
    assert line in stage.read_text(), edit
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
