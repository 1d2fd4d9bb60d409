"""``python -m execproto``: the command line, the same as the ``execproto`` script.

Only when run so: importing ``execproto`` never loads the adapters (the core stays pure).
"""

# The core is type-checked alone, without the adapters it is shipped with.
from execproto.adapters._entry import main  # type: ignore[import-not-found]

raise SystemExit(main())
