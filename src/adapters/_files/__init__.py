"""The files room: ``fs/*`` calls and the executor's own reads, confined by descriptor
(`_beneath`), run on worker threads (`_fs_calls`), and the watches behind ``fs/watchMissing``.

It gets the loop and ``feed``; it uses only the shared `_loop`, `_shares` and `_system` (how an
OS error is worded, a link read).
"""
