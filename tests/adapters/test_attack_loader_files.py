"""Attack: a sandbox allowed to write `/` (or /etc) changes what the dynamic loader and the C
library load or trust for the server, which runs outside it and, here, as root.

Each attack is one a command could make to run its code, or read the server's secrets, once
the sandbox is gone: create `/etc/ld.so.preload` (every later program the server execs would
load a library of its choosing), write in place to a library the server has mapped or to the
loader's cache, edit `/etc/nsswitch.conf` (its next name lookup would load a module of the
sandbox's), add a CA to the trust store `http/request` verifies with, or change the tools the
cgroup watchdog runs as the server, the locales the stage's interpreter reads, or turn a link
on the way to one (`/lib64` on the way to the loader, `/lib`, a library's `.so.N`). Each must
fail (`_own_files`, `_loaded`: held read-only, a missing preload list held as an empty
directory, the links and directories on the way pinned).

The writes tried change nothing even where they succeed (``: >>`` opens for appending and
writes nothing; a file made is removed at once), so the old code, which let them, leaves the
host as it was. Codex 0.171 lets every one of them in the same sandbox (probed by hand: its
server is one static binary, which no preload list or library affects, but the host's
programs are).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from execproto.adapters._command import _elf, _own_files
from execproto.adapters._processes import _cgroups
from execproto.adapters._processes._cgroups import FIXED_ENV

from .conftest import Server, uri
from .sandboxes import IS_ROOT, _special, needs_bwrap, path_entry, profile, run
from .wsclient import Client

PRELOAD = "/etc/ld.so.preload"
NAMES = ("/etc/nsswitch.conf", "/etc/hosts", "/etc/resolv.conf", "/etc/ld.so.cache")
# Tries each path of "$@" and says, a line each, whether a write could open it.
APPEND = 'for f in "$@"; do if (: >> "$f") 2>/dev/null; then echo "$f: written"; ' \
         'else echo "$f: refused"; fi; done'


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Client, str, int]]:
    workspace = tempfile.mkdtemp(prefix="execproto-loader-", dir="/var/tmp")
    running = Server("asyncio")
    try:
        yield running.client(), workspace, running.process.pid
    finally:
        log = running.stop()
        shutil.rmtree(workspace, ignore_errors=True)
        assert "Traceback" not in log, log


def _root_write(workspace: str) -> dict[str, Any]:
    return profile(workspace, [_special("root", "write")])


def _etc_write(workspace: str) -> dict[str, Any]:
    return profile(workspace, [_special("root", "read"), path_entry("/etc", "write")])


def _appended(client: Client, workspace: str, paths: list[str],
              sandbox: dict[str, Any]) -> dict[str, str]:
    script = "set -- " + " ".join(f"'{path}'" for path in paths) + "; " + APPEND
    ran = run(client, script, sandbox, cwd=workspace)
    assert ran.exit_code == 0, ran
    return dict(line.rsplit(": ", 1) for line in ran.stdout.splitlines())


def _mapped(pid: int) -> list[str]:
    """The libraries process ``pid`` has mapped to run (executable mappings of files)."""
    found: dict[str, None] = {}
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and "x" in fields[1] and ".so" in fields[5]:
                found[fields[5].strip()] = None
    return list(found)


def test_what_the_loader_and_the_c_library_read_is_held() -> None:
    held = set(_own_files.protected())
    cache = _elf.cache()
    interpreter = _elf.read(os.path.realpath(shutil.which("bwrap") or "/bin/sh"))
    assert interpreter is not None and interpreter.interpreter
    expected = [PRELOAD, "/etc/ld.so.cache", "/etc/nsswitch.conf", interpreter.interpreter,
                os.path.realpath(interpreter.interpreter),
                ssl.get_default_verify_paths().openssl_capath]
    for name in ("libc.so.6", "libssl.so.3", "libcrypto.so.3", "libffi.so.8"):
        expected += [path for path in cache.get(name, [])[:1]]
        expected += [os.path.realpath(path) for path in cache.get(name, [])[:1]]
    missing = [path for path in expected if path not in held]
    assert not missing, missing


def test_the_loader_cache_is_read_as_ldconfig_reads_it() -> None:
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    if not os.path.exists(ldconfig):
        pytest.skip("no ldconfig here")
    listed = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=True)
    pairs = {(name.split(" (")[0].strip(), path)
             for name, _, path in (line.partition(" => ") for line in
                                   listed.stdout.splitlines()[1:]) if path}
    assert {(name, path) for name, paths in _elf.cache().items() for path in paths} == pairs


def test_a_programs_needs_are_read_as_readelf_reads_them() -> None:
    program = os.path.realpath(shutil.which("bwrap") or "/bin/sh")
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("no readelf here")
    shown = subprocess.run([readelf, "-d", "-l", program], capture_output=True, text=True,
                           check=True).stdout
    facts = _elf.read(program)
    assert facts is not None
    assert facts.needed == re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", shown)
    assert re.findall(r"Requesting program interpreter: (.*)\]", shown) == [facts.interpreter]


@needs_bwrap
@pytest.mark.parametrize("where", ["root", "etc"])
def test_no_preload_list_can_be_made(server: tuple[Client, str, int], where: str) -> None:
    client, workspace, _ = server
    if os.path.lexists(PRELOAD) and not os.path.isdir(PRELOAD):
        pytest.skip(f"this host has a {PRELOAD} of its own")
    sandbox = _root_write(workspace) if where == "root" else _etc_write(workspace)
    try:
        ran = run(client, f"if (: > {PRELOAD}) 2>/dev/null; then echo made; rm -f {PRELOAD}; "
                  f"else echo refused; fi", sandbox, cwd=workspace)
        assert ran.stdout == "refused\n", ran
        # The placeholder the sandbox met is gone with it (or is another live sandbox's).
        assert not os.path.isfile(PRELOAD)
        reply = client.call("fs/writeFile", {"path": uri(PRELOAD), "dataBase64": "",
                                             "sandbox": sandbox})
        assert "error" in reply, reply
        assert not os.path.isfile(PRELOAD)
    finally:
        if os.path.isfile(PRELOAD) and os.path.getsize(PRELOAD) == 0:
            os.remove(PRELOAD)  # the old code's, empty: nothing any program would load


@needs_bwrap
def test_no_library_the_server_maps_can_be_written(server: tuple[Client, str, int]) -> None:
    client, workspace, pid = server
    mapped = _mapped(pid)
    libc = [path for path in mapped if "/libc.so" in path or "/libc-" in path]
    assert libc, mapped
    cache = _elf.cache()
    names = [path for name in ("libc.so.6", "libssl.so.3", "libffi.so.8")
             for path in cache.get(name, [])[:1]]
    paths = [*mapped, *names, *(os.path.realpath(path) for path in names)]
    said = _appended(client, workspace, paths, _root_write(workspace))
    assert set(said.values()) == {"refused"}, said


@needs_bwrap
@pytest.mark.parametrize("where", ["root", "etc"])
def test_the_name_service_and_the_loader_cache_cannot_be_edited(
        server: tuple[Client, str, int], where: str) -> None:
    client, workspace, _ = server
    sandbox = _root_write(workspace) if where == "root" else _etc_write(workspace)
    paths = [path for path in NAMES if os.path.exists(path)]
    said = _appended(client, workspace, [*paths, *map(os.path.realpath, paths)], sandbox)
    assert set(said.values()) == {"refused"}, said


@needs_bwrap
@pytest.mark.parametrize("where", ["root", "etc"])
def test_no_ca_can_be_added_to_the_trust_store(server: tuple[Client, str, int],
                                                where: str) -> None:
    client, workspace, _ = server
    found = ssl.get_default_verify_paths()
    store = [path for path in (found.openssl_cafile, found.openssl_capath, found.cafile,
                               found.capath) if path and os.path.exists(path)]
    if not store:
        pytest.skip("no trust store here")
    directories = sorted({os.path.realpath(path) for path in store if os.path.isdir(path)})
    if where == "etc" and not any(path.startswith("/etc/") for path in directories):
        pytest.skip("the trust store is not in /etc here")
    files = [os.path.realpath(path) for path in store if os.path.isfile(path)]
    sandbox = _root_write(workspace) if where == "root" else _etc_write(workspace)
    made = [os.path.join(directory, "execproto-probe.pem") for directory in directories]
    try:
        said = _appended(client, workspace, [*files, *made], sandbox)
        assert set(said.values()) == {"refused"}, said
    finally:
        for path in made:
            if os.path.isfile(path) and os.path.getsize(path) == 0:
                os.remove(path)  # the old code's, empty: no certificate in it


@needs_bwrap
def test_what_the_stage_and_the_watchdog_read_cannot_be_changed(
        server: tuple[Client, str, int]) -> None:
    client, workspace, _ = server
    held = _own_files.protected()
    gconv = [path for path in held if path.endswith("/gconv")]
    tools = [os.path.realpath(found) for name in ("rmdir", "find")
             if (found := shutil.which(name, path=_own_files.SYSTEM_PATH))]
    locales = [path for path in ("/usr/lib/locale",) if os.path.isdir(path)]
    made = [os.path.join(directory, "execproto-probe") for directory in (*gconv, *locales)]
    try:
        said = _appended(client, workspace, [*tools, *made], _root_write(workspace))
        assert set(said.values()) == {"refused"}, said
    finally:
        for path in made:
            if os.path.isfile(path) and os.path.getsize(path) == 0:
                os.remove(path)


@needs_bwrap
def test_the_rest_of_the_system_stays_writable(server: tuple[Client, str, int]) -> None:
    """Only what the server loads is held: a sandbox allowed `/` still installs elsewhere."""
    client, workspace, _ = server
    if not IS_ROOT:
        pytest.skip("only root may write /usr and /etc")
    made = ["/usr/local/lib/execproto-probe", "/etc/execproto-probe"]
    try:
        said = _appended(client, workspace, made, _root_write(workspace))
        assert set(said.values()) == {"written"}, said
    finally:
        for path in made:
            if os.path.isfile(path):
                os.remove(path)


def _links_on_the_way(path: str) -> list[str]:
    """Every symlink met resolving ``path``, shallow first."""
    links: list[str] = []
    here = ""
    for part in path.strip("/").split("/"):
        here = f"{here}/{part}"
        if os.path.islink(here):
            links.append(here)
            here = os.path.realpath(here)
    return links


@needs_bwrap
def test_no_link_on_the_way_to_the_loader_or_a_library_can_be_turned(
        server: tuple[Client, str, int]) -> None:
    """Turned, `/lib64` would have the next program the server execs (bubblewrap itself,
    as root) load the sandbox's loader; `/lib` or `libz.so.1`, the sandbox's library."""
    client, workspace, _ = server
    interpreter = _elf.read(os.path.realpath(shutil.which("bwrap") or "/bin/sh"))
    assert interpreter is not None
    cache = _elf.cache()
    names = [interpreter.interpreter, *(path for name in ("libc.so.6", "libz.so.1")
                                        for path in cache.get(name, [])[:1])]
    links = list(dict.fromkeys(link for name in names for link in _links_on_the_way(name)))
    if not links:
        pytest.skip("the loader and the libraries are reached through no link here")
    # Each link made again as it is, and renamed over itself: the host is left as it was.
    script = "; ".join(f"ln -sfn '{os.readlink(link)}' '{link}.probe' && "
                       f"if mv -T '{link}.probe' '{link}' 2>/dev/null; then echo '{link}: "
                       f"turned'; else rm -f '{link}.probe'; echo '{link}: refused'; fi"
                       for link in links)
    ran = run(client, script, _root_write(workspace), cwd=workspace)
    assert "turned" not in ran.stdout, ran


def test_the_watchdogs_tools_are_files_and_held() -> None:
    held = set(_own_files.protected())
    for tool in _cgroups.TOOLS:
        assert os.path.isabs(tool) and os.path.realpath(tool) == tool, tool
        assert tool in held, f"{tool} runs as the server and is not held read-only"

@needs_bwrap
def test_a_tool_planted_on_path_never_runs_when_the_watchdog_ends(tmp_path: Path) -> None:
    """The cgroup watchdog runs its tools as the server once the server is gone: by name,
    found on PATH, whose /usr/sbin comes first, a sandbox allowed `/` (or /usr/sbin) could
    have put its own rmdir there for it."""
    directories = FIXED_ENV["PATH"].split(":")
    real = shutil.which("rmdir", path=FIXED_ENV["PATH"])
    before = directories[:directories.index(os.path.dirname(real))] if real else []
    if not before or not IS_ROOT:
        pytest.skip("no place on PATH before rmdir that a root sandbox could write")
    planted = os.path.join(before[0], "rmdir")
    workspace = tmp_path / "work"
    workspace.mkdir()
    mark = tmp_path / "planted-ran"
    running = Server("asyncio")
    with open(f"/proc/{running.process.pid}/cgroup") as table:
        own = next(line.split("::", 1)[1].strip() for line in table if line.startswith("0::"))
    tree = f"{_cgroups._hierarchy()}{own.rstrip('/')}/execproto-{running.process.pid}-1"
    # Only the server's own watchdog counts: the plant passes every other caller through.
    script = (f"printf '#!/bin/sh\\ncase \"$1\" in {tree}*) echo ran >> {mark};; esac\\n"
              f"exec {real} \"$@\"\\n' > {planted} && chmod 755 {planted} && echo planted")
    try:
        # A root over the place is enough; a root-write sandbox would also leave the server a
        # preload placeholder to remove, which the kill below could cut short.
        sandbox = profile(str(workspace), [_special("root", "read"),
                                           path_entry(os.path.dirname(planted), "write")])
        ran = run(running.client(), script, sandbox, cwd=str(workspace))
        assert ran.stdout == "planted\n", ran
        if not os.path.isdir(tree):
            pytest.skip("the server has no cgroup tree here: no watchdog runs")
        running.stop(signal.SIGKILL)  # a clean stop removes the tree itself
        for _ in range(100):  # the watchdog removes the tree with its last tool
            if not os.path.exists(tree):
                break
            time.sleep(0.1)
        assert not os.path.exists(tree), "the watchdog did not remove the tree"
    finally:
        running.stop()
        if os.path.isfile(planted):
            os.remove(planted)
    assert not mark.exists(), "a tool a sandbox planted ran as the server"


@needs_bwrap
def test_no_standard_library_zip_can_be_put_above_the_interpreter(
        server: tuple[Client, str, int]) -> None:
    """Every interpreter the server starts later takes the first `lib/python3XY.zip` found in
    its directory or one above as its prefix, and runs its modules first: planted above the
    held installation, one would run as the server. A directory there is harmless (the
    search takes a file only), so the attempt makes one and a file inside."""
    client, workspace, _ = server
    interpreter = os.path.realpath(sys.executable)
    landmark = _own_files.zip_landmarks([interpreter])[-1]  # the highest: /root/lib/...
    missing = [path for path in (os.path.dirname(landmark), landmark)
               if not os.path.lexists(path)]
    if landmark not in missing:
        pytest.skip(f"{landmark} is there already")
    # Each directory the sandbox itself makes is named, so that only those are removed after:
    # every server started by this interpreter holds the same landmarks, so a placeholder
    # there may be another's (the other shard's live root-write sandbox has one mounted).
    script = ("for d in " + " ".join(f"'{path}'" for path in missing) +
              '; do mkdir "$d" 2>/dev/null && echo "made $d"; done; '
              f"if (: > '{landmark}/x') 2>/dev/null; then echo made; else echo refused; fi")
    ran = run(client, script, _root_write(workspace), cwd=workspace)
    with contextlib.suppress(OSError):  # the old code's: the test fails below all the same
        if ran.stdout.splitlines()[-1:] == ["made"]:
            os.remove(os.path.join(landmark, "x"))
        for path in reversed(re.findall(r"^made (.+)$", ran.stdout, re.M)):
            os.rmdir(path)
    assert ran.stdout == "refused\n", ran
