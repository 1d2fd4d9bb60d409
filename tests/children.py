"""A server's child processes, as the tests and the benches count them.

The stage server (`_processes/_forker.py`) is the server's child for the server's whole life
once the probe of bubblewrap has run (50 ms after listening): it is not a process a request
left behind, so it is left out. It is known by how it is run: the interpreter by descriptor,
``-c`` and its own source, which opens with its docstring.
"""

from __future__ import annotations

import os

_STAGE_SERVER = b'"""The stage server'


def children(pid: int) -> list[int]:
    """The children of ``pid``, whichever of its threads started them, but the stage server."""
    return [child for child in _all_children(pid) if not is_stage_server(child)]


def _all_children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as file:
                found += map(int, file.read().split())
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    return found


def is_stage_server(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            words = file.read().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return False
    return len(words) > 4 and words[3] == b"-c" and words[4].startswith(_STAGE_SERVER)


def resident(pid: int) -> list[int]:
    """``pid`` and its stage server, if it has one: the processes whose memory is the server's
    own while it serves (what its requests start is not)."""
    return [pid, *(child for child in _all_children(pid) if is_stage_server(child))]
