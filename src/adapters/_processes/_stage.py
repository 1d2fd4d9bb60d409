"""The sandbox's file system, built by descriptor before bubblewrap runs.

Run in the child the stage server forks for each sandboxed start (`_forker`: the server's
interpreter by the descriptor it opened at its start, this file's source as read then, so that
nothing a sandbox may write since decides what runs here): `build` reads the plan (from a memfd
the server wrote), builds the sandbox's root in a private mount namespace of its own, with the
sandbox's ``/dev`` (`Stage.dev`), and joins a fresh session keyring; the child then execs
bubblewrap, which takes that root whole (``--dev-bind STAGED /``) and adds only ``/proc``.

Why not let bubblewrap make the mounts: it finds each mount point by path, creating a missing
one with ``creat`` (O_TRUNC, following symlinks) or ``mkdir``, while the host's root is still
reachable and it holds every capability. A sandboxed command that swaps a name in a writable
place between a file and a symlink to ``/oldroot/victim`` has the victim truncated, as root.
Here every path is resolved with RESOLVE_NO_SYMLINKS beneath a descriptor (`openat2`), every
mount is attached to the descriptor that resolution gave (`move_mount`), and every mount point
is made with ``mkdirat`` or ``O_CREAT|O_EXCL`` relative to its parent's descriptor: nothing is
ever created, truncated or mounted through a symlink, whatever is swapped meanwhile. A name
that became a symlink since the server looked fails the start ("changed while the sandbox was
set up"); one that vanished is skipped (nothing there to hide or to show).

With a network in the plan (the descriptors of a namespace the server holds: its session's,
reached from outside through pasta, or the process's own behind the managed proxy; see
`_hold`), the stage joins it, and bubblewrap keeps it (no ``--unshare-net``).

The plan is NUL-separated fields (paths hold no NUL): the root's access (``read``, ``write``
or ``none``), ``1`` if a user namespace is needed (the server is not root), the network to join
(``NET:USER`` descriptors) or nothing, then the operations in order (shallow first, as the
server sorted them), three fields each:
    bind P read|write     the host's P at P
    cover P -             P masked: an empty directory or an empty file, read-only and of
                          mode 000 (`Stage.cover`)
    pin P -               P bound onto itself: it cannot be renamed
    pin-link P TARGET     the symlink P, still leading to TARGET, bound onto itself: it
                          cannot be renamed, removed or replaced (`Stage.pin_link`)
    placeholder P -       P made (as an empty directory) and covered
    link P TARGET         a symlink at P to TARGET, as the host has it (a ``none`` root only)
    refuse WHY -          (alone) fail with WHY before anything is made: the server found
                          the sandbox cannot be kept as asked
A ``none`` root is an empty tmpfs in which the mount points are made, read-only at the end.

Only the standard library, nothing from execproto: it runs with the server's privileges,
so it trusts only its plan.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long

# The new mount API and openat2 have one number on every architecture.
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_FSOPEN, SYS_FSCONFIG, SYS_FSMOUNT = 428, 429, 430, 431, 432
SYS_OPENAT2, SYS_MOUNT_SETATTR = 437, 442
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)

CLONE_NEWNS, CLONE_NEWUSER = 0x20000, 0x10000000
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
AT_FDCWD = -100
AT_EMPTY_PATH, AT_RECURSIVE = 0x1000, 0x8000
OPEN_TREE_CLONE = 1
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
FSCONFIG_SET_STRING, FSCONFIG_CMD_CREATE = 1, 6
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC = 0x1, 0x2, 0x4, 0x8
RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH = 0x2, 0x4, 0x8
KEYCTL_JOIN_SESSION_KEYRING = 1
CLONE_NEWNET = 0x40000000
# Where the staged root is attached in the private namespace for bubblewrap to bind: a
# directory every system has, covered only in this namespace, beneath which no rule is ever
# mounted or read from (the sandbox's /dev is bubblewrap's own), so that no lookup of a
# source on the host passes through the staged tree.
STAGED = "/dev/shm"


# The sandbox's /dev (`Stage.dev`): the host's devices bound there, and its links.
DEVICES = [(f"dev/{name}", name) for name in ("null", "zero", "full", "random", "urandom", "tty")]
DEV_LINKS = (("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"), ("fd", "/proc/self/fd"), ("core", "/proc/kcore"),
             ("ptmx", "pts/ptmx"))


class Changed(Exception):
    """A path is not what the server saw (or the server found the sandbox cannot be kept as
    asked): the start fails rather than mount through it."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def _syscall(number: int, what: str, *args: object) -> int:
    return _check(_LIBC.syscall(ctypes.c_long(number), *args), what)


def openat2(dirfd: int, path: str, flags: int = os.O_PATH) -> int:
    """``path`` beneath ``dirfd``, through no symlink at all (ELOOP if one is met)."""
    how = _OpenHow(flags | os.O_CLOEXEC, 0,
                   RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH)
    return _syscall(SYS_OPENAT2, f"open {path}", ctypes.c_int(dirfd), os.fsencode(path or "."),
                    ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))


def clone_tree(fd: int) -> int:
    return _syscall(SYS_OPEN_TREE, "clone", ctypes.c_int(fd), b"",
                    ctypes.c_uint(OPEN_TREE_CLONE | os.O_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE))


def set_attr(fd: int, attr: int, recursive: bool = True) -> None:
    flags = AT_EMPTY_PATH | (AT_RECURSIVE if recursive else 0)
    spec = _MountAttr(attr, 0, 0, 0)
    _syscall(SYS_MOUNT_SETATTR, "mount_setattr", ctypes.c_int(fd), b"", ctypes.c_uint(flags),
             ctypes.byref(spec), ctypes.c_size_t(ctypes.sizeof(spec)))


def attach(tree: int, target: int) -> None:
    """Mount ``tree`` on exactly the object ``target`` names (no lookup by path)."""
    _syscall(SYS_MOVE_MOUNT, "mount", ctypes.c_int(tree), b"", ctypes.c_int(target), b"",
             ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH))


def tmpfs(read_only: bool, mode: str = "0755") -> int:
    attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (MOUNT_ATTR_RDONLY if read_only else 0)
    return filesystem("tmpfs", {"mode": mode, "size": "1m"}, attrs)


def filesystem(kind: str, options: dict[str, str], attrs: int) -> int:
    """A new, detached mount of a fresh ``kind`` file system."""
    fs = _syscall(SYS_FSOPEN, kind, kind.encode(), ctypes.c_uint(1))
    try:
        for key, value in options.items():
            _syscall(SYS_FSCONFIG, kind, ctypes.c_int(fs), ctypes.c_uint(FSCONFIG_SET_STRING),
                     key.encode(), value.encode(), ctypes.c_int(0))
        _syscall(SYS_FSCONFIG, kind, ctypes.c_int(fs), ctypes.c_uint(FSCONFIG_CMD_CREATE),
                 None, None, ctypes.c_int(0))
        return _syscall(SYS_FSMOUNT, kind, ctypes.c_int(fs), ctypes.c_uint(1),
                        ctypes.c_uint(attrs))
    finally:
        os.close(fs)


class Stage:
    """The sandbox's root being built, attached at `STAGED`."""

    def __init__(self, root: str, masks_files: bool = False) -> None:
        self.host = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.made_root = root == "none"  # our own tmpfs: mount points may be made anywhere
        if self.made_root:
            tree = tmpfs(read_only=False)
        else:
            tree = clone_tree(self.host)
            if root == "read":
                set_attr(tree, MOUNT_ATTR_RDONLY)
        at = os.open(STAGED, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self.blank = _blank_file(at) if masks_files else None
        attach(tree, at)  # over the blank file's tmpfs, if any: bubblewrap binds the top one
        self.root = tree  # the attached tree's root: every destination is resolved beneath it
        self.empty: int | None = None  # the placeholders' tmpfs, once one is made

    def bind(self, path: str, access: str) -> None:
        try:
            source = openat2(self.host, path.lstrip("/"))
        except OSError as exc:
            self._missing_or_changed(exc, path)
            return
        is_dir = stat.S_ISDIR(os.fstat(source).st_mode)
        target = self._target(path, is_dir)
        if target is None:
            return
        tree = clone_tree(source)
        if access == "read":
            set_attr(tree, MOUNT_ATTR_RDONLY)
        attach(tree, target)

    def cover(self, path: str, access: str = "") -> None:
        """A denied ``path`` masked as the reference masks it: a directory by an empty tmpfs,
        a file by an empty file, both of mode 000 and mounted read-only. The names and the
        contents beneath stay hidden (nothing is there), and nothing is written through it;
        what a process meets is "Permission denied" (EACCES), not a missing path. The mode
        binds a root server's sandbox too: its processes have no capabilities (no
        CAP_DAC_OVERRIDE), and owning the mask does not help, as a read-only mount refuses
        chmod."""
        is_dir = None  # what the staged tree has there, unless it is our own
        if self.made_root:
            try:
                source = openat2(self.host, path.lstrip("/"))
            except OSError as exc:
                self._missing_or_changed(exc, path)
                return
            is_dir = stat.S_ISDIR(os.fstat(source).st_mode)
            os.close(source)
        target = self._target(path, is_dir)
        if target is None:
            return
        if stat.S_ISDIR(os.fstat(target).st_mode):
            attach(tmpfs(read_only=True, mode="0000"), target)
            return
        assert self.blank is not None  # made in __init__, as the plan has a cover
        mask = clone_tree(self.blank)
        set_attr(mask, MOUNT_ATTR_RDONLY)
        attach(mask, target)

    def pin(self, path: str, access: str = "") -> None:
        target = self._target(path, True)
        if target is not None:
            attach(clone_tree(target), target)

    def pin_link(self, path: str, target: str) -> None:
        """The symlink at ``path`` bound onto itself, as `pin` binds a directory: a mount
        point cannot be renamed, removed or replaced (EBUSY), and a lookup still follows the
        link beneath it. The server pins the links on the way to what it runs (`/lib64` on
        the way to the loader): a link a sandbox may write beside is not what it was when the
        server looked, if it is not a link to the same ``target`` now, and the start fails
        ("changed"), vanished included: the sandbox could make it anew."""
        try:
            link = openat2(self.root, path.lstrip("/"), os.O_PATH | os.O_NOFOLLOW)
        except OSError:
            raise Changed(f"{path} changed while the sandbox was set up") from None
        if not stat.S_ISLNK(os.fstat(link).st_mode) or os.readlink("", dir_fd=link) != target:
            raise Changed(f"{path} changed while the sandbox was set up")
        attach(clone_tree(link), link)  # nosuid and nodev at the `finish`
        # Renamed away before the mount, the link would be pinned elsewhere: what is at the
        # name now must be the pinned link.
        try:
            now = openat2(self.root, path.lstrip("/"), os.O_PATH | os.O_NOFOLLOW)
        except OSError:
            raise Changed(f"{path} changed while the sandbox was set up") from None
        before, after = os.fstat(link), os.fstat(now)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise Changed(f"{path} changed while the sandbox was set up")

    def placeholder(self, path: str, access: str = "") -> None:
        made: list[str] = []
        target = self._make(path, is_dir=True, made=made)
        on_the_way = [directory for directory in made if directory != "/" + path.strip("/")]
        if not self.made_root and on_the_way:
            # Directories made on the way are pinned, as the server pins those that were
            # there (`pin`): renaming one would carry the cover off, and the command could
            # make the protected path anew beneath a fresh one.
            for directory in on_the_way:
                here = openat2(self.root, directory.lstrip("/"))
                attach(clone_tree(here), here)
            target = openat2(self.root, path.lstrip("/"))
        if self.empty is None:  # one empty read-only tmpfs, bound at every placeholder
            self.empty = tmpfs(read_only=True, mode="0555")
            attach(self.empty, target)  # attached, so that it can be cloned (a detached
            return  # mount cannot be, on every kernel)
        attach(clone_tree(self.empty), target)

    def link(self, path: str, target: str) -> None:
        """The host's symlink at ``path``, made again in our own tmpfs (its directory made
        first); one made meanwhile by another op is left."""
        assert self.made_root, "links are made only under an absent root"
        directory, name = os.path.split(path.rstrip("/"))
        parent = self._make(directory, is_dir=True)
        try:
            os.symlink(target, name, dir_fd=parent)
        except FileExistsError:
            pass

    def finish(self) -> None:
        # Every mount of the staged root nosuid and nodev, in one call: bubblewrap's `--bind`
        # makes each submount so, and remounts, one system call each (a few dozen: the host's
        # /sys, /dev, cgroups beneath `/`, and the plan's), every one that is not already.
        # On a pinned link its remount would also fail (EPERM): it finds the mount point by
        # path, following the link. Nothing changes on a link (what it leads to is on
        # another mount).
        set_attr(self.root, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
        if self.made_root:
            for own in ("dev", "proc"):  # bubblewrap mounts its own there
                self._make("/" + own, is_dir=True)
            set_attr(self.root, MOUNT_ATTR_RDONLY, recursive=False)

    def dev(self) -> None:
        """The sandbox's ``/dev``, as bubblewrap's ``--dev`` makes it: a fresh tmpfs holding
        the host's null, zero, full, random, urandom and tty (each bound from the host's, and
        the terminal of its stdout as ``console``), a devpts of its own with ``ptmx`` leading
        into it, ``shm``, and the links to ``/proc``. Made here, by descriptor in a tmpfs no
        one else reaches yet, rather than by bubblewrap: there each of its binds reads the
        whole mount table back and parses it (its namespace holds the host's mounts, and the
        staged root's twice), measured ~4 ms of a 12 ms workspace-write start, against a
        fraction of one here. After `finish`, so that the devices are not made nodev;
        bubblewrap takes the staged root with ``--dev-bind``, and changes nothing of it."""
        # As bubblewrap's (its source named so, and no size: shm is written there).
        dev = filesystem("tmpfs", {"source": "tmpfs", "mode": "0755"},
                         MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
        target = self._target("/dev", True)
        if target is None:
            raise Changed("/dev is missing")
        attach(dev, target)
        nodes = list(DEVICES)
        try:  # bubblewrap's console: the terminal it was started on, if any
            nodes.append((os.ttyname(1).lstrip("/"), "console"))
        except OSError:
            pass
        for source, name in nodes:
            node = openat2(self.host, source)
            made = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW
                           | os.O_CLOEXEC, 0o444, dir_fd=dev)
            attach(clone_tree(node), made)
            os.close(made)
        for name, leads in DEV_LINKS:
            os.symlink(leads, name, dir_fd=dev)
        for name in ("shm", "pts"):
            os.mkdir(name, 0o755, dir_fd=dev)
        pts = filesystem("devpts", {"source": "devpts", "ptmxmode": "0666", "mode": "620"},
                         MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC)
        attach(pts, openat2(dev, "pts"))
        set_attr(dev, MOUNT_ATTR_NOSUID)  # the devices' binds, all at once

    def _target(self, path: str, is_dir: bool | None) -> int | None:
        """The staged ``path`` (made first in our own tmpfs), None if it vanished."""
        if self.made_root:
            return self._make(path, bool(is_dir))
        try:
            target = openat2(self.root, path.lstrip("/"))
        except OSError as exc:
            self._missing_or_changed(exc, path)
            return None
        if is_dir is not None and stat.S_ISDIR(os.fstat(target).st_mode) != is_dir:
            raise Changed(f"{path} changed while the sandbox was set up")
        return target

    def _make(self, path: str, is_dir: bool, made: list[str] | None = None) -> int:
        """``path`` beneath the staged root, each missing piece made relative to its parent's
        descriptor: a directory with mkdirat, a file with O_CREAT|O_EXCL (neither follows or
        truncates anything); a symlink on the way is refused. The directories it made are
        added to ``made``, shallow first."""
        parts = [part for part in path.split("/") if part]
        here = self.root
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            try:
                here = openat2(here, part)
                continue
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise Changed(f"{path} changed while the sandbox was set up") from None
            if is_dir or not last:
                try:
                    os.mkdir(part, 0o755, dir_fd=here)
                    if made is not None:
                        made.append("/" + "/".join(parts[:index + 1]))
                except FileExistsError:
                    pass  # made meanwhile: opened below, through no symlink
            else:
                flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                try:
                    os.close(os.open(part, flags, 0o444, dir_fd=here))
                except FileExistsError:
                    pass
            here = openat2(here, part)
        if stat.S_ISDIR(os.fstat(here).st_mode) != is_dir:
            raise Changed(f"{path} changed while the sandbox was set up")
        return here

    @staticmethod
    def _missing_or_changed(exc: OSError, path: str) -> None:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return  # vanished: nothing there to show or to hide
        if exc.errno in (errno.ELOOP, errno.EXDEV):
            raise Changed(f"{path} changed while the sandbox was set up") from None
        raise exc


def _blank_file(at: int) -> int:
    """An empty file of mode 000, to bind over denied files (`Stage.cover`): an O_PATH
    descriptor of it, on a tmpfs of its own attached at ``at`` (`STAGED`) before the staged
    root is attached over it. A file is bound only from a mount of this namespace (a detached
    one will not do on every kernel), and there, beneath the staged root, no sandbox sees
    it."""
    holder = tmpfs(read_only=False)
    attach(holder, at)
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    os.close(os.open("blank", flags, 0o000, dir_fd=holder))
    return openat2(holder, "blank")


def _namespace(userns: bool) -> None:
    """A private mount namespace (in a user namespace of our own when not root)."""
    uid, gid = os.geteuid(), os.getegid()
    _check(_LIBC.unshare(CLONE_NEWNS | (CLONE_NEWUSER if userns else 0)), "unshare")
    if userns:
        _map_ids(uid, gid)
    _check(_LIBC.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None), "private")


def _join(joined: str, userns: bool) -> None:
    """Join the network the server holds (`_hold`): ``NET:USER``, its descriptors. Root
    joins the network alone; anyone else joins its user namespace first, whose owner it is
    (and whose mapping is its own), and makes the private mount namespace in there."""
    net, user = (int(fd) for fd in joined.split(":"))
    if userns:
        _check(_LIBC.setns(user, CLONE_NEWUSER), "join the network's user namespace")
    _check(_LIBC.setns(net, CLONE_NEWNET), "join the network")
    os.close(net)
    os.close(user)


def _map_ids(uid: int, gid: int, process: str = "/proc/self") -> None:
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        with open(f"{process}/{name}", "w") as file:
            file.write(text)


def fresh_keyring() -> None:
    """A new, empty session keyring: the server's keys stay out of reach."""
    if SYS_KEYCTL is not None:
        _syscall(SYS_KEYCTL, "keyring", ctypes.c_int(KEYCTL_JOIN_SESSION_KEYRING), None)


OPS = {"bind": Stage.bind, "cover": Stage.cover, "pin": Stage.pin, "pin-link": Stage.pin_link,
       "placeholder": Stage.placeholder, "link": Stage.link}


def build(plan: list[str]) -> None:
    root, userns, joined, ops = plan[0], bool(plan[1]), plan[2], plan[3:]
    if ops[:1] == ["refuse"]:
        raise Changed(ops[1])
    if joined:
        _join(joined, userns)
    _namespace(userns and not joined)
    stage = Stage(root, masks_files="cover" in ops[0::3])
    for index in range(0, len(ops), 3):
        operation, path, access = ops[index:index + 3]
        OPS[operation](stage, path, access)
    stage.finish()
    stage.dev()
    fresh_keyring()

