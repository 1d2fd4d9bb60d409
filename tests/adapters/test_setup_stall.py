"""Setting a sandbox up never stalls the other clients: it runs off the owner, within a budget.

A client pipelines starts whose deny patterns make each setup look at close to the per-start
budget of directory entries (`_glob.MAX_VISITS`); meanwhile another client's fs calls are
answered at once. Past the budget a start is refused, saying so, before more work is done.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from execproto.adapters._processes import _glob

from .conftest import Server, uri
from .sandboxes import _special, needs_bwrap, profile

pytestmark = needs_bwrap

STARTS = 20
PROBE_LIMIT = 1.0  # seconds; each of these setups costs ~0.1 s, the pipeline about 2 s


def _denying(workspace: Path, count: int) -> dict[str, Any]:
    entries = [_special("root", "read")] + [
        {"path": {"type": "glob_pattern", "pattern": f"**/x{i}*.env"}, "access": "deny"}
        for i in range(count)]
    return profile(str(workspace), entries)


def _start(process_id: str, workspace: Path, sandbox: dict[str, Any]) -> dict[str, Any]:
    return {"processId": process_id, "argv": ["true"], "cwd": uri(workspace),
            "env": {"PATH": "/usr/bin:/bin"}, "tty": False, "sandbox": sandbox}


def test_costly_setups_leave_other_clients_answered(adapter: str, tmp_path: Path) -> None:
    for i in range(190):
        (tmp_path / f"f{i}").touch()
    # Each pattern looks at the directory twice (`**` as zero directories, then each child):
    # 380 entries; 120 of them come close to the budget, as an attacker would.
    per_pattern = 2 * 190
    count = _glob.MAX_VISITS // per_pattern - 10
    server = Server(adapter, "--log-level", "warning")
    try:
        attacker, other = server.client(), server.client()
        ids = [attacker.request("process/start", _start(f"a{i}", tmp_path,
                                                        _denying(tmp_path, count)))
               for i in range(STARTS)]
        worst = 0.0
        for _ in range(20):
            began = time.monotonic()
            assert other.result("fs/getMetadata", {"path": uri("/tmp")})["isDirectory"]
            worst = max(worst, time.monotonic() - began)
        assert worst < PROBE_LIMIT, worst
        for msg_id in ids:
            reply = attacker.response(msg_id, timeout=60)
            assert reply["result"]["sandboxType"] == "linuxSeccomp", reply
        too_many = attacker.call("process/start", _start("b", tmp_path,
                                                         _denying(tmp_path, count + 20)))
        assert too_many["error"]["code"] == -32602
        assert f"looks at over {_glob.MAX_VISITS} directory entries" in too_many["error"][
            "message"]
    finally:
        log = server.stop()
    assert "Traceback" not in log, log
