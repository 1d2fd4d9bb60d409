"""The proxy's certificate authority, for credential masking: made once per server process at
the first masking start, with the `cryptography` package (imported then, not before).

- The CA's key never leaves memory. Each intercepted host gets a leaf certificate (ECDSA
  P-256, the host as its subject alternative name) signed by it; its TLS context is cached,
  at most `LEAVES` of them. Python's `ssl` loads a certificate only from a file, so the leaf
  and its key are handed to it through a memfd (an anonymous file no other process can name:
  a sandbox sees no /proc of the server's), never through the file system.
- The child trusts the CA through a bundle, written as the reference writes its own: the
  trusted roots (`_trust`) then the CA, in ``ca-bundle-<sha256>.pem``, in a directory of this
  server's own (`BUNDLE_BASE`), readable and never writable in every sandbox
  (`_masking.bundle_readable`), removed at exit.
- Upstream, the proxy verifies each origin against the roots `_trust` gathers as the
  reference does (the platform's store, then the CA files and directories the server's
  environment names), the same roots the child's bundle holds before the CA.
"""

from __future__ import annotations

import atexit
import datetime
import hashlib
import ipaddress
import os
import shutil
import ssl
import tempfile
import threading
from collections import OrderedDict
from typing import Any

from . import _trust

LEAVES = 256  # leaf contexts kept, least recently used dropped first
CA_NAME = "execproto proxy MITM CA"
ALPN = ["http/1.1"]  # the proxy speaks HTTP/1.1 inside an intercepted tunnel, both ways
LEAF_DAYS = 30


def _bundle_base() -> str:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return runtime
    return os.path.join(os.path.expanduser("~"), ".cache", "execproto")


BUNDLE_BASE = _bundle_base()


class Authority:
    """One server process's CA: `bundle` (the path the child's variables name), `server_context`
    (the leaf a child sees for a host) and `client_context` (the origin, verified)."""

    def __init__(self) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        trusted = _trust.roots(os.environ)  # first: a file that cannot serve stops here
        self._x509, self._hashes, self._ec = x509, hashes, ec
        self._serialization, self._oid = serialization, NameOID
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
        self._name = name
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name).issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()),
                           critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_pem = self._cert.public_bytes(serialization.Encoding.PEM)
        # Its real path: a sandbox binds it there (a rule through a symlink binds nothing).
        self.directory = os.path.realpath(
            tempfile.mkdtemp(prefix="execproto-proxy-ca-", dir=_made(BUNDLE_BASE)))
        os.chmod(self.directory, 0o755)
        atexit.register(shutil.rmtree, self.directory, True)
        bundle = _trust.pem(trusted) + self.ca_pem
        self.bundle = os.path.join(self.directory,
                                   f"ca-bundle-{hashlib.sha256(bundle).hexdigest()}.pem")
        descriptor = os.open(self.bundle, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                             0o444)
        with os.fdopen(descriptor, "wb") as file:
            file.write(bundle)
        self._leaves: OrderedDict[str, ssl.SSLContext] = OrderedDict()
        self._lock = threading.Lock()
        self.client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies, by name
        for der in trusted:
            try:
                self.client_context.load_verify_locations(cadata=der)
            except ssl.SSLError:
                pass  # one OpenSSL will not take as a root: the reference ignores it too
        self.client_context.set_alpn_protocols(ALPN)

    def server_context(self, host: str) -> ssl.SSLContext:
        """The TLS context that shows the child a certificate for ``host`` (made, or cached)."""
        with self._lock:
            context = self._leaves.get(host)
            if context is not None:
                self._leaves.move_to_end(host)
                return context
        context = self._leaf(host)
        with self._lock:
            self._leaves[host] = context
            while len(self._leaves) > LEAVES:
                self._leaves.popitem(last=False)
        return context

    def _leaf(self, host: str) -> ssl.SSLContext:
        x509, serialization = self._x509, self._serialization
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        try:
            alternative: Any = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            alternative = x509.DNSName(host)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(self._oid.COMMON_NAME, host[:64])]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
            .add_extension(x509.SubjectAlternativeName([alternative]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self._key.public_key()), critical=False)
            .sign(self._key, self._hashes.SHA256())
        )
        pem = cert.public_bytes(serialization.Encoding.PEM) + self.ca_pem + key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption())
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(ALPN)
        descriptor = os.memfd_create("execproto-leaf", os.MFD_CLOEXEC)
        try:
            os.write(descriptor, pem)
            context.load_cert_chain(f"/proc/self/fd/{descriptor}")
        finally:
            os.close(descriptor)
        return context


def _made(path: str) -> str:
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


_shared: Authority | None = None
_shared_lock = threading.Lock()


def authority() -> Authority:
    """This server process's CA, made at the first call (from any thread). A startup CA file
    its environment names that cannot serve refuses the start (`backends.Refused`), and the
    next start tries again."""
    global _shared
    with _shared_lock:
        if _shared is None:
            try:
                _shared = Authority()
            except _trust.Unreadable as exc:
                from ..backends import Refused

                raise Refused(str(exc)) from None
        return _shared
