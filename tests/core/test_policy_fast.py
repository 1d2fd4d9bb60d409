"""The policy's cheap paths decide as the plain ones did (`policy_oracle`), byte for byte:
normalizing, the deepest rule, `Policy.of` with its caps remembered, narrowing by a floor with
the server's secrets and own files, and `pinned` through symlinks. Each is checked over many
policies, caps and links, a cap list met again (the remembered case) among them."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from execproto._links import PlantedLink, pinned
from execproto._policy import PathRule, Policy, deepest, narrow, normalize

from . import policy_oracle as plain

# Few names, so that paths share ancestors, meet caps and links, and are un-normal at times.
NAMES = st.sampled_from(["a", "b", "c", ".git", ".", "..", "", "a.b", "a0", "a-"])
ACCESS = st.sampled_from(["none", "read", "write"])


@st.composite
def paths(draw: st.DrawFn) -> str:
    parts = draw(st.lists(NAMES, max_size=4))
    lead = draw(st.sampled_from(["/", "/", "/", "//", ""]))
    tail = draw(st.sampled_from(["", "", "", "/"]))
    return lead + "/".join(parts) + tail


def rules(max_size: int = 6) -> st.SearchStrategy[list[PathRule]]:
    return st.lists(st.builds(PathRule, path=paths(), access=ACCESS), max_size=max_size)


# The server's own files are a list met at every start: a few fixed ones, drawn from again.
OWN = [["/a", "/a/b", "/c/.git", "/b/a0"], ["/a/b/c", "/", "/a-", "/a.b/a"], []]
caps = st.one_of(rules(8), st.sampled_from(OWN).map(
    lambda ps: [PathRule(path=p, access="read") for p in ps]))


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    made = draw(rules())
    return Policy.of(made, draw(st.booleans()), draw(st.lists(paths(), max_size=2)),
                     caps=draw(caps))


@settings(max_examples=300, deadline=None)
@given(st.one_of(paths(), st.text(alphabet="/.a", max_size=12), st.text(max_size=8)))
def test_normalize(path: str) -> None:
    assert normalize(path) == plain.normalize(path)


@settings(max_examples=200, deadline=None)
@given(policies(), paths())
def test_deepest(policy: Policy, path: str) -> None:
    index = plain.index(policy)
    assert deepest(index, path) == plain.deepest(index, path)
    assert policy.access(path) == plain.access(policy, path)


@settings(max_examples=300, deadline=None)
@given(rules(), st.booleans(), st.lists(paths(), max_size=2), caps)
def test_of(made: list[PathRule], network: bool, globs: list[str], held: list[PathRule]) -> None:
    fast = Policy.of(made, network, globs, caps=held)
    assert fast == plain.of(made, network, globs, caps=held)
    assert Policy.of(made, network, globs, caps=held) == fast  # remembered: the same again


@settings(max_examples=200, deadline=None)
@given(st.none() | policies(), st.none() | policies(), st.lists(paths(), max_size=3),
       st.sampled_from(OWN) | st.lists(paths(), max_size=4))
def test_narrow(floor: Policy | None, request: Policy | None, secrets: list[str],
                protected: list[str]) -> None:
    assert (narrow(floor, request, secrets, protected)
            == plain.narrow(floor, request, secrets, protected))
    if request is not None:
        assert request.narrow(floor) == plain.narrow_policies(request, floor)


@st.composite
def links(draw: st.DrawFn) -> dict[str, str]:
    """Symlinks at normalized paths, to absolute or relative targets (loops included)."""
    found = {}
    for _ in range(draw(st.integers(0, 4))):
        where = plain.normalize("/" + draw(paths()))
        if where != "/":
            found[where] = draw(paths()) or "a"
    return found


def _outcome(run: object) -> object:
    try:
        return run()  # type: ignore[operator]
    except PlantedLink as exc:
        return ("refused", str(exc))


@settings(max_examples=300, deadline=None)
@given(policies(), links(), st.none() | policies())
def test_pinned(policy: Policy, found: dict[str, str], floor: Policy | None) -> None:
    assert (_outcome(lambda: pinned(policy, found.get, floor))
            == _outcome(lambda: plain.pinned(policy, found.get, floor)))


@settings(max_examples=300, deadline=None)
@given(policies(), links(), st.none() | policies())
def test_read_caps_change_no_read_where_nothing_is_written(
        policy: Policy, found: dict[str, str], floor: Policy | None) -> None:
    """What `pinned(reading=True)` relies on for a policy that writes nowhere (Codex's
    read-only profile): the rules it resolves to are the same without the read caps."""
    assume(not policy.writable_roots())
    light = Policy(rules=policy.rules, network=policy.network, deny_globs=policy.deny_globs,
                   caps=tuple(cap for cap in policy.caps if cap.access != "read"))
    assert (pinned(light, found.get, floor).narrow(floor).rules
            == pinned(policy, found.get, floor).narrow(floor).rules)


@settings(max_examples=400, deadline=None)
@given(policies(), links(), st.none() | policies(), st.lists(paths(), max_size=4))
def test_pinned_for_reading(policy: Policy, found: dict[str, str], floor: Policy | None,
                            probes: list[str]) -> None:
    """`pinned(reading=True)` (a program's lookup) raises as the plain one does, and what
    may be read is the same at every path either names (and at a few others)."""
    fast = _outcome(lambda: pinned(policy, found.get, floor, reading=True).narrow(floor))
    slow = _outcome(lambda: plain.narrow_policies(plain.pinned(policy, found.get, floor), floor))
    if isinstance(slow, tuple) or isinstance(fast, tuple):
        assert fast == slow
        return
    assert isinstance(fast, Policy) and isinstance(slow, Policy)
    named = {rule.path for rule in (*fast.rules, *slow.rules, *fast.caps, *slow.caps)}
    for path in sorted(named | {plain.normalize("/" + probe) for probe in probes}):
        assert fast.can_read(path) == slow.can_read(path), path


def test_pinned_for_reading_keeps_the_caps_a_planted_link_meets() -> None:
    """A denial through a link planted in the workspace is kept only where its target is
    writable: a read cap whose real path is there drops it (the target reads as the
    workspace does), so `reading` must not leave that cap out."""
    policy = Policy.of([PathRule(path="/", access="read"), PathRule(path="/w", access="write"),
                        PathRule(path="/w/l", access="none")], False,
                       caps=[PathRule(path="/c", access="read")])
    found = {"/w/l": "/w/t", "/c": "/w/t"}
    fast = pinned(policy, found.get, reading=True)
    assert fast.can_read("/w/t") == plain.pinned(policy, found.get).can_read("/w/t") is True


@settings(max_examples=300, deadline=None)
@given(rules(), st.booleans(), caps, st.lists(paths(), max_size=4), ACCESS)
def test_capped_as_made_by_hand(made: list[PathRule], network: bool, held: list[PathRule],
                                more: list[str], access: str) -> None:
    """`capped` on a policy made without `of` (rules unsorted, un-normal, no root rule)."""
    policy = Policy(rules=tuple(made), network=network, caps=tuple(held))
    assert policy.capped(more, access) == plain.capped(policy, more, access)
