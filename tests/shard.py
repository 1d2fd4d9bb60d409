"""Split the live suite between parallel pytest runs: ``-p tests.shard --shard K/N``.

The live tests mostly wait on processes, sockets and timeouts, so two runs side by side finish
in about half the time on two cores. Tests are dealt out in turn, one at a time, except that a
module whose fixtures outlive a test (a server or a codex run shared by the module) goes whole
to one shard, so nothing expensive is set up twice; such modules are dealt in turn among
themselves. The deal depends only on the collection order: the same tree always splits the
same way.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--shard", default="1/1", help="run only shard K of N (K/N, from 1)")


def _shared(item: pytest.Item) -> bool:
    """Whether the item uses a fixture of ours set up once for its module or the session
    (pytest's own, like ``tmp_path_factory``, cost nothing to set up again)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        definition.scope in ("module", "package", "session") and definition.baseid
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
    )


def _units(items: list[pytest.Item]) -> list[list[pytest.Item]]:
    """The items in order, one per unit, but a module with shared fixtures as a single unit."""
    units: list[list[pytest.Item]] = []
    grouped: dict[str, list[pytest.Item]] = {}
    shared_modules = {item.nodeid.split("::")[0] for item in items if _shared(item)}
    for item in items:
        module = item.nodeid.split("::")[0]
        if module not in shared_modules:
            units.append([item])
        elif module in grouped:
            grouped[module].append(item)
        else:
            grouped[module] = [item]
            units.append(grouped[module])
    return units


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    which, _, count = config.getoption("--shard").partition("/")
    shard, shards = int(which) - 1, int(count)
    if not 0 <= shard < shards:
        raise pytest.UsageError(f"--shard {which}/{count}: K must be from 1 to N")
    if shards == 1:
        return
    dealt = {True: 0, False: 0}  # modules dealt whole, and single tests
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for unit in _units(items):
        whole = len(unit) > 1 or _shared(unit[0])
        (keep if dealt[whole] % shards == shard else drop).extend(unit)
        dealt[whole] += 1
    items[:] = keep
    config.hook.pytest_deselected(items=drop)
