"""How the server's file descriptors are shared out, so that no one use can take them all.

A process holds descriptors for as long as it is not finalized, an open fs handle until it is
closed, a connection until it ends. When the server runs out, nothing can be accepted, spawned
or opened, for any client. So the descriptor limit (``RLIMIT_NOFILE``, which the adapter reads
into `Host.descriptor_limit`) is divided up front:

    RESERVED                          the server's own: its listener and event loop, spawns and
                                      fs calls in flight, the http pool's sockets, logs
    max_connections + max_upgrading   connections (both capped elsewhere)
    the rest                          processes (PER_PROCESS each) and open fs handles (one each)

A limit too low for that (below 768 with the default caps) is shared out the same way
at a smaller scale: a quarter of it at most reserved, half of the rest at most for connections.
Then the connections' caps no longer keep them within their share, but processes and fs handles
still cannot take what is left for the server and its connections.

A start or an `fs/open` that would take the last share past its size is refused, naming the
limit; a new connection past ``max_connections`` is closed at once. So a client that starts
sleeps until refused still leaves room for another client to connect, read a file, and run.
"""

from __future__ import annotations

from ._config import Config

# pidfd, stdin, stdout, stderr (a terminal needs fewer: its master and the pidfd).
PER_PROCESS = 4
# Enough for the listener, the loop's own, a spawn's pipes and sandbox setup, every http worker's
# socket and every fs call the workers run at once, with room to spare.
RESERVED = 128


def budget(config: Config, limit: int | None) -> int | None:
    """Descriptors processes and open fs handles may hold together; None when unbounded."""
    if limit is None:
        return None
    rest = limit - min(RESERVED, limit // 4)
    return rest - min(config.max_connections + config.max_upgrading, rest // 2)


def refusal(limit: int, budget: int) -> str:
    return (
        f"out of file descriptors: this server may hold {budget} of its {limit} for processes "
        "and open files (the rest are kept for connections and the server itself); "
        "wait for some to close"
    )
