"""execproto side by side with the reference exec-server and OpenSSH, in one run, on this machine.

    .venv/bin/python bench/compare.py [--quick] [--workloads LIST] [--repeat N] [--table]
                                      [--json FILE]
    .venv/bin/python bench/compare.py --from FILE... [--table]    (saved runs, printed again)

Servers: execproto on each adapter; the reference `codex exec-server` 0.171.0 when it is
installed (found as tests/reference.py finds it: `make reference` puts it there); OpenSSH on
loopback when `sshd` is installed (bench/openssh.py). Every exec-server gets the same measuring
client (bench/wsbench.py). Workloads, chosen with --workloads (all by default):

  unsandboxed  (bench/workloads.py) stream: one process writes 256 MiB, from process/start until
            every byte has arrived as process/output, the best of five (the servers taking
            turns, one stream each, so the machine's load falls on all alike); latency: 200
            sequential starts of `true`, each until its process/closed; fan-out: 200 processes
            started at once, each printing 100 lines; idle RSS; the local floor (a pipe and
            subprocess.run(["true"])); and backpressure: a client that stops reading while a
            process writes 1 GiB, where the writer must block and the server stay under 100 MB.
  sandboxed  (bench/sandboxed.py) start -> closed of `true` under codex's default sandboxes
            (read-only, workspace-write, and workspace-write with the network), 30 sequential
            starts each, the servers taking turns; each profile is first checked to confine a
            write, so the figure is not that of an unsandboxed start.
  cold      (bench/cold_start.py) launch -> first /readyz 200 of execproto as deployed, of the
            stack's floor (asyncio, wsproto and attrs answering that request) and of the
            reference, 7 launches each, taking turns.

--table prints the README's performance table instead: every figure beside the reference's (or
the floor's) from the same run, as a ratio, with the command and the machine's load; of
several runs (--repeat, or --from with saved ones), the medians and each ratio's range. The
README's table comes from `bench/compare.py --repeat 3 --table`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import cold_start  # noqa: E402
import sandboxed  # noqa: E402
from openssh import Sshd, ssh_fanout, ssh_latency, ssh_stream  # noqa: E402
from reference import REFERENCE  # noqa: E402
from report import load_average, now, readme_table, summary  # noqa: E402
from servers import Server, execproto, reference, rss_mb  # noqa: E402
from workloads import (  # noqa: E402
    STREAM_RUNS,
    best_stream,
    local_pipe,
    local_true,
    ws_backpressure,
    ws_fanout,
    ws_idle,
    ws_latency,
    ws_stream,
)

STREAM = 256 << 20
RUNS = 200
SANDBOXED_RUNS = 30
COLD_RUNS = 7
WORKLOADS = ("unsandboxed", "sandboxed", "cold")


def p95(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.95) - 1]


def measure_ws(starts: dict[str, Callable[[], Server]], size: int, runs: int,
               notes: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every exec-server's figures. They run side by side; each is measured alone in turn, and
    the streams take turns (server after server, three rounds), so that a change in the
    machine's load falls on all of them alike. A server a workload fails on (a hang past the
    client's timeout, a refusal) is left out of the run with a note, and the others go on."""
    servers = {}
    found = {}
    streams: dict[str, list[tuple[float, float, float]]] = {}

    def leave_out(name: str, exc: Exception) -> None:
        (notes if notes is not None else []).append(
            f"{name}: left out of this run, a workload failed ({exc!r})")
        servers.pop(name).stop()
        found.pop(name, None)

    try:
        for name, start in starts.items():
            servers[name] = start()
        for name, server in list(servers.items()):
            print(f"measuring {name} ...", file=sys.stderr)
            try:
                idle = ws_idle(server)
                lat = ws_latency(server, runs)
                found[name] = (idle, lat, ws_fanout(server, runs))
            except (OSError, RuntimeError) as exc:  # a timeout is an OSError
                leave_out(name, exc)
        print("measuring the streams, in turns ...", file=sys.stderr)
        streams = {name: [] for name in servers}
        for _ in range(STREAM_RUNS):
            for name, server in list(servers.items()):
                try:
                    streams[name].append(ws_stream(server, size))
                except (OSError, RuntimeError) as exc:
                    leave_out(name, exc)
    finally:
        for server in servers.values():
            server.stop()
    return {name: figures(best_stream(streams[name]), lat, fanout, idle)
            for name, (idle, lat, fanout) in found.items()}


def measure_ssh(binary: str, size: int, runs: int) -> dict[str, Any]:
    sshd = Sshd(binary)
    try:
        idle = rss_mb(sshd.daemons())
        lat = ssh_latency(sshd, runs)
        started, closed, peak = ssh_fanout(sshd, runs)
        stream = best_stream([ssh_stream(sshd, size) for _ in range(STREAM_RUNS)])
    finally:
        sshd.stop()
    return figures(stream, lat, (started, closed, peak), idle)


def figures(stream: dict[str, float], latencies: list[float],
            fanout: tuple[float, float, float], idle: float) -> dict[str, Any]:
    """One server's row of the table."""
    started, closed, peak = fanout
    return {**stream, "latency_median_ms": statistics.median(latencies) * 1e3,
            "latency_p95_ms": p95(latencies) * 1e3, "fanout_start_s": started,
            "fanout_close_s": closed, "fanout_peak_rss_mb": peak, "idle_rss_mb": idle}


def unsandboxed(adapters: list[str], python: str, size: int, runs: int,
                notes: list[str]) -> dict[str, dict[str, Any]]:
    starts = {f"execproto-{adapter}": execproto(adapter, python) for adapter in adapters}
    if REFERENCE:
        starts["reference"] = reference(REFERENCE)
    results = measure_ws(starts, size, runs, notes)
    sshd = shutil.which("sshd")
    if sshd is None and os.access("/usr/sbin/sshd", os.X_OK):
        sshd = "/usr/sbin/sshd"
    if sshd:
        print("measuring OpenSSH ...", file=sys.stderr)
        try:
            results["openssh"] = measure_ssh(sshd, size, runs)
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            notes.append(f"openssh: skipped, it would not run here: {exc}")
    else:
        notes.append("openssh: skipped, sshd is not installed (apt-get install openssh-server)")
    print("measuring the local floor ...", file=sys.stderr)
    true_times = local_true(runs)
    results["local"] = {"stream_mbps": max(local_pipe(size) for _ in range(STREAM_RUNS)),
                        "latency_median_ms": statistics.median(true_times) * 1e3,
                        "latency_p95_ms": p95(true_times) * 1e3}
    return results


def measure(args: argparse.Namespace, adapters: list[str], chosen: list[str]) -> dict[str, Any]:
    """One run of the chosen workloads: its figures, the command, and the machine's load."""
    size, runs = (32 << 20, 50) if args.quick else (STREAM, RUNS)
    sandboxed_runs, cold_runs = (20, 5) if args.quick else (SANDBOXED_RUNS, COLD_RUNS)
    command = " ".join([".venv/bin/python", "bench/compare.py", *sys.argv[1:]])
    run: dict[str, Any] = {"command": command, "at": now(), "load_before": load_average(),
                          "notes": []}
    notes = run["notes"]
    if not REFERENCE:
        notes.append("reference: not installed (make reference)")

    if "unsandboxed" in chosen:
        run["results"] = unsandboxed(adapters, args.python, size, runs, notes)
        print("measuring backpressure ...", file=sys.stderr)
        server = execproto(adapters[0], args.python)()
        try:
            run["backpressure"] = ws_backpressure(server)
        finally:
            server.stop()
    if "sandboxed" in chosen:
        print("measuring sandboxed starts ...", file=sys.stderr)
        starts = {f"execproto-{adapter}": execproto(adapter, args.python) for adapter in adapters}
        if REFERENCE:
            starts["reference"] = reference(REFERENCE)
        run["sandboxed"] = sandboxed.measure(starts, sandboxed_runs)
    if "cold" in chosen:
        print("measuring cold starts ...", file=sys.stderr)
        # Another interpreter's execproto is measured as installed there (bench/at_commit.py
        # makes it a deployed one), this checkout's as a wheel built of it.
        installed = None if args.python == sys.executable else Path(args.python).with_name(
            "execproto")
        run["cold"] = cold_start.side_by_side(cold_runs, installed)
    run["load_after"] = load_average()
    run["sizes"] = {"stream_mib": size >> 20, "stream_runs": STREAM_RUNS, "runs": runs,
                    "sandboxed_runs": sandboxed_runs, "cold_runs": cold_runs,
                    "cores": os.cpu_count()}
    return run


def saved_runs(paths: list[Path]) -> list[dict[str, Any]]:
    """The runs in files written by --json (a run, or a list of them with --repeat)."""
    found = []
    for path in paths:
        saved = json.loads(path.read_text())
        found += saved if isinstance(saved, list) else [saved]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="32 MiB, 50 runs, 20 sandboxed starts and 5 launches, for a try")
    parser.add_argument("--adapters", default="asyncio,trio,threads")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"a comma-separated choice of {', '.join(WORKLOADS)} (default all)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure everything this many times over (default 1); with --table, "
                        "the medians of the runs and the range of each ratio")
    parser.add_argument("--table", action="store_true",
                        help="print the README's performance table (Markdown): each figure "
                        "beside the reference's or the floor's, and the ratio")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter whose execproto is measured (default this one's, "
                        "and for the cold start a wheel of this checkout): e.g. one that "
                        "bench/at_commit.py printed, to put a commit before a change beside one "
                        "after it")
    parser.add_argument("--from", dest="saved", type=Path, nargs="+",
                        help="measure nothing: print the runs saved with --json in these files "
                        "(of several, with --table: the medians and the ratios' range)")
    args = parser.parse_args()
    adapters = args.adapters.split(",")
    first = f"execproto-{adapters[0]}"
    chosen = args.workloads.split(",")
    if unknown := set(chosen) - set(WORKLOADS):
        parser.error(f"unknown workloads: {', '.join(sorted(unknown))}")
    if args.saved:
        done = saved_runs(args.saved)
    else:
        done = []
        for index in range(args.repeat):
            if args.repeat > 1:
                print(f"run {index + 1} of {args.repeat}", file=sys.stderr)
            done.append(measure(args, adapters, chosen))
            if args.json:  # each run kept as soon as it is done
                args.json.write_text(json.dumps(done if args.repeat > 1 else done[0], indent=2)
                                     + "\n")
    print(readme_table(done, first) if args.table
          else "\n\n".join(summary(run, first) for run in done))


if __name__ == "__main__":
    main()
