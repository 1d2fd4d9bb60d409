"""The rotating-symlink attack on the sandbox's mount points (see `mount_race`), bounded in time.

Each mode runs for a few seconds: long enough that bubblewrap making its own mount points lost
the victim in well under a second on this machine, short enough for `make test`;
`bench/mount_race.py` runs the same attack for longer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import Server
from .mount_race import QUIET, Arena, attack, attacker_profile, codex_profile, floor_profile
from .sandboxes import IS_ROOT, needs_bwrap

pytestmark = [needs_bwrap,
              pytest.mark.skipif(not IS_ROOT, reason="the victim is a root-owned file")]

SECONDS = 4.0


def raced(counts: dict[str, int]) -> bool:
    """Whether the race was run: the link turned often, many starts tried, and some ran. A
    start the sandbox refuses because a path it must hold went through the link as it turned
    (`setup_failed`, `refused`) is the safe outcome, and under load most are."""
    tried = counts["ran"] + counts["setup_failed"] + counts["refused"]
    return counts["swaps"] > 1000 and tried >= 20 and counts["ran"] >= 3


def race(server: Server, arena: Arena, victim_sandbox: dict[str, Any],
         attacker_sandbox: dict[str, Any] | None) -> dict[str, int]:
    """`attack` for SECONDS, then again (3 rounds at most, the counts summed) while it has not
    `raced`: on a loaded machine a round runs few starts (5 ran, against 3 needed, beside four
    busy loops), which says nothing of the sandbox. An arena no longer intact ends it at once."""
    counts = attack(server, arena, victim_sandbox, attacker_sandbox, SECONDS)
    for _ in range(2):
        if raced(counts) or not arena.intact():
            break
        more = attack(server, arena, victim_sandbox, attacker_sandbox, SECONDS)
        counts = {name: counts[name] + more[name] for name in counts}
    return counts


@pytest.fixture
def arena() -> Iterator[Arena]:
    made = Arena()
    yield made
    made.remove()


def test_the_operator_floor_holds_against_the_rotating_symlink(arena: Arena) -> None:
    server = Server("asyncio", *QUIET, "--sandbox", "bwrap",
                    "--writable-root", str(arena.workspace))
    try:
        counts = race(server, arena, floor_profile(arena), None)
    finally:
        log = server.stop()
    assert arena.intact(), (counts, log)
    assert raced(counts), counts


def test_a_codex_profile_with_a_deny_glob_holds_against_the_rotating_symlink(
        arena: Arena) -> None:
    server = Server("asyncio", *QUIET)
    try:
        counts = race(server, arena, codex_profile(arena), attacker_profile(arena))
    finally:
        log = server.stop()
    assert arena.intact(), (counts, log)
    assert raced(counts), counts
