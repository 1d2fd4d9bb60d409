"""``python -m execproto.adapters``: the same command line as ``execproto``, through the same
entry (a Ctrl-C while it starts ends it quietly)."""

from ._entry import main

raise SystemExit(main())
