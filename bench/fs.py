"""fs call latency on ordinary paths: `fs/getMetadata` and `fs/readFile` of 4 KiB.

    python bench/fs.py [--adapter asyncio|trio|threads] [--calls N] [--with-sandbox]

One client, one call at a time, on loopback; prints the median and 90th percentile of each
call's round trip in microseconds, best of three rounds (the machine is shared and noisy).
`--with-sandbox` sends the Codex read-only profile with every call, as the real client does.
The figure to keep: confinement must not cost more than 1.2x of these.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wsbench import WsClient  # noqa: E402

ROUNDS = 3


def _serve(adapter: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "execproto.adapters", "serve", "--listen", "ws://127.0.0.1:0",
         "--adapter", adapter, "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def _read_only(workspace: str) -> dict[str, Any]:
    root = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
    return {"permissions": {"type": "managed", "network": "restricted",
                            "file_system": {"type": "restricted", "entries": [root]}},
            "cwd": "file://" + workspace, "workspaceRoots": ["file://" + workspace],
            "windowsSandboxLevel": "disabled"}


def _round_trips(client: WsClient, method: str, params: dict[str, Any], calls: int) -> list[float]:
    messages = client.messages()
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        client.request(method, params)
        answer = next(messages)
        times.append(time.perf_counter() - began)
        assert b'"result"' in answer, answer[:200]
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapter", default="asyncio", choices=["asyncio", "trio", "threads"])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--with-sandbox", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workspace:
        path = Path(workspace) / "four-kib"
        path.write_bytes(b"x" * 4096)
        extra = {"sandbox": _read_only(workspace)} if args.with_sandbox else {}
        server = _serve(args.adapter)
        try:
            assert server.stdout is not None
            client = WsClient(server.stdout.readline().strip())
            client.handshake()
            params = {"path": "file://" + str(path), **extra}
            print(f"adapter {args.adapter}, {args.calls} calls a round, best of {ROUNDS}"
                  + (", with the read-only sandbox" if args.with_sandbox else ""))
            for method in ("fs/getMetadata", "fs/readFile"):
                rounds = [sorted(_round_trips(client, method, params, args.calls))
                          for _ in range(ROUNDS)]
                best = min(rounds, key=statistics.median)
                p90 = best[int(len(best) * 0.9)]
                print(f"{method:16} median {statistics.median(best) * 1e6:7.1f} us   "
                      f"p90 {p90 * 1e6:7.1f} us")
        finally:
            server.terminate()
            server.wait(20)


if __name__ == "__main__":
    main()
