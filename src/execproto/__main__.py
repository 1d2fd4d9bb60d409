"""``python -m execproto``: the command line, the same as the ``execproto`` script.

Only when run so: importing ``execproto`` never loads the adapters (the core stays pure).
"""

import sys

# `python -m` puts the current directory first on sys.path (unless -P or -I, safe_path): a
# module planted there (a json.py in a directory a sandbox may write) would be imported by the
# command line, as the server. Off before anything else is imported (by its place: `os`, to
# name it, is no module of the core's); what Python imported before this is beyond reach
# (`python -P -m execproto`, or the `execproto` script, puts it on no path at all).
if not sys.flags.safe_path and sys.path:
    del sys.path[0]

# The core is type-checked alone, without the adapters it is shipped with.
from execproto.adapters._entry import main  # type: ignore[import-not-found]  # noqa: E402

raise SystemExit(main())
