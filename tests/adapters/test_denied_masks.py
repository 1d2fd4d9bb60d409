"""A denied path, as a sandboxed process meets it: masked as the reference masks it.

Measured on the reference (codex 0.171): a denied directory is an empty tmpfs of mode 000,
mounted read-only, so anything beneath it is "Permission denied" to read or write; a denied
file is an empty regular file of mode 000 bound read-only (a read is EACCES, a truncating
write EROFS, an append EACCES); under an absent (`minimal`) root the masks are there all
the same. The same script runs under each shape on both servers and must print the same.

Then the masks are attacked, with the server as root and as nobody: nothing beneath is read,
listed, written or made, the masks cannot be opened up (chmod, remount, unmount), and the
sandboxed process has no capability that would pass a mode of 000 (CAP_DAC_OVERRIDE,
CAP_DAC_READ_SEARCH), as the reference's has none.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reference import CACHE, REFERENCE, WHY_MISSING

from .conftest import Server
from .sandboxes import IS_ROOT, needs_bwrap, path_entry, profile, run
from .test_reference import Reference
from .wsclient import Client

pytestmark = needs_bwrap

DENIED = ("secret", "secret/s.txt", "secret/sub", "secret/sub/deep.txt", "secret/nope",
          "secret.txt")
# Per path: its kind and mode, then each try's error (empty when it worked).
PROBE = """
for p in {paths}; do
  f="$T/$p"
  echo "$p: stat=$(stat -c '%a %F %s' "$f" 2>&1 | sed 's/.*: //')" \\
    "cat=$(cat "$f" 2>&1 >/dev/null | sed 's/.*: //')" \\
    "ls=$(ls "$f" 2>&1 >/dev/null | sed 's/.*: //')" \\
    "trunc=$( (echo x > "$f") 2>&1 | sed 's/.*: //')" \\
    "append=$( (echo x >> "$f") 2>&1 | sed 's/.*: //')" \\
    "mkdir=$(mkdir "$f/d" 2>&1 | sed 's/.*: //')" \\
    "chmod=$(chmod 755 "$f" 2>&1 | sed 's/.*: //')"
done
""".format(paths=" ".join(DENIED))


def _special(kind: str, access: str) -> dict[str, Any]:
    return {"path": {"type": "special", "value": {"kind": kind}}, "access": access}


def shapes(t: Path) -> dict[str, dict[str, Any]]:
    """Where the reference masks a denied path: a writable root with a read-only subpath,
    a read-only root, an absent root; each denies a directory and a file."""
    w = str(t / "w")
    denials = [path_entry(str(t / "secret"), "none"), path_entry(str(t / "secret.txt"), "deny")]
    return {
        "root-write": profile(w, [_special("root", "write"), path_entry(str(t / "ro"), "read"),
                                  *denials]),
        "root-read": profile(w, [_special("root", "read"), *denials,
                                 path_entry(str(t / "secret" / "sub"), "read")]),
        "minimal": profile(w, [_special("minimal", "read"), path_entry(w, "write"), *denials]),
    }


def make_tree(t: Path) -> None:
    if t.exists():
        shutil.rmtree(t)
    for name in ("w", "ro", "secret/sub"):
        (t / name).mkdir(parents=True)
    for name in ("secret/s.txt", "secret/sub/deep.txt", "secret.txt", "ro/r.txt"):
        (t / name).write_text(f"data:{name}")
    for directory in (t, *t.rglob("*")):  # open to nobody: only the sandbox stands between
        directory.chmod(0o777 if directory.is_dir() else 0o666)


def host_tree(t: Path) -> dict[str, str]:
    """The tree's files and directories, but the placeholders a writable `w` holds for
    `.git` and its kind while its process lives (test_sandbox.py sees them removed)."""
    found: dict[str, str] = {}
    # Not through those placeholders: the server removes them once the process is finalized,
    # which may be while this walks.
    for top, dirs, files in os.walk(t):
        dirs[:] = sorted(name for name in dirs if not name.startswith("."))
        for name in dirs:
            found[os.path.relpath(os.path.join(top, name), t)] = "dir"
        for name in files:
            if not name.startswith("."):
                path = Path(top, name)
                found[str(path.relative_to(t))] = path.read_text() if path.is_file() else "dir"
    return dict(sorted(found.items()))


def probe(client: Client, t: Path, shape: str) -> str:
    make_tree(t)
    before = host_tree(t)
    try:
        ran = run(client, PROBE, shapes(t)[shape], cwd=str(t / "w"), env={"T": str(t)})
        assert ran.exit_code == 0, ran
        assert host_tree(t) == before, ran
        return ran.stdout.replace(str(t), "T") + ran.stderr.replace(str(t), "T")
    finally:
        client.close()


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    # Not under /tmp (the reference will not make its helper there), and open to nobody.
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    made = Path(tempfile.mkdtemp(prefix="masks-", dir="/var/tmp"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


@pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)
@pytest.mark.parametrize("shape", list(shapes(Path("/"))))
def test_a_denied_path_answers_as_the_reference(base: Path, shape: str) -> None:
    assert REFERENCE is not None
    t = base / "t"
    reference, ours = Reference(REFERENCE), Server("asyncio")
    try:
        expected = probe(reference.client(), t, shape)
        actual = probe(ours.client(), t, shape)
    finally:
        reference.stop()
        ours.stop()
    assert "secret: stat=0 directory" in expected, expected  # the reference still masks so
    assert actual == expected


NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--")
RUNS = [()] + ([NOBODY] if IS_ROOT else [])


def _nobody_problem() -> str | None:
    done = subprocess.run([*NOBODY, sys.executable, "-c", "import execproto"],
                          capture_output=True, text=True)
    if done.returncode == 0:
        return None
    said = (done.stderr.strip().splitlines() or [""])[-1]
    return f"nobody cannot run execproto here (is the checkout private?): {said}"


@pytest.fixture(scope="module", params=RUNS, ids=lambda prefix: "nobody" if prefix else "self")
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    if request.param and (problem := _nobody_problem()) is not None:
        pytest.skip(problem)
    served = Server("asyncio", prefix=request.param)
    yield served
    log = served.stop()
    assert "Traceback" not in log, log


# Each line tries one way through a mask; none may print a secret or change the host.
ATTACKS = """
cd "$T"
grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status
cat secret/s.txt secret/sub/deep.txt secret.txt
ls -la secret secret/sub
find secret
chmod 777 secret; chmod 666 secret.txt
cat secret/s.txt secret.txt
echo planted > secret/new; mkdir secret/d
echo overwritten > secret.txt; echo appended >> secret.txt
mount -o remount,rw secret; umount secret; umount secret.txt; umount -l secret
cat secret/s.txt secret.txt
mv secret secret2; mv secret.txt secret3.txt; rm -rf secret secret.txt
ln secret.txt w/hard
cp -r secret w/copied; cat w/copied/s.txt
stat -c '%a %F' secret secret.txt
exit 0
"""


@pytest.mark.parametrize("shape", list(shapes(Path("/"))))
def test_masks_hide_and_hold_against_a_sandboxed_process(server: Server, base: Path,
                                                         shape: str) -> None:
    t = base / "attacked"
    make_tree(t)
    before = host_tree(t)
    client = server.client()
    try:
        ran = run(client, ATTACKS, shapes(t)[shape], cwd=str(t / "w"), env={"T": str(t)})
    finally:
        client.close()
    assert "data:" not in ran.stdout + ran.stderr, ran
    assert "s.txt" not in ran.stdout and "deep.txt" not in ran.stdout, ran
    for line in ran.stdout.splitlines():  # no capability at all, bounding set included
        if line.startswith("Cap"):
            assert line.split()[1] == "0000000000000000", ran
    assert "0 directory" in ran.stdout and "0 regular empty file" in ran.stdout, ran
    after = host_tree(t)
    assert after.pop("w/copied", "dir") == "dir", ran  # cp made it, then could read nothing
    assert after == before, ran


def test_a_program_runs_under_minimal_reads(server: Server, base: Path) -> None:
    """`minimal` names /bin and /lib64, which on a merged-/usr host are links to /usr: the
    sandbox has them, as links to what is mounted, so that a program and its loader are
    found; and they lead nowhere else."""
    t = base / "minimal"
    make_tree(t)
    client = server.client()
    try:
        ran = run(client, "echo ran; readlink /bin /lib64; cat \"$T/ro/r.txt\"",
                  shapes(t)["minimal"], cwd=str(t / "w"), env={"T": str(t)})
    finally:
        client.close()
    assert ran.stdout.startswith("ran\n"), ran
    for name in ("bin", "lib64"):
        if os.path.islink(f"/{name}"):
            assert f"{os.readlink(f'/{name}')}\n" in ran.stdout, ran
    assert "data:" not in ran.stdout, ran  # t/ro is not under `minimal`


def test_a_denial_beneath_the_servers_own_closed_directory_holds(server: Server,
                                                                  base: Path) -> None:
    """A denied path the server cannot reach, behind a directory of its own user's of mode
    000, is still masked: the sandbox runs as that user and may open the directory up."""
    if server.process.args[0] != "setpriv":
        pytest.skip("as root every directory is within reach: the case is a server's user's")
    t = base / "closed"
    make_tree(t)
    own = t / "own"
    (own / "secret").mkdir(parents=True)
    (own / "secret" / "s.txt").write_text("data:own")
    for path in (own, own / "secret", own / "secret" / "s.txt"):
        os.chown(path, 65534, 65534)
    own.chmod(0o000)
    sandbox = profile(str(t / "w"), [_special("root", "write"),
                                     path_entry(str(own / "secret"), "none")])
    client = server.client()
    try:
        ran = run(client, 'chmod 700 "$T/own"; cat "$T/own/secret/s.txt"; ls "$T/own/secret"',
                  sandbox, cwd=str(t / "w"), env={"T": str(t)})
    finally:
        client.close()
        own.chmod(0o755)
    assert "data:own" not in ran.stdout and "s.txt" not in ran.stdout, ran
