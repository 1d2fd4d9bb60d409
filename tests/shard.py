"""Split the live suite between parallel pytest runs: ``-p tests.shard --shard K/N``.

The live tests mostly wait on processes, sockets and timeouts, so two runs side by side finish
in about half the time on two cores. Tests are dealt out in turn, one at a time, except that a
module whose fixtures outlive a test (a server or a codex run shared by the module) goes whole
to one shard, so nothing expensive is set up twice (and modules sharing a session fixture of
a conftest go together: the Codex runs of tests/codex); such units are dealt in turn among
themselves. The deal depends only on the collection order: the same tree always splits the
same way.
"""

from __future__ import annotations

import pytest


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
