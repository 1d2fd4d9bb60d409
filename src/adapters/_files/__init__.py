"""The files room: ``fs/*`` calls and the executor's own reads, confined by descriptor
(`_beneath`), run on worker threads (`_fs_calls`), and the watches behind ``fs/watchMissing``.

It gets the loop and ``feed``; beyond the shared `_loop` and `_shares` it uses only
`_processes._posix` (how an OS error is worded).
"""
