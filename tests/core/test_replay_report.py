"""What replay reports: the first divergence as a readable diff, and a trace cut off mid-line."""

from __future__ import annotations

import base64
import json

import pytest

from execproto import ReplayResult, replay
from execproto._trace import readable

from .test_trace import scripted_session, steps, with_step


def first_step_with(lines: list[str], kind: str) -> int:
    return next(i for i, s in enumerate(steps(lines), start=1)
                if any(a["$type"] == kind for a in s.get("actions", [])))


def test_a_divergence_is_a_unified_diff_of_one_action_a_line() -> None:
    h = scripted_session()
    index = first_step_with(h.lines, "Send")
    step = json.loads(h.lines[index])
    send = next(a for a in step["actions"] if a["$type"] == "Send")
    recorded = base64.b64decode(send["data"]["$bytes"])
    send["data"] = {"$bytes": base64.b64encode(b'{"tampered":true}').decode()}
    result = replay(with_step(h.lines, index, step))
    assert not result.ok and result.step == index
    assert result.event == json.loads(h.lines[index])["event"]
    diff = result.diff()
    assert diff[:2] == ["--- recorded", "+++ replayed"]
    assert f"-Send(conn={send['conn']}, data=b'{{\"tampered\":true}}')" in diff
    # The replayed answer reads as its JSON text, not as base64.
    assert f"+Send(conn={send['conn']}, data={recorded!r})" in diff
    changed = [line for line in diff[2:] if line[:1] in "+-" and not line.startswith("@@")]
    assert len(changed) == 2, diff  # only the one action that differs


def test_a_dropped_action_shows_as_one_removed_line_among_its_context() -> None:
    h = scripted_session()
    index = next(i for i, s in enumerate(steps(h.lines), start=1)
                 if len(s.get("actions", [])) >= 2)
    step = json.loads(h.lines[index])
    dropped = step["actions"].pop()
    diff = replay(with_step(h.lines, index, step)).diff()
    assert [line for line in diff[2:] if line[:1] in "+-"] == [f"+{readable(dropped)}"]
    assert any(line.startswith(" ") for line in diff), diff  # the actions kept, as context


def test_a_step_that_raised_reads_as_raised() -> None:
    result = ReplayResult(ok=False, steps=1, step=1, expected={"error": "boom"}, actual=[])
    assert result.diff()[2:] == ["@@ -1 +1 @@", "-raised boom", "+(no actions)"]


def test_readable_shows_types_fields_and_bytes() -> None:
    value = {"$type": "Send", "conn": 1, "data": {"$bytes": base64.b64encode(b"hi").decode()},
             "extra": {"a": [1, None, "x"]}}
    assert readable(value) == "Send(conn=1, data=b'hi', extra={\"a\": [1, null, \"x\"]})"


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.99])
def test_a_last_line_cut_short_replays_the_steps_before_it(keep: float) -> None:
    h = scripted_session()
    last = h.lines[-1]
    cut = [*h.lines[:-1], last[:int(len(last) * keep)]]
    assert replay(cut) == ReplayResult(ok=True, steps=len(h.lines) - 2, cut_short=True)


def test_a_cut_line_from_a_file_is_the_one_without_its_newline() -> None:
    h = scripted_session()
    text = "".join(line + "\n" for line in h.lines)
    cut = text[: len(text) - len(h.lines[-1]) // 2]
    result = replay(cut.splitlines(keepends=True))
    assert result.ok and result.cut_short and result.steps == len(h.lines) - 2


def test_a_whole_last_line_that_is_not_json_is_still_an_error() -> None:
    h = scripted_session()
    with pytest.raises(ValueError):
        replay([line + "\n" for line in h.lines[:-1]] + ["{oops\n"])


def test_a_bad_line_before_the_last_is_still_an_error() -> None:
    h = scripted_session()
    lines = list(h.lines)
    lines[3] = lines[3][:20]
    with pytest.raises(ValueError):
        replay(lines)


def test_a_cut_trace_that_diverged_before_the_cut_still_diverges() -> None:
    h = scripted_session()
    index = first_step_with(h.lines, "Send")
    step = json.loads(h.lines[index])
    step["actions"] = []
    lines = with_step(h.lines, index, step)
    result = replay([*lines[:-1], lines[-1][:10]])
    assert not result.ok and result.step == index and not result.cut_short
