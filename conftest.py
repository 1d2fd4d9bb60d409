"""Hypothesis draws the same examples on every run of `make test`, so a failure in CI fails
again on every rerun and a pass means the same thing each time. `make fuzz-long` and
`make fuzz-live` explore afresh (EXECPROTO_FUZZ_RANDOM=1), as does a rerun of one failed fuzz
batch by its seed (EXECPROTO_FUZZ_SEED), which a fixed derandomization would override."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("exploring", derandomize=False)
exploring = os.environ.get("EXECPROTO_FUZZ_RANDOM") or os.environ.get("EXECPROTO_FUZZ_SEED")
settings.load_profile("exploring" if exploring else "repeatable")
