"""The owner of the core: the driver (the event queue, the table from action to room, the
timer, the stop, the core's failure) and what every adapter's ``serve`` shares.

It may use every room below it (`_wire`, `_processes`, `_files`, `_http`), `backends`, and the
shared `_loop`, `_shares` and `_system`; no room imports it, not even for types: only the
adapters and `cli` do.
"""
