"""The processes room: each spawned process from its preparation to its finalize (`_children`),
how Linux runs it (`_posix`, `_cgroups`), and the sandbox that carries out a policy
(`_bwrap`, `_stage`, `_seccomp`, `_glob`).

It gets the loop and ``feed``; it uses `backends` to prepare a spawn, the shared `_loop`,
`_shares` and `_system`, and `_proxy` for the managed proxy's listeners a process is given.
"""
