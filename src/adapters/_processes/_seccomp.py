"""The sandbox's system-call filter, compiled by libseccomp and handed to bubblewrap.

bubblewrap loads it (``--seccomp FD``) just before it execs the command, so its own setup is
not filtered, and every process of the sandbox inherits it (no_new_privs is set). A denied
call fails with EPERM, as under the reference's filter, so a program sees an ordinary error
rather than dying. libseccomp (through `pyseccomp`, a ctypes binding) writes the program:
it checks the architecture first (a call made through another ABI, such as 32-bit x86 on
x86_64, kills the process) and knows each architecture's numbers.

What is denied:
- always: the reference's list (`ptrace`, `process_vm_readv/writev`, `io_uring_*`: reading
  or driving other processes, and a second path to every other call), the kernel's key
  management (`keyctl`, `add_key`, `request_key`), which bubblewrap leaves shared, and
  `socket`/`socketpair` for AF_VSOCK;
- with the network restricted: the reference's socket calls (`connect`, `bind`, `listen`,
  `accept`, `sendto`, ...), and `socket`/`socketpair` for anything but an AF_UNIX stream or
  seqpacket socket. That is an allow-list, narrower than the reference's "AF_UNIX only": an
  AF_UNIX datagram socket (SOCK_DGRAM, and SOCK_RAW, which Linux takes for SOCK_DGRAM) can
  `sendmsg` to a named socket (journald's, `/dev/log`) with no `connect`, and a datagram
  pair can name another address too. `sendmsg` itself stays allowed: a stream or seqpacket
  socket sends only once connected, so only to its own pair, and pairs carry data and
  descriptors between a command's own processes.

Why AF_VSOCK and nothing else when the network is allowed: such a sandbox gets a network
namespace of its own (pasta), and the families that live in one reach only that one:
AF_INET/AF_INET6; AF_NETLINK, kept because `ip`, `getifaddrs` and resolvers ask it about the
namespace's own links and routes; AF_PACKET and raw sockets, which need CAP_NET_RAW and so
fail anyway (the sandbox has no capability). Most others are refused by the kernel outside
the host's namespace (AF_BLUETOOTH) or need a capability too. vsock lives in no network
namespace: its port space is the machine's, on a virtual machine the way to the hypervisor
and the host's agents, so a sandbox has no use for it, and the operator's `--host-network`
(the host's own network namespace, chosen on purpose) is no reason to open it either.
AF_ALG (the kernel's ciphers, no network at all) stays allowed with the network, as under
the reference.

Behind the managed network proxy (`SpawnSpec.proxy`) the network namespace holds nothing but
loopback and the proxy's listeners, but a named AF_UNIX socket is found by its path, in no
network namespace: with `connect` allowed (the proxy needs it), a socket on the host's file
system (a container runtime's, a local proxy's) would be a way around the proxy. So there
`socket` is denied for AF_UNIX unless the proxy's configuration allows every unix socket
(``dangerouslyAllowAllUnixSockets``); `socketpair`, which names nothing, stays allowed.

How the arguments are compared: the kernel reads `socket`'s family and type as 32-bit ints,
while seccomp sees the whole 64-bit register, so no call may get past a denial through bits
the kernel ignores. The type is compared with SCMP_CMP_MASKED_EQ on the kernel's own
SOCK_TYPE_MASK (0xF), one denial for each of the 16 values but stream and seqpacket: the
decision is the type the kernel will use, whatever SOCK_NONBLOCK, SOCK_CLOEXEC and the upper
half hold (any other bit the kernel refuses with EINVAL). AF_VSOCK is matched on the lower 32
bits (40 | 1 << 32 is a vsock to the kernel). The network-restricted family rule is "not
exactly AF_UNIX", on all 64 bits, so bits above AF_UNIX only deny (glibc, musl and Go pass
the family sign-extended, so never with such bits).
"""

from __future__ import annotations

import errno
import os
import socket

ALWAYS = ("ptrace", "process_vm_readv", "process_vm_writev", "io_uring_setup",
          "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key")
NETWORK = ("connect", "accept", "accept4", "bind", "listen", "getpeername", "getsockname",
           "shutdown", "sendto", "sendmmsg", "recvmmsg", "getsockopt", "setsockopt")
# socket(2)'s type argument carries SOCK_NONBLOCK and SOCK_CLOEXEC above these bits.
SOCK_TYPE_MASK = 0xF
# The AF_UNIX socket types a sandbox without the network may make: neither sends but to a
# connected peer, and without `connect` that is only its own pair's.
UNIX_TYPES = (socket.SOCK_STREAM, socket.SOCK_SEQPACKET)
# The kernel takes the family as an int: its lower 32 bits.
INT_MASK = 0xFFFF_FFFF
AF_VSOCK = 40  # socket.AF_VSOCK, which Python leaves out where its headers lack it

_programs: dict[tuple[bool, bool], bytes] = {}


def problem() -> str | None:
    """Why no filter can be made here (libseccomp missing), or None."""
    try:
        program(network=False)
    except (ImportError, OSError, RuntimeError) as exc:
        return f"the seccomp filter cannot be built here (libseccomp): {exc}"
    return None


def program(network: bool, unix: bool = True) -> bytes:
    """The BPF program for a sandbox with the network allowed or not, and with named unix
    sockets or not (each built once)."""
    if (network, unix) not in _programs:
        _programs[network, unix] = _build(network, unix)
    return _programs[network, unix]


def _build(network: bool, unix: bool = True) -> bytes:
    import pyseccomp as seccomp  # type: ignore[import-untyped]  # loads libseccomp, when first wanted

    denied = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in ALWAYS + (() if network else NETWORK):
        rules.add_rule(denied, name)
    for call in ("socket", "socketpair"):
        rules.add_rule(denied, call, seccomp.Arg(0, seccomp.MASKED_EQ, INT_MASK, AF_VSOCK))
        if network and not unix and call == "socket":
            rules.add_rule(denied, call,
                           seccomp.Arg(0, seccomp.MASKED_EQ, INT_MASK, socket.AF_UNIX))
        if not network:
            rules.add_rule(denied, call, seccomp.Arg(0, seccomp.NE, socket.AF_UNIX))
            for kind in range(SOCK_TYPE_MASK + 1):
                if kind not in UNIX_TYPES:
                    rules.add_rule(denied, call,
                                   seccomp.Arg(1, seccomp.MASKED_EQ, SOCK_TYPE_MASK, kind))
    with os.fdopen(os.memfd_create("seccomp"), "w+b") as out:
        rules.export_bpf(out)
        out.seek(0)
        return out.read()
