"""``python -m execproto.adapters``: the same command line as ``execproto``, through the same
entry (a Ctrl-C while it starts ends it quietly)."""

import os
import sys

# Off the path before anything is imported: see execproto/__main__.py.
sys.path[:] = [entry for entry in sys.path if entry not in ("", os.getcwd())]

from ._entry import main  # noqa: E402

raise SystemExit(main())
