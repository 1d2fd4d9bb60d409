"""The staged root reaches bubblewrap with every mount nosuid and nodev already (`_stage`'s
`finish`, one call), so that bubblewrap's `--bind` of it remounts none of them, one system
call each: the host's submounts beneath `/`, the plan's binds, pins and placeholders. Seen
from the stage server's child itself, a program run in bubblewrap's place."""

from __future__ import annotations

from pathlib import Path

from execproto import Policy, SpawnSpec
from execproto.adapters._processes import _bwrap, _stage, _zygote
from execproto.policy import PathRule

from .sandboxes import needs_bwrap

pytestmark = needs_bwrap


def test_every_mount_of_the_staged_root_is_nosuid_and_nodev(tmp_path: Path) -> None:
    (tmp_path / "w" / "sub").mkdir(parents=True)
    (tmp_path / "w" / "link").symlink_to("sub")
    rules = [PathRule(path="/", access="read"), PathRule(path=str(tmp_path / "w"), access="write"),
             PathRule(path=str(tmp_path / "w" / "sub"), access="read"),
             PathRule(path=str(tmp_path / "w" / ".git"), access="read")]  # a placeholder
    policy = Policy.of(rules, False).capped([str(tmp_path / "w" / "link" / "held")], "read")
    placeholders = _bwrap.Placeholders()
    sandbox = _bwrap.Sandbox("/usr/bin/bwrap", None, placeholders)
    spec = SpawnSpec(argv=("true",), arg0=None, cwd="/", env=(), tty=False, pipe_stdin=False,
                     session_id="", process_id="flags")
    try:
        argv = sandbox.command(policy, spec, "/usr/bin/true")
        assert argv[0] == _zygote._bwrap.STAGED and argv[1], "the plan is staged"
        # The staged root as bubblewrap would find it: the program in its place says.
        argv[2:] = ["/bin/sh", "-c", "cat /proc/self/mountinfo >&2"]
        status, said = _zygote.run(argv, sandbox.fds, timeout=30)
    finally:
        sandbox.close()
        placeholders.release(sandbox.uses)
    assert status == 0, said
    mounts = [line.split() for line in said.splitlines()]
    # The staged root is the top of the mounts stacked at STAGED (the host's own beneath it);
    # its tree is it and every mount descended from it.
    stacked = [fields for fields in mounts if fields[4] == _stage.STAGED]
    top = next(fields for fields in stacked
               if not any(other[1] == fields[0] for other in stacked))
    tree, staged = {top[0]}, [top]
    for fields in mounts:  # mountinfo lists a parent before its children
        if fields[1] in tree and fields[0] not in tree:
            tree.add(fields[0])
            staged.append(fields)
    points = {fields[4] for fields in staged}
    # The plan's mounts are there: the workspace, its read-only part, the pinned link, and
    # the placeholder.
    for path in ("w", "w/sub", "w/link", "w/.git"):
        assert f"{_stage.STAGED}{tmp_path}/{path}" in points, sorted(points)
    lacking = [fields[4] for fields in staged
               if not {"nosuid", "nodev"} <= set(fields[5].split(","))]
    assert not lacking, lacking
