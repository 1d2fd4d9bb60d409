"""A rule that holds access back through a link a sandbox could replace is refused, as the
reference refuses it (`execproto.policy.crossing`). The file system is a dict of links."""

from __future__ import annotations

from execproto.policy import PathRule, Policy, crossing, refusal

WORKSPACE_WRITE = {"/": "read", "/w": "write", "/tmp": "write", "/w/.git": "read",
                   "/w/.codex": "read", "/w/.agents": "read"}
ROOT_WRITE = {"/": "write", "/w/.git": "read", "/w/.codex": "read", "/data/ro": "read",
              "/data/secret": "none"}


def found(links: dict[str, str], rules: dict[str, str],
          floor: Policy | None = None, caps: tuple[str, ...] = ()) -> str | None:
    policy = Policy.of([PathRule(path=p, access=a) for p, a in rules.items()], False,
                       caps=[PathRule(path=cap, access="read") for cap in caps])
    crossed = crossing(policy, links.get, floor)
    return None if crossed is None else refusal(*crossed)


def test_a_protected_name_that_is_a_link_in_a_writable_root_is_refused() -> None:
    # `mv .codex x; mkdir .codex` would give the next command a config of the command's own.
    for target in ("sub", "/elsewhere/codex"):
        assert found({"/w/.codex": target}, WORKSPACE_WRITE) == (
            "cannot enforce sandbox read-only path /w/.codex because it crosses writable "
            "symlink /w/.codex")


def test_a_denial_through_a_link_in_a_writable_place_is_refused() -> None:
    assert found({"/data": "/srv/data"}, ROOT_WRITE) == (
        "cannot enforce sandbox read-only path /data/ro because it crosses writable symlink "
        "/data")
    rules = {**ROOT_WRITE}
    del rules["/data/ro"]
    assert found({"/data": "/srv/data"}, rules) == (
        "cannot enforce sandbox deny-read path /data/secret because it crosses writable "
        "symlink /data")


def test_links_where_no_sandbox_writes_are_the_operators() -> None:
    # /lib -> usr/lib under a read-only root, a workspace reached through a link of the
    # operator's: nothing a command can replace.
    rules = {"/": "read", "/home/u/ws": "write", "/home/u/ws/.git": "read", "/lib/x": "none"}
    assert found({"/lib": "usr/lib", "/home/u": "/srv/u"}, rules) is None


def test_write_rules_and_the_servers_own_files_are_not_its_matter() -> None:
    # A write rule through a planted link is `pinned`'s; a cap holds at both of its ends.
    assert found({"/w/out": "/tmp/x"}, {**WORKSPACE_WRITE, "/w/out": "write"}) is None
    assert found({"/usr/bin/pasta": "passt"}, {"/": "write"}, caps=("/usr/bin/pasta",)) is None


def test_a_floors_writable_root_is_a_writable_place_too() -> None:
    floor = Policy.of([PathRule(path="/", access="read"), PathRule(path="/floor", access="write")],
                      False)
    rules = {"/": "read", "/floor/ws": "write", "/floor/link/secret": "none"}
    assert found({"/floor/link": "/floor/other"}, rules, floor) is not None


def test_a_loop_counts_as_crossing_its_first_link() -> None:
    assert found({"/w/.git": "/w/.git"}, WORKSPACE_WRITE) == (
        "cannot enforce sandbox read-only path /w/.git because it crosses writable symlink "
        "/w/.git")
