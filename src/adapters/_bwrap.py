"""A policy carried out by bubblewrap: the mounts, namespaces and environment of one sandbox.

What the sandbox guarantees (docs/design.md has the whole list, and tests/adapters/
test_sandbox_attacks.py tries to break each point):

- Files: the policy's rules become mounts, shallow first: `/` read-only (or absent), writable
  rules bound read-write, read rules read-only, denied paths covered by an empty read-only tmpfs
  (a directory) or /dev/null (a file). Every rule's path is resolved through symlinks first and
  the resolved rule narrowed by the floor again, so a symlink planted in a writable root cannot
  carry a write grant elsewhere. The source of each bind is held open by descriptor from the
  check to the mount.
- `/tmp` and `/run` are private, empty, read-only tmpfs unless the policy makes them writable:
  host unix sockets live there, and a read-only mount does not stop `connect()`. `/dev` is a
  fresh one (bwrap's `--dev`), `/dev/shm` with it.
- Its own pid, ipc, uts, cgroup and (unless the policy allows the network) network namespaces;
  no capabilities even when the server is root; no_new_privs (bwrap sets it); `/proc/sys` and
  the other kernel knobs in `/proc` read-only; killed with its parent.
- The wrappers (setpriv, bwrap) run with a fixed environment; the client's variables reach the
  program only, through bwrap's `--setenv`, passed in a memfd (`--args`) so that they never
  appear in a command line another user can read.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
from collections import Counter

from execproto import Policy, SpawnSpec
from execproto._policy import PathRule, deepest

from . import _glob

# The wrappers' whole environment: nothing a client chose.
WRAPPER_ENV = (("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),)

# Host places that hold unix sockets: empty and read-only unless the policy grants a write
# there. (/dev is always the sandbox's own, /dev/shm with it.)
PRIVATE = ("/tmp", "/run", "/var/run")
# Always the sandbox's own, fresh in each: rules beneath these are not mounted.
OWN = ("/proc", "/dev")
# Kernel knobs in a fresh /proc that would change the host, kept read-only.
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")


# Its own user namespace (root inside is root outside, but keyrings and per-user limits are
# its own, and inherited mounts are locked), no nested ones, and everything else its own too.
NAMESPACES = ("--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc",
              "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--cap-drop", "ALL")


def problem(bwrap: str) -> str | None:
    """Why bubblewrap cannot sandbox here, or None when it can (namespaces included)."""
    probe = [bwrap, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
             *NAMESPACES, "--unshare-net", "--", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30,
                              env=dict(WRAPPER_ENV))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap cannot run here: {exc}"
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
    """The bwrap command for one spawn.

    Holds the descriptors it passes (`close` them after the spawn, whether or not it
    succeeded). ``placeholders`` are the empty directories sandboxes made on the host as
    mount points and still use, with how many use each (the backend's, shared by every
    sandbox); ``uses`` lists those this one makes or mounts on, deepest first, for the
    backend to count down at its finalize.
    """

    def __init__(self, bwrap: str, floor: Policy | None, placeholders: Counter[str]) -> None:
        self._bwrap = bwrap
        self._floor = floor
        self._placeholders = placeholders
        self._options: list[str] = []
        self._missing: set[str] = set()
        self._pinned: set[str] = set()
        self.fds: list[int] = []
        self.uses: list[str] = []

    def command(self, policy: Policy, spec: SpawnSpec, program: str) -> list[str]:
        try:
            resolved = self._resolve(policy)
            self._mounts(resolved)
            self._namespaces(resolved)
            self._options += ["--chdir", spec.cwd, "--clearenv"]
            for name, value in spec.env:
                self._options += ["--setenv", name, value]
            args = self._memfd(self._options)
        except BaseException:
            self.close()
            raise
        argv = [self._bwrap, "--args", str(args), "--"]
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
        does not grant there."""
        rules = []
        for rule in policy.rules:
            real = os.path.realpath(rule.path)
            if not os.path.lexists(real):
                if rule.access == "write":
                    continue  # nothing to bind: the parent's rule governs the place
                self._missing.add(real)
            rules.append(PathRule(path=real, access=rule.access))
        for pattern in policy.deny_globs:
            try:
                matches = _glob.expand(pattern)
            except _glob.TooBroad as exc:
                raise CannotEnforce(f"the deny pattern {pattern}: {exc}") from None
            rules += [PathRule(path=os.path.realpath(m), access="none") for m in matches]
        return Policy.of(rules, policy.network).narrow(self._floor)

    def _mounts(self, policy: Policy) -> None:
        root = policy.rules[0]
        if root.access != "none":
            self._bind(root.access, "/")
        self._options += ["--dev", "/dev", "--proc", "/proc"]
        for knob in PROC_READ_ONLY:
            self._options += ["--ro-bind-try", knob, knob]
        private = tuple(p for p in PRIVATE if policy.can_read(p) and not policy.can_write(p)
                        and not os.path.islink(p))
        for place in private:
            self._options += ["--tmpfs", place]
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
            if rule.access == "read" and _beneath(rule.path, private) and parent.access != "write":
                continue  # a read-only view of the host's there would show its sockets again
            if rule.access != "write" and parent.access == "write":
                self._pin_between(parent.path, rule.path)
            self._bind(rule.access, rule.path)
        self._count_uses([rule.path for rule in policy.rules])
        for place in private:  # read-only once the mount points beneath are made
            self._options += ["--remount-ro", place]

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
                self._bind("write", directory)

    def _placeholder(self, path: str) -> None:
        """An empty read-only directory where a protected path is missing, so that the sandbox
        cannot create it (a `.codex` or `.git` planted in a writable root would be trusted by
        the next command). bwrap makes the mount point, and any missing parent, on the host."""
        missing = path
        while not os.path.lexists(missing):
            self._placeholders[missing] += 0  # known from now on; counted in _count_uses
            missing = os.path.dirname(missing)
        self._options += ["--tmpfs", path, "--remount-ro", path]

    def _count_uses(self, paths: list[str]) -> None:
        """Every placeholder this sandbox mounts on or beneath is in use until its finalize,
        whichever sandbox made it: removing it under another one's mount would detach that
        mount and uncover what it protects."""
        used = {place for place in self._placeholders
                if any(_beneath(path, (place,)) for path in paths)}
        self.uses = sorted(used, key=lambda place: (-place.count("/"), place))

    def _bind(self, access: str, path: str) -> None:
        if access == "none":
            if os.path.isdir(path):
                self._options += ["--tmpfs", path, "--remount-ro", path]
            else:
                self._options += ["--ro-bind", "/dev/null", path]
            return
        fd = self._open(path)
        if fd is None:
            return
        kind = "--bind-fd" if access == "write" else "--ro-bind-fd"
        self._options += [kind, str(fd), path]

    def _open(self, path: str) -> int | None:
        """An O_PATH descriptor for ``path`` that still names ``path`` (so no symlink was
        swapped in since it was resolved); None if it vanished."""
        try:
            fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return None
            raise
        self.fds.append(fd)
        if os.readlink(f"/proc/self/fd/{fd}") != path or stat.S_ISLNK(os.fstat(fd).st_mode):
            raise OSError(errno.ELOOP, f"{path} changed while the sandbox was set up")
        return fd

    def _namespaces(self, policy: Policy) -> None:
        self._options += NAMESPACES
        if not policy.network:
            self._options.append("--unshare-net")

    def _memfd(self, options: list[str]) -> int:
        fd = os.memfd_create("bwrap-args")  # close-on-exec; the spawn passes it on
        self.fds.append(fd)
        data = b"".join(os.fsencode(option) + b"\0" for option in options)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
        return fd
