"""``execproto serve``'s authentication flags: added to its parser, checked, and made into the
`Authenticator` every websocket upgrade asks.

The modes and their rules are the reference's (``codex exec-server --ws-auth``), under names in
execproto's style; where the reference's flag is named differently:

    --auth MODE                     --ws-auth MODE
    --auth-token-file FILE          --ws-token-file PATH
    --auth-token-sha256 HEX         --ws-token-sha256 HEX
    --auth-shared-secret-file FILE  --ws-shared-secret-file PATH
    --auth-issuer ISSUER            --ws-issuer ISSUER
    --auth-audience AUDIENCE        --ws-audience AUDIENCE
    --auth-max-clock-skew-seconds   --ws-max-clock-skew-seconds

Two differences: ``--auth`` may be left out when the other flags say which mode is meant
(``--auth-token-file`` alone has always meant a capability token), and a secret file is read
again when it changes and at SIGHUP (the reference reads it once), so a rotated token or
secret takes effect without a restart.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .._wire._auth import DEFAULT_SKEW, MIN_SECRET, Authenticator, CapabilityToken, sha256_hex
from .._wire._token import read_secret as read_secret_text
from ._args import file_path
from ._errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path

CAPABILITY, SIGNED = "capability-token", "signed-bearer-token"
MODES = (CAPABILITY, SIGNED)

# Each mode's own flags, by their attribute and their name on the command line.
OWN = {
    CAPABILITY: {"auth_token_file": "--auth-token-file",
                 "auth_token_sha256": "--auth-token-sha256"},
    SIGNED: {"auth_shared_secret_file": "--auth-shared-secret-file",
             "auth_issuer": "--auth-issuer", "auth_audience": "--auth-audience",
             "auth_max_clock_skew_seconds": "--auth-max-clock-skew-seconds"},
}
# What a mode cannot do without: one of these.
NEEDS = {
    CAPABILITY: "--auth-token-file FILE or --auth-token-sha256 HEX",
    SIGNED: "--auth-shared-secret-file FILE",
}
# The flags that say which mode is meant when --auth is not given.
IMPLY = {"auth_token_file": CAPABILITY, "auth_token_sha256": CAPABILITY,
         "auth_shared_secret_file": SIGNED}


def _skew(text: str) -> int:
    """--auth-max-clock-skew-seconds: a whole number of seconds, 0 or more (the reference's
    unsigned integer, kept to what a 64-bit signed one holds)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of seconds: {text!r}") from None
    if not 0 <= value < 1 << 63:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text}")
    return value


def add_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--auth", choices=MODES, metavar="MODE",
                       help="how websocket clients prove they may connect: capability-token, one "
                            "token every client sends (--auth-token-file or "
                            "--auth-token-sha256), or signed-bearer-token, an HS256 JWT signed "
                            "with --auth-shared-secret-file; may be left out when those flags "
                            "say which (without any: no token, loopback only)")
    serve.add_argument("--auth-token-file", type=file_path, metavar="FILE",
                       help="require 'Authorization: Bearer <token>' with the token in this "
                            "file (read again when it changes and at SIGHUP)")
    serve.add_argument("--auth-token-sha256", metavar="HEX",
                       help="require a bearer token whose SHA-256 is HEX (64 hex digits): the "
                            "host never holds the token itself")
    serve.add_argument("--auth-shared-secret-file", type=file_path, metavar="FILE",
                       help=f"signed-bearer-token: the secret tokens are signed with, "
                            f"{MIN_SECRET} bytes or more (read again when it changes and at "
                            "SIGHUP); a token must be HS256 and carry exp")
    serve.add_argument("--auth-issuer", metavar="ISSUER",
                       help="signed-bearer-token: the iss every token must name")
    serve.add_argument("--auth-audience", metavar="AUDIENCE",
                       help="signed-bearer-token: the aud every token must name (or list)")
    serve.add_argument("--auth-max-clock-skew-seconds", type=_skew, metavar="SECONDS",
                       help=f"signed-bearer-token: seconds a token's exp and nbf may be off "
                            f"(default {DEFAULT_SKEW})")


def mode(args: argparse.Namespace) -> str | None:
    """The mode the flags ask for (None: no authentication), or UsageError if they do not
    agree."""
    given = {flag: name for flags in OWN.values() for flag, name in flags.items()
             if getattr(args, flag) is not None}
    chosen: str | None = args.auth
    if chosen is None:
        implied = {IMPLY[flag] for flag in given if flag in IMPLY}
        if len(implied) > 1:
            raise UsageError("--auth-token-file or --auth-token-sha256 (capability-token) and "
                             "--auth-shared-secret-file (signed-bearer-token) are alternatives: "
                             "give one")
        if not implied and given:
            names = ", ".join(given.values())
            raise UsageError(f"{names}: for --auth signed-bearer-token, which needs "
                             f"{NEEDS[SIGNED]}")
        chosen = implied.pop() if implied else None
    if chosen is None:
        return None
    foreign = [name for flag, name in given.items() if flag not in OWN[chosen]]
    if foreign:
        other = SIGNED if chosen == CAPABILITY else CAPABILITY
        raise UsageError(f"{', '.join(foreign)}: for --auth {other}, not {chosen}")
    if chosen == CAPABILITY and len(given) > 1:
        raise UsageError("--auth-token-file and --auth-token-sha256 are alternatives: give one")
    if not any(flag in given for flag in IMPLY if IMPLY[flag] == chosen):
        raise UsageError(f"--auth {chosen} needs {NEEDS[chosen]}")
    return chosen


def read_secret(path: Path, flag: str) -> str:
    """The secret in ``path``, its surrounding whitespace stripped (as the reference reads
    it), or UsageError naming ``flag``."""
    try:
        secret = read_secret_text(path)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"{flag} {path}: {why}") from None
    if not secret:
        raise UsageError(f"{flag} {path} holds no {'token' if 'token' in flag else 'secret'}")
    return secret


def _named(args: argparse.Namespace, flag: str, name: str) -> str | None:
    """--auth-issuer or --auth-audience: stripped, as the reference does; empty is refused
    (an unset variable in a launch script), where the reference would check nothing."""
    value: str | None = getattr(args, flag)
    if value is None:
        return None
    if not value.strip():
        raise UsageError(f"{name} is empty: give the name every token must carry, or leave the "
                         "flag out")
    return value.strip()


def authenticator(args: argparse.Namespace, chosen: str | None) -> Authenticator | None:
    """What judges every upgrade, the files read (UsageError if one cannot be)."""
    from .._wire._token import SecretFile

    if chosen is None:
        return None
    if chosen == CAPABILITY:
        if args.auth_token_sha256 is not None:
            try:
                digest = sha256_hex(args.auth_token_sha256)
            except ValueError as exc:
                raise UsageError(f"--auth-token-sha256 {exc}") from None
            return CapabilityToken(digest=digest)
        token = SecretFile(args.auth_token_file, read_secret(args.auth_token_file,
                                                             "--auth-token-file"))
        return CapabilityToken(token.current, reload=token.reload)
    from .._wire import _signed  # loads PyJWT: only in this mode

    path = args.auth_shared_secret_file
    secret = read_secret(path, "--auth-shared-secret-file")
    problem = _signed.secret_problem(secret)
    if problem is not None:
        raise UsageError(f"--auth-shared-secret-file {path} {problem} (after stripping the "
                         "whitespace around it)")
    issuer = _named(args, "auth_issuer", "--auth-issuer")
    audience = _named(args, "auth_audience", "--auth-audience")
    skew = args.auth_max_clock_skew_seconds
    held = SecretFile(path, secret, what="shared secret file", noun="secret",
                      problem=_signed.secret_problem)
    return _signed.SignedBearer(held.current, issuer=issuer, audience=audience,
                                skew=DEFAULT_SKEW if skew is None else skew,
                                reload=held.reload)
