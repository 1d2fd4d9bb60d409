"""Shell snapshots (`shellSnapshotV2`): codex with `shell_snapshot_v2` on sends each login
command with a `shellSnapshot` of its thread, and the executor runs the login profile once for
the scope, not once per command.

The executor's HOME (its own environment, `Run.server_env`) has a `.bash_profile` that counts
its runs in a file of the workdir (writable in codex's workspace-write sandbox), exports a
marker that differs per run and defines a function. Two login commands: with snapshots, one
profile run, the same marker, and the function in both.
"""

from __future__ import annotations

from typing import Any

from .fake_model import say, shell
from .runner import Run

# `codex exec --enable shell_snapshot_v2`: the runner's config already has a [features] table,
# which TOML does not let a second piece of text add to.
ENABLE = ("bash", "-c", 'exec "$0" "$1" --enable shell_snapshot_v2 "${@:2}"')
PROFILE = """\
echo ran >> {runs}
export SNAP_MARKER="marker-$$-$RANDOM"
snap_greet() {{ echo "greet-$1"; }}
"""


def profile_once(run: Run) -> dict[str, Any]:
    home = run.root / "server-user"
    home.mkdir()
    runs = run.workdir / "profile-runs"
    (home / ".bash_profile").write_text(PROFILE.format(runs=runs))
    own = run.server_env
    run.server_env = lambda: {**own(), "HOME": str(home)}  # type: ignore[method-assign]
    command = 'echo "marker=$SNAP_MARKER"; snap_greet {}'
    model = run.codex([[shell("one", command.format("one"), login=True)],
                       [shell("two", command.format("two"), login=True)],
                       [say("done")]], prefix=ENABLE)
    return {**run.facts(model),
            "profile_runs": len(runs.read_text().splitlines()) if runs.exists() else 0}


SCENARIOS = {"snapshot_profile_once": profile_once}
