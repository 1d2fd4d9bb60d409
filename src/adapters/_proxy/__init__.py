"""The managed network proxy's listeners: an HTTP proxy and a SOCKS5 one per process, served on
the `Loop` alone, so every adapter runs them the same way.

The room decides nothing. Before any connection leaves it resolves the name (`_lookups`), asks
the core through ``ask`` and acts on the answer (`ProxyRoom.answer`), connecting only to the
addresses it resolved. `_room`: the listeners, accepted under per-process and total caps;
`_hub`: what every connection shares (the limits, the questions, the lookups, the dials, the
count of buffered bytes); `_side` and `_relay`: one socket's bounded queue and two of them
moved both ways; `_http_proxy` (with h11) and `_socks` (a small sans-I/O SOCKS5 parser) for the
clients; `_udp`: UDP ASSOCIATE. It imports no other room, only the shared `_loop`.
"""

from ._hub import Limits
from ._question import Question
from ._room import ProxyRoom

__all__ = ["Limits", "ProxyRoom", "Question"]
