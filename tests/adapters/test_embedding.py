"""The embedding examples of docs/embedding.md and the client example of docs/client.md, run as
written: each must really serve, then stop cleanly."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Server, start
from .wsclient import Client, output_of

DOCS = Path(__file__).resolve().parents[2] / "docs"
EXAMPLES = dict(
    re.findall(r"<!-- embed: (\w+) -->\n```python\n(.*?)```", (DOCS / "embedding.md").read_text(),
               re.DOTALL)
)


def test_every_adapter_has_an_example() -> None:
    assert sorted(EXAMPLES) == ["asyncio", "threads", "trio"]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_example_serves_and_stops(name: str) -> None:
    example = subprocess.Popen(
        [sys.executable, "-c", EXAMPLES[name]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert example.stdout is not None
    url = example.stdout.readline().strip()
    assert url.startswith("ws://127.0.0.1:"), example.communicate(timeout=20)
    client = Client(url)
    assert "result" in client.handshake()
    start(client, "hello", ["echo", "hello from " + name])
    assert output_of(client.events_until_closed("hello")) == {
        "stdout": f"hello from {name}\n".encode()}
    client.close()
    _, err = example.communicate(timeout=30)
    assert example.returncode == 0, err
    assert "Traceback" not in err


CLIENT_EXAMPLE = re.findall(r"<!-- client: example -->\n```python\n(.*?)```",
                            (DOCS / "client.md").read_text(), re.DOTALL)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_client_example_runs_as_written(backend: str) -> None:
    (example,) = CLIENT_EXAMPLE
    assert 'connect("ws://127.0.0.1:8765")' in example
    server = Server("asyncio")
    try:
        code = example.replace("ws://127.0.0.1:8765", server.url)
        code = code.replace("anyio.run(main)", f"anyio.run(main, backend={backend!r})")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        hostname = Path("/etc/hostname").read_bytes()
        assert done.stdout == (
            f"stdout b'hello\\n'\nstderr b'oops\\n'\nexit code 3\n{hostname!r}\n"
        )
    finally:
        server.stop()


def test_an_embedded_server_leaves_nothing_scheduled_in_the_host_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After `serve` returns, the host's loop goes on: nothing of the server may keep waking it
    (the driver's periodic heap trim, say)."""
    import asyncio

    from execproto.adapters._serving import _driver
    from execproto.adapters.asyncio import serve

    # The driver reads the interval each time it schedules a trim: a short one, so that the
    # wait below for a trim scheduled before the stop is short too.
    monkeypatch.setattr(_driver, "TRIM_INTERVAL", 0.2)
    TRIM_INTERVAL = _driver.TRIM_INTERVAL

    async def main() -> list[str]:
        stop = asyncio.Event()
        server = asyncio.create_task(serve("ws://127.0.0.1:0", stop=stop))
        await asyncio.sleep(0.2)
        stop.set()
        await server
        await asyncio.sleep(TRIM_INTERVAL + 0.5)  # any trim scheduled before the stop has fired
        pending = asyncio.get_running_loop()._scheduled  # type: ignore[attr-defined]
        return [repr(h) for h in pending if not h.cancelled()]

    assert asyncio.run(main()) == []
