"""``/livez``, ``/readyz`` and ``/metrics``: probes any orchestrator sends, and a real
Prometheus scraping a real server through its bearer token."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import ADAPTERS, Server

TOKEN = "metrics-test-token"


@pytest.fixture(scope="module", params=ADAPTERS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    token = tmp_path_factory.mktemp("token") / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    running = Server(str(request.param), "--auth-token-file", str(token),
                     "--log-level", "warning")
    try:
        yield running
    finally:
        running.stop()


def http(server: Server, path: str, token: str | None = None) -> tuple[int, str, str]:
    url = server.url.replace("ws://", "http://") + path
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers["content-type"], answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.headers["content-type"], refused.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_probes_answer_without_a_token(server: Server) -> None:
    assert http(server, "/livez")[0] == 200
    assert http(server, "/readyz")[0] == 200


def test_metrics_are_behind_the_token(server: Server) -> None:
    assert http(server, "/metrics")[0] == 401
    assert http(server, "/metrics", "wrong")[0] == 401


def test_metrics_count_what_the_server_did(server: Server) -> None:
    client = server.client(headers=[("Authorization", f"Bearer {TOKEN}")])
    try:
        params = {"processId": "m", "argv": ["echo", "counted"], "cwd": "file:///tmp",
                  "env": {}, "tty": False}
        assert "result" in client.call("process/start", params)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # bounded: echo closes at once
            reply = client.call("process/read", {"processId": "m", "afterSeq": 0,
                                                  "waitMs": 1000})
            if reply["result"]["closed"]:
                break
        status, kind, text = http(server, "/metrics", TOKEN)
    finally:
        client.close()
    assert status == 200 and kind.startswith("text/plain; version=0.0.4")
    found = samples(text)
    assert found[("exec_server_requests_total",
                  (("method", "process/start"), ("result", "ok")))] >= 1
    assert found[("exec_server_processes_started_total", ())] >= 1
    assert found[("exec_server_processes_finished_total", (("result", "success"),))] >= 1
    assert found[("exec_server_output_bytes_total", ())] >= len("counted\n")
    assert found[("exec_server_connections_active", ())] >= 1
    assert found[("exec_server_request_duration_seconds_count",
                  (("method", "process/start"),))] >= 1


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="prometheus is not installed (make test installs Debian's, as root)")
def test_a_real_prometheus_scrapes_the_server_through_its_token(
    server: Server, tmp_path: Path
) -> None:
    if "asyncio" not in server.process.args:
        pytest.skip("the metrics are the core's; one adapter's scrape shows Prometheus takes them")
    token = tmp_path / "token"
    token.write_text(TOKEN)
    # A connection of this test's, which the scrape must count.
    server.client(headers=[("Authorization", f"Bearer {TOKEN}")]).close()
    target = urllib.parse.urlsplit(server.url).netloc
    (tmp_path / "prometheus.yml").write_text(json.dumps({  # YAML is a superset of JSON
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{
            "job_name": "execproto", "metrics_path": "/metrics",
            "authorization": {"type": "Bearer", "credentials_file": str(token)},
            "static_configs": [{"targets": [target]}],
        }],
    }))

    def launch() -> tuple[subprocess.Popen[str], int]:
        port = free_port()
        return subprocess.Popen(
            ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), port

    prometheus, port = launch()
    tries = 1
    try:
        query = urllib.parse.urlencode({"query": 'up{job="execproto"}'})
        value = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and value != "1":  # bounded: a scrape a second
            time.sleep(0.5)
            # The port was free when probed, not when Prometheus bound it: the other shard's
            # servers bind ports of the same range meanwhile. Another then (3 tries in all).
            if (prometheus.poll() is not None and tries < 3
                    and "address already in use" in prometheus.communicate()[1]):
                prometheus, port = launch()
                tries += 1
                continue
            try:
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/api/v1/query?{query}", timeout=5) as answer:
                    result = json.load(answer)["data"]["result"]
            except (urllib.error.URLError, ConnectionError):
                continue  # not listening yet
            value = result[0]["value"][1] if result else None
        assert value == "1", "Prometheus never scraped the server"
        query = urllib.parse.urlencode({"query": "exec_server_connections_total"})
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{query}",
                                    timeout=5) as answer:
            result = json.load(answer)["data"]["result"]
        assert result and float(result[0]["value"][1]) >= 1  # this test's connection, at least
    finally:
        prometheus.terminate()
        try:
            prometheus.wait(10)
        except subprocess.TimeoutExpired:
            prometheus.kill()
            prometheus.wait()
