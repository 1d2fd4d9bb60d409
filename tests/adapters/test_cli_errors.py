"""Every user mistake on the command line: one line on stderr saying what and what to do,
exit status 2 (255 for an exec-server that cannot be reached or kept), never a traceback."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from .conftest import ADAPTERS, Server

EXECPROTO = [sys.executable, "-m", "execproto.adapters"]
MISSING = "/does/not/exist"


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


@pytest.fixture(scope="module")
def silent_port() -> Iterator[int]:
    """A peer that accepts connections and never says a word."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        yield silent.getsockname()[1]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def web_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A web server (not a websocket one) whose answer is a whole page: a directory listing."""
    where = tmp_path_factory.mktemp("web")
    for index in range(50):
        (where / f"file-{index}.txt").write_text("x")
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(where)))
    threading.Thread(target=web.serve_forever, daemon=True).start()
    yield web.server_address[1]
    web.shutdown()
    web.server_close()


@pytest.fixture(scope="module")
def banner_port() -> Iterator[int]:
    """A peer that greets with something that is not HTTP (an SSH server's banner)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)

        def greet() -> None:
            while True:
                try:
                    peer, _ = listener.accept()
                except OSError:  # closed at the end of the module
                    return
                with peer:
                    peer.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
                    peer.settimeout(5)
                    try:
                        peer.recv(1 << 16)
                    except OSError:
                        pass

        threading.Thread(target=greet, daemon=True).start()
        yield listener.getsockname()[1]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = Server("asyncio")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("cli")
    (where / "empty").write_text("")
    (where / "not-json").write_text("hello\n")
    (where / "not-a-trace").write_text('{"format": "something else"}\n')
    (where / "broken-step").write_text(
        '{"format": "execproto-trace", "version": 2, "config": {}, "host": {}}\n{oops\n')
    (where / "blank-token").write_text("\n")
    (where / "badbackend.py").write_text(
        "def make():\n    raise RuntimeError('the container my-box is not running')\n")
    return where


# (what the user typed after `execproto`, status, what stderr must say). {port}, {silent},
# {web}, {banner}, {url}, {wss} (the server's URL as wss://) and {files} are filled in. Exec's
# remote command follows `--`.
MISTAKES = [
    # serve
    ("serve --listen ws://127.0.0.1:{port}", 2, "the port is in use"),
    ("serve --listen ws://127.0.0.1:{port} --adapter trio", 2, "the port is in use"),
    ("serve --listen ws://127.0.0.1:{port} --adapter threads", 2, "the port is in use"),
    ("serve --listen ws://192.0.2.1:0 --auth-token-file /etc/hostname", 2,
     "no network interface of this machine has that address"),
    ("serve --listen ws://localhost:0", 2, "numeric IP address, not a hostname"),
    ("serve --listen ws://0.0.0.0:0", 2, "without --auth-token-file"),
    ("serve --listen http://127.0.0.1:0", 2, "--listen must be ws://IP:PORT or stdio"),
    (f"serve --auth-token-file {MISSING}", 2, f"--auth-token-file {MISSING}: No such file"),
    ("serve --auth-token-file {files}/blank-token", 2, "holds no token"),
    (f"serve --trace {MISSING}/trace.jsonl", 2, "No such file or directory (the directory must"),
    ("serve --trace-redact", 2, "--trace-redact needs --trace FILE"),
    ("serve --trace {files}/blank-token", 2, "File exists (a trace is never overwritten"),
    ("serve --log-level LOUD", 2, "invalid choice: 'LOUD'"),
    ("serve --log-format xml", 2, "invalid choice: 'xml'"),
    ("serve --session-ttl 0", 2, "--session-ttl must be positive"),
    ("serve --kill-grace soon", 2, "invalid float value: 'soon'"),
    ("serve --retention-bytes -1", 2, "--retention-bytes must be positive"),
    ("serve --max-connections 0", 2, "--max-connections must be positive"),
    (f"serve --fs-root {MISSING}", 2, f"--fs-root {MISSING} is not a directory"),
    (f"serve --writable-root {MISSING}", 2, "need --sandbox bwrap"),
    (f"serve --sandbox bwrap --writable-root {MISSING}", 2, MISSING),
    ("serve --sandbox bwrap --backend a:b", 2, "alternatives"),
    ("serve --backend nosuchmodule:make", 2, "no module named 'nosuchmodule' (run from the"),
    ("serve --backend badbackend:nosuchfactory", 2, "has no attribute 'nosuchfactory'"),
    ("serve --backend badbackend:make", 2,  # the flag was not named
     "--backend badbackend:make: the container my-box is not running"),
    ("serve --backend justamodule", 2, "--backend must be module:factory"),
    ("serve --no-such-flag", 2, "unrecognized arguments: --no-such-flag"),
    # exec
    ("exec {url}", 2, "no command given"),
    ("exec {url} --env novalue -- true", 2, "--env wants NAME=VALUE, not 'novalue'"),
    (f"exec {{url}} --auth-token-file {MISSING} -- true", 2, "No such file or directory"),
    ("exec {url} --cwd relative/dir -- true", 2, "--cwd must be an absolute path"),
    (f"exec {{url}} --cwd {MISSING} -- pwd", 2,
     f"--cwd {MISSING} does not exist on the server"),
    ("exec {url} --cwd /etc/hostname -- pwd", 2,
     "--cwd /etc/hostname is not a directory on the server"),
    ("exec {url} --connect-timeout 0 -- true", 2, "--connect-timeout must be positive"),
    ("exec {url} --log-level loud -- true", 2, "invalid choice: 'LOUD'"),
    ("exec 127.0.0.1:1 -- true", 2, "not a websocket URL (ws://HOST:PORT): '127.0.0.1:1'"),
    ("exec ws://127.0.0.1:99999 -- true", 2,  # was "internal error ... a bug"
     "not a websocket URL (ws://HOST:PORT): 'ws://127.0.0.1:99999' (port out of range"),
    ("exec ws://127.0.0.1:1 -- true", 255,
     "cannot reach the server at ws://127.0.0.1:1: Connection refused"),
    ("exec {url} ls -la", 2,  # was only "unrecognized arguments: -la"
     "unrecognized arguments: -la (the command goes after --: execproto exec URL -- ls -la)"),
    ("exec ws://127.0.0.1:{silent} --handshake-timeout 1 -- true", 255,
     "connected, but no websocket handshake in 1 s"),
    ("exec {url} -- /no/such/program", 127, "/no/such/program: No such file or directory"),
    ("exec {url} --timeout 0 -- true", 2, "--timeout must be positive"),
    ("exec ws://127.0.0.1:{web} -- true", 255,  # was the whole page, over many lines
     "ws://127.0.0.1:{web}: not a websocket server: it answered HTTP 200 OK (a web server on"),
    ("exec ws://127.0.0.1:{web}/missing -- true", 255,
     "the server refused the websocket: HTTP 404 Not Found"),
    ("exec {wss} -- true", 255,  # was "Operation not permitted" (OpenSSL's code as an errno)
     "TLS handshake failed: wrong version number (is it a plain ws:// server?)"),
    ("exec ws://127.0.0.1:{banner} -- true", 255,
     "not a websocket server: it said 'SSH-2.0-OpenSSH_9.2', not HTTP"),
    # replay
    (f"replay {MISSING}", 2, f"{MISSING}: No such file or directory"),
    ("replay {files}/empty", 2, "is empty, not an execproto trace"),
    ("replay {files}/not-json", 2, "is not an execproto trace (line 1: JSONDecodeError"),
    ("replay {files}/not-a-trace", 2, "is not an execproto trace (line 1: ValueError"),
    ("replay {files}/broken-step", 2, "is not an execproto trace (line 2: JSONDecodeError"),
    # no command
    ("", 2, "the following arguments are required: command"),
]


@pytest.mark.parametrize(("typed", "status", "said"), MISTAKES)
def test_a_mistake_is_one_line_and_its_exit_status(
    typed: str, status: int, said: str, busy_port: int, silent_port: int, web_port: int,
    banner_port: int, server: Server, files: Path,
) -> None:
    fill = {"port": busy_port, "silent": silent_port, "web": web_port, "banner": banner_port,
            "url": server.url, "wss": server.url.replace("ws://", "wss://"), "files": files}
    argv = typed.format(**fill).split()
    said = said.format(**fill)
    done = subprocess.run([*EXECPROTO, *argv], capture_output=True, text=True, timeout=60,
                          cwd=files, stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stdout) == (status, ""), done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    command = argv[0] if argv and argv[0] in ("serve", "exec", "replay") else ""
    assert lines[0].startswith(f"execproto {command}".rstrip() + ":"), lines[0]
    assert said in lines[0], lines[0]


@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux's unshare is missing")
def test_a_host_name_that_cannot_be_resolved_is_said_so() -> None:
    """It was "Unknown error -2" (getaddrinfo's code read as an errno). Looked up in a network
    namespace of its own: no query leaves the machine."""
    unshare = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]
    done = subprocess.run([*unshare, *EXECPROTO, "exec", "ws://nonexistent.invalid:80",
                           "--", "true"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 255, done.stderr
    assert done.stderr.startswith("execproto exec: cannot reach the server at "
                                  "ws://nonexistent.invalid:80: its host name cannot be "
                                  "resolved ("), done.stderr


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_allow_network_without_pasta_refuses_to_start(tmp_path: Path) -> None:
    """It started, said it was ready, and refused every process (each was given the network,
    and no pasta could give one). pasta hidden: a PATH with bubblewrap only."""
    (tmp_path / "bwrap").symlink_to(shutil.which("bwrap") or "")
    done = subprocess.run([*EXECPROTO, "serve", "--listen", "ws://127.0.0.1:0", "--sandbox",
                           "bwrap", "--allow-network"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, env={"PATH": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("execproto serve: --allow-network: the network cannot be "
                                  "given apart from the host's: pasta"), done.stderr
    assert done.stderr.rstrip().endswith("install passt, or add --host-network to share the "
                                         "host's network"), done.stderr


def test_every_adapter_is_in_the_table() -> None:
    covered = {"asyncio"} | {a for a in ADAPTERS if any(f"--adapter {a}" in m[0] for m in MISTAKES)}
    assert covered == set(ADAPTERS)


@pytest.mark.parametrize("level", ["debug", "Info", "WARNING"])
def test_the_log_level_takes_any_case(level: str) -> None:
    running = Server("asyncio", "--log-level", level)
    log = running.stop()
    assert running.process.returncode == 0, log


def test_help_lists_the_log_levels() -> None:
    done = subprocess.run([*EXECPROTO, "serve", "--help"], capture_output=True, text=True)
    assert "debug, info, warning or error" in " ".join(done.stdout.split())


def test_version() -> None:
    done = subprocess.run([*EXECPROTO, "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("execproto 0.")


def test_python_m_execproto_is_the_command_line() -> None:
    done = subprocess.run([sys.executable, "-m", "execproto", "--version"], capture_output=True,
                          text=True)
    assert done.returncode == 0 and done.stdout.startswith("execproto 0."), done


def test_a_backend_module_is_found_in_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "mybackends.py").write_text(
        "from execproto.adapters.backends import LocalBackend\n"
        "def make():\n    return LocalBackend(bwrap=None)\n")
    # The installed script, which (unlike python -m) does not put the directory on sys.path.
    script = Path(sys.executable).parent / "execproto"
    serve = subprocess.Popen([str(script), "serve", "--backend", "mybackends:make"],
                             cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        assert serve.stdout is not None
        assert serve.stdout.readline().startswith("ws://127.0.0.1:")
    finally:
        serve.terminate()
        _, err = serve.communicate(timeout=15)
    assert serve.returncode == 0 and "Traceback" not in err, err
