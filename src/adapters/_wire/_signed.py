"""``--auth signed-bearer-token``: each client brings an HS256 JWT signed with a secret the
server shares with whoever issues the tokens, so a control plane can hand each user a token of
their own, short-lived, without telling the server. PyJWT verifies it (this module alone
imports it, and only this mode loads it); nothing of a token is verified by hand.

What is accepted is the reference's (``codex exec-server --ws-auth signed-bearer-token``,
measured): HS256 only (``none`` and every other algorithm refused); ``exp`` required, a whole
number; ``nbf`` honoured when present; ``iat``, ``sub``, ``jti`` and the header's ``typ`` and
``kid`` ignored; ``iss`` and ``aud`` checked only when the server names an issuer or an
audience (``aud`` may be a list holding it); both times allowed the clock skew, 30 s unless
told. The secret is at least 32 bytes. Claims of the wrong type are refused as the reference's
typed claims are: ``exp`` or ``nbf`` not a 64-bit integer, ``iss`` not a string, ``aud`` not a
string or a list of strings.

One difference, under a second wide: PyJWT compares ``exp`` with the fractional time, the
reference with whole seconds, so a token is refused here up to a second before the reference
would refuse it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jwt

from ._auth import DEFAULT_SKEW, MIN_SECRET, Authenticator, Refusal, credentials

ALGORITHMS = ["HS256"]

# What the client is told: the refusals a holder of a well-signed token may act on (get a new
# one, ask for another audience) by name; anything else only that the token is not one.
INVALID = b"invalid bearer token\n"
MISSING = Refusal("no bearer token", b"missing bearer token\n")
NOT_BEARER = Refusal("not a bearer token", b"invalid authorization header\n")
EXPIRED = Refusal("bearer token expired", b"expired bearer token\n")
NOT_YET = Refusal("bearer token not valid yet (nbf)", b"bearer token not valid yet\n")
ISSUER = Refusal("bearer token from another issuer", b"bearer token from another issuer\n")
AUDIENCE = Refusal("bearer token for another audience", b"bearer token for another audience\n")

# PyJWT's refusals, most specific first (a bad signature is a DecodeError too): the reason is
# ours, never the exception's text, which could quote what the client sent.
REFUSALS: tuple[tuple[type[jwt.PyJWTError], Refusal], ...] = (
    (jwt.InvalidSignatureError, Refusal("bearer token with a bad signature", INVALID)),
    (jwt.InvalidAlgorithmError, Refusal("bearer token not signed with HS256", INVALID)),
    (jwt.ExpiredSignatureError, EXPIRED),
    (jwt.ImmatureSignatureError, NOT_YET),
    (jwt.InvalidIssuerError, ISSUER),
    (jwt.InvalidAudienceError, AUDIENCE),
    (jwt.DecodeError, Refusal("bearer token malformed (not a JWT)", INVALID)),
    (jwt.InvalidTokenError, Refusal("bearer token invalid", INVALID)),
)
# A claim the token lacks, by name: exp always, iss and aud when the server names them.
MISSING_CLAIM = {
    "exp": Refusal("bearer token without exp", INVALID),
    "iss": ISSUER,
    "aud": AUDIENCE,
}

_I64 = range(-(1 << 63), 1 << 63)


def _whole(value: Any) -> bool:
    return type(value) is int and value in _I64


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _audience(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(map(_text, value)))


# The claims the reference reads, with the type it reads each as: one of another type makes
# the whole token unreadable to it.
CLAIM_TYPES: dict[str, Callable[[Any], bool]] = {
    "exp": _whole, "nbf": _whole, "iss": _text, "aud": _audience,
}


def secret_problem(secret: str) -> str | None:
    """What makes ``secret`` unfit to verify tokens (None: nothing)."""
    if len(secret.encode()) < MIN_SECRET:
        return f"holds less than {MIN_SECRET} bytes"
    return None


class SignedBearer(Authenticator):
    def __init__(self, secret: str | Callable[[], str], issuer: str | None = None,
                 audience: str | None = None, skew: int = DEFAULT_SKEW,
                 reload: Callable[[str], None] | None = None) -> None:
        """``secret``: the shared secret, or a function giving the secret of the moment (a
        `SecretFile`'s ``current``, whose ``reload`` is ``reload``). ``issuer`` and
        ``audience``: what ``iss`` and ``aud`` must say, when given. ``skew``: seconds
        ``exp`` and ``nbf`` are allowed to be off."""
        self._secret = secret
        self._issuer = issuer
        self._audience = audience
        self._skew = skew
        self._reload = reload
        self._options: Any = {  # PyJWT's options (a TypedDict there)
            "require": ["exp"],
            "verify_iss": issuer is not None,
            "verify_aud": audience is not None,  # PyJWT would refuse any aud when none is named
            "verify_iat": False, "verify_sub": False, "verify_jti": False,
        }

    def refusal(self, header: bytes | None) -> Refusal | None:
        if header is None:
            return MISSING
        token = credentials(header, NOT_BEARER)
        if isinstance(token, Refusal):
            return token
        secret = self._secret() if callable(self._secret) else self._secret
        try:
            claims = jwt.decode(token, secret.encode(), algorithms=ALGORITHMS,
                                issuer=self._issuer, audience=self._audience,
                                leeway=self._skew, options=self._options)
        except jwt.MissingRequiredClaimError as exc:
            return MISSING_CLAIM.get(exc.claim, REFUSALS[-1][1])
        except jwt.PyJWTError as exc:
            return next((refused for kind, refused in REFUSALS if isinstance(exc, kind)),
                        REFUSALS[-1][1])
        for name, fits in CLAIM_TYPES.items():
            if name in claims and not fits(claims[name]):
                return Refusal(f"bearer token with a malformed claim ({name})", INVALID)
        return None

    def reload(self, why: str = "SIGHUP") -> bool:
        if self._reload is None:
            return False
        self._reload(why)
        return True
