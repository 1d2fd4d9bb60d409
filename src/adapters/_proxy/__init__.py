"""The managed network proxy's listeners: an HTTP proxy and a SOCKS5 one per process, served on
the `Loop` alone, so every adapter runs them the same way.

The room decides nothing. Before any connection leaves it resolves the name (`_lookups`), asks
the core through ``ask(proc, question_id, question)`` and acts on `ProxyRoom.answer`,
connecting (`_dial`) only to the addresses it resolved and asked about. `_room`: the
listeners, accepted under per-process and total caps; `_hub`: what every connection shares
(the `Limits`, the questions, the lookups, the count of buffered bytes, the open connections by
process); `_side` and `_relay`: one socket's bounded queue, and two of them moved both ways;
`_http_proxy` (with h11) and `_socks` (over `_socks_wire`, SOCKS5's bytes, sans-I/O) for the
clients; `_udp`: UDP ASSOCIATE; with transparent TCP, `_transparent` for the connections a
process's namespace redirects to the room and `_dns` (over `_dns_wire`, DNS's bytes, sans-I/O)
for the synthetic addresses that keep their names. It imports no other room, only the shared
`_loop` and the core's `Question`.
"""

from ._hub import Limits
from ._question import Question
from ._room import ProxyRoom

__all__ = ["Limits", "ProxyRoom", "Question"]
