"""``execproto replay`` on a real server's trace: ok, cut short by a crash, or a readable diff."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from .test_stdio_files import requests

EXECPROTO = [sys.executable, "-m", "execproto.adapters"]


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The lines of a trace a server wrote for a session read from a file."""
    where = tmp_path_factory.mktemp("replay")
    (where / "requests.jsonl").write_bytes(requests(where))
    with open(where / "requests.jsonl", "rb") as stdin:
        done = subprocess.run(
            [*EXECPROTO, "serve", "--listen", "stdio", "--log-level", "warning",
             "--trace", str(where / "trace.jsonl")],
            stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 0, done.stderr
    return (where / "trace.jsonl").read_text().splitlines(keepends=True)


def run_replay(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "t.jsonl").write_text(text)
    return subprocess.run([*EXECPROTO, "replay", str(tmp_path / "t.jsonl")],
                          capture_output=True, text=True, timeout=60)


def test_a_whole_trace_replays(trace: list[str], tmp_path: Path) -> None:
    done = run_replay(tmp_path, "".join(trace))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"ok: {len(trace) - 1} steps replayed identically\n"


def test_a_trace_cut_by_a_crash_replays_what_it_holds(trace: list[str], tmp_path: Path) -> None:
    last = trace[-1]
    done = run_replay(tmp_path, "".join(trace[:-1]) + last[: len(last) // 2])
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (f"ok: the last line was cut short (a crash while recording?); "
                           f"{len(trace) - 2} steps replayed identically\n")


def test_a_bad_line_in_the_middle_is_an_error(trace: list[str], tmp_path: Path) -> None:
    lines = list(trace)
    lines[2] = lines[2][:25] + "\n"
    done = run_replay(tmp_path, "".join(lines))
    assert done.returncode == 2
    assert "is not an execproto trace (line 3: JSONDecodeError" in done.stderr


def test_a_divergence_is_shown_as_a_diff(trace: list[str], tmp_path: Path) -> None:
    lines = list(trace)
    index = next(i for i, line in enumerate(lines[1:], start=1)
                 if any(a["$type"] == "Send" for a in json.loads(line).get("actions", [])))
    step = json.loads(lines[index])
    send = next(a for a in step["actions"] if a["$type"] == "Send")
    answer = base64.b64decode(send["data"]["$bytes"])
    send["data"]["$bytes"] = base64.b64encode(b'{"tampered":true}').decode()
    lines[index] = json.dumps(step) + "\n"
    done = run_replay(tmp_path, "".join(lines))
    assert done.returncode == 1, done.stderr
    out = done.stdout.splitlines()
    assert out[0].startswith(f"diverged at step {index} (line {index + 1}) on "
                             "MessageReceived(conn="), out[0]
    assert out[1:3] == ["  --- recorded", "  +++ replayed"]
    assert f"  -Send(conn={send['conn']}, data=b'{{\"tampered\":true}}')" in out
    assert f"  +Send(conn={send['conn']}, data={answer!r})" in out
    assert "$bytes" not in done.stdout  # bytes read as bytes, not base64
