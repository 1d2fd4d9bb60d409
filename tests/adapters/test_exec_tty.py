"""``execproto exec --tty`` driven through a real pseudo-terminal, as a user types into it.

The local terminal is raw while the command runs, so Ctrl-C is a byte (0x03), not SIGINT, and
exec's own messages must end with CR LF. The escapes are ssh's: ``~.`` at the start of a line
disconnects (exit 255), ``~~`` sends one ``~``. A resized window is passed on (``tmux``).
"""

from __future__ import annotations

import os
import pty
import shlex
import shutil
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server

EXEC = [sys.executable, "-m", "execproto.adapters", "exec"]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = Server("asyncio", "--kill-grace", "0.5", "--log-level", "warning")
    yield running
    log = running.stop()
    assert "Traceback" not in log, log


class Typed:
    """exec --tty with a pty as its stdin: keys go in through the master side."""

    def __init__(self, url: str, script: str, *options: str) -> None:
        self.master, self.slave = pty.openpty()
        self.before = termios.tcgetattr(self.slave)
        self.proc = subprocess.Popen([*EXEC, url, "--tty", *options, "--", "sh", "-c", script],
                                     stdin=self.slave, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.stdout, self.stderr = self.proc.stdout, self.proc.stderr

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def until(self, wanted: bytes) -> bytes:
        """The remote terminal's output up to and including ``wanted``."""
        seen = b""
        while wanted not in seen:
            more = self.stdout.read1(1 << 16)
            assert more, f"the output ended before {wanted!r}: {seen!r}"
            seen += more
        return seen

    def finish(self, timeout: float = 10) -> tuple[int, bytes]:
        """Exit status and stderr; the local terminal must be as it was."""
        try:
            status = self.proc.wait(timeout)
        finally:
            self.proc.kill()
            _, err = self.proc.communicate()
            restored = termios.tcgetattr(self.slave)
            os.close(self.master)
            os.close(self.slave)
        assert restored == self.before, "the terminal was left raw"
        return status, err


def _gone(tag: str) -> bool:
    deadline = time.monotonic() + 10
    while subprocess.run(["pgrep", "-f", tag], capture_output=True).stdout:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_tilde_dot_as_the_first_input_disconnects_and_terminates(server: Server) -> None:
    tag = f"first-input-{os.getpid()}"
    typed = Typed(server.url, f"echo ready; sleep 60; # {tag}")
    typed.until(b"ready\r\n")
    typed.type(b"~.")
    status, err = typed.finish()
    assert status == 255, err
    assert err == b"execproto exec: ~.: disconnecting; the remote process is terminated\r\n"
    assert _gone(tag), "the remote process was not terminated"


def test_escapes_only_at_the_start_of_a_line(server: Server) -> None:
    """Mid-line ``~.`` is text, ``~x`` at the start sends both, ``~~`` sends one ``~``, and
    ``~.`` after Enter disconnects."""
    tag = f"after-enter-{os.getpid()}"
    typed = Typed(server.url, 'echo ready; read a; echo "got:$a"; read b; echo "got:$b"; '
                              f"sleep 60; # {tag}")
    typed.until(b"ready\r\n")
    typed.type(b"~xa~.b\r")
    typed.until(b"got:~xa~.b\r\n")
    typed.type(b"~~c\r")
    typed.until(b"got:~c\r\n")
    typed.type(b"~.")
    status, _ = typed.finish()
    assert status == 255
    assert _gone(tag), "the remote process was not terminated"


@pytest.mark.parametrize(("keys", "status", "said"), [
    (b"\x03\x03\x03", 130, b"execproto exec: Ctrl-C while reconnecting: giving up"),
    (b"~.", 255, b"execproto exec: ~. while reconnecting: giving up"),
])
def test_typed_keys_give_up_while_reconnecting(keys: bytes, status: int, said: bytes) -> None:
    """In raw mode Ctrl-C is a byte on stdin: while the connection was down it was held with
    everything typed, and exec went on for its whole resume timeout (25 s)."""
    doomed = Server("asyncio", "--log-level", "warning")
    typed = Typed(doomed.url, "echo ready; sleep 60")
    typed.until(b"ready\r\n")
    doomed.stop(signal.SIGKILL)
    lost = typed.stderr.readline()
    assert lost.startswith(b"execproto exec: lost the connection") and lost.endswith(
        b"(for up to 25 s, Ctrl-C three times or ~. gives up)\r\n"), lost  # no staircase
    if keys.startswith(b"\x03"):
        typed.type(keys[:2])
        time.sleep(0.5)
        assert typed.proc.poll() is None, "two Ctrl-Cs gave up already"
        keys = keys[2:]
    began = time.monotonic()
    typed.type(keys)
    got, err = typed.finish(timeout=10)
    assert got == status and time.monotonic() - began < 5, (got, err)
    assert err.startswith(said) and err.endswith(b"\r\n"), err


def _tmux(socket_path: str, *args: str) -> str:
    done = subprocess.run(["tmux", "-S", socket_path, "-f", "/dev/null", *args],
                          capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _pane_shows(socket_path: str, wanted: str, enter: bool = False, wait: float = 20) -> None:
    """Wait until a line of the pane is ``wanted``; with ``enter``, press Enter every half
    second meanwhile (the resize reaches the remote terminal some time after the window's)."""
    deadline = time.monotonic() + wait
    pressed = 0.0
    while True:
        if enter and time.monotonic() - pressed > 0.5:
            _tmux(socket_path, "send-keys", "-t", "exec", "Enter")
            pressed = time.monotonic()
        screen = _tmux(socket_path, "capture-pane", "-p", "-t", "exec")
        if wanted in (line.strip() for line in screen.split("\n")):
            return
        assert time.monotonic() < deadline, f"{wanted!r} never showed:\n{screen}"
        time.sleep(0.1)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_resized_window_is_passed_on(server: Server, tmp_path: Path) -> None:
    """The remote terminal kept its start size for good: a TUI never redrew to the window."""
    socket_path = str(tmp_path / "tmux.sock")  # a tmux server of its own
    command = shlex.join([*EXEC, server.url, "--tty", "--", "sh", "-c",
                          "echo ready; while read line; do stty size; done"])
    _tmux(socket_path, "new-session", "-d", "-s", "exec", "-x", "100", "-y", "30", command)
    try:
        _tmux(socket_path, "set-option", "-t", "exec", "status", "off")
        _pane_shows(socket_path, "ready")
        sizes = []
        for width, height in ((100, 30), (120, 40), (61, 17)):
            _tmux(socket_path, "resize-window", "-t", "exec", "-x", str(width), "-y",
                  str(height))
            shown = _tmux(socket_path, "display-message", "-p", "-t", "exec",
                          "#{pane_height} #{pane_width}").strip()
            sizes.append(shown)
            _pane_shows(socket_path, shown, enter=True)
        assert sizes == ["30 100", "40 120", "17 61"]
    finally:
        subprocess.run(["tmux", "-S", socket_path, "kill-server"], capture_output=True,
                       timeout=20)
