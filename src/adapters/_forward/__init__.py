"""The forward room: the TCP streams of ``forward/open`` (`_streams`), each connected from a
socket of its session's network (the backend's ``session_socket``) or, where the core allows
it, of the server host's own, and the ports the server's process listens on (`_ports`), which
the core keeps such a stream from.

It gets the loop, ``feed`` and the backend, and uses the shared `_loop` and `backends` (whose
`NoNetwork` a session without a network of its own raises); it decides nothing of
where a stream may go (the core does) and only connects and moves bytes.
"""
