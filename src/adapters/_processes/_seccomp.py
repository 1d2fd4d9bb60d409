"""The sandbox's system-call filter, compiled by libseccomp and handed to bubblewrap.

bubblewrap loads it (``--seccomp FD``) just before it execs the command, so its own setup is
not filtered, and every process of the sandbox inherits it (no_new_privs is set). A denied
call fails with EPERM, as under the reference's filter, so a program sees an ordinary error
rather than dying. libseccomp (through `pyseccomp`, a ctypes binding) writes the program:
it checks the architecture first (a call made through another ABI, such as 32-bit x86 on
x86_64, kills the process) and knows each architecture's numbers.

What is denied:
- always: the reference's list (`ptrace`, `process_vm_readv/writev`, `io_uring_*`: reading
  or driving other processes, and a second path to every other call), and the kernel's key
  management (`keyctl`, `add_key`, `request_key`), which bubblewrap leaves shared;
- with the network restricted: the reference's socket calls (`connect`, `bind`, `listen`,
  `accept`, `sendto`, ...), and `socket`/`socketpair` for any family but AF_UNIX; beyond the
  reference, an AF_UNIX datagram socket too, since `sendmsg` to a named datagram socket
  needs no `connect` (a datagram `socketpair` can name another address as well).
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

_programs: dict[bool, bytes] = {}


def problem() -> str | None:
    """Why no filter can be made here (libseccomp missing), or None."""
    try:
        program(network=False)
    except (ImportError, OSError, RuntimeError) as exc:
        return f"the seccomp filter cannot be built here (libseccomp): {exc}"
    return None


def program(network: bool) -> bytes:
    """The BPF program for a sandbox with the network allowed or not (built once)."""
    if network not in _programs:
        _programs[network] = _build(network)
    return _programs[network]


def _build(network: bool) -> bytes:
    import pyseccomp as seccomp  # type: ignore[import-untyped]  # loads libseccomp, when first wanted

    denied = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in ALWAYS + (() if network else NETWORK):
        rules.add_rule(denied, name)
    if not network:
        for call in ("socket", "socketpair"):
            rules.add_rule(denied, call, seccomp.Arg(0, seccomp.NE, socket.AF_UNIX))
            rules.add_rule(denied, call, seccomp.Arg(1, seccomp.MASKED_EQ, SOCK_TYPE_MASK,
                                                     socket.SOCK_DGRAM))
    with os.fdopen(os.memfd_create("seccomp"), "w+b") as out:
        rules.export_bpf(out)
        out.seek(0)
        return out.read()
