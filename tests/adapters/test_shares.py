"""The pools' shares on their own: turns, the per-owner cap, holds and drops.

Work items block on events the test sets, so which ran, and in what order, is exact.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from execproto.adapters._shares import Shares

WAIT = 10.0


class Pool:
    """A Shares whose `done` calls come back on a queue, and whose work the test releases."""

    def __init__(self, workers: int, per_owner: int) -> None:
        self.posted: queue.Queue[Callable[[], None]] = queue.Queue()
        self.shares = Shares(self.posted.put, workers, per_owner, "test-shares")
        self.started: queue.Queue[str] = queue.Queue()
        self.finished: list[tuple[str, Any]] = []
        self.gates: dict[str, threading.Event] = {}

    def submit(self, owner: str, name: str) -> None:
        gate = self.gates[name] = threading.Event()

        def work() -> str:
            self.started.put(name)
            assert gate.wait(WAIT)
            return name

        self.shares.submit(owner, work, lambda result: self.finished.append((name, result)))

    def next_started(self) -> str:
        return self.started.get(timeout=WAIT)

    def nothing_started(self) -> bool:
        try:
            self.started.get(timeout=0.2)
        except queue.Empty:
            return True
        return False

    def finish(self, name: str) -> None:
        self.gates[name].set()
        self.posted.get(timeout=WAIT)()  # as the owner's loop would run it


def test_an_owner_runs_at_most_its_share_and_others_take_turns() -> None:
    pool = Pool(workers=2, per_owner=1)
    for name in ("a1", "a2", "a3"):
        pool.submit("hog", name)
    pool.submit("other", "b1")
    assert {pool.next_started(), pool.next_started()} == {"a1", "b1"}  # one each
    assert pool.nothing_started()  # a2 waits: the hog has its one
    pool.finish("b1")
    assert pool.nothing_started()  # the free thread may not take a second of the hog's
    pool.finish("a1")
    assert pool.next_started() == "a2"
    pool.finish("a2")
    assert pool.next_started() == "a3"
    pool.finish("a3")
    assert [name for name, _ in pool.finished] == ["b1", "a1", "a2", "a3"]
    pool.shares.close()


def test_turns_go_round_robin_between_owners() -> None:
    pool = Pool(workers=1, per_owner=1)
    pool.submit("first", "blocker")
    assert pool.next_started() == "blocker"
    for name in ("a1", "a2", "a3"):
        pool.submit("a", name)
    pool.submit("b", "b1")
    pool.submit("c", "c1")
    pool.finish("blocker")
    order = []
    for _ in range(5):
        order.append(pool.next_started())
        pool.finish(order[-1])
    assert order == ["a1", "b1", "c1", "a2", "a3"]
    pool.shares.close()


def test_a_held_owner_starts_nothing_and_a_dropped_ones_queue_never_runs() -> None:
    pool = Pool(workers=2, per_owner=2)
    pool.shares.hold("slow reader")
    pool.submit("slow reader", "r1")
    pool.submit("leaving", "l1")
    assert pool.next_started() == "l1"
    pool.submit("leaving", "l2")
    pool.submit("leaving", "l3")
    assert pool.next_started() == "l2"
    pool.shares.drop("leaving")  # l3 forgotten; the two running finish
    assert pool.nothing_started()
    pool.shares.release("slow reader")
    pool.finish("l1")
    assert pool.next_started() == "r1"
    pool.finish("l2")
    pool.finish("r1")
    assert pool.nothing_started()
    assert sorted(name for name, _ in pool.finished) == ["l1", "l2", "r1"]
    pool.shares.close()


def test_a_failing_call_gets_its_exception_as_its_result() -> None:
    posted: queue.Queue[Callable[[], None]] = queue.Queue()
    shares = Shares(posted.put, 1, 1, "test-shares")
    got: list[Any] = []

    def broken() -> None:
        raise ValueError("a bug")

    shares.submit("o", broken, got.append)
    posted.get(timeout=WAIT)()
    assert isinstance(got[0], ValueError)
    shares.close()


def test_calls_queued_at_once_each_get_a_thread_while_threads_are_left() -> None:
    """Two calls submitted together, one thread idle, threads still to start: both run at once
    (a free thread was counted for each, so the second waited for the first to finish)."""
    pool = Pool(workers=4, per_owner=2)
    pool.submit("a", "a1")
    assert pool.next_started() == "a1"
    pool.finish("a1")  # its thread is idle now
    pool.submit("b", "b1")
    pool.submit("b", "b2")
    assert {pool.next_started(), pool.next_started()} == {"b1", "b2"}
    pool.finish("b1")
    pool.finish("b2")
    pool.shares.close()


def test_a_call_keeps_its_place_in_the_share_until_its_answer_is_delivered() -> None:
    """An answer that crosses the owner's high water holds the owner from its `done`: none of
    the owner's calls may start between the work's end and that (under load, twice a share's
    16 MiB reads were made for a client that read none, and the server grew past 500 MB)."""
    pool = Pool(workers=2, per_owner=1)
    for name in ("a1", "a2", "a3"):
        pool.submit("reader", name)
    assert pool.next_started() == "a1"
    pool.gates["a1"].set()  # its work ends; its answer is not delivered yet
    assert pool.nothing_started()
    delivered = pool.posted.get(timeout=WAIT)
    pool.shares.hold("reader")  # as the answer's send past the high water does, then
    delivered()
    assert pool.nothing_started()
    pool.shares.release("reader")
    assert pool.next_started() == "a2"
    pool.finish("a2")
    assert pool.next_started() == "a3"
    pool.finish("a3")
    assert [name for name, _ in pool.finished] == ["a1", "a2", "a3"]
    pool.shares.close()
