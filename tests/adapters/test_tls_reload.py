"""A renewed certificate is served without a restart: ``execproto serve`` reads its
``--tls-cert`` and ``--tls-key`` again when either file changes (checked at each new connection)
or at SIGHUP, and a pair that cannot serve leaves the last one in place."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
from certs import WHY_MISSING, Certs, make_certs

from .test_tls import TlsServer, run_exec

pytestmark = pytest.mark.skipif(bool(WHY_MISSING), reason=WHY_MISSING)


def put(source: Path, target: Path) -> None:
    """Replace ``target`` with a copy of ``source`` in one step, as a Kubernetes Secret
    volume or certbot's renewal swaps the files."""
    staged = target.with_suffix(".new")
    shutil.copy(source, staged)
    os.replace(staged, target)


def test_a_renewed_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    old, new = make_certs(tmp_path / "old"), make_certs(tmp_path / "new")
    live = Certs(ca=old.ca, cert=tmp_path / "server.pem", key=tmp_path / "server.key",
                 ca_key=old.ca_key)
    put(old.cert, live.cert)
    put(old.key, live.key)
    server = TlsServer("asyncio", live)
    try:
        assert run_exec(server.url, "--ca-file", str(old.ca)).returncode == 4
        put(new.key, live.key)
        put(new.cert, live.cert)
        renewed = run_exec(server.url, "--ca-file", str(new.ca))
        assert renewed.returncode == 4, renewed.stderr
        assert run_exec(server.url, "--ca-file", str(old.ca)).returncode == 255
        # Half a renewal (the old certificate beside the new key): the pair in use stays.
        put(old.cert, live.cert)
        kept = run_exec(server.url, "--ca-file", str(new.ca))
        assert kept.returncode == 4, kept.stderr
        put(new.cert, live.cert)
        server.process.send_signal(signal.SIGHUP)
        # Handled on the server's own time: a connection before it would find the files
        # changed and read them itself.
        server.wait_for_log("the TLS certificate and key were read again (SIGHUP)")
        again = run_exec(server.url, "--ca-file", str(new.ca))
        assert again.returncode == 4, again.stderr
    finally:
        log = server.stop()
    reads = [line.split("INFO execproto: ", 1)[1] for line in log.splitlines()
             if "TLS certificate" in line and "INFO" in line]
    # The renewal was seen by the next connection; the repair by SIGHUP, which took note of the
    # files' new stamps, so the next connection found nothing new.
    assert reads == ["the TLS certificate and key were read again (the files changed)",
                     "the TLS certificate and key were read again (SIGHUP)"], log
    assert (f"WARNING execproto: the TLS certificate was not read again (the files changed): "
            f"--tls-key {live.key} is not the key of the certificate in --tls-cert {live.cert}; "
            "the last one stays") in log, log
