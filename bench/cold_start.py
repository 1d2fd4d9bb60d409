"""Cold start: from launching a server to its first ``/readyz`` 200, beside the reference.

    .venv/bin/python bench/cold_start.py [--runs 7] [--json FILE]

Each run launches a fresh process listening on ``ws://127.0.0.1:0``, reads the bound address it
prints on stdout, and asks ``GET /readyz`` on a new loopback connection until one answers 200
(short timeouts, at most 2000 tries); the time counted is from just before the launch to that
answer. Servers:

- ``execproto serve`` as deployed: this checkout built as a wheel and installed (not editable)
  in a virtual environment of its own, as the Containerfile and ``pipx install .`` have it,
  with the dependencies of this interpreter's environment on its path; also with
  ``--adapter threads``, which imports no asyncio;
- ``execproto serve`` and ``python -m execproto serve`` from this interpreter's environment
  (``make``'s .venv has the package editable, whose path finder every start pays for, and the
  test tools' start-up hooks);
- the reference ``codex exec-server`` 0.171.0 when it is installed (found as
  tests/reference.py finds it).

The floors are ``python -c pass`` with each interpreter, from launch to exit, and, as deployed,
importing each chosen dependency alone (asyncio, wsproto with h11, attrs), asyncio and wsproto
together, and what no server start can skip: those and the core (attrs and the core's
classes). The stack's floor, which the start is judged against, is a server of those three
alone: importing asyncio, wsproto and attrs, listening and answering the same `/readyz` 200, from
launch to that answer as for a server. The median of the runs is the figure; min and max show
the spread (a shared 2-core machine is noisy). `bench/compare.py` measures the floor, the start
as deployed and the reference taking turns, and reports the start as a ratio to the floor.

Every subject gets one launch first that is not counted, and runs with bytecode caching on
(PYTHONDONTWRITEBYTECODE is dropped from its environment): an installed package has its
bytecode compiled by pip, and without it every start would compile the adapters from source.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from reference import CACHE, REFERENCE  # noqa: E402

RUNS = 7
TRIES = 2000  # /readyz asks per run; each waits at most TIMEOUT
TIMEOUT = 0.05
LAUNCH_TIMEOUT = 20.0  # seconds a server gets to print its address
REQUEST = b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, **(extra or {})}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def ready(host: str, port: int) -> bool:
    """Whether one ``GET /readyz`` on a new connection answers 200."""
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT) as sock:
            sock.sendall(REQUEST)
            head = sock.recv(64)
    except OSError:
        return False
    return head.startswith(b"HTTP/1.1 200")


def launch_to_ready(argv: list[str], env: dict[str, str] | None = None) -> float:
    """Seconds from launching ``argv`` to its first ``/readyz`` 200; the server is killed after."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               env=environment(env))
    try:
        assert process.stdout is not None
        line = _first_line(process)
        url = line.decode().strip()
        if not url.startswith("ws://"):
            raise RuntimeError(f"{argv[0]} printed {line!r}, not its address")
        host, _, port = url.removeprefix("ws://").rpartition(":")
        for _ in range(TRIES):
            if ready(host, int(port)):
                return time.perf_counter() - started
        raise RuntimeError(f"{url}/readyz never answered 200")
    finally:
        process.kill()
        process.wait(10)


def _first_line(process: subprocess.Popen[bytes]) -> bytes:
    """The first line of stdout, or an error once the process has been silent too long."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    got = b""
    while b"\n" not in got:
        left = deadline - time.monotonic()
        if left <= 0 or (process.poll() is not None and not got):
            raise RuntimeError(f"no address on stdout (exit status {process.poll()})")
        readable, _, _ = select.select([fd], [], [], left)
        if readable:
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"stdout closed before an address (exit status "
                                   f"{process.wait(10)})")
            got += chunk
    return got.split(b"\n", 1)[0]


def launch_to_exit(argv: list[str]) -> float:
    started = time.perf_counter()
    # wait() with no timeout blocks in waitpid; with one it polls, in steps of up to 50 ms.
    status = subprocess.Popen(argv, env=environment()).wait()
    elapsed = time.perf_counter() - started
    if status != 0:
        raise RuntimeError(f"{argv} exited {status}")
    return elapsed


ROOT = Path(__file__).resolve().parent.parent
# What building the wheel reads of the checkout (a copy: setuptools leaves build/ behind).
BUILT_FROM = ("pyproject.toml", "README.md", "LICENSE", "src")  # src last: a directory


def deployed(into: Path, root: Path = ROOT) -> Path:
    """The ``execproto`` script of a wheel of the checkout at ``root`` (this one by default)
    installed in a new venv in ``into``, its dependencies taken from this interpreter's
    site-packages (a .pth line: no download)."""
    source = into / "source"
    shutil.copytree(root / "src", source / "src",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in BUILT_FROM[:-1]:
        shutil.copy(root / name, source / name)
    quiet = {"stdout": subprocess.DEVNULL, "check": True}
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(into / "wheel"), str(source)], **quiet)
    venv = into / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], **quiet)
    python = venv / "bin" / "python"
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps",
                    *map(str, (into / "wheel").glob("*.whl"))], **quiet)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    (Path(site.stdout.strip()) / "execproto-deps.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin" / "execproto"


def execproto_script() -> str:
    beside = Path(sys.executable).parent / "execproto"
    found = str(beside) if beside.exists() else shutil.which("execproto")
    if found is None:
        raise SystemExit("no execproto script: pip install -e . first")
    return found


# The dependencies every server start imports, and the core's attrs classes (events, actions,
# the server core): no start can take less than these do.
UNSKIPPABLE = "import asyncio, wsproto, execproto.events, execproto.actions, execproto._server"
# Each chosen dependency on its own, and the two the asyncio adapter cannot serve without: what
# the start costs before a line of execproto runs.
DEPENDENCIES = {"asyncio": "import asyncio", "wsproto (with h11)": "import wsproto",
                "attrs": "import attrs", "asyncio and wsproto": "import asyncio, wsproto"}
SERVE = ["serve", "--listen", "ws://127.0.0.1:0", "--log-level", "warning"]
# The stack's floor for a start: the interpreter importing the three dependencies a server
# cannot do without (asyncio, wsproto, attrs), listening, printing its address as the server
# does, and answering GET /readyz 200, parsed and answered with wsproto's own HTTP library
# (h11). No server on this stack can start faster; the target is a multiple of it.
STACK_FLOOR = """\
import asyncio, attrs, h11, wsproto

async def answer(reader, writer):
    http = h11.Connection(h11.SERVER)
    while http.next_event() is h11.NEED_DATA:
        http.receive_data(await reader.read(4096))
    writer.write(http.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
                 + http.send(h11.EndOfMessage()))
    await writer.drain()
    writer.close()

async def serve():
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    print("ws://127.0.0.1:%d" % server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()

asyncio.run(serve())
"""
FLOOR = "asyncio+wsproto+attrs answering /readyz (the stack's floor)"
DEPLOYED = "execproto serve, as deployed"
REFERENCE_NAME = "reference codex exec-server 0.171.0"


def subjects(installed: Path) -> dict[str, Callable[[], float]]:
    python = str(installed.parent / "python")
    found: dict[str, Callable[[], float]] = {
        "python -c pass, its venv (the floor)": lambda: launch_to_exit([python, "-c", "pass"]),
        **{f"importing {name} alone": partial(launch_to_exit, [python, "-c", code])
           for name, code in DEPENDENCIES.items()},
        "importing what serving cannot skip": lambda: launch_to_exit([python, "-c", UNSKIPPABLE]),
        FLOOR: lambda: launch_to_ready([python, "-c", STACK_FLOOR]),
        DEPLOYED: lambda: launch_to_ready([str(installed), *SERVE]),
        "serve --adapter threads, as deployed": lambda: launch_to_ready(
            [str(installed), *SERVE, "--adapter", "threads"]),
        "python -c pass, this venv": lambda: launch_to_exit([sys.executable, "-c", "pass"]),
        "execproto serve, this venv": lambda: launch_to_ready([execproto_script(), *SERVE]),
        "python -m execproto serve": lambda: launch_to_ready(
            [sys.executable, "-m", "execproto", *SERVE]),
    }
    if REFERENCE is not None:
        binary = REFERENCE

        def reference() -> float:
            # Not under /tmp: there the reference skips the helpers it makes at start.
            homes = CACHE.parent / "reference-homes"
            homes.mkdir(parents=True, exist_ok=True)
            home = tempfile.mkdtemp(prefix="codex-home-", dir=homes)
            try:
                return launch_to_ready([binary, "exec-server", "--listen", "ws://127.0.0.1:0"],
                                       env={"CODEX_HOME": home})
            finally:
                shutil.rmtree(home, ignore_errors=True)

        found[REFERENCE_NAME] = reference
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="launches per server (default 7)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="execproto-cold-") as scratch:
        measured = subjects(deployed(Path(scratch)))
        for name, measure in measured.items():
            results[name] = figures(name, measure, args.runs)
    ratio = float(results[DEPLOYED]["median_ms"]) / float(results[FLOOR]["median_ms"])
    print(f"\nexecproto serve as deployed: {ratio:.2f}x the stack's floor (medians)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


def side_by_side(runs: int, installed: Path | None = None) -> dict[str, list[float]]:
    """Launch-to-ready ms of the stack's floor, execproto serve as deployed (this checkout, or
    the ``execproto`` script ``installed``) and the reference (when installed), taking turns one
    launch each so that the machine's load falls on all alike; each gets one unmeasured launch
    first. For `bench/compare.py`."""
    with tempfile.TemporaryDirectory(prefix="execproto-cold-") as scratch:
        found = subjects(installed or deployed(Path(scratch)))
        chosen = {name: found[name] for name in (FLOOR, DEPLOYED, REFERENCE_NAME) if name in found}
        for measure in chosen.values():
            measure()
        times: dict[str, list[float]] = {name: [] for name in chosen}
        for _ in range(runs):
            for name, measure in chosen.items():
                times[name].append(measure() * 1000)
    return times


def figures(name: str, measure: Callable[[], float], runs: int) -> dict[str, Any]:
    measure()  # one unmeasured launch: the page cache, not the start, is what it warms
    times = [measure() * 1000 for _ in range(runs)]
    print(f"{name:62} median {statistics.median(times):6.1f} ms  "
          f"(min {min(times):.1f}, max {max(times):.1f}; {runs} runs)", flush=True)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
            "runs_ms": times}


if __name__ == "__main__":
    main()
