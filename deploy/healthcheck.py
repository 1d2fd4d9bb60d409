"""The container's health check: GET a probe URL of the local server; exit 0 on 200, else 1.

    python healthcheck.py https://127.0.0.1:8765/livez

The image has no curl. The certificate is not verified: it names the service (a DNS name or
an address clients use), not 127.0.0.1, and the check asks whether the server answers, not
who it is. Only the standard library, so it runs on the image's bare Python.
"""

import ssl
import sys
import urllib.error
import urllib.request

TIMEOUT = 3  # seconds; below the HEALTHCHECK's --timeout, so the check reports, not the runtime


def main(url: str) -> int:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT, context=context) as answer:
            status = answer.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError as exc:  # refused, timed out, TLS failed
        print(f"healthcheck: {url}: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"healthcheck: {url}: HTTP {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "https://127.0.0.1:8765/livez"))
