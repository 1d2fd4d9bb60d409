"""The processes room: each spawned process from its preparation to its finalize (`_children`),
how Linux runs it (`_posix`, `_cgroups`, the stage server `_zygote`), and the sandbox that
carries out a policy (`_bwrap`, `_stage`, `_seccomp`, `_glob`, the ways to the server's own
files `_ways`, the placeholders `_placeholders`, its refusal `_refusals`).

It gets the loop, ``feed`` and a backend, whose interface is the room's own (`_backend`:
`Backend`, `ExecSpec`, `Refused`; `backends` names them for an embedder, and is this machine's);
it uses the shared `_loop`, `_shares` and `_system`, and `_proxy` for the managed proxy's
listeners a process is given.
"""
