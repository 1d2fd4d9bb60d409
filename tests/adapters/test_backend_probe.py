"""`LocalBackend`'s probe of bubblewrap: none at construction (a server's start does not wait for
it), run once, where its answer is first needed or on a thread of its own once asked; a probe
that fails means no sandbox, not a failed server."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from execproto.adapters import backends
from execproto.adapters._processes import _bwrap, _posix


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each probe run, by the thread that ran it; bubblewrap found, and working."""
    runs: list[str] = []

    def problem(bwrap: str) -> str | None:
        runs.append(threading.current_thread().name)
        return None

    monkeypatch.setattr(_posix, "real_program", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(_bwrap, "problem", problem)
    return runs


def test_nothing_is_probed_until_the_answer_is_needed_and_then_once(probes: list[str]) -> None:
    backend = backends.LocalBackend(pasta=None)
    assert probes == []
    assert backend.sandbox_type == "linuxSeccomp"
    assert backend.network_proxy and backend.problem is None
    assert probes == [threading.current_thread().name]  # here, once


def test_a_started_probe_calls_back_once_its_answer_is_in(probes: list[str]) -> None:
    backend = backends.LocalBackend(pasta=None)
    told: list[Any] = []
    done = threading.Event()
    backend.when_probed(lambda: (told.append(backend.describe()), done.set()))
    assert told == []  # asking to be told starts nothing
    backend.probe()
    backend.probe()  # once is enough
    assert done.wait(10)
    assert probes == ["execproto-bwrap-probe"]
    assert told[0].startswith("bubblewrap (/usr/bin/bwrap)"), told
    backend.when_probed(lambda: told.append("at once"))
    assert told[1:] == ["at once"]
    assert backend.sandbox_type == "linuxSeccomp" and len(probes) == 1


def test_a_probe_that_raises_means_no_sandbox(monkeypatch: pytest.MonkeyPatch,
                                               probes: list[str]) -> None:
    def broken(bwrap: str) -> str | None:
        raise RuntimeError("the host's own way of failing")

    monkeypatch.setattr(_bwrap, "problem", broken)
    backend = backends.LocalBackend(pasta=None)
    assert backend.sandbox_type == "none" and not backend.network_proxy
    assert "the host's own way of failing" in (backend.problem or "")
    assert "no sandbox can be enforced here" in backend.warnings()[0]


def test_without_bubblewrap_the_answer_is_in_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_posix, "real_program", lambda name: None)
    backend = backends.LocalBackend(pasta=None)
    told: list[str] = []
    backend.when_probed(lambda: told.append(backend.problem or ""))
    assert told == ["bubblewrap (bwrap) is not installed"]
    # The operator's start-up line says what happens, and nothing it contradicts (it said
    # "none can be enforced; only the processes that ask for one are sandboxed").
    assert backend.describe() == ("none can be enforced: a process that asks for one is "
                                  "refused, the others run unsandboxed")
