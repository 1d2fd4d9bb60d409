"""fs calls' budgets and the pools' weighing, at unit level (issue 32, item 8).

The time budget is 10 s of a call's processor time, which the compiled deny patterns no longer
let a tree of a test's size reach on a live server: here it is made small and a walk run
directly. The bound on patterns × paths, likewise; and `Weighed` with work the test releases.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from execproto import INVALID_REQUEST, Policy
from execproto._policy import PathRule
from execproto.adapters._files import _beneath, _fs_calls
from execproto.adapters._files._beneath import Exhausted, Scope
from execproto.adapters._files._fs_calls import Weighed
from execproto.adapters._files._walk import walk
from execproto.fs import Walk


def _scope(patterns: int) -> Scope:
    globs = [f"/**/x{i}*.env" for i in range(patterns)]
    return Scope((), Policy.of([PathRule(path="/", access="read")], False, globs)).budgeted()


def _tree(base: Path) -> Path:
    for d in range(3):
        for f in range(10):
            (base / "a" / f"d{d}").mkdir(parents=True, exist_ok=True)
            (base / "a" / f"d{d}" / f"f{f}.txt").touch()
    return base


def _walk_params(root: str) -> Walk:
    return Walk(path=root, follow=False, prune_hidden=False, max_depth=64,
                max_directories=10_000, max_entries=50_000)


def test_the_time_budget_stops_a_walk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trees = _tree(tmp_path)
    assert len(walk(_walk_params(str(trees)), _scope(250)).text) > 1000  # within 10 s: whole
    monkeypatch.setattr(_beneath, "CALL_SECONDS", 0.0)  # spent at once: stopped at a child
    with pytest.raises(Exhausted) as stopped:
        walk(_walk_params(str(trees)), _scope(250))
    assert stopped.value.error.code == INVALID_REQUEST
    assert "time budget of 0 s of processor time" in stopped.value.error.message
    with pytest.raises(Exhausted):  # without deny patterns too: a walk's loop looks
        walk(_walk_params(str(trees)), Scope().budgeted())
    # A recursive remove's or copy's check of the tree, the same way (nothing touched yet).
    fd = os.open(trees, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(Exhausted):
            _scope(1).check_tree(fd, "a", [(str(trees / "a"), "read")])
    finally:
        os.close(fd)


def test_the_checks_bound_counts_patterns_times_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_beneath, "MAX_GLOB_CHECKS", 1000)
    scope = _scope(100)
    for index in range(10):  # 10 paths × 100 patterns: at the bound
        scope.check(f"/w/{index}", f"/w/{index}", "read")
    with pytest.raises(Exhausted, match="at most 1,000 pattern checks"):
        scope.check("/w/more", "/w/more", "read")


class _Pool:
    """A Weighed pool whose work the test releases, its `done` calls run by the test."""

    def __init__(self, workers: int, per_owner: int) -> None:
        self.posted: queue.Queue[Callable[[], None]] = queue.Queue()
        self.shares = Weighed(self.posted.put, workers, per_owner, "test-weighed")
        self.started: queue.Queue[str] = queue.Queue()
        self.gates: dict[str, threading.Event] = {}

    def submit(self, owner: str, name: str) -> None:
        gate = self.gates[name] = threading.Event()

        def work() -> None:
            self.started.put(name)
            assert gate.wait(10)

        self.shares.submit(owner, work, lambda result: None)

    def next_started(self) -> str:
        return self.started.get(timeout=10)

    def nothing_started(self) -> bool:
        try:
            self.started.get(timeout=0.2)
        except queue.Empty:
            return True
        return False

    def finish(self, name: str) -> None:
        self.gates[name].set()
        self.posted.get(timeout=10)()


def test_heavy_connections_keep_to_half_the_threads_behind_the_light(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fs_calls, "HEAVY", 0.1)
    pool = _Pool(workers=2, per_owner=2)
    pool.submit("hog", "h1")
    assert pool.next_started() == "h1"
    time.sleep(0.2)  # h1 has cost 0.2 s and runs on: the hog is heavy
    pool.submit("hog", "h2")
    assert pool.nothing_started()  # by count it could run two; by cost, half the threads
    pool.submit("light", "l1")
    assert pool.next_started() == "l1"  # the thread the heavy leave free
    pool.submit("light", "l2")
    pool.finish("h1")
    assert pool.next_started() == "l2"  # queued after h2, and first: the light go first
    pool.finish("l1")
    assert pool.next_started() == "h2"
    assert 0.2 < pool.shares.recent("hog", time.monotonic()) < 5
    pool.finish("l2")
    pool.finish("h2")
    pool.shares.close()
