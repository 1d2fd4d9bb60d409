"""The core's counts for metrics (`ServerCore.stats`, `gauges`): what each event adds."""

from __future__ import annotations

from execproto import Drain
from execproto._stats import Histogram, Stats

from .harness import Harness


def stats_of(h: Harness) -> Stats:
    return h.core.core.stats


def test_requests_are_counted_by_method_and_result_with_their_durations() -> None:
    h = Harness()
    h.connect(1)
    h.handshake(1)
    h.now = 1.0
    msg_id = h.request(1, "environment/info")
    h.now = 1.25
    h.request(1, "fs/getMetadata", {"path": "relative"})  # refused at once
    assert h.response(1, msg_id) is not None
    stats = stats_of(h)
    assert stats.requests[("initialize", "ok")] == 1
    assert stats.requests[("environment/info", "ok")] == 1
    assert stats.requests[("fs/getMetadata", "error")] == 1
    assert stats.request_seconds["environment/info"].count == 1
    assert stats.connections_total == 1


def test_a_method_nobody_serves_is_one_label_however_many_names_are_tried() -> None:
    # A client must not be able to grow the series without bound.
    h = Harness()
    h.connect(1)
    h.handshake(1)
    for n in range(50):
        h.request(1, f"made/up{n}")
    stats = stats_of(h)
    assert stats.requests[("other", "error")] == 50
    assert {method for method, _ in stats.requests} == {"initialize", "other"}


def test_a_request_never_answered_before_its_connection_closed_is_not_counted() -> None:
    h = Harness()
    h.connect(1)
    h.handshake(1)
    proc = h.start(1, "p")
    h.request(1, "process/read", {"processId": "p", "afterSeq": 0, "waitMs": 10_000})
    h.disconnect(1)
    stats = stats_of(h)
    assert ("process/read", "ok") not in stats.requests
    assert stats._pending == {}
    assert h.core.core.gauges()["sessions_detached"] == 1
    assert proc


def test_processes_are_counted_from_spawn_to_finalizing() -> None:
    h = Harness()
    h.connect(1)
    h.handshake(1)
    h.now = 10.0
    proc = h.start(1, "p")
    assert h.core.core.gauges()["processes"] == 1
    h.output(proc, "stdout", b"hello")
    h.now = 12.5
    h.exit(proc, 3)
    h.eof(proc, "stdout")
    h.eof(proc, "stderr")
    stats = stats_of(h)
    assert stats.output_bytes == 5
    assert stats.processes_started == 1
    assert stats.processes_finished == {"failure": 1}
    assert (stats.process_seconds.count, stats.process_seconds.sum) == (1, 2.5)
    assert h.core.core.gauges()["processes"] == 0


def test_a_histogram_counts_each_observation_in_its_bucket_cumulatively() -> None:
    histogram = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 7.0):
        histogram.observe(value)
    assert histogram.cumulative() == [(0.1, 2), (1.0, 3), (float("inf"), 4)]
    assert (histogram.count, histogram.sum) == (4, 7.65)


def test_connections_the_server_closes_are_counted_by_close_code() -> None:
    h = Harness()
    h.connect(1)
    h.send(1, {"jsonrpc": "2.0", "method": "initialized", "params": {}})  # before initialize
    h.connect(2)
    h.feed(Drain())
    h.connect(3)
    assert stats_of(h).closed_by_server == {"protocol_error": 1, "going_away": 1}
