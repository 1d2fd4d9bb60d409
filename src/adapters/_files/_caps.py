"""A sandboxed fs call runs as a sandboxed process would: without capabilities.

A sandboxed process has none, so a file's mode bits bind it even when the server runs as root:
it cannot write a 0444 file nor read another user's 0600 one, nor read what needs a
capability (/proc/kcore). A server running as root would otherwise read and write through
them all. Capabilities belong to a thread, so the call's worker thread lowers its effective
set for the call and raises it again after (the permitted set is kept, so it can).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager

_VERSION_3 = 0x20080522  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


_libc = ctypes.CDLL(None, use_errno=True)


def _call(function: str, data: ctypes.Array[_Data]) -> None:
    header = _Header(_VERSION_3, 0)  # pid 0: the calling thread
    if getattr(_libc, function)(ctypes.byref(header), data) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


@contextmanager
def capless() -> Iterator[None]:
    """The calling thread without effective capabilities while the block runs."""
    data = (_Data * 2)()
    _call("capget", data)
    saved = (data[0].effective, data[1].effective)
    if saved == (0, 0):  # none to lose (the server is not root): nothing to do
        yield
        return
    data[0].effective = data[1].effective = 0
    _call("capset", data)
    try:
        yield
    finally:
        data[0].effective, data[1].effective = saved
        _call("capset", data)


def effective() -> tuple[int, int]:
    """The calling thread's effective capabilities (for tests)."""
    data = (_Data * 2)()
    _call("capget", data)
    return data[0].effective, data[1].effective
