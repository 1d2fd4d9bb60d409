"""A network namespace the server keeps: a session's network, or one process's private one.

Run as ``/proc/self/fd/PYTHON_FD -I -S -c SOURCE PYTHON_FD CONTROL_FD PASTA`` (the server's
interpreter and this file's source as read at the server's start, as the stage is run: nothing
a sandbox may write since decides what runs here). It makes a network namespace (owned by a
user namespace of its own) and holds it for as long as CONTROL_FD, a unix socket whose other
end the server keeps, stays open: the server closing it, or dying, ends the holder, and with
it pasta; the namespace goes with the last process in it. The stage of each sandbox that uses
this network joins it by the descriptors the server opened on ``/proc/PID/ns``.

With PASTA (a path) the namespace is reached from outside through pasta, as one machine behind
a NAT: pasta forwards no port either way and does not map the gateway to the host. Its
connections leave through the host's sockets, so a connection to one of the host's own
addresses would reach the host's services (the server's port among them, if it listens on
0.0.0.0): every address the host has is given a ``prohibit`` route here, before anything runs.
Where pasta cannot run (a host with no routable interface, where it exits at once), the
namespace keeps its loopback only and the holder says so. Without PASTA it is loopback only.

Once the namespace is ready the holder writes ``ok routed`` or ``ok loopback`` on CONTROL_FD,
or ``error WHY``. It then makes sockets for the server: each request ``socket FAMILY TYPE`` is
answered with a new socket of this namespace, passed as a descriptor (a socket belongs to the
namespace it was made in, wherever it is used). The server binds the managed proxy's listeners
that way, and connects forwards into the session's network. ``route`` adds a default route
onto loopback, for the transparent proxy's rules to take every connection.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct
import sys
import time

_LIBC = ctypes.CDLL(None, use_errno=True)

CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
PR_SET_PDEATHSIG = 1
SIGPIPE, SIGXFSZ, SIG_DFL = 13, 25, 0
# How long pasta may take to give the namespace its route (it takes milliseconds).
NETWORK_WAIT = 5.0
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
RTM_NEWROUTE, NLM_F_REQUEST, NLM_F_ACK, NLM_F_CREATE = 24, 0x1, 0x4, 0x400
RT_TABLE_MAIN, RTPROT_STATIC, RT_SCOPE_UNIVERSE, RTN_PROHIBIT, RTA_DST = 254, 4, 0, 8, 1
RT_SCOPE_LINK, RTN_UNICAST, RTA_OIF, RTA_PREFSRC, LOOPBACK_INDEX = 253, 1, 4, 7, 1
RTF_UP, RTF_REJECT = 0x1, 0x200


def _check(result: int, what: str) -> None:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _map_ids(uid: int, gid: int, process: str) -> None:
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        with open(f"{process}/{name}", "w") as file:
            file.write(text)


def host_addresses() -> list[str]:
    """Every address of the host's own but loopback ones, read before the namespace exists
    (IPv4 from the kernel's local routes, IPv6 from its address list)."""
    found = []
    with open("/proc/net/fib_trie") as trie:  # "|-- 10.0.0.5" then "/32 host LOCAL"
        last = ""
        for line in trie:
            text = line.strip()
            if text.startswith("|--"):
                last = text[3:].strip()
            elif text == "/32 host LOCAL" and last and not last.startswith("127."):
                found.append(last)
    try:
        with open("/proc/net/if_inet6") as table:  # hex address, index, prefix, scope, ...
            for fields in (line.split() for line in table):
                address = socket.inet_ntop(socket.AF_INET6, bytes.fromhex(fields[0]))
                if address != "::1":
                    found.append(address)
    except FileNotFoundError:
        pass
    return sorted(set(found))


class Pasta:
    """pasta, forked before the namespace exists (so it stays in the host's network), waiting
    for the word to join it."""

    def __init__(self, pasta: str) -> None:
        self._go_read, self._go = os.pipe()
        holder, uid, gid = os.getpid(), os.geteuid(), os.getegid()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the child execs or exits
            try:
                os.close(self._go)
                _LIBC.prctl(PR_SET_PDEATHSIG, 9)  # dies with the holder
                if os.getppid() != holder or os.read(self._go_read, 1) != b"g":
                    os._exit(1)  # the holder is gone or gave up
                _map_ids(uid, gid, f"/proc/{holder}")  # from outside: mapping 0 needs it
                quiet = os.open("/dev/null", os.O_RDWR)  # its notes (no IPv6 route, say) are
                for fd in (1, 2):  # not the server's log's: the holder says what it got
                    os.dup2(quiet, fd)
                os.closerange(3, os.sysconf("SC_OPEN_MAX"))
                for number in (SIGPIPE, SIGXFSZ):  # Python ignores these; pasta must not
                    _LIBC.signal(number, SIG_DFL)
                # PASTA is passt's file (not the `pasta` link a sandbox could turn), and
                # passt is pasta when its name says so.
                os.execv(pasta, ["pasta", "--foreground", "--quiet", "--config-net",
                                 "--runas", f"{uid}:{gid}", "-t", "none", "-u", "none",
                                 "-T", "none", "-U", "none", "--no-map-gw", str(holder)])
            finally:
                os._exit(127)
        os.close(self._go_read)

    def go(self) -> None:
        os.write(self._go, b"g")
        os.close(self._go)

    def routed(self) -> bool:
        """Whether pasta gave the namespace its default route; False if it exited first
        (no routable interface on the host)."""
        deadline = time.monotonic() + NETWORK_WAIT
        while not routed():
            if os.waitpid(self.pid, os.WNOHANG)[0] != 0:
                return False
            if time.monotonic() > deadline:
                raise OSError(errno.ETIMEDOUT, "pasta set up no route")
            time.sleep(0.001)
        return True


def routed() -> bool:
    """Whether this namespace has a default route that is up (IPv4 or IPv6; the kernel lists
    an unreachable IPv6 default on `lo` in every namespace)."""
    with open("/proc/self/net/route") as table:  # Iface Destination Gateway Flags ...
        for fields in (line.split() for line in table.readlines()[1:]):
            if fields[1] == "00000000" and int(fields[3], 16) & RTF_UP:
                return True
    try:
        with open("/proc/self/net/ipv6_route") as table:  # dest len src len hop ... flags dev
            for fields in (line.split() for line in table):
                flags = int(fields[8], 16)
                if fields[1] == "00" and flags & RTF_UP and not flags & RTF_REJECT:
                    return True
    except FileNotFoundError:
        pass
    return False


def loopback_up() -> None:
    import fcntl
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(probe, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def _add_route(link: socket.socket, seq: int, family: int, destination: bytes, length: int,
               scope: int, kind: int, attributes: bytes) -> None:
    body = struct.pack("=BBBBBBBBI", family, length, 0, 0, RT_TABLE_MAIN, RTPROT_STATIC,
                       scope, kind, 0) + attributes
    if length:
        body += struct.pack("=HH", 4 + len(destination), RTA_DST) + destination
    header = struct.pack("=LHHLL", 16 + len(body), RTM_NEWROUTE,
                         NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE, seq, 0)
    link.send(header + body)
    answer = link.recv(4096)
    code = struct.unpack_from("=i", answer, 16)[0]  # nlmsgerr: 0 is the ack
    if code < 0 and -code != errno.EEXIST:
        raise OSError(-code, f"a route: {os.strerror(-code)}")


def prohibit(addresses: list[str]) -> None:
    """A ``prohibit`` route to each address (connect fails with EACCES), by rtnetlink."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as link:
        for seq, address in enumerate(addresses, 1):
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            raw = socket.inet_pton(family, address)
            _add_route(link, seq, family, raw, len(raw) * 8, RT_SCOPE_UNIVERSE, RTN_PROHIBIT, b"")


def route_everything() -> None:
    """An IPv4 default route onto loopback: every address is routable, so that a connection
    to anywhere reaches the output hook, where the transparent proxy's rules take it (a
    namespace with loopback only would refuse it first, with no route)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as link:
        # From 127.0.0.1, as a connection to loopback is: else no source fits (0.0.0.0).
        attributes = (struct.pack("=HHi", 8, RTA_OIF, LOOPBACK_INDEX)
                      + struct.pack("=HH", 8, RTA_PREFSRC) + socket.inet_aton("127.0.0.1"))
        _add_route(link, 1, socket.AF_INET, b"", 0, RT_SCOPE_LINK, RTN_UNICAST, attributes)


def make(pasta: str) -> str:
    """The namespace; returns ``routed`` or ``loopback``."""
    blocked = host_addresses() if pasta else []
    helper = Pasta(pasta) if pasta else None
    uid, gid = os.geteuid(), os.getegid()
    _check(_LIBC.unshare(CLONE_NEWNET | CLONE_NEWUSER), "unshare")
    if helper is not None:
        helper.go()
        if helper.routed():
            prohibit(blocked)
            return "routed"
    elif uid != 0:  # root is mapped from outside (by pasta's child); unmapped, it still
        _map_ids(uid, gid, "/proc/self")  # holds every capability here, which is all it needs
    loopback_up()
    return "loopback"


def serve(control: socket.socket) -> None:
    """Sockets of this namespace for the server, and a route onto loopback when it asks
    (``route``), till it closes its end."""
    while True:
        request = control.recv(64)
        if not request:
            return
        words = request.split()
        try:
            if words[0] == b"route":
                route_everything()
                control.send(b"ok")
                continue
            made = socket.socket(int(words[1]), int(words[2]))
        except (OSError, ValueError, IndexError) as exc:
            control.send(b"error " + str(exc).encode())
            continue
        socket.send_fds(control, [b"ok"], [made.fileno()])
        made.close()


def main() -> None:
    interpreter_fd, control_fd, pasta = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    os.close(interpreter_fd)
    control = socket.socket(fileno=control_fd)
    try:
        mode = make(pasta)
    except OSError as exc:
        control.send(f"error {exc}".encode())
        sys.exit(1)
    control.send(f"ok {mode}".encode())
    serve(control)


if __name__ == "__main__":
    main()
