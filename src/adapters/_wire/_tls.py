"""TLS for ``wss://`` listeners, with no I/O: bytes read in, plaintext and bytes to send out.

Each websocket peer on a TLS listener runs its bytes through a `ServerTls` (an `ssl.SSLObject`
over two memory buffers): what its socket read goes in through `receive`, what it writes comes
out of `encrypt`. So no adapter needs a TLS transport of its own: each moves bytes as it does for
``ws://`` (asyncio's raw sockets and vectored sends, trio's writer task, the threads' reader and
writer threads), and the handshake is bytes in and out on the owner's loop, never a blocking
call. A connection in its TLS handshake is still in its upgrade: the upgrade gate and
``--handshake-timeout`` count it from the accept, as they count a slow HTTP upgrade, and the gate
lets it begin only within its address's rate and the owner's time left for handshakes (its
signature is what a flood of canned ClientHellos costs; see `_gate.Gate`).

The price is that the core's thread encrypts and decrypts, as asyncio's and trio's own TLS
streams would.

This module imports `ssl`; only a TLS listener loads it.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Sequence
from pathlib import Path

import attrs

from ._token import file_stamp

log = logging.getLogger("execproto")

READ_SIZE = 256 << 10  # plaintext asked of OpenSSL at once (it gives at most a record, 16 KiB)
# What OpenSSL says of a peer that sent something other than a TLS hello.
NOT_TLS = {"HTTP_REQUEST", "HTTPS_PROXY_REQUEST", "WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL",
           "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"}


class TlsSetupError(ValueError):
    """A certificate or key that cannot serve: its message names the file and what is wrong."""


def _no_password() -> str:
    raise TlsSetupError("is encrypted: give the key unencrypted (openssl pkey -in FILE -out NEW)")


def server_context(cert: str | Path, key: str | Path,
                   names: tuple[str, str] | None = None) -> ssl.SSLContext:
    """A server context for the PEM certificate chain ``cert`` and its private key ``key``,
    TLS 1.2 and later. Raises `TlsSetupError` naming the file at fault as ``names`` says (by
    default their paths), never a prompt for a password (an encrypted key is refused)."""
    names = names or (str(cert), str(key))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load(context, _read(cert, key, names), names)
    return context


def _read(cert: str | Path, key: str | Path, names: tuple[str, str]) -> tuple[str, str]:
    texts = []
    for path, name in zip((cert, key), names, strict=True):
        try:
            texts.append(Path(path).read_text("ascii"))
        except OSError as exc:
            raise TlsSetupError(f"{name}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise TlsSetupError(f"{name}: not a PEM file (it is not text)") from None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=texts[0])
    except (ssl.SSLError, ValueError):
        raise TlsSetupError(f"{names[0]}: no PEM certificate in it") from None
    return texts[0], texts[1]


def _load(context: ssl.SSLContext, texts: tuple[str, str], names: tuple[str, str]) -> None:
    """Put the chain and key in ``texts`` in ``context``. OpenSSL reads them from files: here
    from memory files holding what was read, so what is loaded is what was checked, whatever
    happens to the files meanwhile."""
    cert_name, key_name = names
    fds = [os.memfd_create("execproto-tls", os.MFD_CLOEXEC) for _ in texts]
    try:
        for fd, text in zip(fds, texts, strict=True):
            os.write(fd, text.encode("ascii"))
        cert, key = (f"/proc/self/fd/{fd}" for fd in fds)
        try:
            context.load_cert_chain(cert, key, password=_no_password)
        except TlsSetupError as exc:
            raise TlsSetupError(f"{key_name} {exc}") from None
        except ssl.SSLError as exc:
            if exc.reason == "KEY_VALUES_MISMATCH":
                raise TlsSetupError(f"{key_name} is not the key of the certificate in "
                                    f"{cert_name}") from None
            raise TlsSetupError(f"{key_name}: no PEM private key in it") from None
        except OSError as exc:  # no /proc to open the memory files through
            raise TlsSetupError(f"{cert_name} and {key_name} could not be loaded: "
                                f"{exc.strerror or exc}") from None
    finally:
        for fd in fds:
            os.close(fd)


class CertFiles:
    """The certificate and key of a ``wss://`` listener, read again when either file changes
    (each new connection checks their stat: two system calls) or at SIGHUP.

    Certificates are renewed in place (cert-manager, a Kubernetes Secret update, certbot), and
    a server that kept the old one would serve it past its expiry. The one context is loaded
    again, so connections already open keep their session and new ones get the new pair. A
    pair that cannot serve (half written, a key that is not the certificate's) is checked on a
    context of its own first and, failing, leaves the last pair in place (a warning says so).
    """

    def __init__(self, cert: str | Path, key: str | Path, names: tuple[str, str]) -> None:
        self._paths = (cert, key)
        self._names = names
        self._seen = self._stamp()
        self.context = server_context(cert, key, names)

    def _stamp(self) -> tuple[tuple[int, int, int] | None, ...]:
        return tuple(file_stamp(path) for path in self._paths)

    def current(self) -> ssl.SSLContext:
        """The context for a new connection: loaded again first if a file changed."""
        if self._stamp() != self._seen:
            self.reload("the files changed")
        return self.context

    def reload(self, why: str = "SIGHUP") -> None:
        self._seen = self._stamp()
        try:
            texts = _read(*self._paths, self._names)
            _load(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), texts, self._names)
        except TlsSetupError as exc:
            log.warning("the TLS certificate was not read again (%s): %s; the last one stays",
                        why, exc)
            return
        _load(self.context, texts, self._names)
        log.info("the TLS certificate and key were read again (%s)", why)


@attrs.define
class Decrypted:
    """What one `ServerTls.receive` produced, to be acted on in this order."""

    send: bytes = b""  # handshake messages or an alert, for the peer
    plain: bytes = b""  # the application's bytes
    eof: bool = False  # the peer is done (a close_notify, or the socket's end)
    failed: str | None = None  # the handshake or a record failed: why, for the log
    plain_http: bool = False  # it failed on a plain HTTP request: one that HTTP can answer


class ServerTls:
    """The server side of one TLS connection."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.handshaken = False
        self._done = False  # failed, ended or closed: no more records either way

    def receive(self, data: bytes) -> Decrypted:
        """Feed bytes read from the socket (b"" at its end)."""
        out = Decrypted()
        if self._done:
            return out
        if not data:
            self._done = out.eof = True
            return out
        self._incoming.write(data)
        try:
            if not self.handshaken:
                self._tls.do_handshake()
                self.handshaken = True
            out.plain, out.eof = self._read()
            self._done = out.eof
        except ssl.SSLWantReadError:
            pass  # the handshake needs more of the peer's bytes
        except ssl.SSLError as exc:
            self._done = out.eof = True
            out.failed = describe(exc)
            out.plain_http = exc.reason == "HTTP_REQUEST"
        out.send = self._outgoing.read()
        return out

    def _read(self) -> tuple[bytes, bool]:
        """The plaintext of every whole record received, and whether a close_notify ended it
        (then `read` gives b"")."""
        chunks = []
        ended = False
        while True:
            try:
                chunk = self._tls.read(READ_SIZE)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except ssl.SSLZeroReturnError:
                ended = True
                break
            if not chunk:
                ended = True
                break
            chunks.append(chunk)
        return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), ended

    def encrypt(self, parts: Sequence[bytes]) -> bytes:
        """``parts`` as records for the socket (b"" once the connection is done or when the
        handshake is not: nothing is written before it, and nothing after a failure)."""
        if self._done or not self.handshaken:
            return b""
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        view = memoryview(data)
        try:
            while view:
                view = view[self._tls.write(view):]
        except ssl.SSLError:
            self._done = True
        return self._outgoing.read()

    def close(self) -> bytes:
        """The close_notify to send before hanging up (b"" if the handshake never finished)."""
        if self._done or not self.handshaken:
            self._done = True
            return b""
        self._done = True
        try:
            self._tls.unwrap()
        except ssl.SSLError:
            pass  # the peer's close_notify is not waited for (SSLWantReadError)
        return self._outgoing.read()


def describe(exc: ssl.SSLError) -> str:
    """OpenSSL's reason as words, with a hint for a client that does not speak TLS."""
    why = (exc.reason or exc.strerror or str(exc)).replace("_", " ").lower()
    if exc.reason in NOT_TLS:
        return f"{why} (not a TLS client: a plain ws:// or http:// one?)"
    return why
