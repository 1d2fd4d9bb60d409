"""`python -m codex CODEX SERVER BASE [SCENARIO...]`: every scenario, runner.py's and those of
each `scenarios_*.py` here (a dict `SCENARIOS` in each), played by runner.main."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from . import runner

scenarios = dict(runner.SCENARIOS)
for path in sorted(Path(__file__).parent.glob("scenarios_*.py")):
    module = importlib.import_module(f"codex.{path.stem}")
    clashes = scenarios.keys() & module.SCENARIOS.keys()
    assert not clashes, f"{path.name} names scenarios runner already has: {sorted(clashes)}"
    scenarios.update(module.SCENARIOS)
runner.main(scenarios, *sys.argv[1:])
