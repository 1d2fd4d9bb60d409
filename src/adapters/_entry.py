"""Where the ``execproto`` command starts: the console script and ``python -m execproto``.

Importing the command line and what its command needs takes a while (the client for exec, the
backends for serve). A Ctrl-C in that time would raise KeyboardInterrupt in the middle of an
import, and Python would print a traceback. So SIGINT is left to the kernel until the imports
are done: a Ctrl-C then ends the process at once and quietly, killed by SIGINT as a C program
would be (the shell sees 130). Python's own handler is put back before anything else runs;
from then on the command handles Ctrl-C as it says it does.

The start makes many objects (modules, classes, functions) and next to no garbage, so the
cyclic collector's passes over them are put off too (~10 ms of a server's start): `cli` lets
it run again once the command has started, with what the start made frozen out of its passes.

Keep this module tiny, and its imports few and built in: until it runs, a Ctrl-C still meets
Python's handler.
"""

from __future__ import annotations

import gc
import signal
import sys


def main() -> int:
    gc.disable()  # until `cli.started`
    # Only Python's own handler is swapped: SIGINT ignored (nohup, a background job) stays so.
    swapped = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if swapped:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    from . import cli

    cli.load(sys.argv[1:])
    if swapped:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return cli.main()
    except KeyboardInterrupt:  # while the command line is parsed, before the command runs
        return 130
