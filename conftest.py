"""Hypothesis draws the same examples on every run of `make test`, so a failure in CI fails
again on every rerun and a pass means the same thing each time. `make fuzz-long` and
`make fuzz-live` explore afresh (EXECPROTO_FUZZ_RANDOM=1), as does a rerun of one failed fuzz
batch by its seed (EXECPROTO_FUZZ_SEED), which a fixed derandomization would override.

Skipped tests are summed up at the end, one line per reason ("12 skipped: pasta (Debian's
passt) is not installed"): on a machine without a part, what was not tested, and why, is said
where it is seen.

No example has a deadline: the checks run under coverage beside both halves of the live suite
on two cores, where a pause of the process says nothing of the code (Hypothesis' 200 ms of
wall-clock per example failed them as DeadlineExceeded or "unreliable test timings"). What
must be fast is measured by `bench/`, or bounded by a test of its own."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, database=None, deadline=None)
settings.register_profile("exploring", derandomize=False, deadline=None)
exploring = os.environ.get("EXECPROTO_FUZZ_RANDOM") or os.environ.get("EXECPROTO_FUZZ_SEED")
settings.load_profile("exploring" if exploring else "repeatable")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    reasons: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    for reason, count in sorted(reasons.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{count} skipped: {reason}")

