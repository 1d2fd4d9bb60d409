"""bench/compare.py's own checks: the sandboxed workload times only starts that are confined
(and says so of one that is not), the cold start's floor is a server answering /readyz, and
the README table puts each figure beside what it is judged against.

The figures themselves are measured by the bench, not asserted here.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from .sandboxes import needs_bwrap

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench(name: str) -> ModuleType:
    """A module of bench/, which is no package: its modules import each other by plain name."""
    sys.path.insert(0, str(BENCH))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(BENCH))


sandboxed = _bench("sandboxed")
servers = _bench("servers")
cold_start = _bench("cold_start")
report = _bench("report")
wsbench = _bench("wsbench")


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    server = servers.execproto("asyncio")()
    try:
        ws = wsbench.WsClient(server.url, timeout=60)
        ws.handshake()
        yield ws
        ws.close()
    finally:
        server.stop()


def check(client: Any, name: str, tmp_path: Path) -> str | None:
    workspace, outside = tmp_path / "workspace", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    # The outside directory is under /tmp here, which workspace-write may write: for those
    # profiles the check needs one elsewhere, as the bench makes it.
    if sandboxed.PROFILES[name].writes_workspace:
        outside = Path(sandboxed.tempfile.mkdtemp(dir=Path.home() / ".cache"))
    try:
        why: str | None = sandboxed.confinement(client, name, str(workspace), str(outside))
        return why
    finally:
        shutil.rmtree(outside, ignore_errors=True)


@needs_bwrap
@pytest.mark.parametrize("name", ["read-only", "workspace-write", "workspace-write+net"])
def test_each_default_profile_is_confined(client: Any, name: str, tmp_path: Path) -> None:
    if name.endswith("+net") and shutil.which("pasta") is None:
        pytest.skip("pasta (Debian's passt) is not installed")
    assert check(client, name, tmp_path) is None


@needs_bwrap
def test_a_profile_that_lets_the_command_write_anywhere_is_not_timed(
        client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    everywhere = sandboxed.Profile([sandboxed.special("root", "write")], "restricted",
                                   writes_workspace=False)
    monkeypatch.setitem(sandboxed.PROFILES, "read-only", everywhere)
    why = check(client, "read-only", tmp_path)
    assert why is not None and "outside the workspace" in why


@needs_bwrap
def test_a_sandbox_without_the_network_its_profile_allows_is_not_timed(
        client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("pasta") is None:
        pytest.skip("pasta (Debian's passt) is not installed")
    asked = sandboxed.sandbox

    def restricted(profile: Any, workspace: str) -> Any:
        return asked(sandboxed.Profile(profile.entries, "restricted", profile.writes_workspace),
                     workspace)

    monkeypatch.setattr(sandboxed, "sandbox", restricted)
    assert check(client, "workspace-write+net", tmp_path) == "the network was unreachable"


def test_a_start_without_a_sandbox_is_not_timed(client: Any, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandboxed, "sandbox", lambda profile, workspace: None)
    assert check(client, "read-only", tmp_path) == "answered sandboxType 'none'"


def test_the_stacks_floor_answers_readyz() -> None:
    assert cold_start.launch_to_ready([sys.executable, "-c", cold_start.STACK_FLOOR]) > 0


def test_the_table_shows_each_figure_beside_the_reference_and_the_floor() -> None:
    figures = {"stream_mbps": 900.0, "server_cpu_per_gib": 1.0, "latency_median_ms": 2.0,
               "latency_p95_ms": 3.0, "fanout_start_s": 0.1, "fanout_close_s": 0.2,
               "fanout_peak_rss_mb": 30.0, "idle_rss_mb": 25.0}
    spread = {"p10_ms": 1.0, "p90_ms": 3.0, "min_ms": 1.0, "max_ms": 4.0, "runs": 20}
    run = {
        "command": "bench/compare.py --table", "at": "now", "load_before": "1.00 1.00 1.00",
        "load_after": "2.00 1.00 1.00", "notes": [],
        "sizes": {"stream_mib": 256, "runs": 200, "sandboxed_runs": 20, "cold_runs": 3,
                  "cores": 2},
        "results": {"execproto-asyncio": figures,
                    "reference": {key: value * 2 for key, value in figures.items()}},
        "sandboxed": {"read-only": {"execproto-asyncio": {"median_ms": 20.0, **spread},
                                    "reference": {"median_ms": 80.0, **spread}},
                      "workspace-write": {"execproto-asyncio": {"skipped": "not confined: x"},
                                          "reference": {"median_ms": 80.0, **spread}}},
        "cold": {cold_start.FLOOR: [100.0, 110.0, 120.0], cold_start.DEPLOYED: [150, 160, 170],
                 cold_start.REFERENCE_NAME: [10.0, 11.0, 12.0]},
    }
    table = report.readme_table([run], "execproto-asyncio").splitlines()

    def row(*words: str) -> str:
        return next(line for line in table if all(word in line for word in words))

    assert "| 900 | reference 1800 | 0.50x | ≥ 3x |" in row("| stream, 256 MiB")
    assert "| 20.0 (1–3) | reference 80.0 (1–3) | 0.25x | ≤ 0.25x |" in row("read-only")
    assert "| not confined: x |" in row("workspace-write")
    assert "| 160 (150–170) | the stack's floor 110 (100–120) | 1.45x | ≤ 1.5x |" in row("floor")
    assert "| reference 11 (10–12) | 14.55x |" in row("cold start", "reference")
    slower = json.loads(json.dumps(run))
    slower["results"]["reference"]["stream_mbps"] = 3600.0
    both = report.readme_table([run, slower], "execproto-asyncio").splitlines()
    stream = next(line for line in both if line.startswith("| stream"))
    assert "| 900 | reference 2700 | 0.38x (0.25–0.50) | ≥ 3x |" in stream
    assert "(2 runs)" in both[-1]
    assert table[-1] == ("Measured by `bench/compare.py --table` on now, 2 cores; the 1-minute "
                         "load average from 1.00 to 2.00 before and after each run.")


class _Gone:
    """A server that refuses every connection: what a hung or dead exec-server looks like to
    the measuring client."""

    name = "gone"
    url = "ws://127.0.0.1:9"  # discard: nothing listens there
    pid = 0
    stopped = False

    def stop(self) -> None:
        self.stopped = True


def test_a_server_a_workload_fails_on_is_left_out_with_a_note_and_the_others_measured() -> None:
    compare = _bench("compare")
    gone = _Gone()
    notes: list[str] = []
    found = compare.measure_ws({"gone": lambda: gone, "execproto": servers.execproto("asyncio")},
                               1 << 16, 3, notes)
    assert list(found) == ["execproto"]
    assert found["execproto"]["latency_median_ms"] > 0
    assert gone.stopped
    assert len(notes) == 1 and notes[0].startswith("gone: left out of this run"), notes
