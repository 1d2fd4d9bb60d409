"""Upload against output through ``execproto exec``, and the client's memory, on one server.

    .venv/bin/python bench/client_stream.py [--mb 100] [--rounds 3] [--adapter asyncio]

Output: ``exec URL -- head -c N /dev/zero > /dev/null``. Upload: ``head -c N /dev/zero |
exec URL -- wc -c``. Each is run ``--rounds`` times; the median is shown, with exec's peak
memory (max RSS). Then a library client that starts a 4N-byte output and reads none of it for
a few seconds, then all of it: its peak RSS shows that unread output is bounded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXECPROTO = [sys.executable, "-m", "execproto"]

UNREAD = r"""
import resource, sys, anyio
from execproto.adapters.client import connect

async def main(url, size):
    async with connect(url) as ex:
        proc = await ex.start(["head", "-c", str(size), "/dev/zero"])
        await anyio.sleep(3)
        held = proc.buffered
        total = 0
        async for chunk in proc.output():
            total += len(chunk.data)
        assert total == size, total
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(held, rss)

anyio.run(main, sys.argv[1], int(sys.argv[2]))
"""


def timed(command: str) -> tuple[float, int]:
    """Seconds and the peak RSS (MiB) of the slowest of the shell's children."""
    began = time.perf_counter()
    shell = subprocess.Popen(["sh", "-c", command])
    _, status, usage = os.wait4(shell.pid, 0)
    took = time.perf_counter() - began
    assert os.waitstatus_to_exitcode(status) == 0, command
    return took, usage.ru_maxrss // 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--adapter", default="asyncio")
    args = parser.parse_args()
    size = args.mb * 1_000_000
    server = subprocess.Popen(
        [*EXECPROTO, "serve", "--listen", "ws://127.0.0.1:0", "--adapter", args.adapter,
         "--log-level", "warning", "--drain-grace", "0"],  # the unread process still runs
        stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        exec_ = " ".join([*EXECPROTO, "exec", url])
        runs = {
            "output": f"{exec_} -- head -c {size} /dev/zero > /dev/null",
            "upload": f"head -c {size} /dev/zero | {exec_} -- wc -c > /dev/null",
        }
        medians = {}
        for name, command in runs.items():
            results = [timed(command) for _ in range(args.rounds)]
            seconds = statistics.median(r[0] for r in results)
            medians[name] = seconds
            peak = max(r[1] for r in results)
            print(f"{name:7} {args.mb} MB: {seconds:6.2f} s median of {args.rounds} "
                  f"({args.mb / seconds:6.1f} MB/s), exec peak RSS {peak} MiB")
        print(f"upload / output: {medians['upload'] / medians['output']:.2f}x")
        unread = subprocess.run([sys.executable, "-c", UNREAD, url, str(4 * size)],
                                capture_output=True, text=True, check=True)
        held, rss = unread.stdout.split()
        print(f"unread {4 * args.mb} MB: {int(held) / 2**20:.1f} MiB held after 3 s, "
              f"client peak RSS {rss} MiB")
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
