"""The directory of programs a model expects on PATH (`_codex_path`): what it holds, where it
goes, that it is removed, and that on a server it leads the inherited PATH, is announced in
``prependPathDirs``, runs in a sandbox and cannot be changed from one.

The server tests give the directory to ``serve`` with ``--path-prepend``, the way `serve`'s
own one goes into `Config.path_prepend` and `Config.protected`.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reference import REFERENCE, WHY_MISSING

from execproto import path_from_uri
from execproto.adapters._command import _codex_path

from .conftest import Server, start, uri
from .sandboxes import needs_bwrap, workspace_write
from .wsclient import Client, output_of

POLICY = {"inherit": "all", "ignoreDefaultExcludes": False, "exclude": [], "set": {},
          "includeOnly": []}
PATCH = "*** Begin Patch\n*** Add File: made.txt\n+made by apply_patch\n*** End Patch\n"
HEREDOC = f"apply_patch <<'EOF'\n{PATCH}EOF\n"
SUMMARY = b"Success. Updated the following files:\nA made.txt\n"


@pytest.fixture
def made() -> Iterator[str]:
    directory = _codex_path.make()
    yield directory
    _codex_path.remove(directory)


def test_it_holds_apply_patch_and_its_alias(made: str, tmp_path: Path) -> None:
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o755
    program = Path(made, "apply_patch")
    assert stat.S_IMODE(program.stat().st_mode) == 0o755
    assert os.readlink(Path(made, "applypatch")) == "apply_patch"
    for name in ("apply_patch", "applypatch"):
        done = subprocess.run(["sh", "-c", HEREDOC.replace("apply_patch", name, 1)],
                              cwd=tmp_path, capture_output=True, timeout=60,
                              env={"PATH": f"{made}:/usr/bin:/bin"})
        assert (done.returncode, done.stdout, done.stderr) == (0, SUMMARY, b"")
        (tmp_path / "made.txt").unlink()


def test_it_links_ripgrep_when_given(tmp_path: Path) -> None:
    rg = tmp_path / "rg"
    rg.write_text("#!/bin/sh\necho ripgrep here\n")
    rg.chmod(0o755)
    directory = _codex_path.make(rg=str(rg))
    try:
        assert os.readlink(os.path.join(directory, "rg")) == str(rg)
        done = subprocess.run(["rg"], capture_output=True, timeout=30,
                              env={"PATH": f"{directory}:/usr/bin:/bin"})
        assert done.stdout == b"ripgrep here\n"
    finally:
        _codex_path.remove(directory)
    assert not os.path.lexists(directory)


def test_without_ripgrep_there_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_codex_path, "which", lambda name: None)
    directory = _codex_path.make()
    try:
        assert sorted(os.listdir(directory)) == [".lock", "apply_patch", "applypatch"]
    finally:
        _codex_path.remove(directory)


def test_the_program_ignores_the_callers_python_environment(made: str, tmp_path: Path) -> None:
    """PYTHONPATH, PYTHONSTARTUP and the like of the caller change nothing it imports."""
    planted = tmp_path / "planted"
    (planted / "execproto").mkdir(parents=True)
    (planted / "execproto" / "__init__.py").write_text("raise SystemExit('planted')\n")
    env = {"PATH": f"{made}:/usr/bin:/bin", "PYTHONPATH": str(planted),
           "PYTHONHOME": str(planted), "PYTHONSTARTUP": str(planted / "x.py")}
    done = subprocess.run(["sh", "-c", HEREDOC], cwd=tmp_path, capture_output=True,
                          timeout=60, env=env)
    assert (done.returncode, done.stdout, done.stderr) == (0, SUMMARY, b"")


def test_an_interpreter_path_with_a_blank_goes_through_sh(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _codex_path.program_text("/opt/a python/bin/python3")
    assert text.startswith("#!/bin/sh\n")
    assert "\nexec '/opt/a python/bin/python3' -I -c 'import sys;" in text
    # The same form, run (with an interpreter path a #! line could take, forced through sh).
    monkeypatch.setattr(_codex_path, "SHEBANG_MAX", 0)
    text = _codex_path.program_text()
    assert text.startswith("#!/bin/sh\n")
    program = tmp_path / "apply_patch"
    program.write_text(text)
    program.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run([str(program), PATCH], cwd=work, capture_output=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, SUMMARY, b"")


def test_it_goes_where_no_writable_root_is(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # The cache first: Codex's workspace-write sandboxes (of any server) may write /tmp.
    directory = _codex_path.make()
    try:
        assert os.path.dirname(directory) == str(tmp_path / "cache" / "execproto")
    finally:
        _codex_path.remove(directory)
    directory = _codex_path.make(avoid=[str(tmp_path / "cache")])
    try:
        assert os.path.dirname(directory) == str(temporary)
    finally:
        _codex_path.remove(directory)
    with pytest.raises(OSError, match="writable-root"):
        _codex_path.make(avoid=[str(tmp_path)])


def test_a_dead_servers_directory_is_swept_and_a_live_ones_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # where they all go, the sweep too
    code = ("import os, sys, tempfile; tempfile.tempdir = sys.argv[1]; "
            "from execproto.adapters._command import _codex_path; "
            "print(_codex_path.make(), flush=True); {end}")
    # One whose server is alive, and one whose died without removing it (os._exit: no atexit;
    # its making kept the first, which is locked).
    alive = subprocess.Popen([sys.executable, "-c", code.format(end="sys.stdin.read()"),
                              str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert alive.stdout is not None
        living = alive.stdout.readline().strip()
        dead = subprocess.run([sys.executable, "-c", code.format(end="os._exit(0)"),
                               str(tmp_path)], capture_output=True, text=True, timeout=60,
                              check=True).stdout.strip()
        assert os.path.isdir(dead) and os.path.isdir(living)
        directory = _codex_path.make()
        _codex_path.remove(directory)
        assert not os.path.lexists(dead)
        assert os.path.isdir(living)
    finally:
        alive.communicate("", timeout=30)
    # A server that exits removes its own.
    assert not os.path.lexists(living)


def test_the_directory_is_removed_when_the_server_exits(tmp_path: Path) -> None:
    code = ("import tempfile, sys; tempfile.tempdir = sys.argv[1]; "
            "from execproto.adapters._command import _codex_path; print(_codex_path.make())")
    made = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=60, check=True,
                          env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)}).stdout.strip()
    assert made.startswith(str(tmp_path)) and not os.path.lexists(made)


# -- on a server ----------------------------------------------------------------------------------


def ran(c: Client, process_id: str, argv: list[str], **extra: Any) -> tuple[bytes, bytes, Any]:
    reply = start(c, process_id, argv, **extra)
    assert "result" in reply, reply
    output = output_of(c.events_until_closed(process_id))
    read = c.call("process/read", {"processId": process_id, "afterSeq": 0})["result"]
    return output.get("stdout", b""), output.get("stderr", b""), read["exitCode"]


@pytest.fixture
def serving(adapter: str) -> Iterator[tuple[Server, str]]:
    """A server with the directory it makes itself (no --no-apply-patch), and that directory:
    the first of prependPathDirs."""
    server = Server(adapter, "--log-level", "warning")
    c = server.client()
    made = path_from_uri(c.result("environment/info", {})["prependPathDirs"][0])
    c.close()
    yield server, made
    server.stop()


def test_it_leads_the_inherited_path_and_is_announced(serving: tuple[Server, str],
                                                      tmp_path: Path) -> None:
    server, made = serving
    c = server.client()
    assert c.result("environment/info", {})["prependPathDirs"] == [uri(made)]
    assert Path(made, "apply_patch").is_file() and os.path.dirname(made) != str(tmp_path)
    out, err, code = ran(c, "path", ["sh", "-c", 'printf %s "$PATH"'], env={}, envPolicy=POLICY)
    assert out.decode().split(":")[0] == made, (out, err)
    out, err, code = ran(c, "patch", ["bash", "-c", HEREDOC], cwd=uri(str(tmp_path)), env={},
                         envPolicy=POLICY)
    assert (out, err, code) == (SUMMARY, b"", 0)
    assert (tmp_path / "made.txt").read_text() == "made by apply_patch\n"


@needs_bwrap
def test_in_a_sandbox_it_runs_and_cannot_be_changed(serving: tuple[Server, str],
                                                    tmp_path: Path) -> None:
    server, made = serving
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    before = {name: Path(made, name).read_bytes() for name in ("apply_patch",)}
    c = server.client()
    sandbox = workspace_write(str(workspace))
    out, err, code = ran(c, "patch", ["bash", "-c", HEREDOC], cwd=uri(str(workspace)), env={},
                         envPolicy=POLICY, sandbox=sandbox)
    assert (out, err, code) == (SUMMARY, b"", 0)
    assert (workspace / "made.txt").read_text() == "made by apply_patch\n"
    # The sandbox may write /tmp, where the directory is, but not the directory.
    attacks = [
        f"echo 'echo owned' > {made}/apply_patch",
        f"rm -f {made}/apply_patch",
        f"ln -sf /bin/true {made}/apply_patch",
        f"echo x > {made}/rg-planted",
        f"mv {made} {made}.moved",
        f"rm -rf {made}",
        f"chmod 777 {made}",
        f"mv {os.path.dirname(made)} /tmp/moved-parent-{os.getpid()}" if os.path.dirname(
            made) != "/tmp" else "false",
    ]
    for index, attack in enumerate(attacks):
        out, err, code = ran(c, f"attack-{index}", ["sh", "-c", attack],
                             cwd=uri(str(workspace)), env={}, envPolicy=POLICY, sandbox=sandbox)
        assert code != 0, (attack, out, err)
    assert {name: Path(made, name).read_bytes() for name in before} == before
    assert sorted(os.listdir(made)) == sorted(
        [".lock", "apply_patch", "applypatch", *(["rg"] if os.path.lexists(f"{made}/rg")
                                                 else [])])
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o755


@pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)
def test_the_same_heredoc_as_on_the_reference(serving: tuple[Server, str],
                                              tmp_path: Path) -> None:
    """What the model does, `apply_patch <<'EOF'` from bash with the inherited PATH, on both."""
    from .test_reference import Reference

    assert REFERENCE is not None
    reference = Reference(REFERENCE)
    results = []
    try:
        for name, client in (("reference", reference.client()), ("ours", serving[0].client())):
            work = tmp_path / name
            work.mkdir()
            (work / "f.txt").write_text("one\r\ntwo\r\n")
            script = ("apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: f.txt\n@@\n-two\n"
                      "+2\n*** Add File: g.txt\n+g\n*** Delete File: nope\n*** End Patch\nEOF\n")
            out, err, code = ran(client, "p", ["bash", "-c", script], cwd=uri(str(work)),
                                 env={}, envPolicy=POLICY)
            err = err.replace(str(work).encode(), b"{WORK}")
            results.append((out, err, code, sorted((p.name, p.read_bytes())
                                                   for p in work.iterdir())))
    finally:
        reference.stop()
    assert results[1] == results[0]
    assert results[0][1] == b"Failed to delete file {WORK}/nope\n"


def test_serve_makes_it_removes_it_and_can_do_without(adapter: str) -> None:
    server = Server(adapter, "--log-level", "warning")
    c = server.client()
    made = path_from_uri(c.result("environment/info", {})["prependPathDirs"][0])
    c.close()
    assert os.access(Path(made, "apply_patch"), os.X_OK)
    server.stop()
    assert not os.path.lexists(made), "the directory outlived its server"
    server = Server(adapter, "--log-level", "warning", "--no-apply-patch")
    c = server.client()
    try:
        assert c.result("environment/info", {})["prependPathDirs"] == []
    finally:
        c.close()
        server.stop()
