"""The connections: bytes in and out of a client, websocket (with TLS) or stdio, as the core's
events; the listener, the bearer token, ``/readyz``, ``/livez`` and ``/metrics``.

A peer reaches the rest of the server only through what it is handed (the loop, ``feed``, the
registry of connections); it imports no other room.
"""
