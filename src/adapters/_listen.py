"""The ``--listen`` address: ``ws://IP:PORT`` (numeric IP only) or ``stdio``."""

from __future__ import annotations

import errno
import ipaddress
import logging
import time
from urllib.parse import urlsplit

import attrs


class ListenError(ValueError):
    pass


# accept() failures that mean "not now" (out of descriptors or memory): the listener waits a
# moment and tries again. Any other failure means the listener itself is gone.
EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
ACCEPT_RETRY = 0.1  # seconds

log = logging.getLogger("execproto")


class AcceptTrouble:
    """Says once that connections cannot be accepted, and once that they can again, rather than
    a line per retry."""

    def __init__(self) -> None:
        self.failing = False

    def failed(self, exc: OSError) -> None:
        if not self.failing:
            self.failing = True
            log.warning("cannot accept connections: %s; retrying every %s s", exc, ACCEPT_RETRY)

    def accepted(self) -> None:
        if self.failing:
            self.failing = False
            log.warning("accepting connections again")


class QuietRetries(logging.Filter):
    """For trio's own accept loop, which logs a traceback on every retry: keep one line per
    ``every`` seconds, without the traceback."""

    def __init__(self, every: float = 10.0) -> None:
        super().__init__()
        self._every = every
        self._last = -every

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text = None, None
        now = time.monotonic()
        if now - self._last < self._every:
            return False
        self._last = now
        return True


@attrs.frozen
class Listen:
    stdio: bool
    host: str = ""
    port: int = 0

    @property
    def loopback(self) -> bool:
        return self.stdio or ipaddress.ip_address(self.host).is_loopback

    def describe(self, bound: tuple[str, int] | None) -> str:
        """The address to announce: ``stdio``, or ``ws://IP:PORT`` as actually bound."""
        if self.stdio or bound is None:
            return "stdio"
        host, port = bound[0], bound[1]
        return f"ws://[{host}]:{port}" if ":" in host else f"ws://{host}:{port}"

    @classmethod
    def parse(cls, text: str) -> Listen:
        if text in ("stdio", "stdio://"):
            return cls(stdio=True)
        parts = urlsplit(text)
        if parts.scheme != "ws" or parts.path not in ("", "/") or parts.query:
            raise ListenError(f"--listen must be ws://IP:PORT or stdio, got {text!r}")
        try:
            host = parts.hostname or ""
            ipaddress.ip_address(host)
        except ValueError:
            raise ListenError(
                f"--listen needs a numeric IP address, not a hostname: {text!r} "
                "(use ws://127.0.0.1:PORT for loopback)"
            ) from None
        try:
            port = parts.port
        except ValueError:
            raise ListenError(f"--listen has an invalid port: {text!r}") from None
        if port is None:
            raise ListenError(f"--listen needs a port: {text!r} (0 picks a free one)")
        return cls(stdio=False, host=host, port=port)
