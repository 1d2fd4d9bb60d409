"""A policy carried out by bubblewrap: the mounts, namespaces and environment of one sandbox.

What the sandbox guarantees (docs/design.md has the whole list, and tests/adapters/
test_sandbox.py and test_mount_race.py try to break each point):

- Files: the policy's rules become mounts, shallow first: `/` read-only (or absent), writable
  rules bound read-write, read rules read-only, denied paths masked by an empty directory or
  file of mode 000, read-only (as the reference masks them: what lies beneath is "Permission
  denied", not missing), shown under an absent root too; there, the host's symlinks that lead
  to what is mounted (`/bin -> usr/bin`) are made again. Every rule's path is resolved through
  symlinks first and the resolved rule narrowed by the floor again, so a symlink planted in a
  writable root cannot carry a write grant elsewhere. What the server holds (its own files,
  what it loads, its secrets) holds at its name too: every link and directory on the way to
  it that the sandbox could rename or replace is pinned (`_ways.Ways`). The mounts are made by
  `_stage`, by descriptor and through no symlink, before bubblewrap runs; bubblewrap takes
  the staged root whole and makes no mount point of its own in a place the sandbox can write.
- What the policy lets it read it reads, `/tmp` and `/run` included; unix sockets there are
  stopped by the seccomp filter when the network is restricted (`_seccomp`).
- Its own pid, ipc, uts, cgroup and (unless the policy allows the network) network namespaces;
  no capabilities even when the server is root; no_new_privs (bwrap sets it); `/proc/sys` and
  the other kernel knobs in `/proc` read-only; a fresh session keyring; killed with its parent.
- The stage server's child and bwrap run with a fixed environment; the client's variables
  reach the program only, through bwrap's `--setenv`, passed in a memfd (`--args`) so that they
  never appear in a command line another user can read.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Protocol

from execproto import Policy, SpawnSpec
from execproto.policy import (
    PathRule,
    PlantedLink,
    crossing,
    deepest,
    follow,
    pinned,
    refusal,
)

from . import _forker, _glob, _hold, _seccomp, _stage
from ._placeholders import Placeholders, can_make, reach
from ._posix import STAGED, readlink
from ._refusals import CannotEnforce as CannotEnforce  # named here as before
from ._ways import REMEMBERED, Cached, Remembered, Unlinked, Ways
from ._wrappers import PID_NAMESPACES as PID_NAMESPACES  # named here as before
from ._wrappers import WRAPPER_ENV as WRAPPER_ENV


class Network(Protocol):
    """A network namespace the server holds (`_netns.Holder`): its descriptors, to join."""

    net: int
    user: int


def _interpreter() -> str:
    """The file of the server's own interpreter (what a venv's `python` leads to, so that no
    `pyvenv.cfg` beside a link is read), or the system's where this user cannot run that one
    (a server started as another user by `setpriv`, say): the stage needs only the standard
    library of any Python 3."""
    for candidate in (getattr(sys, "_base_executable", ""), sys.executable):
        real = os.path.realpath(candidate) if candidate else ""
        if real and os.access(real, os.X_OK):
            return real
    return os.path.realpath(shutil.which("python3", path=WRAPPER_ENV[0][1]) or sys.executable)


class _Runner:
    """How the stage server (`_forker`, with `_stage`) and the network holder (`_hold`) are
    run, fixed when the server starts: the interpreter by a descriptor opened then, and the
    sources as read then. They run as the server, the stage before any namespace exists, so
    nothing a sandbox may write may decide what runs: with the server in a workspace's
    `.venv`, a sandboxed `cat > .venv/bin/python` or an edit of `_stage.py` would otherwise
    run outside at the next start. Isolated from the environment and from site packages
    (`-I -S`)."""

    def __init__(self, module: ModuleType) -> None:
        self._fd: int | None = None
        with open(str(module.__file__), encoding="utf-8") as file:
            self.source = file.read()

    def argv(self, fds: list[int]) -> list[str]:
        """The command, its interpreter a copy of the server's descriptor passed at the same
        number (the program closes it first, so nothing it starts inherits it)."""
        if self._fd is None:
            self._fd = os.open(_interpreter(), os.O_PATH | os.O_CLOEXEC)
        fd = fcntl.fcntl(self._fd, fcntl.F_DUPFD_CLOEXEC, 0)  # the spawn passes it on
        fds.append(fd)
        return [f"/proc/self/fd/{fd}", "-I", "-S", "-c", self.source, str(fd)]


# bubblewrap's own root when the stage is not needed, by the root's access (none: its tmpfs).
DIRECT_ROOT = {"read": ("--ro-bind", "/", "/"), "write": ("--bind", "/", "/"), "none": ()}
# Always the sandbox's own, fresh in each: rules beneath these are not mounted.
OWN = ("/proc", "/dev")
# Kernel knobs in a fresh /proc that would change the host, kept read-only. Bubblewrap's
# `--proc` binds its /proc/irq and /proc/bus read-only itself, wherever it could write them
# (every version: unconditionally in older ones, after `access(W_OK)` in newer; the sandbox's
# processes, with no capabilities, can write no more than it could). Each bind here has
# bubblewrap read the whole mount table back.
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/fs")
# Files in a fresh /proc that list the host's keys (every key the user may view, the server's
# included, whatever the keyring): covered, as keyctl is filtered.
PROC_HIDDEN = ("/proc/keys", "/proc/key-users")


# Its own user namespace (root inside is root outside, but keyrings and per-user limits are
# its own, and inherited mounts are locked), no nested ones, and everything else its own too.
NAMESPACES = ("--unshare-user", "--disable-userns", "--unshare-ipc",
              "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--cap-drop", "ALL")


def problem(bwrap: str) -> str | None:
    """Why bubblewrap cannot sandbox here, or None when it can (namespaces, the staged root
    and the seccomp filter included)."""
    missing = _seccomp.problem()
    if missing is not None:
        return missing
    sandbox = Sandbox(bwrap, None, Placeholders())
    # A rule below `/`, so that the stage runs too (mount_setattr needs Linux 5.12).
    rules = [PathRule(path="/", access="read"),
             PathRule(path=os.path.dirname(_stage.__file__), access="none")]
    try:
        probe = sandbox.command(Policy.of(rules, False),
                                SpawnSpec(argv=("true",), arg0=None, cwd="/", env=(),
                                          tty=False, pipe_stdin=False, session_id="",
                                          process_id="probe"),
                                "true")
    except CannotEnforce as exc:  # its budget spent: a machine too loaded to say
        return f"bubblewrap cannot run here: {exc}"
    from . import _zygote  # it imports this module
    try:
        status, said = _zygote.run(probe, sandbox.fds, timeout=30)
    except OSError as exc:
        return f"bubblewrap cannot run here: {exc}"
    finally:
        sandbox.close()
    if status is None:
        return "bubblewrap cannot run here: the probe did not end in 30 s"
    if status != 0:
        return f"bubblewrap cannot run here: {said.strip() or status}"
    return None


def _beneath(path: str, tops: tuple[str, ...]) -> bool:
    return any(top == "/" or path == top or path.startswith(top + "/") for top in tops)


def _parent(index: dict[str, PathRule], path: str) -> PathRule:
    """The rule nearest above ``path``, not counting a rule for ``path`` itself."""
    return deepest(index, os.path.dirname(path)) if path != "/" else index["/"]


# One start's budget: what setting up one sandbox may cost a worker of the shared pool
# (`_children.PREP_WORKERS`) and the server's memory, far past what a real client asks (Codex's
# workspace-write profile: ~8 rules of ~10 components, 3 placeholders, a few ms). Past any of
# them the start is refused, saying which, before more of it is done.
MAX_RULES = 1024  # once the deny patterns are expanded: each is a mount, or more
MAX_DEPTH = _glob.MAX_DEPTH  # components of a rule's path: each is read when it is resolved
MAX_PLACEHOLDERS = 64  # directories one start makes on the host: each kept till its finalize
MAX_PLACEHOLDER_PATH = 1024  # bytes of such a directory's path, kept as long
# Wall time on its worker: what another client's start may wait for, when every worker is
# taken by a costly one. Every loop that can be long checks it (the expansion, each symlink
# read while resolving, the plan); the bounds above keep a start well under it.
MAX_SECONDS = 2.0
# Plans remade because a placeholder the plan relied on was removed meanwhile (`Placeholders`).
MAX_TRIES = 3


class Budget:
    """The deadline of one start's setup."""

    def __init__(self) -> None:
        self._ends = time.monotonic() + MAX_SECONDS

    def check(self) -> None:
        if time.monotonic() > self._ends:
            raise CannotEnforce(f"setting the sandbox up took over {MAX_SECONDS:g} s")

    def readlink(self, path: str) -> str | None:
        """`_posix.readlink`, within the deadline: a rule's path is read one component, and
        one link (40 of them, 4 KB each), at a time."""
        self.check()
        return readlink(path)

    @staticmethod
    def shape(policy: Policy) -> None:
        """The bounds a policy's shape alone breaks, checked before any path is looked at."""
        if len(policy.rules) + len(policy.caps) > MAX_RULES:
            raise CannotEnforce(f"the sandbox has over {MAX_RULES} rules")
        for rule in (*policy.rules, *policy.caps):
            if rule.path.count("/") > MAX_DEPTH:
                raise CannotEnforce(f"the path {rule.path[:64]}... has over {MAX_DEPTH} "
                                    "components")


class Sandbox:
    """The command for one spawn, for the stage server (`_zygote`): its child builds the file
    system (`_stage`) and execs bwrap.

    Holds the descriptors it passes (`close` them after the spawn, whether or not it
    succeeded). ``placeholders`` are the empty directories sandboxes made on the host as
    mount points and still use (the backend's, shared by every sandbox); ``uses`` lists
    those this one makes or mounts on, deepest first, counted there once `command` returns,
    for the backend to count down at its finalize. Nothing else of it outlives the spawn.
    """

    def __init__(self, bwrap: str, floor: Policy | None, placeholders: Placeholders,
                 network: Callable[[], Network] | None = None,
                 pid_namespace: str = "isolate") -> None:
        self._bwrap = bwrap
        self._pids = PID_NAMESPACES[pid_namespace]
        # The network of a sandbox that may use it: the namespace it gives (its session's,
        # made at the first call), or None: the host's.
        self._network = network
        self._floor = floor
        self._placeholders = placeholders
        self.budget = Budget()  # from now: the backend's own look at the policy counts too
        self._readlink = Cached(self.budget.readlink)  # one look at the links per start
        self._ways = Ways(self._readlink)
        self._ops: list[tuple[str, str, str]] = []  # (operation, path, access): see _stage
        self._missing: set[str] = set()
        self._pinned: set[str] = set()
        self.made: set[str] = set()  # placeholders this one makes, missing parents included
        self.seen: list[str] = []  # the paths its plan binds, covers or pins: there when seen
        self.fds: list[int] = []
        self.uses: list[str] = []

    def command(self, policy: Policy, spec: SpawnSpec, program: str) -> list[str]:
        try:
            Budget.shape(policy)
            crossed = crossing(policy, self._readlink, self._floor)
            if crossed is not None:
                return self._refused(policy, spec, refusal(*crossed))
            matched = self._expand(policy)
            for _ in range(MAX_TRIES):
                self._ops, self._missing, self._pinned, self.made = [], set(), set(), set()
                seen = self._placeholders.removals
                resolved = self._resolve(policy, matched)
                root = self._mounts(resolved)
                if root == "none":
                    self._links(policy, resolved)
                self.seen = [path for op, path, _ in self._ops if op != "placeholder"]
                uses = self._placeholders.take([rule.path for rule in resolved.rules],
                                                self.made, self.seen, seen)
                if uses is not None:
                    self.uses = uses
                    break
            else:
                raise CannotEnforce("placeholders the sandbox relied on kept being removed "
                                    f"while it was set up ({MAX_TRIES} tries)")
            self.seen, self.made, self._missing, self._pinned = [], set(), set(), set()
            joined = self._join() if resolved.network and self._network else ""
            # Without a mount below `/` nor a network to join, the stage has nothing to do
            # (Codex's read-only profile): bubblewrap's only mount points are then /dev and
            # /proc, which no sandbox can move, and keyctl is filtered and /proc/keys empty.
            # The stage server's child then execs bubblewrap at once (no plan).
            staged = bool(self._ops or joined)
            # A staged root holds its own /dev (`_stage.Stage.dev`), whose devices the
            # stage left usable: every other mount there is nodev already.
            options = (["--dev-bind", _stage.STAGED, "/"] if staged
                       else [*DIRECT_ROOT[root], "--dev", "/dev"])
            options += ["--proc", "/proc"]
            for knob in PROC_READ_ONLY:
                options += ["--ro-bind-try", knob, knob]
            for listing in PROC_HIDDEN:  # an empty file (a device would be nodev here)
                options += ["--ro-bind-data", str(self._memfd(b"")), listing]
            options += (*NAMESPACES, *self._pids)
            if not resolved.network:
                options.append("--unshare-net")
            # Behind the managed proxy, a named unix socket would be a way around it.
            unix = spec.proxy is None or spec.proxy.dangerously_allow_all_unix_sockets
            filtered = _seccomp.program(resolved.network, unix)
            options += ["--seccomp", str(self._memfd(filtered))]
            options += ["--chdir", spec.cwd, "--clearenv"]
            for name, value in spec.env:
                options += ["--setenv", name, value]
            args = self._memfd(b"".join(os.fsencode(option) + b"\0" for option in options))
            plan_fd = ""
            if staged:
                head = (root, "1" if os.geteuid() != 0 else "", joined)
                plan = [*head, *(field for op in self._ops for field in op)]
                plan_fd = str(self._memfd(b"\0".join(map(os.fsencode, plan))))
            argv = [STAGED, plan_fd, self._bwrap, "--args", str(args), "--"]
        except BaseException:
            self.close()
            self._placeholders.release(self.uses)
            self.uses = []
            raise
        if spec.arg0 is not None:  # bwrap cannot rename argv[0]; bash's exec -a can
            return argv + ["/bin/bash", "-c", 'exec -a "$0" "$@"', spec.arg0, program,
                           *spec.argv[1:]]
        return argv + list(spec.argv)

    def _refused(self, policy: Policy, spec: SpawnSpec, why: str) -> list[str]:
        """The command for a sandbox that cannot be set up as asked (`crossing`): the stage
        fails with ``why`` before it makes anything, so the process starts and exits 1 saying
        so, as the reference's does (its sandboxDenied is true: the words name the sandbox)."""
        plan = ["read", "", "", "refuse", why, ""]
        plan_fd = self._memfd(b"\0".join(map(os.fsencode, plan)))
        return [STAGED, str(plan_fd), self._bwrap, "--", *spec.argv]

    def _join(self) -> str:
        """The network's descriptors for the stage to join, as ``NET:USER``."""
        assert self._network is not None
        holder = self._network()
        fds = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 0) for fd in (holder.net, holder.user)]
        self.fds += fds
        return f"{fds[0]}:{fds[1]}"

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds.clear()

    # -- the policy, resolved ------------------------------------------------------------------

    def _expand(self, policy: Policy) -> list[PathRule]:
        """The deny patterns' matches, as rules (within the start's budget)."""
        matched = []
        budget = _glob.Budget(self.budget.check)
        for pattern in policy.deny_globs:
            try:
                matches = _glob.expand(pattern, budget)
            except _glob.TooBroad as exc:
                raise CannotEnforce(f"the deny pattern {pattern}: {exc}") from None
            matched += [PathRule(path=match, access="none") for match in matches]
        if len(policy.rules) + len(policy.caps) + len(matched) > MAX_RULES:
            raise CannotEnforce(f"the sandbox has over {MAX_RULES} rules once its deny "
                                "patterns are expanded")
        return matched

    def _resolve(self, policy: Policy, matched: list[PathRule]) -> Policy:
        """The rules at their real paths, with the deny patterns' ``matched``, narrowed by the
        floor again: a rule that resolved outside the operator's writable roots loses what the
        floor does not grant there, and a symlink a sandbox could have planted carries no
        grant out of the writable places (`execproto.policy.pinned`)."""
        # A read cap only takes write away: where nothing is writable (Codex's read-only
        # profile) the server's hundred own files change no mount, and resolving them was
        # most of the setup's cost. The denying caps (the server's secrets) always hold.
        writes = any(rule.access == "write" for rule in policy.rules)
        caps = [cap for cap in policy.caps if writes or cap.access != "read"]
        self._ways = REMEMBERED.ways(tuple(cap.path for cap in caps), self._readlink)
        try:
            real = pinned(Policy.of([*policy.rules, *matched], policy.network, caps=caps),
                          self._readlink, self._floor, follow_caps=self._ways.followed)
        except PlantedLink as exc:
            raise CannotEnforce(str(exc)) from None
        rules = []
        unlinked = Unlinked()
        for rule in real.rules:
            self.budget.check()
            if not unlinked(rule.path):
                continue  # a cap's name through a link (it holds where that leads too)
            there = reach(rule.path)
            if there == "unreachable":
                continue
            if there == "missing":
                if rule.access == "write":
                    continue  # nothing to bind: the parent's rule governs the place
                self._missing.add(rule.path)
            rules.append(rule)
        # A cap's name through a link is not mounted: it holds where that leads too.
        caps = [cap for cap in real.caps
                if self._ways.real(cap.path) == cap.path and reach(cap.path) != "unreachable"]
        return Policy.of(rules, policy.network, caps=caps).narrow(self._floor)

    def _mounts(self, policy: Policy) -> str:
        """The stage's operations for ``policy``; returns the root's access."""
        index = policy.index()
        ways = self._ways_by_grant(index)
        self._pin_ways(ways.pop("/", []))
        for rule in policy.rules[1:]:
            self.budget.check()
            self._mount(index, rule)
            self._pin_ways(ways.pop(rule.path, []))
        return policy.rules[0].access

    def _mount(self, index: dict[str, PathRule], rule: PathRule) -> None:
        parent = _parent(index, rule.path)
        if _beneath(rule.path, OWN):
            return
        if rule.path in self._missing:
            if parent.access == "write":
                self._pin_between(parent.path, rule.path)
                self._placeholder(rule.path)
            return  # else nothing there to hide, and nothing can be made there
        if rule.access == parent.access and not (rule.access == "none" and
                                                 parent.path == "/"):
            return  # the parent's mount already shows it so (a denial under an absent
            # root is masked all the same: there, as the reference's, it is found and
            # refused rather than missing)
        if rule.access != "write" and parent.access == "write":
            self._pin_between(parent.path, rule.path)
        self._bind(rule.access, rule.path)

    def _links(self, policy: Policy, resolved: Policy) -> None:
        """Under an absent root, the host's symlinks on the way to what the policy shows, made
        again where nothing shown holds them: the rules are mounted at their real paths, and
        a program names `/bin/sh` or `/lib64/ld-linux-x86-64.so.2` (`/bin -> usr/bin` on a
        merged-/usr system), so without them nothing could run under `minimal`. A link only
        leads where the host's does, into what is mounted there; it grants nothing."""
        shown = [rule.path for rule in resolved.rules[1:] if rule.access != "none"]
        hidden = [rule.path for rule in resolved.rules[1:] if rule.access == "none"]
        made = set()
        for rule in policy.rules:
            if rule.access == "none" or rule.path == "/":
                continue
            hops: list[tuple[str, str]] = []
            try:
                follow(rule.path, self.budget.readlink, hops=hops)
            except PlantedLink:
                pass  # a loop: the links before it are made all the same
            for where, target in hops:
                if where in made or _beneath(where, (*shown, *hidden, *OWN)):
                    continue  # there already, through its mount, or hidden
                made.add(where)
                self._ops.append(("link", where, target))

    def _ways_by_grant(self, index: dict[str, PathRule]) -> dict[str, list[str]]:
        """The entries on the way to a held name (`_ways.Ways`) that lie where the sandbox may
        write, by the write rule that grants it there, each list shallow first. The held file
        itself is not among them: it has a rule of its own, bound or made as a placeholder."""
        grants: dict[str, str | None] = {}  # a directory's write rule, or None
        found: dict[str, list[str]] = {}
        for path in self._ways.met:
            parent = path.rsplit("/", 1)[0] or "/"
            if parent not in grants:
                rule = deepest(index, parent)
                grants[parent] = rule.path if rule.access == "write" else None
            grant = grants[parent]
            if grant is not None and not _beneath(path, OWN):
                found.setdefault(grant, []).append(path)
        for paths in found.values():
            paths.sort(key=lambda path: (path.count("/"), path))
        return found

    def _pin_ways(self, paths: list[str]) -> None:
        """Pin ``paths`` (`_ways_by_grant`), once their write rule is mounted and before
        anything beneath them is: a directory as `_pin_between` does, a link by binding the
        link onto itself (the stage checks it still leads where it led here)."""
        for path in paths:
            if path in self._pinned:
                continue
            target = self._ways.met[path]
            if target is not None:
                self._pinned.add(path)
                self._ops.append(("pin-link", path, target))
            elif path in self._ways.directories and os.path.isdir(path):
                self._pinned.add(path)
                self._ops.append(("pin", path, ""))

    def _pin_between(self, top: str, path: str) -> None:
        """Bind every directory strictly between a writable ``top`` and a protected ``path``
        onto itself, read-write as it was: a mount point cannot be renamed (EBUSY), so the
        command cannot move the protected path out from under its cover by renaming a parent
        (`mv conf conf2` would leave `conf2/secret.env` readable to the next command)."""
        between = []
        here = os.path.dirname(path)
        while here != top and _beneath(here, (top,)) and here != "/":
            between.append(here)
            here = os.path.dirname(here)
        for directory in reversed(between):
            if directory not in self._pinned and os.path.isdir(directory):
                self._pinned.add(directory)
                self._ops.append(("pin", directory, ""))

    def _placeholder(self, path: str) -> None:
        """An empty read-only directory where a protected path is missing, so that the sandbox
        cannot create it (a `.codex` or `.git` planted in a writable root would be trusted by
        the next command). The stage makes it, and any missing parent, on the host; each is
        kept till the finalize (`Placeholders`), so their number and length are bounded."""
        if len(os.fsencode(path)) > MAX_PLACEHOLDER_PATH:
            raise CannotEnforce(f"the missing path {path[:64]}... is over "
                                f"{MAX_PLACEHOLDER_PATH} bytes: no directory is made for it")
        missing = [path]
        while not os.path.lexists(os.path.dirname(missing[-1])):
            missing.append(os.path.dirname(missing[-1]))
        if not can_make(os.path.dirname(missing[-1])):
            return
        self.made.update(missing)
        if len(self.made) > MAX_PLACEHOLDERS:
            raise CannotEnforce(f"the sandbox would make over {MAX_PLACEHOLDERS} "
                                "directories for missing paths")
        self._ops.append(("placeholder", path, ""))

    def _bind(self, access: str, path: str) -> None:
        if access == "none":
            self._ops.append(("cover", path, ""))
        else:
            self._ops.append(("bind", path, access))

    def _memfd(self, data: bytes) -> int:
        fd = os.memfd_create("execproto-sandbox")  # close-on-exec; the spawn passes it on
        self.fds.append(fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
        return fd


FORKER, HOLD = _Runner(_forker), _Runner(_hold)
# The ways' classes by the names they had here, before `_ways` (tests know them so).
_Remembered, _Unlinked, _Ways = Remembered, Unlinked, Ways
STAGE_SOURCE = _Runner(_stage).source
