"""Output throughput of the core: `OutputReceived` events per second through `ServerCore.handle`.

One attached, handshaken client and one running process; a run feeds N output events of 64 KiB
(``--large``), another N of 100 bytes (``--small``). Each run uses a fresh core and is long enough
to pass the retention bounds (1 MiB, 65536 chunks), so the steady state, where every append also
drops the oldest chunk, is included. Reports the best of several runs (``time.perf_counter``).

    python bench/core.py                 # both sizes, best of 5
    python bench/core.py --profile       # also: where the time goes (cProfile, small chunks)
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time

from execproto import (
    ConnectionOpened,
    MessageReceived,
    OutputReceived,
    ProcessSpawned,
    Send,
    ServerCore,
    Spawn,
)

TARGET_SMALL_EVENTS_PER_S = 200_000


def ready_core() -> tuple[ServerCore, int]:
    """A core with client conn 1 past the handshake and process "p" running; and its handle."""
    core = ServerCore()

    def send(message: object) -> list[object]:
        return list(core.handle(MessageReceived(conn=1, data=json.dumps(message)), 0.0))

    core.handle(ConnectionOpened(conn=1, session_id="bench"), 0.0)
    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientName": "bench"}})
    send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    actions = send(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "process/start",
            "params": {
                "processId": "p",
                "argv": ["cat"],
                "cwd": "file:///tmp",
                "env": {},
                "tty": False,
            },
        }
    )
    spawns = [a for a in actions if isinstance(a, Spawn)]
    assert len(spawns) == 1, actions
    proc = spawns[0].proc
    core.handle(ProcessSpawned(proc=proc, pid=4242), 0.0)
    return core, proc


def check_output_path(chunk_size: int) -> None:
    """One event gives exactly one Send of a process/output notification (what is measured)."""
    core, proc = ready_core()
    actions = core.handle(OutputReceived(proc=proc, stream="stdout", data=b"x" * chunk_size), 0.0)
    assert len(actions) == 1 and isinstance(actions[0], Send), actions
    message = json.loads(actions[0].data)
    assert message["method"] == "process/output" and message["params"]["seq"] == 1, message


def payload(size: int) -> bytes:
    return (bytes(range(256)) * (size // 256 + 1))[:size]


def run_once(chunk_size: int, count: int) -> float:
    """Seconds for ``count`` output events of ``chunk_size`` bytes through a fresh core."""
    core, proc = ready_core()
    handle = core.handle
    # One event object, fed again and again: building events is the adapter's cost, not the core's.
    event = OutputReceived(proc=proc, stream="stdout", data=payload(chunk_size))
    start = time.perf_counter()
    for _ in range(count):
        handle(event, 1.0)
    return time.perf_counter() - start


def measure(label: str, chunk_size: int, count: int, runs: int) -> float:
    check_output_path(chunk_size)
    best = min(run_once(chunk_size, count) for _ in range(runs))
    rate = count / best
    mb_s = rate * chunk_size / 1e6
    print(
        f"{label:>16}: {count:>9,} events  best of {runs}: {best:7.3f} s  "
        f"{rate:>12,.0f} events/s  {mb_s:>9,.1f} MB/s  {1e9 / rate:>8,.0f} ns/event"
    )
    return rate


def profile(chunk_size: int, count: int, top: int) -> None:
    core, proc = ready_core()
    handle = core.handle
    event = OutputReceived(proc=proc, stream="stdout", data=payload(chunk_size))

    def loop() -> None:
        for _ in range(count):
            handle(event, 1.0)

    profiler = cProfile.Profile()
    profiler.runcall(loop)
    print(f"\ncProfile, {count:,} events of {chunk_size} bytes (profiling inflates every call):")
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5,
                        help="runs per size; the best counts (default 5)")
    parser.add_argument("--small", type=int, default=300_000, help="100-byte events per run")
    parser.add_argument("--large", type=int, default=4_000, help="64 KiB events per run")
    parser.add_argument("--profile", action="store_true", help="print the top cProfile entries")
    parser.add_argument("--top", type=int, default=25, help="entries shown by --profile")
    args = parser.parse_args(argv)

    print(f"execproto core output throughput (Python {sys.version.split()[0]})")
    measure("64 KiB chunks", 64 * 1024, args.large, args.runs)
    small = measure("100 B chunks", 100, args.small, args.runs)
    verdict = "meets" if small >= TARGET_SMALL_EVENTS_PER_S else "BELOW"
    print(f"small chunks {verdict} the target of {TARGET_SMALL_EVENTS_PER_S:,} events/s")
    if args.profile:
        profile(100, min(args.small, 200_000), args.top)
        profile(64 * 1024, args.large, args.top // 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

