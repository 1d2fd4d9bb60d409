"""Throwaway certificates for the TLS tests, made by docs/serving.md's recipe (the openssl command
line; the `cryptography` package is no dependency of the project), for 127.0.0.1 as it is
written: a CA, and a server certificate it signed for that IP. So the recipe the docs give
operators is the one every TLS test, the Codex CLI's included, runs on."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import attrs

SERVING = Path(__file__).resolve().parent.parent / "docs" / "serving.md"
WHY_MISSING = "" if shutil.which("openssl") else "the openssl command is not installed"
RECIPE_ADDRESS = "127.0.0.1"


@attrs.frozen
class Certs:
    ca: Path  # the CA's certificate: what a client trusts
    cert: Path  # the server's certificate (PEM)
    key: Path  # its private key (PEM, unencrypted)
    ca_key: Path  # the CA's key: a key that is not ``cert``'s


def recipe() -> str:
    """docs/serving.md's commands that make the certificates."""
    found = re.search(r"<!-- tls: recipe -->\n(?:<!-- [^>]* -->\n)*```sh\n(.*?)```",
                      SERVING.read_text(), re.DOTALL)
    assert found, "docs/serving.md has no TLS recipe"
    script = found[1]
    assert f"IP:{RECIPE_ADDRESS}" in script
    return script


def make_certs(where: Path) -> Certs:
    """The docs' CA and server certificate, for 127.0.0.1, made in ``where``."""
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["sh", "-ec", recipe()], cwd=where, check=True, capture_output=True,
                   timeout=60)
    return Certs(ca=where / "ca.pem", cert=where / "server.pem", key=where / "server.key",
                 ca_key=where / "ca.key")
