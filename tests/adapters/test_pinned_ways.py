"""The links and directories on the way to a held file, where a sandbox may write beside them,
are pinned under every shape of root: renamed, removed or replaced, one would lead the held
name elsewhere (`_bwrap._Ways`; the loader's `/lib64` is test_attack_loader_files's case).

Here the held name is the server's own file reached through a workspace (`held -> real`, as a
server run from a venv in its workspace reaches its interpreter), the workspace is writable,
and the root is the host's read-only, or absent (`minimal`): the pins must be made once the
workspace's own mount is, else they would lie beneath it, unseen. Run through the stage
server as a start is, the file held as the server's own files are (a read cap).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from execproto import Policy, SpawnSpec
from execproto._links import _followed_caps
from execproto.adapters._processes import _bwrap, _placeholders, _posix, _zygote
from execproto.policy import PathRule, pinned

from .sandboxes import needs_bwrap

pytestmark = needs_bwrap
BWRAP = "/usr/bin/bwrap"

# Each try says whether it worked: turn the link (renamed over by a new one), remove it,
# rename the directory it lies in, rename the real directory; then what the name reads.
SCRIPT = """exec 1>&2  # the stage server's run returns stderr
cd "$1"
ln -s elsewhere w/new && if mv -T w/new w/held 2>/dev/null; then echo turned; fi
rm -f w/new
if rm w/held 2>/dev/null; then echo removed; fi
if mv w/real w/moved 2>/dev/null; then echo moved; fi
cat w/held/file
"""


def _run(tmp_path: Path, root: str) -> tuple[int | None, str]:
    w = tmp_path / "w"
    (w / "real").mkdir(parents=True)
    (w / "real" / "file").write_text("held\n")
    (w / "held").symlink_to("real")
    rules = [PathRule(path="/", access=root), PathRule(path=str(w), access="write")]
    if root == "none":  # what `minimal` shows: the shell and what it loads
        rules += [PathRule(path=path, access="read")
                  for path in ("/bin", "/usr", "/lib", "/lib64", "/etc") if os.path.exists(path)]
    policy = Policy.of(rules, False).capped([str(w / "held" / "file")], "read")
    sandbox = _bwrap.Sandbox(BWRAP, None, _placeholders.Placeholders())
    spec = SpawnSpec(argv=("/bin/sh", "-c", SCRIPT, "sh", str(tmp_path)), arg0=None,
                     cwd="/", env=(("PATH", "/usr/bin:/bin"),), tty=False, pipe_stdin=False,
                     session_id="", process_id="ways")
    try:
        argv = sandbox.command(policy, spec, "/bin/sh")
        return _zygote.run(argv, sandbox.fds, timeout=30)
    finally:
        sandbox.close()


@pytest.mark.parametrize("root", ["read", "none"])
def test_a_link_in_a_writable_workspace_on_the_way_to_a_held_file_holds(
        tmp_path: Path, root: str) -> None:
    status, said = _run(tmp_path, root)
    assert (status, said) == (0, "held\n")
    w = tmp_path / "w"
    assert os.readlink(w / "held") == "real" and (w / "real" / "file").read_text() == "held\n"


def test_the_ways_resolve_as_the_kernel_does(tmp_path: Path) -> None:
    """`_Ways` against realpath: relative and absolute links, `..` after a link, chains, a
    loop (None: nothing to load), and every link met recorded with its target."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("")
    links = {"up": "a/b/..", "abs": str(tmp_path / "a"), "chain": "abs/b", "via": "chain/../b",
             "loop": "loop2", "loop2": "loop"}
    for name, target in links.items():
        (tmp_path / name).symlink_to(target)
    ways = _bwrap._Ways(_posix.readlink)
    for name in ("up/b/f", "abs/b/f", "chain/f", "via/f", "a/b/missing", "abs/missing/x"):
        path = str(tmp_path / name)
        assert ways.real(path) == os.path.realpath(path), name
    assert ways.real(str(tmp_path / "loop" / "f")) is None
    for name, target in links.items():
        assert ways.met[str(tmp_path / name)] == target, name
    assert str(tmp_path / "a") in ways.directories



def test_the_ways_follow_the_caps_as_pinned_does(tmp_path: Path) -> None:
    """`_Ways.followed`, which `pinned` takes in place of its own walk of the caps, gives the
    caps' real paths as `pinned`'s own walk does, through every shape of link above; and a
    policy pinned either way is the same."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("")
    links = {"up": "a/b/..", "abs": str(tmp_path / "a"), "chain": "abs/b", "via": "chain/../b",
             "loop": "loop2", "loop2": "loop", "dangling": "nowhere/x"}
    for name, target in links.items():
        (tmp_path / name).symlink_to(target)
    names = ("up/b/f", "abs/b/f", "chain/f", "via/f", "a/b/missing", "abs/missing/x",
             "loop/f", "dangling", "a", "a/b/f", "chain/../up")
    caps = [PathRule(path=os.path.normpath(f"{tmp_path}/{name}"), access=access)
            for name in names for access in ("read", "none")]
    ways = _bwrap._Ways(_posix.readlink)
    assert ways.followed(caps) == _followed_caps(caps, _posix.readlink)
    policy = Policy.of([PathRule(path="/", access="read"),
                        PathRule(path=str(tmp_path), access="write")], False).capped(
        [cap.path for cap in caps], "read")
    assert (pinned(policy, _posix.readlink, follow_caps=_bwrap._Ways(_posix.readlink).followed)
            == pinned(policy, _posix.readlink))


def test_the_ways_remembered_from_a_start_hold_only_while_nothing_on_them_changed(
        tmp_path: Path) -> None:
    """`_Remembered`: the ways to the caps walked once are taken again while the directories
    they were read from are unchanged, and walked anew when a link on them was turned (in a
    directory last changed long enough ago for its stamp to be trusted, and in one changed
    just now, whose entries are read again), or one was made where there was none."""
    (tmp_path / "w" / "real").mkdir(parents=True)
    (tmp_path / "w" / "other").mkdir()
    (tmp_path / "w" / "held").symlink_to("real")
    caps = (str(tmp_path / "w" / "held" / "file"), str(tmp_path / "w" / "plain" / "file"))
    (tmp_path / "w" / "plain").mkdir()
    remembered = _bwrap._Remembered()
    time.sleep(remembered.TRUSTED_AFTER + 0.1)  # the stamps taken from now on are trusted

    def walked(target: str) -> int:
        ways = remembered.ways(caps, _posix.readlink)
        assert ways.met[caps[0].rsplit("/", 1)[0]] == target
        assert ways.real(caps[0]) == str(tmp_path / "w" / target / "file")
        return remembered.walks

    assert walked("real") == 1
    assert walked("real") == 1  # remembered: nothing changed
    remembered.ways(caps[1:], _posix.readlink)  # another list of caps (a read-only profile's)
    assert remembered.walks == 2 and walked("real") == 2  # each list is kept
    turn(tmp_path / "w" / "held", "other")  # in a directory whose stamp is trusted
    assert walked("other") == 3
    turn(tmp_path / "w" / "held", "real")  # at once: that directory's stamp is not trusted
    assert walked("real") == 4
    assert walked("real") == 4  # its entries read again, and found as they were
    (tmp_path / "w" / "plain").rename(tmp_path / "w" / "gone")
    (tmp_path / "w" / "plain").symlink_to("other")  # a link where there was a directory
    ways = remembered.ways(caps, _posix.readlink)
    assert remembered.walks == 5 and ways.real(caps[1]) == str(tmp_path / "w" / "other" / "file")


def turn(link: Path, target: str) -> None:
    """``link`` turned to ``target``, as a sandbox would: a new link renamed over it."""
    fresh = link.with_name(link.name + ".new")
    fresh.symlink_to(target)
    fresh.rename(link)
