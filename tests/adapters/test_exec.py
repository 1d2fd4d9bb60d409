"""``execproto exec`` as a user runs it: real commands on a real server (and the reference)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import pty
import random
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server
from .test_reference import REFERENCE, WHY_MISSING, Reference

EXEC = [sys.executable, "-m", "execproto.adapters", "exec"]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = Server("asyncio", "--kill-grace", "0.5")
    yield running
    log = running.stop()
    assert "Traceback" not in log, log


def run(
    url: str, *argv: str, stdin: bytes = b"", options: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*EXEC, url, *options, "--", *argv], input=stdin, capture_output=True,
                          timeout=60)


def test_stdout_stderr_and_exit_code_pass_through(server: Server) -> None:
    done = run(server.url, "sh", "-c", "printf out; printf err >&2; exit 3")
    assert (done.stdout, done.stderr, done.returncode) == (b"out", b"err", 3)


def test_stdin_is_piped_byte_exactly(server: Server) -> None:
    data = os.urandom(3 << 20)
    done = run(server.url, "cat", stdin=data)
    assert done.returncode == 0, done.stderr
    assert done.stdout == data


def test_an_open_stdin_does_not_keep_it_alive_after_the_command(server: Server) -> None:
    proc = subprocess.Popen([*EXEC, server.url, "--", "echo", "hi"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    try:
        assert proc.wait(20) == 0  # stdin is still open: nobody has written or closed it
        assert proc.stdout is not None and proc.stdout.read() == b"hi\n"
    finally:
        proc.kill()
        proc.communicate()


def test_binary_output_is_byte_exact(server: Server) -> None:
    done = run(server.url, sys.executable, "-c",
               "import sys; sys.stdout.buffer.write(bytes(range(256)) * 4096)")
    assert done.stdout == bytes(range(256)) * 4096


def test_cwd_and_env(server: Server, tmp_path: Path) -> None:
    done = run(server.url, "sh", "-c", 'pwd; echo "$A|$B"',
               options=("--cwd", str(tmp_path), "--env", "A=1", "--env", "B=x=y"))
    assert done.stdout == f"{tmp_path}\n1|x=y\n".encode()


def test_the_server_secrets_stay_out_of_the_environment(tmp_path: Path) -> None:
    leaky = Server("asyncio", env={"MY_API_KEY": "hush", "VISIBLE": "yes"})
    try:
        done = run(leaky.url, "sh", "-c", 'echo "${MY_API_KEY:-none} $VISIBLE"')
        assert done.stdout == b"none yes\n"
        done = run(leaky.url, "sh", "-c", 'echo "${VISIBLE:-none}"',
                   options=("--inherit-env", "none"))
        assert done.stdout == b"none\n"
    finally:
        leaky.stop()


def test_a_missing_program_exits_127_with_a_message(server: Server) -> None:
    done = run(server.url, "/no/such/program")
    assert done.returncode == 127
    assert b"No such file or directory" in done.stderr


def test_an_unreachable_server_exits_255(server: Server) -> None:
    done = run("ws://127.0.0.1:1", "true")
    assert done.returncode == 255
    assert done.stderr == (
        b"execproto exec: cannot reach the server at ws://127.0.0.1:1: Connection refused\n")


def test_bad_arguments_exit_2(server: Server) -> None:
    assert run(server.url, options=()).returncode == 2  # no command
    assert run(server.url, "true", options=("--env", "novalue")).returncode == 2


def test_text_the_protocol_cannot_carry_exits_2_at_once_naming_it(server: Server) -> None:
    """A byte that is not UTF-8 in the command or --env made invalid JSON whose answer (id -1)
    matched no call: exec waited for good. It is refused before connecting."""
    not_utf8 = os.fsdecode(b"caf\xe9")
    for argv, options, named in (
            (("ls", not_utf8), (), b"argument 1 of the command"),
            (("env",), ("--env", f"X={not_utf8}"), b"--env X")):
        began = time.monotonic()
        ran = run(server.url, *argv, options=options)
        assert ran.returncode == 2 and time.monotonic() - began < 10, ran
        assert named in ran.stderr and b"not UTF-8 text" in ran.stderr, ran.stderr
    assert run(server.url, "echo", "café").stdout == "café\n".encode()  # text goes through


def _started(server: Server, script: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([*EXEC, server.url, "--", "sh", "-c", script],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    return proc


def test_ctrl_c_interrupts_the_remote_process(server: Server) -> None:
    script = "trap 'echo caught; exit 7' INT; echo ready; while :; do sleep 0.05; done"
    proc = _started(server, script)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert (out, proc.returncode) == (b"caught\n", 7)


def test_ctrl_c_three_times_terminates_a_process_that_ignores_it(server: Server) -> None:
    tag = f"60.{os.getpid()}"
    proc = _started(server, f"trap '' INT; echo ready; sleep {tag}")
    for _ in range(3):
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(0.3)
        except subprocess.TimeoutExpired:
            pass
    proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGINT  # exec's own, as for any signal that ends it
    ps = subprocess.run(["pgrep", "-f", f"sleep {tag}"], capture_output=True)
    assert ps.stdout == b"", "the remote process was not terminated"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stopping_signal_ends_exec_within_a_second_of_a_frozen_server(signum: int) -> None:
    """A request the server never answers (it is SIGSTOPped) kept SIGTERM and SIGHUP parked:
    only SIGKILL ended exec, so `timeout N execproto exec ...` could not."""
    frozen = Server("asyncio")
    proc = _started(frozen, "echo ready; sleep 60")
    try:
        os.kill(frozen.process.pid, signal.SIGSTOP)
        began = time.monotonic()
        proc.send_signal(signum)
        proc.communicate(timeout=30)
        took = time.monotonic() - began
        assert proc.returncode == 128 + signum and took < 3, (proc.returncode, took)
    finally:
        os.kill(frozen.process.pid, signal.SIGCONT)
        frozen.stop()


def _gone(tag: str) -> bool:
    """Whether no process has ``tag`` in its command line, within 10 s."""
    deadline = time.monotonic() + 10
    while subprocess.run(["pgrep", "-f", tag], capture_output=True).stdout:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_closed_stdout_stops_the_remote_process_quietly(server: Server) -> None:
    tag = f"closed-stdout-{os.getpid()}"
    proc = _started(server, f"echo ready; while :; do echo more; sleep 0.01; done # {tag}")
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    assert proc.wait(30) == 128 + signal.SIGPIPE  # as a shell's command that SIGPIPE ended
    assert proc.stderr.read() == b""
    assert _gone(tag), "the remote process was not terminated"


def test_a_local_stdout_that_cannot_be_written_is_a_local_error(server: Server) -> None:
    """`>/dev/full` was blamed on the server ("cannot reach the server ...", 255)."""
    tag = f"full-stdout-{os.getpid()}"
    with open("/dev/full", "wb") as full:
        done = subprocess.run([*EXEC, server.url, "--", "sh", "-c",
                               f"while :; do echo more; sleep 0.01; done # {tag}"],
                              stdout=full, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (b"execproto exec: cannot write to the local stdout: No space left on "
                           b"device; the remote process is terminated\n")
    assert _gone(tag), "the remote process was not terminated"


def test_a_reader_stalled_past_two_pings_loses_nothing() -> None:
    """A local reader that stops reading (`| less`) blocked exec's event loop in its write, so
    the server's pings went unanswered: it dropped the connection, the session expired and the
    remote process was killed with its output. Now the write waits in a thread of its own,
    and the process is paused until the reader catches up."""
    quick = Server("asyncio", "--ping-interval", "0.5", "--session-ttl", "2", "--log-level",
                   "warning")
    size = 20 << 20
    make = f"import random, sys; sys.stdout.buffer.write(random.Random(7).randbytes({size}))"
    try:
        proc = subprocess.Popen([*EXEC, quick.url, "--", sys.executable, "-c", make],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL)
        time.sleep(6)  # twelve ping intervals, and the session's TTL past the first two
        out, err = proc.communicate(timeout=60)
    finally:
        log = quick.stop()
    assert (proc.returncode, err) == (0, b""), err
    assert len(out) == size
    expected = hashlib.sha256(random.Random(7).randbytes(size)).hexdigest()
    assert hashlib.sha256(out).hexdigest() == expected
    assert "unanswered" not in log, log


def test_timeout_terminates_the_remote_process_and_exits_124(server: Server) -> None:
    tag = f"timed-out-{os.getpid()}"
    began = time.monotonic()
    done = run(server.url, "sh", "-c", f"echo started; sleep 60; # {tag}",
               options=("--timeout", "1"))
    took = time.monotonic() - began
    assert (done.returncode, done.stdout, done.stderr) == (124, b"started\n", b""), done
    assert 1 <= took < 10, took  # a second of its own, and the GIVE_UP bound at most beyond
    assert _gone(tag), "the remote process was not terminated"


def test_timeout_counts_the_connecting_too() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"ws://127.0.0.1:{silent.getsockname()[1]}"
        began = time.monotonic()
        done = run(url, "true", options=("--timeout", "0.5"))
    assert done.returncode == 124 and time.monotonic() - began < 8, done  # not 10 s


def test_help_is_plain_words_and_describes_every_option() -> None:
    done = subprocess.run([*EXEC, "--help"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    assert "``" not in done.stdout and "`" not in done.stdout, done.stdout
    for needed in ("--timeout", "~.", "124", "141", "255"):
        assert needed in done.stdout, needed
    from execproto.adapters import cli

    parser = cli._parser().commands["exec"]
    undescribed = [action.dest for action in parser._actions if not action.help]
    assert undescribed == []


def test_tty_forwards_keystrokes_raw_and_restores_the_terminal(server: Server) -> None:
    master, slave = pty.openpty()
    before = termios.tcgetattr(slave)
    try:
        proc = subprocess.Popen(
            [*EXEC, server.url, "--tty", "--", "sh", "-c", "echo ready; read line; echo got:$line"],
            stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\r\n"
        os.write(master, b"typed\r")  # Enter on a raw local terminal is a bare CR
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert out.endswith(b"got:typed\r\n"), out  # the remote pty echoes, then answers
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)
def test_it_works_against_the_reference() -> None:
    assert REFERENCE is not None
    reference = Reference(REFERENCE)
    try:
        done = run(reference.url, "sh", "-c", "printf out; printf err >&2; exit 3")
        assert (done.stdout, done.stderr, done.returncode) == (b"out", b"err", 3)
        # The reference cannot close a process's stdin, so the command reads what it needs.
        done = run(reference.url, "head", "-c", "5", stdin=b"hello world")
        assert (done.stdout, done.returncode) == (b"hello", 0)
    finally:
        reference.stop()


def test_a_backends_missing_command_is_the_servers_problem(tmp_path: Path) -> None:
    (tmp_path / "dockerish.py").write_text(
        "from execproto.adapters.backends import ExecSpec\n"
        "class Missing:\n"
        "    sandbox_type = 'none'\n"
        "    def prepare(self, request):\n"
        "        return ExecSpec(argv=('no-such-docker', *request.argv), env=request.env,\n"
        "                        cwd=request.cwd)\n"
        "    def finalize(self, token, status, exit_code, timed_out):\n"
        "        pass\n"
        "def make():\n"
        "    return Missing()\n")
    backed = Server("asyncio", "--backend", "dockerish:make", env={"PYTHONPATH": str(tmp_path)})
    try:
        done = run(backed.url, "true")
    finally:
        backed.stop()
    assert done.returncode == 255
    assert done.stderr == (b"execproto exec: the server could not start true: the backend's "
                           b"command no-such-docker: No such file or directory (os error 2)\n")


def test_a_server_that_dies_mid_command_is_one_line_and_255() -> None:
    doomed = Server("asyncio")
    proc = subprocess.Popen([*EXEC, doomed.url, "--resume-timeout", "0.5", "--", "sh", "-c",
                             "echo ready; sleep 60"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    doomed.stop(signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 255
    assert err.decode().splitlines() == [
        f"execproto exec: lost the connection to {doomed.url}; reconnecting (for up to 0.5 s, "
        "Ctrl-C gives up)",
        f"execproto exec: {doomed.url}: the connection dropped and could not be resumed in 0.5 s",
    ]


def test_a_server_that_says_good_bye_ends_exec_at_once_with_255() -> None:
    """A close frame (1001 when the server stops) is a decision, not a drop: before, exec spent
    its whole resume timeout (25 s) reconnecting to a server that had said good-bye."""
    leaving = Server("asyncio")
    proc = subprocess.Popen([*EXEC, leaving.url, "--", "sh", "-c", "echo ready; sleep 60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    began = time.monotonic()
    leaving.stop(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 255 and time.monotonic() - began < 5, (proc.returncode, err)
    assert err.decode().splitlines() == [
        f"execproto exec: {leaving.url}: the server closed the connection: 1001 server shutting "
        "down"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_the_wait_to_resume(signum: int) -> None:
    doomed = Server("asyncio")
    proc = subprocess.Popen([*EXEC, doomed.url, "--", "sh", "-c", "echo ready; sleep 60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    assert proc.stderr is not None
    doomed.stop(signal.SIGKILL)
    assert proc.stderr.readline().startswith(b"execproto exec: lost the connection")
    proc.send_signal(signum)
    assert proc.wait(10) == 128 + signum  # not the 25 s of the resume window
    assert b"while reconnecting: giving up" in proc.stderr.read()


def test_a_silent_peer_can_be_interrupted_while_connecting() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"ws://127.0.0.1:{silent.getsockname()[1]}"
        proc = subprocess.Popen([*EXEC, url, "--", "true"], stderr=subprocess.PIPE)
        silent.settimeout(30)
        accepted, _ = silent.accept()  # it is connected, and waits for the handshake
        with accepted:
            time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(5) == 128 + signal.SIGTERM  # well before the 10 s timeout


def _sized_run(url: str) -> tuple[int, bytes, bytes]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
    try:
        proc = subprocess.Popen(
            [*EXEC, url, "--tty", "--", "sh", "-c", 'stty size; echo "$TERM"'],
            stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "TERM": "xterm-test"},
        )
        out, err = proc.communicate(timeout=30)
    finally:
        os.close(master)
        os.close(slave)
    return proc.returncode, out, err


def test_tty_takes_the_local_terminal_size_and_term(server: Server) -> None:
    status, out, err = _sized_run(server.url)
    assert status == 0, err
    assert out == b"33 101\r\nxterm-test\r\n"  # the size went with the start


@pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)
def test_tty_against_the_reference_sets_the_size_with_stty() -> None:
    assert REFERENCE is not None
    reference = Reference(REFERENCE)
    try:
        status, out, err = _sized_run(reference.url)
    finally:
        reference.stop()
    assert status == 0, err
    assert out == b"33 101\r\nxterm-test\r\n"  # no process/resize there: set by stty
