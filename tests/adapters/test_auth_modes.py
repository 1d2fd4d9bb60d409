"""serve's authentication modes, the reference's ``--ws-auth`` under execproto's names: a
capability token known only by its SHA-256, and HS256 JWTs signed with a shared secret. The
JWT cases (expired, wrong audience, wrong issuer, bad signature, ``alg: none``, the clock
skew's edge from both sides, ...) get the same answer from execproto as from the reference,
side by side; each refusal is one log line that names its reason and never holds the token;
a rotated secret takes effect without a restart."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from reference import CACHE, REFERENCE, WHY_MISSING

from .conftest import Server, uri
from .sandboxes import needs_bwrap, read_only
from .wsclient import Client

SECRET = "shared-secret-0123456789-abcdefghij"  # 35 bytes: the least is 32
OTHER_SECRET = "another-secret-0123456789-abcdefghij"
ISSUER, AUDIENCE, SKEW = "control-plane", "sandbox-7", 60
UPGRADE = (
    "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign(claims: Any, secret: str = SECRET, alg: str = "HS256",
         header: dict[str, Any] | None = None) -> str:
    """A JWT, made by hand so that it can be what PyJWT would refuse to make (``alg: none``,
    claims of the wrong type); the servers verify it, not this."""
    head = b64(json.dumps({"alg": alg, "typ": "JWT", **(header or {})}).encode())
    body = b64(json.dumps(claims).encode())
    if alg == "none":
        return f"{head}.{body}."
    digest = {"HS256": hashlib.sha256, "HS512": hashlib.sha512}[alg]
    mac = hmac.new(secret.encode(), f"{head}.{body}".encode(), digest).digest()
    return f"{head}.{body}.{b64(mac)}"


def claims(now: int, **changed: Any) -> dict[str, Any]:
    """A token's claims that both servers accept, with ``changed`` over them (None: left out)."""
    fine = {"exp": now + 300, "iss": ISSUER, "aud": AUDIENCE, **changed}
    return {name: value for name, value in fine.items() if value is not None}


# name -> (the token, made at `now`; whether it is let in; the reason our log gives if not).
# The skew's edge is taken 3 s from each side: a second is what the two servers may differ by
# (PyJWT's fractional time against the reference's whole seconds), and the rest is room for a
# loaded machine between making the token and the server reading it.
CASES: dict[str, tuple[Callable[[int], str], bool, str | None]] = {
    "valid": (lambda now: sign(claims(now)), True, None),
    "its audience among others": (
        lambda now: sign(claims(now, aud=["another", AUDIENCE])), True, None),
    "iat in the future, sub, jti and kid, all ignored": (
        lambda now: sign(claims(now, iat=now + 10_000, sub=5, jti=[1]), header={"kid": "k"}),
        True, None),
    "expired": (lambda now: sign(claims(now, exp=now - SKEW - 600)), False,
                "bearer token expired"),
    "expired, just within the skew": (lambda now: sign(claims(now, exp=now - SKEW + 3)),
                                      True, None),
    "expired, just past the skew": (lambda now: sign(claims(now, exp=now - SKEW - 3)), False,
                                    "bearer token expired"),
    "not valid yet, just within the skew": (lambda now: sign(claims(now, nbf=now + SKEW - 3)),
                                            True, None),
    "not valid yet, just past the skew": (lambda now: sign(claims(now, nbf=now + SKEW + 3)),
                                          False, "bearer token not valid yet (nbf)"),
    "wrong audience": (lambda now: sign(claims(now, aud="another")), False,
                       "bearer token for another audience"),
    "no audience": (lambda now: sign(claims(now, aud=None)), False,
                    "bearer token for another audience"),
    "wrong issuer": (lambda now: sign(claims(now, iss="someone-else")), False,
                     "bearer token from another issuer"),
    "no exp": (lambda now: sign(claims(now, exp=None)), False, "bearer token without exp"),
    "exp not a whole number": (lambda now: sign(claims(now, exp=now + 300.5)), False,
                               "bearer token with a malformed claim (exp)"),
    "bad signature": (lambda now: sign(claims(now), secret=OTHER_SECRET), False,
                      "bearer token with a bad signature"),
    "alg none": (lambda now: sign(claims(now), alg="none"), False,
                 "bearer token not signed with HS256"),
    "HS512": (lambda now: sign(claims(now), alg="HS512"), False,
              "bearer token not signed with HS256"),
    "malformed": (lambda now: "not-a-jwt", False, "bearer token malformed (not a JWT)"),
}


def ask(port: int, token: str | None, scheme: str = "Bearer") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    header = "" if token is None else f"Authorization: {scheme} {token}\r\n"
    try:
        sock.sendall((UPGRADE + header + "\r\n").encode())
    except (BrokenPipeError, ConnectionResetError):
        pass  # closed at the accept: `answer` says so
    return sock


def answer(sock: socket.socket) -> tuple[int, bytes]:
    """The status of the answer to an upgrade, and its body (b"" for a 101)."""
    got = b""
    with sock:
        while b"\r\n\r\n" not in got:
            try:
                more = sock.recv(4096)
            except ConnectionResetError:
                more = b""
            if not more:
                return 0, got  # closed with no answer
            got += more
        head, _, body = got.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        length = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
        while status != 101 and length is not None and len(body) < int(length.group(1)):
            more = sock.recv(4096)
            if not more:
                break
            body += more
    return status, body


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def verdicts(port: int, names: list[str], sent: list[str] | None = None
             ) -> dict[str, tuple[bool, int]]:
    """Each case's token presented at once on a connection of its own: whether it was let in
    (101, or 401), and the connection's own port, which names it in the server's log. A valid
    token goes first, so that the address is one a client proved (and the refusals that follow
    are not rate-limited as guessing). ``sent`` gets the tokens."""
    sent = [] if sent is None else sent
    sent.append(CASES["valid"][0](int(time.time())))
    assert answer(ask(port, sent[-1]))[0] == 101
    now = int(time.time())
    tokens = {name: CASES[name][0](now) for name in names}
    sent += tokens.values()
    asked = {name: ask(port, token) for name, token in tokens.items()}
    found = {}
    for name, sock in asked.items():
        local = sock.getsockname()[1]
        status, _ = answer(sock)
        assert status in (101, 401), (name, status)
        found[name] = (status == 101, local)
    return found


def secret_file(where: Path, secret: str = SECRET) -> Path:
    path = where / "secret"
    path.write_text(secret + "\n")
    return path


def signed_server(adapter: str, secret: Path, *more: str) -> Server:
    return Server(adapter, "--auth", "signed-bearer-token", "--auth-shared-secret-file",
                  str(secret), "--auth-issuer", ISSUER, "--auth-audience", AUDIENCE,
                  "--auth-max-clock-skew-seconds", str(SKEW), *more)


def stopped(server: Server) -> str:
    log = server.stop()
    assert server.process.returncode == 0, log
    assert "Traceback" not in log, log
    return log


def test_each_jwt_is_let_in_or_refused_and_the_log_names_why(tmp_path: Path) -> None:
    server = signed_server("asyncio", secret_file(tmp_path))
    sent: list[str] = []
    try:
        found = verdicts(port_of(server.url), list(CASES), sent)
    finally:
        log = stopped(server)
    assert {name: let_in for name, (let_in, _) in found.items()} == {
        name: let_in for name, (_, let_in, _) in CASES.items()}
    for name, (let_in, local) in found.items():
        said = [line.split(" refused: ", 1)[1] for line in log.splitlines()
                if f"connection from 127.0.0.1:{local} refused: " in line]
        assert said == ([] if let_in else [CASES[name][2]]), (name, said)
    assert SECRET not in log
    pieces = {piece for token in sent for piece in token.split(".") if len(piece) >= 8}
    assert pieces and not [piece for piece in pieces if piece in log]  # no token, nor a part


def test_the_client_is_told_what_it_may_act_on(tmp_path: Path) -> None:
    server = signed_server("asyncio", secret_file(tmp_path))
    port = port_of(server.url)
    now = int(time.time())
    try:
        assert answer(ask(port, sign(claims(now))))[0] == 101
        assert answer(ask(port, sign(claims(now, exp=now - 600)))) == (
            401, b"expired bearer token\n")
        assert answer(ask(port, sign(claims(now, aud="x")))) == (
            401, b"bearer token for another audience\n")
        # A token not well signed learns nothing more than that.
        assert answer(ask(port, sign(claims(now, exp=now - 600), secret=OTHER_SECRET))) == (
            401, b"invalid bearer token\n")
        assert answer(ask(port, None)) == (401, b"missing bearer token\n")
        assert answer(ask(port, sign(claims(now)), scheme="Basic"))[0] == 401
        assert answer(ask(port, sign(claims(now)), scheme="bearer"))[0] == 101
    finally:
        stopped(server)


def test_a_rotated_secret_takes_effect_without_a_restart(tmp_path: Path) -> None:
    # The secret file is read by the wire's code every adapter shares: one adapter will do.
    path = secret_file(tmp_path)
    server = signed_server("asyncio", path)
    port = port_of(server.url)
    now = int(time.time())
    old, new = sign(claims(now)), sign(claims(now), secret=OTHER_SECRET)
    try:
        assert answer(ask(port, old))[0] == 101
        # As a Secret volume is updated: a new file renamed over the old one.
        (tmp_path / "next").write_text(OTHER_SECRET + "\n")
        os.replace(tmp_path / "next", path)
        assert answer(ask(port, new))[0] == 101
        assert answer(ask(port, old))[0] == 401
        path.write_text("too-short\n")  # never a secret: the last one stays
        assert answer(ask(port, new))[0] == 101
        path.write_text(SECRET + "\n")
        server.process.send_signal(signal.SIGHUP)  # and SIGHUP reads it at once
        deadline = time.monotonic() + 10
        while answer(ask(port, old))[0] != 101:
            assert time.monotonic() < deadline, "the secret was not read again"
            time.sleep(0.1)
        assert answer(ask(port, new))[0] == 401
    finally:
        log = stopped(server)
    assert "re-read (the file changed): the secret changed" in log, log
    assert "holds less than 32 bytes: the last secret stays" in log, log
    assert SECRET not in log and OTHER_SECRET not in log and "too-short" not in log


def test_wrong_jwts_count_as_wrong_tokens_at_the_gate(tmp_path: Path) -> None:
    # An address whose tokens are refused, and that never presented a good one, is held to a
    # few connections a second: the rest are closed at the accept, as for a wrong capability
    # token (test_gate.py).
    server = signed_server("asyncio", secret_file(tmp_path))
    port = port_of(server.url)
    bad = sign(claims(int(time.time())), secret=OTHER_SECRET)
    try:
        assert answer(ask(port, bad))[0] == 401
        socks = [ask(port, bad) for _ in range(24)]
        statuses = [answer(sock)[0] for sock in socks]
    finally:
        log = stopped(server)
    assert 0 in statuses and 401 in statuses, statuses  # some closed unanswered, some refused
    assert "wrong tokens a second from 127.0.0.1" in log, log


# -- a capability token known by its SHA-256 --------------------------------------------------

TOKEN = "capability-5b0e7c1d9a"


@pytest.mark.parametrize("hex_case", [str.lower, str.upper], ids=["lower", "upper"])
def test_a_token_known_only_by_its_digest(hex_case: Callable[[str], str]) -> None:
    digest = hex_case(hashlib.sha256(TOKEN.encode()).hexdigest())
    server = Server("asyncio", "--auth", "capability-token", "--auth-token-sha256", digest)
    port = port_of(server.url)
    try:
        command_line = Path(f"/proc/{server.process.pid}/cmdline").read_bytes()
        assert TOKEN.encode() not in command_line and digest.encode() in command_line
        assert answer(ask(port, TOKEN))[0] == 101
        assert answer(ask(port, TOKEN + "x")) == (401, b"missing or wrong bearer token\n")
        assert answer(ask(port, TOKEN[:-1]))[0] == 401
        assert answer(ask(port, digest))[0] == 401  # the digest is no token
        assert answer(ask(port, None))[0] == 401
    finally:
        log = stopped(server)
    assert log.count("refused: wrong bearer token") == 3, log
    assert "refused: no bearer token" in log
    assert TOKEN not in log


def test_the_digest_alone_means_a_capability_token() -> None:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    server = Server("asyncio", "--auth-token-sha256", digest)
    try:
        assert answer(ask(port_of(server.url), TOKEN))[0] == 101
        assert answer(ask(port_of(server.url), "nope"))[0] == 401
    finally:
        stopped(server)


def test_jwt_is_loaded_only_for_signed_tokens(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    secret = secret_file(tmp_path)
    probe = (
        "import sys\n"
        "from execproto.adapters import cli\n"
        "from execproto.adapters._command import _auth_flags\n"
        "args = cli._parser(False, False).parse_args(sys.argv[1:])\n"
        "_auth_flags.authenticator(args, _auth_flags.mode(args))\n"
        "print('jwt' in sys.modules)\n"
    )
    loaded = {}
    for name, flags in {"file": ["--auth-token-file", str(token)],
                        "digest": ["--auth-token-sha256", "0" * 64],
                        "signed": ["--auth-shared-secret-file", str(secret)]}.items():
        done = subprocess.run([sys.executable, "-c", probe, "serve", *flags],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        loaded[name] = done.stdout.strip()
    assert loaded == {"file": "False", "digest": "False", "signed": "True"}


# -- the command line -------------------------------------------------------------------------

SHA = "ab" * 32


@pytest.mark.parametrize(("flags", "said"), [
    ("--auth capability-token", "--auth capability-token needs --auth-token-file FILE or "
                                "--auth-token-sha256 HEX"),
    ("--auth signed-bearer-token", "--auth signed-bearer-token needs --auth-shared-secret-file"),
    ("--auth-token-file {token} --auth-token-sha256 " + SHA, "are alternatives: give one"),
    ("--auth-token-file {token} --auth-shared-secret-file {secret}", "are alternatives"),
    ("--auth signed-bearer-token --auth-shared-secret-file {secret} --auth-token-sha256 " + SHA,
     "--auth-token-sha256: for --auth capability-token, not signed-bearer-token"),
    ("--auth capability-token --auth-token-file {token} --auth-issuer x",
     "--auth-issuer: for --auth signed-bearer-token, not capability-token"),
    ("--auth-audience x", "--auth-audience: for --auth signed-bearer-token, which needs "
                          "--auth-shared-secret-file"),
    ("--auth-token-sha256 abc", "--auth-token-sha256 must be a SHA-256 digest: 64 hex digits"),
    ("--auth-token-sha256 " + "g" * 64, "must be a SHA-256 digest"),
    ("--auth-shared-secret-file {short}", "holds less than 32 bytes"),
    ("--auth-shared-secret-file {missing}", "No such file or directory"),
    ("--auth-shared-secret-file {blank}", "holds no secret"),
    ("--auth-shared-secret-file {secret} --auth-issuer ' '", "--auth-issuer is empty"),
    ("--auth-shared-secret-file {secret} --auth-max-clock-skew-seconds -1",
     "must be 0 or more seconds"),
    ("--auth-shared-secret-file {secret} --auth-max-clock-skew-seconds 1.5",
     "not a whole number of seconds"),
    ("--auth sometimes", "invalid choice: 'sometimes'"),
    ("--listen stdio --auth-token-sha256 " + SHA, "needs a websocket listener"),
    ("--listen stdio --exit-on-stdin-close", "--exit-on-stdin-close needs a websocket listener"),
    ("--listen ws://0.0.0.0:0", "without --auth-token-file, --auth-token-sha256 or --auth "
                                "signed-bearer-token"),
])
def test_a_wrong_combination_is_one_line_and_status_2(tmp_path: Path, flags: str,
                                                       said: str) -> None:
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "short").write_text("  thirty-one-bytes-long-secret-x  \n")
    (tmp_path / "blank").write_text("\n \n")
    filled = flags.format(token=tmp_path / "token", secret=secret_file(tmp_path),
                          short=tmp_path / "short", blank=tmp_path / "blank",
                          missing=tmp_path / "missing")
    done = subprocess.run(f"{sys.executable} -m execproto.adapters serve {filled} < /dev/null",
                          shell=True, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stdout == "" and said in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr


@needs_bwrap
def test_no_sandboxed_fs_call_reads_the_secret() -> None:
    # Under /var/tmp, readable by all, so that only the sandbox stands between it and a read
    # (test_sandbox_secrets.py does the same for the token file).
    base = Path(tempfile.mkdtemp(prefix="execproto-secret-", dir="/var/tmp"))
    base.chmod(0o755)
    secret = secret_file(base)
    server = signed_server("asyncio", secret)
    try:
        client = Client(server.url, headers=[
            ("Authorization", f"Bearer {sign(claims(int(time.time())))}")])
        assert "result" in client.handshake()
        denied = client.call("fs/readFile", {"path": uri(secret), "sandbox": read_only(str(base))})
        control = client.call("fs/readFile", {"path": uri(secret)})
        client.close()
    finally:
        stopped(server)
        shutil.rmtree(base, ignore_errors=True)
    assert "Permission denied" in denied["error"]["message"], denied
    assert base64.b64decode(control["result"]["dataBase64"]).decode().strip() == SECRET


# -- --exit-on-stdin-close --------------------------------------------------------------------

def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("grace", ["0", "10"])
def test_the_server_stops_when_its_stdin_closes(adapter: str, grace: str) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "execproto.adapters", "serve", "--listen", "ws://127.0.0.1:0",
         "--adapter", adapter, "--exit-on-stdin-close", "--drain-grace", grace],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdin is not None
    try:
        url = server.stdout.readline().strip()
        client = Client(url)
        assert "result" in client.handshake()
        # With a grace, the sleep must outlast the moments between its output and the close
        # of stdin (a loaded machine can stall them for a second).
        job = "echo $$; exec sleep 600" if grace == "0" else "echo $$; exec sleep 2.5"
        assert "result" in client.call("process/start", {
            "processId": "p", "argv": ["sh", "-c", job], "cwd": "file:///tmp", "env": {},
            "tty": False})
        printed = client.notification(lambda m: m["method"] == "process/output")
        pid = int(base64.b64decode(printed["params"]["chunk"]))
        assert alive(pid)
        began = time.monotonic()
        server.stdin.close()
        # With no grace it stops at once, ending the process; with one it waits for it.
        server.wait(timeout=20)
        took = time.monotonic() - began
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    log = server.stderr.read() if server.stderr is not None else ""
    assert server.returncode == 0, log
    assert "stdin closed (--exit-on-stdin-close): stopping as on SIGTERM" in log, log
    assert not alive(pid)
    if grace == "10":
        assert "drained: every process has finished" in log, log
        assert took < 10, took
    assert "Traceback" not in log, log


def test_without_the_flag_a_closed_stdin_changes_nothing() -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "execproto.adapters", "serve", "--listen", "ws://127.0.0.1:0"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdin is not None
    try:
        url = server.stdout.readline().strip()
        server.stdin.close()
        time.sleep(1)
        assert server.poll() is None
        assert "result" in Client(url).handshake()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)


# -- side by side with the reference ----------------------------------------------------------

HOMES = CACHE.parent / "reference-homes"


@pytest.fixture
def reference(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start the reference's exec-server with the flags given; its URL."""
    if REFERENCE is None:
        pytest.skip(WHY_MISSING)
    HOMES.mkdir(parents=True, exist_ok=True)  # not under /tmp: the reference refuses it there
    home = tempfile.mkdtemp(prefix="codex-home-", dir=HOMES)
    started: list[subprocess.Popen[str]] = []

    def start(*flags: str) -> str:
        assert REFERENCE is not None
        process = subprocess.Popen([REFERENCE, "exec-server", "--listen", "ws://127.0.0.1:0",
                                    *flags], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True,
                                   env={**os.environ, "CODEX_HOME": home})
        started.append(process)
        assert process.stdout is not None
        return process.stdout.readline().strip()

    yield start
    for process in started:
        process.kill()
        process.wait(10)
    shutil.rmtree(home, ignore_errors=True)


def test_the_reference_lets_in_and_refuses_the_same_jwts(
    reference: Callable[..., str], tmp_path: Path
) -> None:
    secret = secret_file(tmp_path)
    url = reference("--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", str(secret),
                    "--ws-issuer", ISSUER, "--ws-audience", AUDIENCE,
                    "--ws-max-clock-skew-seconds", str(SKEW))
    theirs = verdicts(port_of(url), list(CASES))
    ours_server = signed_server("asyncio", secret)
    try:
        ours = verdicts(port_of(ours_server.url), list(CASES))
    finally:
        stopped(ours_server)
    assert {name: let_in for name, (let_in, _) in theirs.items()} == {
        name: let_in for name, (let_in, _) in ours.items()}


def test_the_reference_knows_a_token_by_its_digest_as_we_do(
    reference: Callable[..., str],
) -> None:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    url = reference("--ws-auth", "capability-token", "--ws-token-sha256", digest)
    ours = Server("asyncio", "--auth", "capability-token", "--auth-token-sha256", digest)
    try:
        for port in (port_of(url), port_of(ours.url)):
            assert answer(ask(port, TOKEN))[0] == 101
            assert answer(ask(port, TOKEN + "x"))[0] == 401
            assert answer(ask(port, None))[0] == 401
    finally:
        stopped(ours)


def test_the_reference_needs_a_secret_of_32_bytes_as_we_do(
    reference: Callable[..., str], tmp_path: Path
) -> None:
    for secret, starts in (("x" * 31, False), ("x" * 32, True)):
        path = secret_file(tmp_path, f"  {secret}  ")
        assert bool(reference("--ws-auth", "signed-bearer-token", "--ws-shared-secret-file",
                              str(path))) == starts
        done = subprocess.Popen(
            [sys.executable, "-m", "execproto.adapters", "serve", "--auth-shared-secret-file",
             str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert done.stdout is not None
        assert bool(done.stdout.readline().strip()) == starts
        done.terminate()
        done.wait(20)
