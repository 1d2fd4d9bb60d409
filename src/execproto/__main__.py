"""``python -m execproto``: the command line, the same as the ``execproto`` script.

Only when run so: importing ``execproto`` never loads the adapters (the core stays pure).
"""

from execproto.adapters.cli import main

raise SystemExit(main())
