"""Every method the reference 0.171.0 answers, answered by execproto too, the same way.

The inventory (issue 14) was found by sending every method-like string in the reference binary;
these are the ones it did not answer with -32601. For each, the same params go to both servers
and the answers must match. Cases where execproto differs on purpose (docs/protocol.md: names
that are not UTF-8, readDirectory's order, the cap on watched paths) are left out.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from reference import REFERENCE, WHY_MISSING

from .test_reference import answer
from .test_reference import both as both  # the fixture; `x as x` marks a re-export
from .wsclient import Client

pytestmark = pytest.mark.skipif(REFERENCE is None, reason=WHY_MISSING)

ANSWERED = [
    "initialize", "environment/info", "environment/status", "environmentConfig/read",
    "capabilities/discoverV2", "capabilityRoots/discoverV1", "process/start", "process/read",
    "process/write", "process/signal", "process/terminate", "fs/readFile", "fs/writeFile",
    "fs/createDirectory", "fs/getMetadata", "fs/canonicalize", "fs/readDirectory", "fs/walk",
    "fs/remove", "fs/copy", "fs/open", "fs/readBlock", "fs/writeBlock", "fs/close",
    "fs/watchMissing", "http/request",
]


def same(both: Any, scenario: Callable[[Client], Any]) -> None:
    reference, ours = both
    assert scenario(ours()) == scenario(reference())


def test_every_answered_method_is_answered_alike_for_empty_params(both: Any) -> None:
    def scenario(c: Client) -> list[Any]:
        replies = []
        for method in ANSWERED[1:]:
            reply = answer(c.call(method, {}))
            if method == "environment/info":  # the host's facts differ; the fields may not
                reply = list(reply["result"]) + list(reply["result"]["capabilities"])
            replies.append((method, reply))
        return replies

    same(both, scenario)


def test_no_method_of_the_inventory_is_unknown(both: Any) -> None:
    _, ours = both
    c = ours()
    for method in ANSWERED:
        reply = c.call(method, {})
        assert reply.get("error", {}).get("code") != -32601, (method, reply)


def _tree() -> str:
    # Not under /tmp's top for the reference's sake; names all UTF-8 and URI-plain.
    root = tempfile.mkdtemp(prefix="inventory-")
    for d in ("b", "d1/d2", ".hdir", "empty"):
        os.makedirs(os.path.join(root, d))
    for f in ("a.txt", "b/Bb", "b/_c", "b/aa", "d1/f1.txt", "d1/d2/f2.txt", ".hdir/h.txt",
              ".hidden_file"):
        with open(os.path.join(root, f), "w") as out:
            out.write("x")
    os.mkfifo(os.path.join(root, "fifo"))
    os.symlink("d1", os.path.join(root, "link_dir"))
    os.symlink("a.txt", os.path.join(root, "link_file"))
    os.symlink("nowhere", os.path.join(root, "broken"))
    os.symlink(".", os.path.join(root, "loop"))
    return root


def test_walks_match(both: Any) -> None:
    root = _tree()
    base = "file://" + root
    options = {"maxDepth": 64, "maxDirectories": 100, "maxEntries": 100,
               "followDirectorySymlinks": False}
    cases: list[Any] = [{"path": base, "options": options}]
    cases += [{"path": base, "options": {**options, "maxEntries": n}}
              for n in (1, 6, 9, 10, 11, 13)]
    cases += [{"path": base, "options": {**options, "maxDirectories": n}} for n in (1, 2, 5)]
    cases += [{"path": base, "options": {**options, "maxDepth": n}} for n in (0, 1)]
    cases += [
        {"path": base, "options": {**options, "followDirectorySymlinks": True}},
        {"path": base, "options": {**options, "pruneHiddenDirectories": True}},
        {"path": base, "options": [1, 2, 3, True, True]},
        {"path": base + "/./d1/..", "options": options},
        {"path": base + "/a.txt", "options": options},
        {"path": base + "/link_dir", "options": options},
        {"path": base + "/missing", "options": options},
        {"path": base + "/a.txt/x", "options": options},
        {"path": base, "options": {**options, "maxDepth": 65}},
        {"path": base, "options": {**options, "maxEntries": 0}},
        {"path": base, "options": {**options, "maxDepth": None}},
        {"path": base, "options": [1, 2, 3]},
        {"path": "file://otherhost/tmp", "options": options},
    ]

    def scenario(c: Client) -> list[Any]:
        return [answer(c.call("fs/walk", params)) for params in cases]

    same(both, scenario)


def test_open_modes_and_write_blocks_match(both: Any) -> None:
    directory = tempfile.mkdtemp(prefix="inventory-wb-")

    def scenario(c: Client) -> list[Any]:
        target = f"file://{directory}/f-{len(os.listdir(directory))}"
        calls: list[tuple[str, Any]] = [
            ("fs/open", {"handleId": "e", "path": target, "mode": mode})
            for mode in ("bogus", 1, None, ["read"], {}, {"replace": {}})
        ]
        calls += [
            ("fs/open", {"handleId": "w", "path": target, "mode": "replace"}),
            ("fs/writeBlock", {"handleId": "w", "offset": 0, "chunk": ""}),
            ("fs/writeBlock", {"handleId": "nope", "offset": 0, "chunk": "YQ=="}),
            ("fs/writeBlock", {"handleId": "w", "offset": 2**63 - 1, "chunk": "YQ=="}),
            ("fs/writeBlock", {"handleId": "w", "offset": 0, "chunk": "!"}),
            ("fs/writeBlock", {"handleId": "w", "offset": -1, "chunk": "YQ=="}),
            ("fs/writeBlock", {"handleId": "w", "offset": 0, "chunk": "aGVsbG8="}),
            ("fs/readBlock", {"handleId": "w", "offset": 0, "len": 1}),
            ("fs/close", {"handleId": "w"}),
            ("fs/open", {"handleId": "r", "path": target, "mode": {"read": None}}),
            ("fs/readBlock", {"handleId": "r", "offset": 0, "len": 10}),
            ("fs/writeBlock", {"handleId": "r", "offset": 0, "chunk": "YQ=="}),
            ("fs/open", {"handleId": "d", "path": f"file://{directory}", "mode": "replace"}),
        ]
        return [answer(c.call(method, params)) for method, params in calls]

    same(both, scenario)


def test_watch_status_and_config_errors_match(both: Any) -> None:
    directory = tempfile.mkdtemp(prefix="inventory-wm-")
    w = f"file://{directory}/"
    os.mkdir(directory + "/exists")
    calls: list[tuple[str, Any]] = [
        ("environment/status", None), ("environment/status", {"x": 1}),
        ("environment/status", []), ("environment/info", {"x": 1}),
        ("fs/watchMissing", {"watchId": "w1", "missing": []}),
        ("fs/watchMissing", {"watchId": 1, "missing": "x"}),
        ("fs/watchMissing", {"watchId": 1, "missing": [1]}),
        ("fs/watchMissing", [1, [w + "a"]]),
        ("fs/watchMissing", [1, [], None]),
        ("fs/watchMissing", {"watchId": 1, "missing": [w + "exists"]}),
        ("fs/watchMissing", {"watchId": 1, "missing": [w + "a"], "present": w + "none"}),
        ("fs/watchMissing", {"watchId": 1, "missing": [], "present": w + "exists"}),
        ("fs/watchMissing", {"watchId": 1, "missing": [w + "a"], "present": w + "exists"}),
        ("fs/watchMissing", {"watchId": 1, "missing": []}),
        ("environmentConfig/read", {"cwd": w, "configPaths": []}),
        ("environmentConfig/read", {"cwd": w, "configPaths": [], "requirementsPaths": []}),
        ("environmentConfig/read", {"cwd": w, "configPaths": [[]], "requirementsPaths": []}),
        ("environmentConfig/read", {"cwd": w, "configPaths": ["a"], "requirementsPaths": []}),
        ("environmentConfig/read", {"cwd": "/tmp", "configPaths": [["a"]],
                                    "requirementsPaths": []}),
        ("capabilities/discoverV2", []),
        ("capabilities/discoverV2", None),
        ("capabilityRoots/discoverV1", {"roots": []}),
        ("capabilityRoots/discoverV1", {"roots": [{"id": "r"}]}),
        ("capabilityRoots/discoverV1", {"roots": [{"id": 1, "path": "file:///x"}]}),
    ]

    def scenario(c: Client) -> list[Any]:
        return [answer(c.call(method, params)) for method, params in calls]

    same(both, scenario)


def test_discovery_of_a_project_root_matches(both: Any) -> None:
    root = tempfile.mkdtemp(prefix="inventory-skills-")
    for where in (".agents/skills/a", ".codex/skills/b", "direct", "deep/er/c", "skills/d"):
        os.makedirs(os.path.join(root, where))
        with open(os.path.join(root, where, "SKILL.md"), "w") as out:
            out.write(f"---\nname: {os.path.basename(where)}\ndescription: d\n---\nbody\n")

    def scenario(c: Client) -> Any:
        return answer(c.call("capabilityRoots/discoverV1", {"roots": [
            {"id": "p", "path": "file://" + root}, {"id": "n", "path": "file://" + root + "/no"}]}))

    same(both, scenario)
