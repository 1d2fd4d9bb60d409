"""The sandbox policy: deepest rule wins, and narrowing never grants more than either side."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from execproto import PathRule, Policy
from execproto._policy import RANK, narrow, normalize


def policy(network: bool = False, **rules: str) -> Policy:
    """``policy(**{"/": "read", "/w": "write"})``"""
    return Policy.of([PathRule(path=p, access=a) for p, a in rules.items()], network)


def test_the_deepest_rule_decides() -> None:
    p = policy(**{"/": "read", "/w": "write", "/w/.git": "read", "/w/.git/x": "none"})
    assert p.access("/etc/passwd") == "read"
    assert p.access("/w") == "write"
    assert p.access("/w/src/a.c") == "write"
    assert p.access("/w/.git/HEAD") == "read"
    assert p.access("/w/.git/x/y") == "none"
    assert p.access("/w2") == "read"  # a sibling whose name starts alike is not beneath /w


def test_paths_are_compared_after_normalizing() -> None:
    p = policy(**{"/": "read", "/w/": "write"})
    assert p.can_write("/w/a/../b")
    assert not p.can_write("/w/../etc/passwd")
    assert normalize("//") == "/"
    assert normalize("/a//b/./c/..") == "/a/b"


def test_without_a_root_rule_everything_else_is_denied() -> None:
    p = policy(**{"/w": "write"})
    assert p.access("/etc") == "none"
    assert p.rules[0] == PathRule(path="/", access="none")


def test_of_two_rules_for_one_path_the_lesser_wins() -> None:
    p = Policy.of([PathRule(path="/w", access="write"), PathRule(path="/w", access="read")], False)
    assert p.access("/w/x") == "read"


def test_a_client_can_narrow_the_floor_but_never_widen_it() -> None:
    floor = policy(**{"/": "read", "/w": "write"})
    asked = policy(network=True, **{"/": "write"})
    got = floor.narrow(asked)
    assert got.access("/etc") == "read"
    assert got.access("/w/x") == "write"
    assert got.network is False
    read_only = floor.narrow(policy(**{"/": "read"}))
    assert not read_only.can_write("/w/x")


def test_no_floor_means_the_request_as_asked() -> None:
    # As asked, but that the kernel's knobs are held read-only (a cap, here taking nothing).
    asked = policy(**{"/": "read"})
    assert narrow(None, asked).rules == asked.rules  # type: ignore[union-attr]
    assert narrow(None, None) is None
    floor = policy(**{"/": "read"})
    assert narrow(floor, None).rules == floor.rules  # type: ignore[union-attr]


def test_the_kernels_knobs_are_read_only_whatever_a_profile_grants() -> None:
    everything = policy(**{"/": "write", "/sys/fs/cgroup": "write"})
    held = narrow(None, everything)
    assert held is not None
    assert held.access("/sys/fs/cgroup/cgroup.procs") == "read"
    assert held.access("/sys") == "read" and held.access("/tmp") == "write"


def test_deny_patterns_from_both_sides_are_kept() -> None:
    a = Policy.of([PathRule(path="/", access="read")], False, deny_globs=["/w/*.env"])
    b = Policy.of([PathRule(path="/", access="write")], False, deny_globs=["/w/*.key", "/w/*.env"])
    assert a.narrow(b).deny_globs == ("/w/*.env", "/w/*.key")


_names = st.sampled_from(["a", "b", "w", ".git"])
_paths = st.lists(_names, max_size=3).map(lambda parts: "/" + "/".join(parts))
_access = st.sampled_from(["none", "read", "write"])
_policies = st.builds(
    lambda rules, network: Policy.of([PathRule(path=p, access=a) for p, a in rules], network),
    st.lists(st.tuples(_paths, _access), max_size=6),
    st.booleans(),
)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(_policies, _policies, _paths)
def test_narrowing_is_the_lesser_access_at_every_path(a: Policy, b: Policy, path: str) -> None:
    both = a.narrow(b)
    expected = min(a.access(path), b.access(path), key=RANK.__getitem__)
    assert both.access(path) == expected
    assert both.access(path) == b.narrow(a).access(path)
    assert both.network == (a.network and b.network)


def test_the_servers_secrets_are_denied_in_every_effective_policy() -> None:
    asked = Policy.of([PathRule(path="/", access="write")], network=True)
    floor = Policy.of([PathRule(path="/", access="read")], network=False)
    secrets = ["/etc/execproto/token", "/var/log/trace.jsonl"]
    for effective in (narrow(None, asked, secrets), narrow(floor, asked, secrets),
                      narrow(floor, None, secrets)):
        assert effective is not None
        assert not any(effective.can_read(path) for path in secrets)
        assert effective.can_read("/etc/execproto/other")
    # No sandbox at all stays none: an unsandboxed process is not confined by secrets.
    assert narrow(None, None, secrets) is None
    assert narrow(None, asked, ()) == asked.capped(["/sys"], "read")  # the kernel's knobs


def test_a_deeper_grant_reopens_nothing_of_a_secret_or_a_protected_place() -> None:
    # A client (or the floor) granting inside the secrets' directory, or write inside what
    # the server runs, gets neither: a cap holds everything beneath its path.
    asked = policy(**{"/": "write", "/secrets/..data": "read", "/venv/bin": "write"})
    for floor in (None, policy(**{"/": "read", "/secrets/..data/token": "read"})):
        effective = narrow(floor, asked, ["/secrets"], ["/venv"])
        assert effective is not None
        for path in ("/secrets", "/secrets/..data", "/secrets/..data/token"):
            assert effective.access(path) == "none", (floor, path)
        assert effective.access("/venv/bin/python") == "read"
        assert effective.access("/w") == ("write" if floor is None else "read")
        # The caps survive a further narrowing, as the adapter's by the floor again.
        again = effective.narrow(policy(**{"/": "write", "/secrets/x": "write"}))
        assert again.access("/secrets/x") == "none" and again.access("/venv/y") == "read"


@settings(derandomize=True, max_examples=300, deadline=None)
@given(_policies, _policies, st.lists(_paths, max_size=2), _paths)
def test_a_cap_holds_at_and_beneath_its_path(a: Policy, b: Policy, caps: list[str],
                                             path: str) -> None:
    capped = a.capped(caps, "read").narrow(b)
    expected = a.narrow(b).access(path)
    if any(path == cap or path.startswith(cap.rstrip("/") + "/") for cap in caps):
        expected = min(expected, "read", key=RANK.__getitem__)
    assert capped.access(path) == expected
