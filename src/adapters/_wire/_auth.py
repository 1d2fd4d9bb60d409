"""Who may open a websocket (and read ``/metrics``): the bearer token its upgrade must carry,
checked in one of the two ways the reference's ``--ws-auth`` offers.

- ``capability-token``: one token every client sends. The server holds it in a file (read
  again when it changes, `_token.SecretFile`) or knows only its SHA-256, so the host never
  stores the token itself.
- ``signed-bearer-token``: an HS256 JWT, signed with a secret the server shares with whoever
  issues the tokens (a control plane handing short-lived per-user tokens to warm sandboxes);
  see `_signed`, which alone imports PyJWT.

Each check answers None (let in) or a `Refusal`: the reason for the server's one log line,
which never holds the token, and the 401's body, which tells the client no more than what it
may know (a capability token's client learns only that it is missing or wrong).
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Callable

import attrs


# Never compared (checked with `isinstance`, answered from its fields): no equality, whose
# methods attrs would compile at every server's start.
@attrs.frozen(eq=False)
class Refusal:
    why: str  # for the log: names the reason, never the token
    body: bytes  # the 401's body, one line


# signed-bearer-token's (`_signed`) numbers, here so that the command line can name them
# without loading PyJWT: the clock skew allowed by default, in seconds, and the least a shared
# secret holds, in bytes once the whitespace around it is stripped; both the reference's.
DEFAULT_SKEW = 30
MIN_SECRET = 32

# What a capability token's client is told, whatever was wrong: no more than that.
CAPABILITY_REFUSED = b"missing or wrong bearer token\n"
NO_TOKEN = Refusal("no bearer token", CAPABILITY_REFUSED)


class Authenticator:
    """How an upgrade's ``Authorization`` header is judged."""

    def refusal(self, header: bytes | None) -> Refusal | None:
        """None when ``header`` (None: there was none) lets the client in; else why not."""
        raise NotImplementedError

    def reload(self, why: str = "SIGHUP") -> bool:
        """Read its files again, now; False when it has none to read."""
        return False


# What ``serve(token=...)`` takes: a fixed token, a function giving the token of the moment
# (`_token.SecretFile.current`), an `Authenticator`, or None for none.
Token = str | Callable[[], str] | Authenticator | None


def credentials(header: bytes, refused: Refusal) -> bytes | Refusal:
    """The token of an ``Authorization: Bearer <token>`` header, or ``refused``: another
    scheme, or none. The scheme's name is case-insensitive (RFC 7235) and the spaces around
    the token do not count, as the reference reads it."""
    scheme, _, token = header.strip().partition(b" ")
    token = token.strip()
    if scheme.lower() != b"bearer" or not token:
        return refused
    return token


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


class CapabilityToken(Authenticator):
    """One token, from ``token`` (fixed, or a function giving it: a `SecretFile`'s
    ``current``), or known only by its SHA-256, ``digest``."""

    WRONG = Refusal("wrong bearer token", CAPABILITY_REFUSED)

    def __init__(self, token: str | Callable[[], str] | None = None,
                 digest: bytes | None = None, reload: Callable[[str], None] | None = None
                 ) -> None:
        """``reload``: what re-reads the token's file, when it has one."""
        if (token is None) == (digest is None):
            raise ValueError("a capability token is given either itself or by its digest")
        self._token = token
        self._digest = digest
        self._reload = reload

    def refusal(self, header: bytes | None) -> Refusal | None:
        if header is None:
            return NO_TOKEN
        given = credentials(header, self.WRONG)
        if isinstance(given, Refusal):
            return given
        # Both sides hashed, then compared in constant time: neither the time taken nor the
        # lengths say how much of a guess was right.
        if self._digest is not None:
            expected = self._digest
        else:
            token = self._token() if callable(self._token) else self._token
            assert token is not None
            expected = _digest(token.encode())
        import hmac  # at the first client with a token, not at a start

        return None if hmac.compare_digest(_digest(given), expected) else self.WRONG

    def reload(self, why: str = "SIGHUP") -> bool:
        if self._reload is None:
            return False
        self._reload(why)
        return True


def authenticator(token: Token) -> Authenticator | None:
    """``serve``'s ``token`` as an `Authenticator` (None: every client is let in)."""
    if token is None or isinstance(token, Authenticator):
        return token
    return CapabilityToken(token)


def sha256_hex(text: str) -> bytes:
    """The digest a ``--auth-token-sha256`` gives: 64 hex digits, either case, spaces around
    them ignored. ValueError if it is not one."""
    text = text.strip()
    if len(text) != 64 or not all(char in string.hexdigits for char in text):
        raise ValueError("must be a SHA-256 digest: 64 hex digits")
    return bytes.fromhex(text)
