"""Split the live suite between parallel pytest runs: ``-p tests.shard --shard K/N``.

The live tests mostly wait on processes, sockets and timeouts, so two runs side by side finish
in about half the time on two cores. Tests are dealt out by their measured cost (the costliest
first, each to the shard with the least), one at a time, except that a module whose fixtures
outlive a test (a server or a codex run shared by the module) goes whole to one shard, so
nothing expensive is set up twice (and modules sharing a session fixture of a conftest go
together: the Codex runs of tests/codex). The deal depends only on the
collection and the measured costs: the same tree always splits the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# Each module's measured seconds (`measure`; regenerate with `python tests/shard.py LOG...`
# from runs with --durations=0), and the guess for a test of a module not measured yet.
COSTS = Path(__file__).with_name("shard_costs.json")
DEFAULT_COST = 0.3
PHASES = ("setup", "call", "teardown")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--shard", default="1/1", help="run only shard K of N (K/N, from 1)")


def _shared_fixtures(item: pytest.Item) -> list[pytest.FixtureDef[object]]:
    """Our fixtures the item uses that are set up once for its module or the session
    (pytest's own, like ``tmp_path_factory``, cost nothing to set up again)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    return [definition
            for definitions in info.name2fixturedefs.values()
            for definition in definitions
            if definition.scope in ("module", "package", "session") and definition.baseid]


def _shared(item: pytest.Item) -> bool:
    return bool(_shared_fixtures(item))


def _unit_key(item: pytest.Item) -> str:
    """What goes whole to one shard: the item's module, or, for a fixture of the session or
    a package defined in a conftest (the Codex runs every tests/codex module shares), the
    directory that defines it, so that it is set up once."""
    for definition in _shared_fixtures(item):
        if definition.scope in ("package", "session"):
            return definition.baseid
    return item.nodeid.split("::")[0]


def _units(items: list[pytest.Item]) -> list[list[pytest.Item]]:
    """The items in order, one per unit, but those sharing a fixture of theirs as a single
    unit (a module's, or a conftest's session fixture's directory: `_unit_key`)."""
    units: list[list[pytest.Item]] = []
    grouped: dict[str, list[pytest.Item]] = {}
    shared_keys = {_unit_key(item) for item in items if _shared(item)}
    for item in items:
        key = _unit_key(item) if _shared(item) else item.nodeid.split("::")[0]
        if key not in shared_keys:
            units.append([item])
        elif key in grouped:
            grouped[key].append(item)
        else:
            grouped[key] = [item]
            units.append(grouped[key])
    return units


def _costs(items: list[pytest.Item]) -> dict[str, float]:
    """Seconds each item is expected to take: its module's measured seconds (COSTS, from a
    run's ``--durations=0``) shared among its tests, or DEFAULT_COST for a module not measured."""
    measured = json.loads(COSTS.read_text()) if COSTS.exists() else {}
    counts: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        counts[module] = counts.get(module, 0) + 1
    return {item.nodeid: measured[module] / counts[module] if module in measured
            else DEFAULT_COST
            for item in items for module in [item.nodeid.split("::")[0]]}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    which, _, count = config.getoption("--shard").partition("/")
    shard, shards = int(which) - 1, int(count)
    if not 0 <= shard < shards:
        raise pytest.UsageError(f"--shard {which}/{count}: K must be from 1 to N")
    if shards == 1:
        return
    # The costliest unit first, each to the shard with the least so far (ties: the earlier
    # unit, the lower shard): the shards end within about one unit of each other.
    cost = _costs(items)
    units = _units(items)
    order = sorted(range(len(units)), key=lambda i: (-sum(cost[x.nodeid] for x in units[i]), i))
    loads = [0.0] * shards
    mine: set[int] = set()
    for index in order:
        lightest = min(range(shards), key=lambda k: (loads[k], k))
        loads[lightest] += sum(cost[item.nodeid] for item in units[index])
        if lightest == shard:
            mine.add(index)
    keep = [item for index, unit in enumerate(units) if index in mine for item in unit]
    drop = [item for index, unit in enumerate(units) if index not in mine for item in unit]
    items[:] = keep
    config.hook.pytest_deselected(items=drop)


def measure(log: str) -> dict[str, float]:
    """Each module's seconds (setup, call and teardown) from pytest's ``--durations=0`` lines."""
    found: dict[str, float] = {}
    for line in log.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].endswith("s") and parts[1] in PHASES:
            module = parts[2].split("::")[0]
            found[module] = round(found.get(module, 0.0) + float(parts[0][:-1]), 2)
    return dict(sorted(found.items()))


if __name__ == "__main__":
    # python tests/shard.py LOG...: the modules' costs from runs with --durations=0.
    import sys

    costs: dict[str, float] = {}
    for name in sys.argv[1:]:
        with open(name) as file:
            costs.update(measure(file.read()))
    COSTS.write_text(json.dumps(costs, indent=0, sort_keys=True) + "\n")
