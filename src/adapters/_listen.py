"""The ``--listen`` address: ``ws://IP:PORT`` (numeric IP only) or ``stdio``."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

import attrs


class ListenError(ValueError):
    pass


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
