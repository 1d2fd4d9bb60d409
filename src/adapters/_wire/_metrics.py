"""``GET /metrics``: the core's counts and gauges in Prometheus' text format.

The names are the reference's (its OpenTelemetry metrics, as Prometheus spells them) and
execproto's own under the same prefix. The core does the counting (`ServerCore.stats`,
`ServerCore.gauges`); this only renders a snapshot when scraped, with prometheus_client, which
is imported at the first scrape so serving without one costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from execproto import ServerCore

if TYPE_CHECKING:
    from execproto import Recorder

PREFIX = "exec_server"

# gauge name -> (the core's gauge, help)
GAUGES = {
    "connections_active": ("connections", "Connections open now."),
    "processes_active": ("processes", "Processes spawned or starting and not yet finalized."),
    "sessions_attached": ("sessions_attached", "Sessions with a connection."),
    "sessions_detached": ("sessions_detached", "Sessions waiting for their client to resume."),
    "held_bytes": ("held_bytes", "Output held for detached sessions."),
    "stdin_backlog_bytes": ("stdin_backlog_bytes", "Stdin given and not yet written."),
    "descriptors_in_use": ("descriptors_in_use", "Descriptors processes and fs handles hold."),
    "descriptor_budget": ("descriptor_budget",
                          "Descriptors processes and fs handles may hold (0: no limit)."),
}


def render(core: ServerCore | Recorder) -> bytes:
    """The exposition of one scrape (of the core a trace `Recorder` wraps, if it is one)."""
    if not isinstance(core, ServerCore):  # a trace's `Recorder`
        core = core.core
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(core))
    return generate_latest(registry)


class _Collector:
    def __init__(self, core: ServerCore) -> None:
        self._core = core

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        core, stats = self._core, self._core.stats
        gauges = core.gauges()
        for name, (key, text) in GAUGES.items():
            yield GaugeMetricFamily(f"{PREFIX}_{name}", text, value=gauges[key])
        yield CounterMetricFamily(f"{PREFIX}_connections", "Connections opened.",
                                  value=stats.connections_total)
        requests = CounterMetricFamily(f"{PREFIX}_requests", "Requests answered.",
                                       labels=["method", "result"])
        for (method, result), count in sorted(stats.requests.items()):
            requests.add_metric([method, result], count)
        yield requests
        durations = HistogramMetricFamily(f"{PREFIX}_request_duration_seconds",
                                          "From a request's arrival to its answer.",
                                          labels=["method"])
        for method, histogram in sorted(stats.request_seconds.items()):
            durations.add_metric([method], _buckets(histogram), histogram.sum)
        yield durations
        finished = CounterMetricFamily(f"{PREFIX}_processes_finished", "Processes finalized.",
                                       labels=["result"])
        for result, count in sorted(stats.processes_finished.items()):
            finished.add_metric([result], count)
        yield finished
        yield CounterMetricFamily(f"{PREFIX}_processes_started", "Processes spawned.",
                                  value=stats.processes_started)
        process_seconds = HistogramMetricFamily(f"{PREFIX}_process_duration_seconds",
                                                "From a process's spawn to its finalizing.")
        process_seconds.add_metric([], _buckets(stats.process_seconds),
                                   stats.process_seconds.sum)
        yield process_seconds
        yield CounterMetricFamily(f"{PREFIX}_output_bytes", "Output read from processes.",
                                  value=stats.output_bytes)
        closed = CounterMetricFamily(f"{PREFIX}_connections_closed_by_server",
                                     "Connections the server closed, by why.", labels=["reason"])
        for reason, count in sorted(stats.closed_by_server.items()):
            closed.add_metric([reason], count)
        yield closed


def _buckets(histogram: Any) -> list[tuple[str, float]]:
    return [("+Inf" if bound == float("inf") else repr(bound), count)
            for bound, count in histogram.cumulative()]
