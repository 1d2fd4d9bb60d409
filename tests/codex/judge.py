"""What every Codex end-to-end test module shares: one runner per server for the whole test
session (conftest.py starts them), and how a scenario's report is judged."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from reference import REFERENCE

SERVERS = (["reference"] if os.environ.get("EXECPROTO_CODEX_SERVER") == "reference"
           else ["asyncio", "trio", "threads"])
UNSHARE = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]
TESTS = Path(__file__).resolve().parent.parent


def why_no_netns() -> str:
    try:
        tried = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True, timeout=30)
    except OSError as error:
        return f"`unshare` cannot run: {error}"
    if tried.returncode:
        return f"`{' '.join(UNSHARE)}` is not permitted here: {tried.stderr.strip()}"
    return ""


class Runs:
    """One runner per server, all started at once; each report is read when first needed."""

    def __init__(self) -> None:
        assert REFERENCE is not None
        # CODEX_HOME may not be under /tmp, and the sandbox cases need a directory outside it.
        cache = Path.home() / ".cache" / "execproto" / "codex-e2e"
        cache.mkdir(parents=True, exist_ok=True)
        self.base = Path(tempfile.mkdtemp(dir=cache))
        self.runners: dict[str, subprocess.Popen[str]] = {}
        for server in SERVERS:
            (self.base / server).mkdir()
            self.runners[server] = subprocess.Popen(
                [*UNSHARE, "--", sys.executable, "-m", "codex", REFERENCE, server,
                 str(self.base / server)],
                cwd=TESTS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                start_new_session=True)
        self.reports: dict[str, dict[str, dict[str, Any]]] = {}
        self.stderr: dict[str, str] = {}

    def report(self, server: str, scenario: str) -> dict[str, Any]:
        if server not in self.reports:
            runner = self.runners[server]
            try:
                out, self.stderr[server] = runner.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                os.killpg(runner.pid, signal.SIGKILL)
                out, self.stderr[server] = runner.communicate()
            reports = [json.loads(line) for line in out.splitlines()]
            self.reports[server] = {report["name"]: report for report in reports}
        found = self.reports[server].get(scenario)
        assert found is not None, f"no report of {scenario} from the runner: {self.stderr[server]}"
        return found

    def close(self) -> None:
        for runner in self.runners.values():
            if runner.poll() is None:
                os.killpg(runner.pid, signal.SIGKILL)
                runner.communicate()
        shutil.rmtree(self.base, ignore_errors=True)


def facts(runs: Runs, server: str, scenario: str, requests: int) -> dict[str, Any]:
    """A scenario's facts, once it ran as scripted: ``requests`` model requests and nothing
    else asked of the model."""
    report = runs.report(server, scenario)
    logs = "\n".join(f"--- {name}:\n{text}" for name, text in report["logs"].items())
    assert "error" not in report, f"{report['error']}\n{logs}"
    found: dict[str, Any] = report["facts"]
    if "skipped" in found:  # a part it needs is missing here (iproute2, or TLS on the reference)
        pytest.skip(found["skipped"])
    assert found["strays"] == [], found["strays"]
    assert found["requests"] == requests, f"{found['requests']} model requests: {found}\n{logs}"
    return found


def ran(output: str, code: int) -> bool:
    """Whether a tool output says the command ran to ``code``."""
    return f"\nProcess exited with code {code}\n" in output

