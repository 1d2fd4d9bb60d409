"""execproto side by side with the reference exec-server and OpenSSH, in one run, on this machine.

    .venv/bin/python bench/compare.py [--quick] [--json FILE]

Servers: execproto on each adapter; the reference `codex exec-server` 0.171.0 when it is
installed (found as tests/reference.py finds it: `make reference` puts it there); OpenSSH on
loopback when `sshd` is installed, with a throwaway key and config made here (one connection,
multiplexed with ControlMaster, so a command costs a channel, not a handshake). Every
exec-server gets the same measuring client (bench/wsbench.py). Workloads:

  stream    one process writes 256 MiB (head -c 268435456 /dev/zero); from process/start until
            every byte has arrived as process/output; the best of three. The client's own CPU
            share is reported, to show it is not the bottleneck, and the server's CPU time.
  latency   200 sequential process/start of `true`, each until its process/closed.
  fan-out   200 processes started at once, each printing 100 lines (seq 1 100): time until all
            are started, until all are closed, and the server's peak RSS meanwhile.
  idle      the server's RSS after one handshake.
  local     the floor: a pipe (head | cat) and subprocess.run(["true"]).
  backpressure  a client that stops reading while a process writes 1 GiB: the writer must
            block and the server's RSS stay under 100 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from reference import REFERENCE  # noqa: E402
from wsbench import WsClient, output_bytes, start_params  # noqa: E402

STREAM = 256 << 20
STREAM_RUNS = 3  # the best of these counts: a shared 2-core machine is noisy
RUNS = 200
LINES = 100
GIB = 1 << 30


# -- servers --------------------------------------------------------------------------------------


class Server:
    def __init__(self, name: str, argv: list[str], env: dict[str, str] | None = None,
                 home: str | None = None) -> None:
        self.name = name
        self.home = home  # a scratch directory the server used, removed when it stops
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True, env={**os.environ, **(env or {})})
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith("ws://"):
            raise RuntimeError(f"{name} did not start")
        self.pid = self.process.pid

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)


def execproto(adapter: str) -> Callable[[], Server]:
    # --drain-grace 0: stopped at once, as the reference is, not after a drain.
    argv = [sys.executable, "-m", "execproto.adapters", "serve", "--listen", "ws://127.0.0.1:0",
            "--adapter", adapter, "--log-level", "WARNING", "--drain-grace", "0"]
    return lambda: Server(f"execproto-{adapter}", argv)


def reference(binary: str) -> Callable[[], Server]:
    def start() -> Server:
        home = tempfile.mkdtemp(prefix="codex-home-")
        return Server("reference", [binary, "exec-server", "--listen", "ws://127.0.0.1:0"],
                      env={"CODEX_HOME": home}, home=home)

    return start


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total / 1024


class PeakRss:
    """Samples the RSS of ``pids()`` every few ms while the block runs; ``peak`` in MB."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self._pids = pids
        self.peak = 0.0
        self._done = threading.Event()

    def __enter__(self) -> PeakRss:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._done.wait(0.003):
            self.peak = max(self.peak, rss_mb(self._pids()))

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb(self._pids()))


# -- the exec-server workloads --------------------------------------------------------------------


def wait_closed(client: WsClient, process_ids: set[str]) -> None:
    for raw in client.messages():
        if b"process/closed" in raw:
            process_ids.discard(json.loads(raw)["params"]["processId"])
            if not process_ids:
                return


def ws_idle(server: Server) -> float:
    client = WsClient(server.url)
    client.handshake()
    time.sleep(0.5)
    rss = rss_mb([server.pid])
    client.close()
    return rss


def ws_latency(server: Server, runs: int) -> list[float]:
    client = WsClient(server.url)
    client.handshake()
    times = []
    for i in range(runs):
        t0 = time.perf_counter()
        client.request("process/start", start_params(f"t{i}", ["true"]))
        wait_closed(client, {f"t{i}"})
        times.append(time.perf_counter() - t0)
    client.close()
    return times


def ws_fanout(server: Server, count: int) -> tuple[float, float, float]:
    client = WsClient(server.url)
    client.handshake()
    with PeakRss(lambda: [server.pid]) as rss:
        t0 = time.perf_counter()
        ids = {client.request("process/start", start_params(f"f{i}", ["seq", "1", str(LINES)]))
               for i in range(count)}
        pending, started_at = set(ids), 0.0
        open_ids = {f"f{i}" for i in range(count)}
        for raw in client.messages():
            if pending and b'"result"' in raw:
                pending.discard(json.loads(raw).get("id"))
                if not pending:
                    started_at = time.perf_counter() - t0
            elif b"process/closed" in raw:
                open_ids.discard(json.loads(raw)["params"]["processId"])
                if not open_ids and not pending:
                    break
        closed_at = time.perf_counter() - t0
    client.close()
    return started_at, closed_at, rss.peak


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes (all their threads) so far."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except FileNotFoundError:
            pass
    return total / os.sysconf("SC_CLK_TCK")


def best_stream(run: Callable[[], tuple[float, float, float]]) -> dict[str, float]:
    mbps, client, server = max(run() for _ in range(STREAM_RUNS))
    return {"stream_mbps": mbps, "client_cpu": client, "server_cpu_per_gib": server}


def ws_stream(server: Server, size: int) -> tuple[float, float, float]:
    """MB/s from start until every byte arrived, the client's CPU share, and the server's CPU
    seconds per GiB."""
    client = WsClient(server.url)
    client.handshake()
    got = 0
    server_cpu = cpu_seconds([server.pid])
    t0, cpu0 = time.perf_counter(), time.process_time()
    client.request("process/start", start_params("s", ["head", "-c", str(size), "/dev/zero"]))
    for raw in client.messages():
        n = output_bytes(raw)
        if n >= 0:
            got += n
        elif b"process/closed" in raw:
            break
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    server_cpu = cpu_seconds([server.pid]) - server_cpu
    client.close()
    if got != size:
        raise RuntimeError(f"{server.name}: stream delivered {got} of {size} bytes")
    return size / wall / 1e6, cpu / wall, server_cpu * GIB / size


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (FileNotFoundError, ProcessLookupError):
                pass
    return found


def written(pid: int) -> int:
    with open(f"/proc/{pid}/io") as io:
        for line in io:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


def ws_backpressure(server: Server, seconds: float = 5.0) -> dict[str, Any]:
    """A client that stops reading while a process writes 1 GiB."""
    client = WsClient(server.url)
    client.handshake()
    with PeakRss(lambda: [server.pid]) as rss:
        client.request("process/start", start_params("b", ["head", "-c", str(GIB), "/dev/zero"]))
        time.sleep(seconds)  # not reading a byte meanwhile
        writers = children(server.pid)
        progress = [written(pid) for pid in writers]
        time.sleep(1.0)
        still = [written(pid) for pid in writers]
    client.request("process/terminate", {"processId": "b"})
    client.close()
    blocked = bool(writers) and progress == still and max(still) < GIB
    return {"written_mib": max(still, default=0) / (1 << 20), "blocked": blocked,
            "peak_rss_mb": rss.peak}


# -- OpenSSH --------------------------------------------------------------------------------------


class Sshd:
    """sshd on loopback with a throwaway host key, client key and config; one multiplexed
    connection (ControlMaster) carries every command."""

    def __init__(self, binary: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="bench-sshd-"))
        d = self.dir
        for name in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)],
                           check=True)
        shutil.copy(d / "client_key.pub", d / "authorized_keys")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        (d / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n"
            f"PidFile {d}/sshd.pid\nAuthorizedKeysFile {d}/authorized_keys\nStrictModes no\n"
            "UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\nMaxSessions 1000\nMaxStartups 1000\n"
            "LogLevel ERROR\n"
        )
        os.makedirs("/run/sshd", exist_ok=True)  # its privilege-separation directory
        self.process = subprocess.Popen([binary, "-D", "-e", "-f", str(d / "sshd_config")],
                                        stderr=subprocess.DEVNULL)
        self.pid = self.process.pid
        self.base = ["ssh", "-p", str(self.port), "-i", str(d / "client_key"),
                     "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                     "-o", "LogLevel=ERROR", "-o", f"ControlPath={d}/control", "-T"]
        for _ in range(100):
            master = subprocess.run([*self.base, "-o", "ControlMaster=yes", "-o",
                                     "ControlPersist=yes", "-N", "-f", "127.0.0.1"],
                                    capture_output=True, timeout=30)
            if master.returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"ssh master did not connect: {master.stderr.decode()}")
        self.argv = [*self.base, "-o", "ControlMaster=no", "127.0.0.1"]

    def daemons(self) -> list[int]:
        """The sshd processes: the listener and the connection's privilege-separated pair."""
        found, queue = [], [self.pid]
        while queue:
            pid = queue.pop()
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except FileNotFoundError:
                continue
            if comm.startswith("sshd"):
                found.append(pid)
                queue += children(pid)
        return found

    def stop(self) -> None:
        subprocess.run([*self.base, "-O", "exit", "127.0.0.1"], capture_output=True)
        self.process.terminate()
        self.process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def ssh_stream(sshd: Sshd, size: int) -> tuple[float, float, float]:
    server_cpu = cpu_seconds(sshd.daemons())
    t0, cpu0 = time.perf_counter(), time.process_time()
    proc = subprocess.Popen([*sshd.argv, "head", "-c", str(size), "/dev/zero"],
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None
    got, fd = 0, proc.stdout.fileno()
    while data := os.read(fd, 1 << 20):
        got += len(data)
    proc.wait()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    server_cpu = cpu_seconds(sshd.daemons()) - server_cpu
    assert got == size, got
    return size / wall / 1e6, cpu / wall, server_cpu * GIB / size


def ssh_latency(sshd: Sshd, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([*sshd.argv, "true"], check=True)
        times.append(time.perf_counter() - t0)
    return times


def ssh_fanout(sshd: Sshd, count: int) -> tuple[float, float, float]:
    import selectors

    with PeakRss(sshd.daemons) as rss:
        t0 = time.perf_counter()
        procs = [subprocess.Popen([*sshd.argv, "seq", "1", str(LINES)], stdout=subprocess.PIPE)
                 for _ in range(count)]
        selector = selectors.DefaultSelector()
        for proc in procs:
            assert proc.stdout is not None
            selector.register(proc.stdout, selectors.EVENT_READ)
        unstarted, started_at = set(range(count)), 0.0
        index = {proc.stdout.fileno(): i  # type: ignore[union-attr]
                 for i, proc in enumerate(procs)}
        while selector.get_map():
            for key, _ in selector.select():
                data = os.read(key.fd, 1 << 16)
                unstarted.discard(index[key.fd])
                if not unstarted and not started_at:
                    started_at = time.perf_counter() - t0
                if not data:
                    selector.unregister(key.fileobj)
        for proc in procs:
            proc.wait()
        closed_at = time.perf_counter() - t0
    return started_at, closed_at, rss.peak


# -- the local floor ------------------------------------------------------------------------------


def local_pipe(size: int) -> float:
    t0 = time.perf_counter()
    subprocess.run(["sh", "-c", f"head -c {size} /dev/zero | cat > /dev/null"], check=True)
    return size / (time.perf_counter() - t0) / 1e6


def local_true(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(["true"], check=True)
        times.append(time.perf_counter() - t0)
    return times


# -- the run --------------------------------------------------------------------------------------


def p95(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.95) - 1]


def measure_ws(start: Callable[[], Server], size: int, runs: int) -> dict[str, Any]:
    server = start()
    try:
        idle = ws_idle(server)
        lat = ws_latency(server, runs)
        started, closed, peak = ws_fanout(server, runs)
        stream = best_stream(lambda: ws_stream(server, size))
    finally:
        server.stop()
    return figures(stream, lat, (started, closed, peak), idle)


def measure_ssh(binary: str, size: int, runs: int) -> dict[str, Any]:
    sshd = Sshd(binary)
    try:
        idle = rss_mb(sshd.daemons())
        lat = ssh_latency(sshd, runs)
        started, closed, peak = ssh_fanout(sshd, runs)
        stream = best_stream(lambda: ssh_stream(sshd, size))
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


ROWS = [
    ("stream MB/s", "stream_mbps", "{:.0f}"),
    ("  client CPU share", "client_cpu", "{:.0%}"),
    ("  server CPU s/GiB", "server_cpu_per_gib", "{:.2f}"),
    ("latency median ms", "latency_median_ms", "{:.2f}"),
    ("latency p95 ms", "latency_p95_ms", "{:.2f}"),
    ("fan-out: all started s", "fanout_start_s", "{:.3f}"),
    ("fan-out: all closed s", "fanout_close_s", "{:.3f}"),
    ("fan-out: peak RSS MB", "fanout_peak_rss_mb", "{:.1f}"),
    ("idle RSS MB", "idle_rss_mb", "{:.1f}"),
]


def table(results: dict[str, dict[str, Any]]) -> str:
    names = list(results)
    lines = ["| workload | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for label, key, fmt in ROWS:
        cells = [fmt.format(results[n][key]) if results[n].get(key) is not None else "-"
                 for n in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratios(results: dict[str, dict[str, Any]], ours: str, other: str) -> list[str]:
    if other not in results:
        return [f"{ours}/{other}: not measured ({other} is not available here)"]
    lines = [f"{ours} / {other}:"]
    for label, key, _ in ROWS:
        a, b = results[ours].get(key), results[other].get(key)
        if a is not None and b:
            lines.append(f"  {label.strip():24} {a / b:6.2f}x")
    return lines


def targets(results: dict[str, dict[str, Any]], ours: str) -> list[str]:
    r, local = results[ours], results["local"]
    checks = [(f"latency median within 10x of subprocess.run(['true']) "
               f"({r['latency_median_ms']:.2f} vs {local['latency_median_ms']:.2f} ms)",
               r["latency_median_ms"] <= 10 * local["latency_median_ms"])]
    ref = results.get("reference")
    if ref is not None:
        checks += [
            (f"stream at least 1.0x the reference ({r['stream_mbps'] / ref['stream_mbps']:.2f}x)",
             r["stream_mbps"] >= ref["stream_mbps"]),
            (f"latency median at most 0.25x "
             f"({r['latency_median_ms'] / ref['latency_median_ms']:.2f}x)",
             r["latency_median_ms"] <= 0.25 * ref["latency_median_ms"]),
            (f"fan-out start-all at most 0.5x ({r['fanout_start_s'] / ref['fanout_start_s']:.2f}x)",
             r["fanout_start_s"] <= 0.5 * ref["fanout_start_s"]),
            (f"RSS at 200 processes at most the reference's "
             f"({r['fanout_peak_rss_mb']:.1f} vs {ref['fanout_peak_rss_mb']:.1f} MB)",
             r["fanout_peak_rss_mb"] <= ref["fanout_peak_rss_mb"]),
        ]
    else:
        checks.append(("the reference targets: not checked (the reference is not installed)", True))
    return [f"  [{'ok' if ok else 'MISSED'}] {what}" for what, ok in checks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="32 MiB and 50 runs, for a try")
    parser.add_argument("--adapters", default="asyncio,trio,threads")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    size, runs = (32 << 20, 50) if args.quick else (STREAM, RUNS)

    results: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for adapter in args.adapters.split(","):
        print(f"measuring execproto-{adapter} ...", file=sys.stderr)
        results[f"execproto-{adapter}"] = measure_ws(execproto(adapter), size, runs)
    binary = REFERENCE
    if binary:
        print("measuring the reference ...", file=sys.stderr)
        results["reference"] = measure_ws(reference(binary), size, runs)
    else:
        notes.append("reference: not installed (make reference)")
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
    print("measuring backpressure ...", file=sys.stderr)
    first = f"execproto-{args.adapters.split(',')[0]}"
    server = execproto(first.split("-", 1)[1])()
    try:
        held = ws_backpressure(server)
    finally:
        server.stop()

    print(f"\n{size >> 20} MiB stream, {runs} runs, {os.cpu_count()} cores\n")
    print(table(results))
    print()
    for other in ("reference", "openssh"):
        print("\n".join(ratios(results, first, other)))
    print(f"\ntargets for {first}:")
    print("\n".join(targets(results, first)))
    verdict = "ok" if held["blocked"] and held["peak_rss_mb"] < 100 else "MISSED"
    print(f"\nbackpressure ({first}): a client stops reading while a process writes 1 GiB; "
          f"the writer stopped at {held['written_mib']:.0f} MiB and stays blocked: "
          f"{held['blocked']}; server peak RSS {held['peak_rss_mb']:.1f} MB (< 100 MB) [{verdict}]")
    for note in notes:
        print(f"note: {note}")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "backpressure": held,
                                         "notes": notes}, indent=2))


if __name__ == "__main__":
    main()
