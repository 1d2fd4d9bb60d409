"""Throwaway certificates for the TLS tests, made by the README's recipe (the openssl command
line; the `cryptography` package is no dependency of the project) with 127.0.0.1 for the
server's address: a CA, and a server certificate it signed for that IP. So the recipe the README
gives operators is the one every TLS test, the Codex CLI's included, runs on."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import attrs

README = Path(__file__).resolve().parent.parent / "README.md"
WHY_MISSING = "" if shutil.which("openssl") else "the openssl command is not installed"
RECIPE_ADDRESS = "10.0.0.5"


@attrs.frozen
class Certs:
    ca: Path  # the CA's certificate: what a client trusts
    cert: Path  # the server's certificate (PEM)
    key: Path  # its private key (PEM, unencrypted)
    ca_key: Path  # the CA's key: a key that is not ``cert``'s


def recipe() -> str:
    """The README's commands that make the certificates (not the ``execproto serve`` after)."""
    found = re.search(r"<!-- tls: recipe -->\n```sh\n(.*?)```", README.read_text(), re.DOTALL)
    assert found, "the README has no TLS recipe"
    script = found[1].split("\nexecproto serve", 1)[0]
    assert RECIPE_ADDRESS in script
    return script.replace(RECIPE_ADDRESS, "127.0.0.1")


def make_certs(where: Path) -> Certs:
    """The README's CA and server certificate, for 127.0.0.1, made in ``where``."""
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["sh", "-ec", recipe()], cwd=where, check=True, capture_output=True,
                   timeout=60)
    return Certs(ca=where / "ca.pem", cert=where / "server.pem", key=where / "server.key",
                 ca_key=where / "ca.key")
