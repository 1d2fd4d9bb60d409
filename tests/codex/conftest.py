"""The session's Codex runners, shared by every test module here (judge.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .judge import SERVERS, Runs, why_no_netns


@pytest.fixture(scope="session")
def runs() -> Iterator[Runs]:
    why = why_no_netns()
    if why:
        pytest.skip(f"{why}; codex would reach beyond loopback")
    started = Runs()
    yield started
    started.close()


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> str:
    return str(request.param)
