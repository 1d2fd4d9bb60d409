"""Capability discovery under the sandbox the client sends: each `capabilityRoots/discoverV1`
root under its own, `capabilities/discoverV2` under the request's, each narrowed by the
server's floor as an fs call's is (the adapter scans through them)."""

from __future__ import annotations

from typing import Any

from execproto import RunFs
from execproto.fs import DiscoverRoots, DiscoverSkills

from .harness import Harness


def sandbox(*entries: tuple[str, str]) -> dict[str, Any]:
    return {"permissions": {"type": "managed", "network": "restricted",
                            "file_system": {"type": "restricted", "entries": [
                                {"path": {"type": "special", "value": {"kind": "root"}},
                                 "access": "read"},
                                *({"path": {"type": "path", "path": f"file://{path}"},
                                   "access": access} for path, access in entries)]}},
            "cwd": "file:///w", "windowsSandboxLevel": "disabled"}


def test_each_root_is_scanned_under_its_own_sandbox(h: Harness) -> None:
    h.request(1, "capabilityRoots/discoverV1", {"roots": [
        {"id": "a", "path": "file:///r/a", "sandbox": sandbox(("/r/a/secret", "none"))},
        {"id": "b", "path": "file:///r/b"},
    ]})
    [run] = h.of_type(RunFs)
    assert isinstance(run.request, DiscoverRoots)
    first, second = run.request.roots
    assert first.sandbox is not None
    assert first.sandbox.access("/r/a/secret") == "none"
    assert first.sandbox.access("/r/a/skills") == "read"
    assert second.sandbox is None  # no floor: the server's own view


def test_discover_v2_carries_its_sandbox_as_an_fs_call_does(h: Harness) -> None:
    h.request(1, "capabilities/discoverV2", {"cwd": "file:///w",
                                             "sandbox": sandbox(("/home/skills", "none"))})
    [run] = h.of_type(RunFs)
    assert run.request == DiscoverSkills(cwd="/w", sandbox=run.request.sandbox)
    assert run.request.sandbox is not None
    assert run.request.sandbox.access("/home/skills/x") == "none"


def test_a_malformed_root_sandbox_names_what_is_wrong(h: Harness) -> None:
    reply = h.call(1, "capabilityRoots/discoverV1", {"roots": [
        {"id": "a", "path": "file:///r/a", "sandbox": {"permissions": 1}}]})
    assert reply["error"]["code"] == -32602, reply


def test_discover_v2_s_sandbox_must_name_its_cwd(h: Harness) -> None:
    without = sandbox()
    del without["cwd"]
    reply = h.call(1, "capabilities/discoverV2", {"cwd": "file:///w", "sandbox": without})
    assert reply["error"] == {"code": -32602, "message": "missing field `cwd`"}
    # A root's may leave it out (a dynamic entry then needs it, as an fs call's does).
    h.request(1, "capabilityRoots/discoverV1", {"roots": [
        {"id": "a", "path": "file:///r/a", "sandbox": without}]})
    assert h.of_type(RunFs)
