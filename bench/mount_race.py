"""The rotating-symlink attack on the sandbox's mount points, for longer than `make test` runs it.

A sandboxed command swaps names in a writable root between a file, a dangling symlink and
symlinks to a root-owned victim outside every writable root, while sandboxed processes whose
policy mounts on those names are started one after another (tests/adapters/mount_race.py has
the attack). Modes: the operator's floor with a client's deny rule, and a Codex
workspace-write profile with a deny glob. Reports, per mode, the starts that ran, those whose
setup refused a name that changed under it, the attacker's swaps, and whether the victim is
intact. Run as root, where bubblewrap is installed:

    .venv/bin/python bench/mount_race.py [--seconds 60]

Loopback only. Exits 1 if the victim was touched in any mode.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.adapters.conftest import Server  # noqa: E402
from tests.adapters.mount_race import (  # noqa: E402
    QUIET,
    Arena,
    attack,
    attacker_profile,
    codex_profile,
    floor_profile,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="per mode")
    args = parser.parse_args()
    print("| mode | starts run | setups refused | starts refused | swaps | victim |")
    print("|---|---|---|---|---|---|")
    touched = False
    for mode in ("floor", "codex"):
        arena = Arena()
        try:
            if mode == "floor":
                server = Server("asyncio", *QUIET, "--sandbox", "bwrap", "--writable-root",
                                str(arena.workspace))
                victim, attacker = floor_profile(arena), None
            else:
                server = Server("asyncio", *QUIET)
                victim, attacker = codex_profile(arena), attacker_profile(arena)
            try:
                counts = attack(server, arena, victim, attacker, args.seconds)
            finally:
                server.stop()
            intact = arena.intact()
            touched |= not intact
            print(f"| {mode} | {counts['ran']} | {counts['setup_failed']} | "
                  f"{counts['refused']} | {counts['swaps']} | "
                  f"{'intact' if intact else 'TOUCHED'} |", flush=True)
        finally:
            arena.remove()
    return 1 if touched else 0


if __name__ == "__main__":
    sys.exit(main())
