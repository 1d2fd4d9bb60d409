"""The roots credential masking trusts, as the reference gathers them: the platform's store,
then each certificate file the server's environment names for its tools (`STARTUP_FILES`),
then the directories of ``SSL_CERT_DIR``; each certificate once, in that order.

One set serves both ends. The proxy verifies an origin against it, and the child's bundle is
it with the proxy's CA after: a server told of a private CA (``SSL_CERT_FILE`` naming it, say)
reaches origins that CA signed, and its children still reach every public one. The platform's
store is OpenSSL's own file (or directory), never the one ``SSL_CERT_FILE`` names: that file
is added to it, not put in its place.

A file the environment names that cannot be read, or holds no certificate, refuses the start
with the reference's words (`Unreadable`); a directory's unreadable entries are skipped, as
the platform's are.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import ssl
from collections.abc import Iterable, Mapping

# The variables the reference reads its startup CA files from, in its order.
STARTUP_FILES = ("CODEX_CA_CERTIFICATE", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                 "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT", "BUNDLE_SSL_CA_CERT",
                 "npm_config_cafile", "NPM_CONFIG_CAFILE")
DIRECTORY_ENTRIES = 4096  # files read at most from one directory of certificates
FILE_BYTES = 16 << 20  # bytes read at most from one certificate file

_BLOCK = re.compile(rb"-----BEGIN (TRUSTED )?CERTIFICATE-----(.*?)-----END \1?CERTIFICATE-----",
                    re.DOTALL)


class Unreadable(Exception):
    """A startup CA file that cannot serve: the message is the reference's refusal."""


def roots(environ: Mapping[str, str]) -> list[bytes]:
    """The trusted certificates (DER), each once: the platform's, the startup files', the
    startup directories'."""
    found: dict[bytes, None] = {}
    paths = ssl.get_default_verify_paths()
    if paths.openssl_cafile and os.path.isfile(paths.openssl_cafile):
        found.update(dict.fromkeys(_certificates(_read(paths.openssl_cafile))))
    elif paths.openssl_capath and os.path.isdir(paths.openssl_capath):
        found.update(dict.fromkeys(_directory(paths.openssl_capath)))
    seen: set[str] = set()
    for name in STARTUP_FILES:
        path = environ.get(name, "")
        if path and path not in seen:
            seen.add(path)
            found.update(dict.fromkeys(_startup_file(path)))
    for directory in environ.get("SSL_CERT_DIR", "").split(os.pathsep):
        if directory and directory not in seen:
            seen.add(directory)
            found.update(dict.fromkeys(_directory(directory)))
    return list(found)


def pem(certificates: Iterable[bytes]) -> bytes:
    return b"".join(ssl.DER_cert_to_PEM_cert(der).encode("ascii") for der in certificates)


def _startup_file(path: str) -> list[bytes]:
    try:
        data = _read(path)
    except OSError:
        raise Unreadable("invalid network proxy config: failed to read startup CA bundle: "
                         f"{path}") from None
    try:
        found = _certificates(data, strict=True)
    except ValueError:
        raise Unreadable("invalid network proxy config: failed to parse startup CA bundle: "
                         f"{path}") from None
    if not found:
        raise Unreadable("invalid network proxy config: startup CA bundle contained no "
                         f"certificates: {path}")
    return found


def _directory(directory: str) -> list[bytes]:
    found: list[bytes] = []
    try:
        names = sorted(os.listdir(directory))[:DIRECTORY_ENTRIES]
    except OSError:
        return found
    for name in names:
        path = os.path.join(directory, name)
        try:
            if os.path.isfile(path):
                found += _certificates(_read(path))
        except OSError:
            continue
    return found


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read(FILE_BYTES)


def _certificates(data: bytes, strict: bool = False) -> list[bytes]:
    """The certificates of PEM ``data`` (an OpenSSL TRUSTED CERTIFICATE as the certificate it
    starts with). A block that is not base64 is skipped, or with ``strict`` a ValueError."""
    found = []
    for match in _BLOCK.finditer(data):
        try:
            der = base64.b64decode(b"".join(match[2].split()), validate=True)
        except (binascii.Error, ValueError):
            if strict:
                raise ValueError("not base64") from None
            continue
        if match[1]:
            der = der[:_item_length(der)]
        if der:
            found.append(der)
    return found


def _item_length(der: bytes) -> int:
    """The length of the DER item ``der`` starts with (0 if it is not whole)."""
    if len(der) < 2:
        return 0
    if der[1] < 0x80:
        length = 2 + der[1]
    else:
        size = der[1] & 0x7F
        if size == 0 or len(der) < 2 + size:
            return 0
        length = 2 + size + int.from_bytes(der[2:2 + size], "big")
    return length if length <= len(der) else 0
