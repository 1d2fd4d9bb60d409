"""The http room: ``http/request`` calls in flight (`_http_calls`), the blocking HTTP/1.1 work
behind each (`_http`) and the lookups it can walk away from (`_lookup`).

It gets the loop, ``feed`` and a way to ask whether a connection is blocked; it uses the shared
`_loop` and `_shares`.
"""
