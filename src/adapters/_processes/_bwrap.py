"""A policy carried out by bubblewrap: the mounts, namespaces and environment of one sandbox.

What the sandbox guarantees (docs/design.md has the whole list, and tests/adapters/
test_sandbox.py and test_mount_race.py try to break each point):

- Files: the policy's rules become mounts, shallow first: `/` read-only (or absent), writable
  rules bound read-write, read rules read-only, denied paths covered by an empty read-only tmpfs
  (a directory) or /dev/null (a file). Every rule's path is resolved through symlinks first and
  the resolved rule narrowed by the floor again, so a symlink planted in a writable root cannot
  carry a write grant elsewhere. The mounts are made by `_stage`, by descriptor and through no
  symlink, before bubblewrap runs; bubblewrap takes the staged root whole and makes no mount
  point of its own in a place the sandbox can write.
- What the policy lets it read it reads, `/tmp` and `/run` included; unix sockets there are
  stopped by the seccomp filter when the network is restricted (`_seccomp`).
- Its own pid, ipc, uts, cgroup and (unless the policy allows the network) network namespaces;
  no capabilities even when the server is root; no_new_privs (bwrap sets it); `/proc/sys` and
  the other kernel knobs in `/proc` read-only; a fresh session keyring; killed with its parent.
- The wrappers (setpriv, the stage, bwrap) run with a fixed environment; the client's variables
  reach the program only, through bwrap's `--setenv`, passed in a memfd (`--args`) so that they
  never appear in a command line another user can read.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections import Counter

from execproto import Policy, SpawnSpec
from execproto.policy import PathRule, PlantedLink, deepest, pinned

from . import _glob, _seccomp, _stage
from ._posix import readlink

# The wrappers' whole environment: nothing a client chose.
WRAPPER_ENV = (("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),)


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


class _Stage:
    """How the stage is run, fixed when the server starts: the interpreter by a descriptor
    opened then, and the stage's source as read then. The stage runs as the server, before
    any namespace exists, so nothing a sandbox may write may decide what runs: with the
    server in a workspace's `.venv`, a sandboxed `cat > .venv/bin/python` or an edit of
    `_stage.py` would otherwise run outside at the next start. Isolated from the
    environment and from site packages (`-I -S`)."""

    def __init__(self) -> None:
        self._fd: int | None = None
        with open(_stage.__file__, encoding="utf-8") as file:
            self._source = file.read()

    def argv(self, sandbox: Sandbox) -> list[str]:
        """The stage's command, its interpreter a copy of the server's descriptor passed at
        the same number (the stage closes it first, so nothing inside inherits it)."""
        if self._fd is None:
            self._fd = os.open(_interpreter(), os.O_PATH | os.O_CLOEXEC)
        fd = fcntl.fcntl(self._fd, fcntl.F_DUPFD_CLOEXEC, 0)  # the spawn passes it on
        sandbox.fds.append(fd)
        return [f"/proc/self/fd/{fd}", "-I", "-S", "-c", self._source, str(fd)]


# bubblewrap's own root when the stage is not needed, by the root's access (none: its tmpfs).
DIRECT_ROOT = {"read": ("--ro-bind", "/", "/"), "write": ("--bind", "/", "/"), "none": ()}
# Always the sandbox's own, fresh in each: rules beneath these are not mounted.
OWN = ("/proc", "/dev")
# Kernel knobs in a fresh /proc that would change the host, kept read-only.
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
# Files in a fresh /proc that list the host's keys (every key the user may view, the server's
# included, whatever the keyring): covered, as keyctl is filtered.
PROC_HIDDEN = ("/proc/keys", "/proc/key-users")


# Its own user namespace (root inside is root outside, but keyrings and per-user limits are
# its own, and inherited mounts are locked), no nested ones, and everything else its own too.
NAMESPACES = ("--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc",
              "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--cap-drop", "ALL")


def problem(bwrap: str) -> str | None:
    """Why bubblewrap cannot sandbox here, or None when it can (namespaces, the staged root
    and the seccomp filter included)."""
    missing = _seccomp.problem()
    if missing is not None:
        return missing
    sandbox = Sandbox(bwrap, None, Counter())
    # A rule below `/`, so that the stage runs too (mount_setattr needs Linux 5.12).
    rules = [PathRule(path="/", access="read"),
             PathRule(path=os.path.dirname(_stage.__file__), access="none")]
    probe = sandbox.command(Policy.of(rules, False),
                            SpawnSpec(argv=("true",), arg0=None, cwd="/", env=(), tty=False,
                                      pipe_stdin=False, session_id="", process_id="probe"),
                            "true")
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30,
                              env=dict(WRAPPER_ENV), pass_fds=sandbox.fds)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap cannot run here: {exc}"
    finally:
        sandbox.close()
    if done.returncode != 0:
        return f"bubblewrap cannot run here: {done.stderr.strip() or done.returncode}"
    return None


def _beneath(path: str, tops: tuple[str, ...]) -> bool:
    return any(top == "/" or path == top or path.startswith(top + "/") for top in tops)


def _parent(index: dict[str, PathRule], path: str) -> PathRule:
    """The rule nearest above ``path``, not counting a rule for ``path`` itself."""
    return deepest(index, os.path.dirname(path)) if path != "/" else index["/"]


class CannotEnforce(Exception):
    """The policy names more than this sandbox can set up (the spawn is refused)."""


class Sandbox:
    """The command for one spawn: the stage (which builds the file system) exec'ing bwrap.

    Holds the descriptors it passes (`close` them after the spawn, whether or not it
    succeeded). ``placeholders`` are the empty directories sandboxes made on the host as
    mount points and still use, with how many use each (the backend's, shared by every
    sandbox); ``uses`` lists those this one makes or mounts on, deepest first, for the
    backend to count down at its finalize.
    """

    def __init__(self, bwrap: str, floor: Policy | None, placeholders: Counter[str],
                 pasta: str | None = None) -> None:
        self._bwrap = bwrap
        # The network of a sandbox that may use it: its own through pasta (None: the host's).
        self._pasta = pasta
        self._floor = floor
        self._placeholders = placeholders
        self._ops: list[tuple[str, str, str]] = []  # (operation, path, access): see _stage
        self._missing: set[str] = set()
        self._pinned: set[str] = set()
        self.fds: list[int] = []
        self.uses: list[str] = []

    def command(self, policy: Policy, spec: SpawnSpec, program: str) -> list[str]:
        try:
            resolved = self._resolve(policy)
            root = self._mounts(resolved)
            pasta = (self._pasta if resolved.network else None) or ""
            # Without a mount below `/` nor a network of its own, the stage has nothing to do
            # (Codex's read-only profile): bubblewrap's only mount points are then /dev and
            # /proc, which no sandbox can move, and keyctl is filtered and /proc/keys empty.
            staged = bool(self._ops or pasta)
            options = ["--bind", _stage.STAGED, "/"] if staged else list(DIRECT_ROOT[root])
            options += ["--dev", "/dev", "--proc", "/proc"]
            for knob in PROC_READ_ONLY:
                options += ["--ro-bind-try", knob, knob]
            for listing in PROC_HIDDEN:  # an empty file (a device would be nodev here)
                options += ["--ro-bind-data", str(self._memfd(b"")), listing]
            options += NAMESPACES
            if not resolved.network:
                options.append("--unshare-net")
            options += ["--seccomp", str(self._memfd(_seccomp.program(resolved.network)))]
            options += ["--chdir", spec.cwd, "--clearenv"]
            for name, value in spec.env:
                options += ["--setenv", name, value]
            args = self._memfd(b"".join(os.fsencode(option) + b"\0" for option in options))
            argv = [self._bwrap, "--args", str(args), "--"]
            if staged:
                head = (root, "1" if os.geteuid() != 0 else "", pasta)
                plan = [*head, *(field for op in self._ops for field in op)]
                plan_fd = self._memfd(b"\0".join(map(os.fsencode, plan)))
                argv = [*STAGE.argv(self), str(plan_fd), *argv]
        except BaseException:
            self.close()
            raise
        if spec.arg0 is not None:  # bwrap cannot rename argv[0]; bash's exec -a can
            return argv + ["/bin/bash", "-c", 'exec -a "$0" "$@"', spec.arg0, program,
                           *spec.argv[1:]]
        return argv + list(spec.argv)

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds.clear()

    # -- the policy, resolved ------------------------------------------------------------------

    def _resolve(self, policy: Policy) -> Policy:
        """The rules at their real paths, the deny patterns expanded, narrowed by the floor
        again: a rule that resolved outside the operator's writable roots loses what the floor
        does not grant there, and a symlink a sandbox could have planted carries no grant out
        of the writable places (`execproto.policy.pinned`)."""
        matched = []
        budget = _glob.Budget()
        for pattern in policy.deny_globs:
            try:
                matches = _glob.expand(pattern, budget)
            except _glob.TooBroad as exc:
                raise CannotEnforce(f"the deny pattern {pattern}: {exc}") from None
            matched += [PathRule(path=match, access="none") for match in matches]
        try:
            real = pinned(Policy.of([*policy.rules, *matched], policy.network,
                                    caps=policy.caps), readlink, self._floor)
        except PlantedLink as exc:
            raise CannotEnforce(str(exc)) from None
        rules = []
        for rule in real.rules:
            if os.path.realpath(rule.path) != rule.path:
                continue  # a cap's name through a link (it holds where that leads too)
            if not os.path.lexists(rule.path):
                if rule.access == "write":
                    continue  # nothing to bind: the parent's rule governs the place
                self._missing.add(rule.path)
            rules.append(rule)
        caps = [cap for cap in real.caps if os.path.realpath(cap.path) == cap.path]
        return Policy.of(rules, policy.network, caps=caps).narrow(self._floor)

    def _mounts(self, policy: Policy) -> str:
        """The stage's operations for ``policy``; returns the root's access."""
        index = policy.index()
        for rule in policy.rules[1:]:
            parent = _parent(index, rule.path)
            if _beneath(rule.path, OWN):
                continue
            if rule.path in self._missing:
                if parent.access == "write":
                    self._pin_between(parent.path, rule.path)
                    self._placeholder(rule.path)
                continue  # else nothing there to hide, and nothing can be made there
            if rule.access == parent.access:
                continue  # the parent's mount already shows it so
            if rule.access != "write" and parent.access == "write":
                self._pin_between(parent.path, rule.path)
            self._bind(rule.access, rule.path)
        self._count_uses([rule.path for rule in policy.rules])
        return policy.rules[0].access

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
        the next command). The stage makes it, and any missing parent, on the host."""
        missing = path
        while not os.path.lexists(missing):
            self._placeholders[missing] += 0  # known from now on; counted in _count_uses
            missing = os.path.dirname(missing)
        self._ops.append(("placeholder", path, ""))

    def _count_uses(self, paths: list[str]) -> None:
        """Every placeholder this sandbox mounts on or beneath is in use until its finalize,
        whichever sandbox made it: removing it under another one's mount would detach that
        mount and uncover what it protects."""
        used = {place for place in self._placeholders
                if any(_beneath(path, (place,)) for path in paths)}
        self.uses = sorted(used, key=lambda place: (-place.count("/"), place))

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


STAGE = _Stage()
