"""Confinement of fs calls: a path is opened by descriptor exactly where it was checked.

The server resolves every path itself: it reads each symlink on the way (`real`), checks the
resulting path, free of symlinks and "..", against the roots and the policy, then opens that
path refusing any symlink at all (openat2 with RESOLVE_NO_SYMLINKS, or a component-by-component
O_NOFOLLOW walk where the kernel lacks it). If something was swapped for a symlink in between,
the open fails with ELOOP and the whole resolution starts again, so what is opened is always
what was checked; a path with no symlink and no ".." (the usual case) costs one check and one
open. Operations then work relative to the descriptors they got, never by path again.
"""

from __future__ import annotations

import ctypes
import errno
import os
import posixpath
import stat
import time
from collections.abc import Callable, Sequence

from execproto import INTERNAL_ERROR, INVALID_REQUEST, Policy, RpcError
from execproto.policy import RANK, Globs, pinned

from .._system import readlink
from . import _view

MAX_LINKS = 40  # as the kernel: more symlinks than this on one path is a loop (ELOOP)
RETRIES = 8  # resolutions of one path raced by a swap before the call gives up with ELOOP
_DIR = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
# What one call may cost, whoever asks: a walk or a recursive copy or remove under 250 deny
# patterns took minutes, and its thread the others' share of the interpreter. The patterns are
# compiled once per call (`Globs`), each path checked against all of them counts as that many
# checks, and the loops look at the processor time the call's thread has used (`Scope.spent`):
# not the wall clock, so a call waiting on a slow disk, or for the interpreter while others
# run, is not stopped for what it did not cost.
MAX_GLOB_CHECKS = 10_000_000  # patterns × paths: 256 patterns over 39,000 paths
CALL_SECONDS = 10.0

_DENIED = {
    "read": RpcError(INVALID_REQUEST, "Permission denied (os error 13)"),
    "write": RpcError(INTERNAL_ERROR, "Read-only file system (os error 30)"),
}


def _error(code: int, path: str = "") -> OSError:
    return OSError(code, os.strerror(code), path)


# -- opening a symlink-free path ---------------------------------------------------------------

class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


_SYS_OPENAT2 = 437  # the same number on every Linux architecture (the unified syscall table)
_AT_FDCWD = -100
_RESOLVE_NO_SYMLINKS = 0x04  # also refuses magic links (/proc/self/fd/...)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _openat2(path: str, flags: int, mode: int) -> int:
    how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, _RESOLVE_NO_SYMLINKS)
    fd = _libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(_AT_FDCWD),
                       ctypes.c_char_p(os.fsencode(path)), ctypes.byref(how),
                       ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        raise _error(ctypes.get_errno(), path)
    return int(fd)


def _walk_open(path: str, flags: int, mode: int) -> int:
    """`_openat2`'s fallback: one O_NOFOLLOW open per component of an absolute normalized path."""
    names = [name for name in path.split("/") if name]
    fd = os.open("/", _DIR)
    try:
        for name in names[:-1]:
            inner = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = inner
            kind = os.fstat(fd).st_mode
            if not stat.S_ISDIR(kind):
                raise _error(errno.ELOOP if stat.S_ISLNK(kind) else errno.ENOTDIR, path)
        last = os.open(names[-1] if names else ".", flags | os.O_NOFOLLOW, mode, dir_fd=fd)
    finally:
        os.close(fd)
    if flags & os.O_PATH and stat.S_ISLNK(os.fstat(last).st_mode):
        os.close(last)  # O_PATH|O_NOFOLLOW opens a symlink itself: refuse it as openat2 does
        raise _error(errno.ELOOP, path)
    return last


def _probe() -> bool:
    try:
        os.close(_openat2("/", _DIR, 0))
    except OSError:  # ENOSYS before Linux 5.6; EPERM under some seccomp filters
        return False
    return True


open_exact = _openat2 if _probe() else _walk_open


# -- resolving a path ourselves ----------------------------------------------------------------

def _names(path: str) -> list[str]:
    """The components to resolve, as a stack (next one last); "" and "." carry nothing."""
    return [name for name in reversed(path.split("/")) if name and name != "."]


def real(path: str, *, follow: bool = True, make: bool = False) -> str:
    """Where ``path`` leads through its symlinks (the last one only if ``follow``): an absolute
    path with no symlink and no "..". Only a proposal: the caller checks it and opens it with
    `open_exact`, which fails if anything on it became a symlink meanwhile. A missing last
    component is fine (it is to be created); a missing one before it is ENOENT unless ``make``
    (createDirectory), and then the rest is appended as it is."""
    todo, here, links = _names(path), list[str](), 0
    fd = os.open("/", _DIR)
    try:
        while todo:
            name = todo.pop()
            if name == "..":
                if here:
                    here.pop()
                    os.close(fd)
                    fd = os.open("/" + "/".join(here), _DIR)
                continue
            try:
                target = os.readlink(name, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.EINVAL:  # there, and not a symlink
                    target = None
                elif exc.errno == errno.ENOENT and (not todo or (make and ".." not in todo)):
                    return "/" + "/".join(here + [name, *reversed(todo)])
                else:
                    raise
            if target is None or (not todo and not follow):
                if todo:
                    inner = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=fd)
                    os.close(fd)
                    fd = inner
                here.append(name)
                continue
            links += 1
            if links > MAX_LINKS:
                raise _error(errno.ELOOP, path)
            if target.startswith("/"):
                here = []
                os.close(fd)
                fd = os.open("/", _DIR)
            todo += _names(target)
    finally:
        os.close(fd)
    return "/" + "/".join(here)


# -- the check ---------------------------------------------------------------------------------

class Exhausted(Exception):
    """A call ran out of its budget (`MAX_GLOB_CHECKS`, `CALL_SECONDS`): it stops, and its
    answer is ``error``. Not an `RpcError`, so no loop that skips a path it may not see (a
    walk's invisible links, a listing's) mistakes it for one."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.error = RpcError(INVALID_REQUEST, message)


def _beneath(path: str, top: str) -> bool:
    return top == "/" or path == top or path.startswith(top + "/")


def resolved_policy(policy: Policy, floor: Policy | None) -> Policy:
    """The policy's rules at their real paths, narrowed by the operator's floor again, as the
    process sandbox has them (`_bwrap`): a rule whose path is the operator's symlink governs
    where it leads, and one a sandbox could have planted carries no grant out of the writable
    places (`execproto.policy.pinned`; raises `PlantedLink` where a write grant would)."""
    return pinned(policy, readlink, floor).narrow(floor)


def _tree(directory: int, name: str, spent: Callable[[], None]) -> list[str]:
    """The paths (relative to ``name``) of everything in the directory ``name``; ``spent`` is
    asked at each directory."""
    listed = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    found: list[str] = []
    todo = [(os.open(name, listed, dir_fd=directory), "")]
    try:
        while todo:
            fd, prefix = todo.pop()
            try:
                spent()
                with os.scandir(fd) as listing:
                    for entry in listing:
                        relative = posixpath.join(prefix, entry.name)
                        found.append(relative)
                        if entry.is_dir(follow_symlinks=False):
                            todo.append((os.open(entry.name, listed, dir_fd=fd), relative))
            finally:
                os.close(fd)
    finally:
        for fd, _ in todo:
            os.close(fd)
    return found


class Scope:
    """What one fs call may touch: inside ``roots`` (``--fs-root``, real paths; none: anywhere)
    and where ``policy`` grants (None: no sandbox). Every open goes through here."""

    def __init__(self, roots: Sequence[str] = (), policy: Policy | None = None,
                 unkept: str | None = None, unkept_for: Sequence[str] = ()) -> None:
        self.roots = tuple(roots)
        self.policy = policy
        # Why the policy cannot be kept as asked (`execproto.policy.crossing`), if so: a call
        # needing one of ``unkept_for`` fails saying it, as a sandboxed process fails to
        # start, and as the reference's calls that run in its sandbox do (`Files.scope`).
        self.unkept = unkept
        self.unkept_for = tuple(unkept_for)
        self.confined = bool(roots) or policy is not None
        self._globs: Globs | None = None  # the deny patterns, compiled at the first check
        self._began: float | None = None  # the call's thread's processor time, once budgeted
        self._checks = 0

    def budgeted(self) -> Scope:
        """Hold this scope to one call's budgets, from now, on this thread (`Files.run`). A
        scope that outlives a call (a watch's, polled on another thread) has none."""
        self._began = time.thread_time()
        return self

    def spent(self) -> None:
        """Raise `Exhausted` once the call has used `CALL_SECONDS`: asked in every loop that
        looks at paths (a walk's, a tree's check, each check under deny patterns)."""
        if self._began is not None and time.thread_time() - self._began > CALL_SECONDS:
            raise Exhausted(f"the call used its time budget of {CALL_SECONDS:g} s of processor "
                            "time and was stopped")

    def _denies(self, path: str) -> bool:
        assert self.policy is not None
        if self._globs is None:
            self._globs = Globs(self.policy.deny_globs)
        if self._began is not None:
            patterns = len(self._globs.patterns)
            self._checks += patterns
            if self._checks > MAX_GLOB_CHECKS:
                raise Exhausted(
                    f"the call looked at more paths than its {patterns} deny patterns allow: "
                    f"at most {MAX_GLOB_CHECKS:,} pattern checks (patterns × paths) per call")
            self.spent()
        return self._globs.denies(path)

    def granted(self, path: str, *, deep: bool = False) -> str:
        """The access the policy grants the real ``path``; ``deep``: also everything beneath it
        (no deeper rule may grant less). Deny patterns cover what they match and beneath."""
        policy = self.policy
        if policy is None:
            return "write"
        fixed = _view.access(path)
        if fixed is not None:
            return fixed
        access = policy.access(path)
        if deep:
            below = [r.access for r in policy.rules if r.path.startswith(path.rstrip("/") + "/")]
            access = min([access, *below], key=RANK.__getitem__)
        if policy.deny_globs and self._denies(path):
            return "none"
        return access

    def check_tree(self, directory: int, name: str, pairs: Sequence[tuple[str, str]]) -> None:
        """Before a recursive remove or copy touches anything: every entry of the tree at
        ``name`` in ``directory`` (walked by descriptor, no symlink followed) checked, under
        each (real path of the tree, access needed) of ``pairs``. A deny pattern may match
        anything beneath, so the call touches all of the tree or none of it."""
        if self.policy is None or not self.policy.deny_globs:
            return  # deeper rules are checked by `granted(deep=True)`; nothing else to find
        for relative in _tree(directory, name, self.spent):
            for top, need in pairs:
                where = posixpath.join(top, relative)
                self.check(where, where, need)

    def allows(self, path: str, need: str) -> bool:
        inside = not self.roots or any(_beneath(path, root) for root in self.roots)
        return inside and RANK[self.granted(path)] >= RANK[need]

    def check(self, shown: str, path: str, need: str, *, deep: bool = False) -> None:
        """Refuse ``need`` at the real ``path`` (``shown``: as the client named it)."""
        if self.unkept is not None and need in self.unkept_for:
            raise RpcError(INTERNAL_ERROR, self.unkept)
        if self.roots and not any(_beneath(path, root) for root in self.roots):
            raise RpcError(INVALID_REQUEST, f"path `{shown}` is outside the allowed roots")
        if RANK[self.granted(path, deep=deep)] < RANK[need]:
            if self.absent(path):
                raise _error(errno.ENOENT, shown)
            if _view.access(path) is not None:  # /proc and /dev: their modes refuse a write
                raise _DENIED["read"]
            raise _DENIED[need]

    def placeholder(self, path: str) -> None:
        """Where ``path``'s directory is missing but a rule names it beneath a writable one, a
        sandbox has an empty directory there that it cannot change (the stage makes one for a
        process, `_bwrap`): refuse ``path`` as that would, read-only or denied."""
        policy = self.policy
        if policy is None:
            return
        directory = posixpath.dirname(posixpath.normpath(path))
        rule = policy.index().get(directory)
        if rule is None or rule.access == "write" or directory == "/":
            return
        if policy.access(posixpath.dirname(directory)) == "write":
            raise _DENIED["write" if rule.access == "read" else "read"]

    def absent(self, path: str) -> bool:
        """Whether a sandboxed process would find nothing at the real ``path``: its sandbox
        mounts only what the policy grants or denies, and the directories that lead there, so
        a path under no rule but the root's denial is not there (the reference's answer,
        -32004), where a path a rule denies is there and refused (-32600)."""
        policy = self.policy
        if policy is None:
            return False
        if _view.absent(path):
            return True
        if _view.access(path) is not None:
            return False
        rule = policy.rule_for(path)
        if rule.path != "/" or rule.access != "none":
            return False
        inside = path.rstrip("/") + "/"
        return not any(other.path.startswith(inside) for other in policy.rules)

    def seen_as(self, path: str) -> str:
        """What a sandboxed process finds at the real ``path``: "absent" (nothing, as
        `absent` says, or nothing on the host), "masked" (a denial's empty mode-000 mask: to
        list or read it is EACCES), "leading" (a directory its sandbox makes only to lead to
        the rules beneath, holding just their names: `leading_to`), or "shown" (the host's,
        as far as the policy reads)."""
        if self.absent(path) or not os.path.lexists(path):
            return "absent"
        if self.policy is None or RANK[self.granted(path)] >= RANK["read"]:
            return "shown"
        rule = self.policy.rule_for(path)
        leading = rule.path == "/" and rule.access == "none" and _view.access(path) is None
        if leading and not (self.policy.deny_globs and self._denies(path)):
            return "leading"
        return "masked"

    def leading_to(self, path: str) -> list[str]:
        """The names in a "leading" directory (`seen_as`): the next component of each rule
        beneath it whose path is there on the host, sorted bytewise."""
        assert self.policy is not None
        inside = path.rstrip("/") + "/"
        names = {rule.path[len(inside):].split("/")[0] for rule in self.policy.rules
                 if rule.path.startswith(inside)}
        return sorted((name for name in names if os.path.lexists(inside + name)),
                      key=os.fsencode)

    def exists(self, path: str) -> bool:
        """Whether ``path`` is there as far as this scope can see: outside it, or where the
        policy grants nothing, nothing is, so asking tells nothing about what lies there."""
        if not self.confined:
            return os.path.exists(path)
        try:
            fd, _ = self.open(path, os.O_PATH, "read")
        except (OSError, RpcError):
            return False
        os.close(fd)
        return True

    # -- opening ---------------------------------------------------------------------------------

    def open(self, path: str, flags: int, need: str, *, deep: bool = False,
             follow: bool = True) -> tuple[int, str]:
        """A descriptor for ``path`` opened with ``flags`` (files made 0o666 less the umask, as
        any program's), and its real path, checked for ``need``. Symlinks are followed (the last
        one too, if ``follow``) only as far as the check allows."""
        flags |= os.O_CLOEXEC
        if not self.confined:
            if not follow:
                flags |= os.O_NOFOLLOW
            try:
                return os.open(path, flags, 0o666), path
            except FileExistsError:
                if not (flags & os.O_EXCL and follow and os.path.islink(path)):
                    raise
                return os.open(os.path.realpath(path), flags, 0o666), path  # a dangling link
        where = posixpath.normpath(path)
        if "/.." in path:  # ".." after a symlink is not lexical: resolve it ourselves
            where = real(path, follow=follow)
        for _ in range(RETRIES):
            self.check(path, where, need, deep=deep)
            try:
                return open_exact(where, flags, 0o666), where
            except OSError as exc:
                # O_EXCL finds a symlink there (a dangling one: the file is made where it
                # leads, as any program's open would) before RESOLVE_NO_SYMLINKS refuses it.
                linked = exc.errno == errno.EEXIST and flags & os.O_EXCL and follow and (
                    os.path.islink(where))
                if exc.errno != errno.ELOOP and not linked:
                    raise
            where = real(path, follow=follow)  # a symlink on the way, or one swapped in
        raise _error(errno.ELOOP, path)

    def parent(self, path: str, need: str, *, deep: bool = False) -> tuple[int, str, str]:
        """For calls on a name itself (remove, mkdir, a copy's destination): the directory
        holding it (an O_PATH descriptor), the name, and its real path, checked for ``need``.
        A symlink as the last component is not followed."""
        where = real(path, follow=False) if "/.." in path else posixpath.normpath(path)
        for _ in range(RETRIES):
            directory, name = posixpath.split(where)
            if not name:
                raise _error(errno.EBUSY, path)  # "/" itself: nothing holds it
            if self.confined:
                self.check(path, where, need, deep=deep)
            try:
                return os.open(directory, _DIR) if not self.confined else open_exact(
                    directory, _DIR, 0), name, where
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
            where = real(path, follow=False)
        raise _error(errno.ELOOP, path)

    def makedirs(self, path: str) -> None:
        """``mkdir -p``: each directory made is checked for write, each one on the way opened
        without following; an existing non-directory at the end is EEXIST."""
        if not self.confined:
            os.makedirs(path, exist_ok=True)
            if not os.path.isdir(path):
                raise _error(errno.EEXIST, path)
            return
        for _ in range(RETRIES):
            where = real(path, make=True)
            self.check(path, where, "write")
            if self._make(path, [name for name in where.split("/") if name]):
                return
        raise _error(errno.ELOOP, path)

    def _make(self, path: str, names: list[str]) -> bool:
        """Make ``names`` below "/"; False if a symlink turned up on the way (resolve again)."""
        fd = os.open("/", _DIR)
        try:
            for index, name in enumerate(names):
                try:
                    inner = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    self.check(path, "/" + "/".join(names[:index + 1]), "write")
                    try:
                        os.mkdir(name, 0o777, dir_fd=fd)
                    except FileExistsError:
                        pass
                    inner = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise
                    if _is_link(fd, name):
                        return False
                    raise _error(errno.EEXIST if index == len(names) - 1 else errno.ENOTDIR,
                                 path) from None
                os.close(fd)
                fd = inner
            return True
        finally:
            os.close(fd)


def _is_link(fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
