"""The staged root reaches bubblewrap as bubblewrap would leave it, so that it changes nothing
of it (`_stage`'s `finish` and `dev`): every mount nosuid, and nodev but for the devices of
its own `/dev`, which is made as bubblewrap's ``--dev`` makes it. Bubblewrap's own would cost
a few dozen remounts and a read of the whole mount table for each device. Seen from the
stage server's child itself (a program run in bubblewrap's place), and from a sandbox beside
one whose `/dev` is bubblewrap's."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

from execproto import Policy, SpawnSpec
from execproto.adapters._processes import _bwrap, _placeholders, _stage, _zygote
from execproto.policy import PathRule

from .sandboxes import needs_bwrap

pytestmark = needs_bwrap
BWRAP = "/usr/bin/bwrap"
DEVICES = {f"/dev/{name}" for name in ("null", "zero", "full", "random", "urandom", "tty")}


def _run(policy: Policy, script: str, program: str | None = None) -> tuple[int | None, str]:
    """``script`` by sh in a sandbox of ``policy`` (with ``program``: run in bubblewrap's
    place, by the stage server's child); its stderr."""
    placeholders = _placeholders.Placeholders()
    sandbox = _bwrap.Sandbox(BWRAP, None, placeholders)
    spec = SpawnSpec(argv=("/bin/sh", "-c", f"exec 1>&2; {script}"), arg0=None, cwd="/",
                     env=(("PATH", "/usr/bin:/bin"),), tty=False, pipe_stdin=False,
                     session_id="", process_id="flags")
    try:
        argv = sandbox.command(policy, spec, "/bin/sh")
        if program is not None:
            assert argv[0] == _stage_command() and argv[1], "the plan is staged"
            argv[2:] = [program, "-c", script]
        return _zygote.run(argv, sandbox.fds, timeout=30)
    finally:
        sandbox.close()
        placeholders.release(sandbox.uses)


def _stage_command() -> str:
    from execproto.adapters._processes._posix import STAGED
    return STAGED


def _workspace(tmp_path: Path) -> Policy:
    """A workspace-write policy with a bind, a read-only part, a placeholder and a pinned
    link beneath the writable workspace."""
    (tmp_path / "w" / "sub").mkdir(parents=True)
    (tmp_path / "w" / "link").symlink_to("sub")
    rules = [PathRule(path="/", access="read"), PathRule(path=str(tmp_path / "w"), access="write"),
             PathRule(path=str(tmp_path / "w" / "sub"), access="read"),
             PathRule(path=str(tmp_path / "w" / ".git"), access="read")]
    return Policy.of(rules, False).capped([str(tmp_path / "w" / "link" / "held")], "read")


def test_every_mount_of_the_staged_root_is_nosuid_and_nodev_but_its_devices(
        tmp_path: Path) -> None:
    status, said = _run(_workspace(tmp_path), "cat /proc/self/mountinfo >&2", "/bin/sh")
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
    points = {fields[4].removeprefix(_stage.STAGED) for fields in staged}
    for path in ("w", "w/sub", "w/link", "w/.git"):  # the plan's mounts are there
        assert f"{tmp_path}/{path}" in points, sorted(points)
    flags = {fields[4].removeprefix(_stage.STAGED): set(fields[5].split(","))
             for fields in staged}
    assert [point for point, have in flags.items() if "nosuid" not in have] == []
    devices = {point for point, have in flags.items() if "nodev" not in have}
    assert devices == DEVICES | {"/dev/pts"}, devices


def test_a_staged_sandbox_s_dev_is_bubblewrap_s(tmp_path: Path) -> None:
    """Against bubblewrap's own ``--dev`` (a sandbox with nothing to stage): the same names,
    kinds, modes, devices and link targets, the same mounts, and each device usable."""
    script = ("cd /dev && for f in * pts/* shm/*; do stat -c '%n %F %a %t:%T %N' \"$f\"; done; "
              "echo mounts; cat /proc/self/mountinfo; echo used; "
              "echo x > /dev/null && head -c 2 /dev/zero | od -An -c && head -c 1 /dev/urandom "
              "| wc -c && echo shared > /dev/shm/f && cat /dev/shm/f && "
              "python3 -c 'import os; m, s = os.openpty(); print(os.ttyname(s))'")
    staged = _run(_workspace(tmp_path), script)
    plain = _run(Policy.of([PathRule(path="/", access="read")], False), script)
    assert staged[0] == 0 and plain[0] == 0, (staged, plain)
    assert _dev(staged[1]) == _dev(plain[1])
    assert staged[1].endswith("shared\n/dev/pts/0\n") and os.path.exists("/dev/null")


def _dev(said: str) -> tuple[str, list[tuple[str, ...]], str]:
    """What a sandbox said of its /dev: its entries, its mounts (the top one at /dev and
    those beneath it: point, flags, kind, source, options), and its devices' use."""
    entries, rest = said.split("mounts\n")
    table, used = rest.split("used\n")
    mounts = [line.split() for line in table.splitlines()]
    top = [fields for fields in mounts if fields[4] == "/dev"][-1]
    tree, found = {top[0]}, []
    for fields in mounts:
        if fields[0] in tree or fields[1] in tree:
            tree.add(fields[0])
            dash = fields.index("-")
            found.append((fields[4], fields[5], *fields[dash + 1:]))
    return entries, found, used


def test_the_kernel_knobs_are_read_only_in_either_kind_of_sandbox(tmp_path: Path) -> None:
    """/proc/sys, /proc/fs (ours), /proc/irq and /proc/bus (bubblewrap's own `--proc`)."""
    script = "grep -E ' /proc/(sys|fs|irq|bus) ' /proc/self/mountinfo | cut -d' ' -f5,6"
    for policy in (_workspace(tmp_path), Policy.of([PathRule(path="/", access="read")], False)):
        status, said = _run(policy, script)
        assert status == 0, said
        knobs = {point: set(flags.split(",")) for point, flags in map(str.split, said.splitlines())
                 if point}
        assert set(knobs) == {"/proc/sys", "/proc/fs", "/proc/irq", "/proc/bus"}, said
        assert all("ro" in flags for flags in knobs.values()), said


def _on_a_terminal(policy: Policy, script: str) -> str:
    """What ``script`` writes on its terminal, in a sandbox of ``policy`` started with one."""
    placeholders = _placeholders.Placeholders()
    sandbox = _bwrap.Sandbox(BWRAP, None, placeholders)
    spec = SpawnSpec(argv=("/bin/sh", "-c", script), arg0=None, cwd="/",
                     env=(("PATH", "/usr/bin:/bin"),), tty=True, pipe_stdin=False,
                     session_id="", process_id="console")
    said = b""
    try:
        argv = sandbox.command(policy, spec, "/bin/sh")
        staged = SpawnSpec(argv=tuple(argv), arg0=None, cwd="/", env=_bwrap.WRAPPER_ENV,
                           tty=True, pipe_stdin=False, session_id="", process_id="console")
        child = _zygote.ZYGOTE.spawn(staged, sandbox.fds, ())
        try:
            terminal, ends = child.outputs["pty"], time.monotonic() + 30
            while time.monotonic() < ends:
                # Its exit taken before the wait: an exit seen after a quiet wait could have
                # come with its last output, written just after the wait timed out.
                exited = child.exit_status() is not None
                if select.select([terminal], [], [], 0.2)[0]:
                    try:
                        chunk = os.read(terminal, 4096)
                    except BlockingIOError:
                        continue
                    except OSError:  # EIO: the terminal's last process is gone
                        break
                    if not chunk:
                        break
                    said += chunk
                elif exited:
                    break
        finally:
            child.signal_group("KILL")
            child.reap()
    finally:
        sandbox.close()
        placeholders.release(sandbox.uses)
    return said.decode(errors="replace")


def test_a_staged_sandbox_on_a_terminal_has_it_as_its_console(tmp_path: Path) -> None:
    """As bubblewrap's own `--dev` does: the terminal the process was started on, bound as
    /dev/console, which is then what `tty` names; a terminal of its own can be opened."""
    script = ("stat -c '%F %a %t:%T' /dev/console; tty; "
              "grep ' /dev/console ' /proc/self/mountinfo | cut -d' ' -f5,6; "
              "python3 -c 'import os; m, s = os.openpty(); print(os.ttyname(s))'")
    staged = _on_a_terminal(_workspace(tmp_path), script)
    plain = _on_a_terminal(Policy.of([PathRule(path="/", access="read")], False), script)
    assert "/dev/console\r\n/dev/console rw,nosuid" in staged and "/dev/pts/0" in staged
    assert staged.splitlines()[1:] == plain.splitlines()[1:], (staged, plain)
