"""Rules resolved to real paths: an operator's symlink is followed, a planted one carries no grant
out of the writable places (`execproto.policy.pinned`). The file system is a dict of links."""

from __future__ import annotations

import itertools
import posixpath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from execproto.policy import RANK, PathRule, PlantedLink, Policy, follow, pinned


def policy(network: bool = False, **rules: str) -> Policy:
    return Policy.of([PathRule(path=path, access=access) for path, access in rules.items()],
                     network)


def fs(**links: str) -> dict[str, str]:
    """Links by path; keyword names spell paths with `_` for `/`."""
    return {"/" + name.replace("_", "/"): target for name, target in links.items()}


WORKSPACE_WRITE = {"/": "read", "/w": "write", "/tmp": "write", "/tmp/t": "write",
                   "/w/.git": "read", "/w/.codex": "read"}


def pin(links: dict[str, str], rules: dict[str, str], floor: Policy | None = None) -> Policy:
    return pinned(Policy.of([PathRule(path=p, access=a) for p, a in rules.items()], False),
                  links.get, floor)


def test_a_tmpdir_replaced_by_a_link_out_fails_the_start() -> None:
    # One command made its tmpdir, in a writable /tmp, a link to /etc.
    with pytest.raises(PlantedLink, match=r"^/tmp/t changed while the sandbox was set up: "
                                          r"the symlink /tmp/t lies where a sandbox may write"):
        pin({"/tmp/t": "/etc"}, WORKSPACE_WRITE)


def test_a_workspace_under_tmp_replaced_by_a_link_out_fails_the_start() -> None:
    rules = {"/": "read", "/tmp": "write", "/tmp/ws": "write"}
    with pytest.raises(PlantedLink, match="/tmp/ws changed"):
        pin({"/tmp/ws": "../var/elsewhere"}, rules)


def test_a_write_rule_beneath_the_floors_writable_root_is_planted_there_too() -> None:
    # The client's profile writes only its workspace and tmpdir, both in the floor's root;
    # another sandbox, under the same floor, made the tmpdir a link to a place the client
    # did not grant.
    floor = policy(**{"/": "read", "/floor": "write"})
    rules = {"/": "read", "/floor/ws": "write", "/floor/t": "write"}
    with pytest.raises(PlantedLink, match="/floor/t changed"):
        pin({"/floor/t": "/floor/other"}, rules, floor)


def test_a_planted_link_within_the_writable_places_keeps_its_grant() -> None:
    pinned_ = pin({"/tmp/t": "/tmp/u"}, WORKSPACE_WRITE)
    assert pinned_.access("/tmp/u") == "write"
    assert pinned_.access("/etc") == "read"


def test_a_planted_read_rule_cannot_uncover_a_denied_place() -> None:
    rules = {"/": "read", "/w": "write", "/w/.git": "read", "/secret": "none"}
    pinned_ = pin({"/w/.git": "/secret/sub"}, rules)
    assert pinned_.access("/secret/sub") == "none"
    assert pinned_.access("/secret/sub/key") == "none"


def test_a_planted_read_rule_still_protects_what_it_leads_to_in_the_workspace() -> None:
    # `.agents -> shared` in a writable workspace: what it names stays read-only.
    rules = {"/": "read", "/w": "write", "/w/.agents": "read"}
    pinned_ = pin({"/w/.agents": "shared"}, rules)
    assert pinned_.access("/w/shared") == "read"
    assert pinned_.access("/w/other") == "write"


def test_a_planted_deny_match_hides_nothing_outside_the_writable_places() -> None:
    # A deny pattern's match the sandbox made a link to /usr/bin must not take the next
    # command's programs away; one to its own files may.
    rules = {"/": "read", "/w": "write", "/w/a.env": "none", "/w/b.env": "none"}
    pinned_ = pin({"/w/a.env": "/usr/bin", "/w/b.env": "notes"}, rules)
    assert pinned_.access("/usr/bin") == "read"
    assert pinned_.access("/w/notes") == "none"


def test_an_operators_link_is_followed() -> None:
    # /ws is the operator's link (its directory, /, no sandbox may write), /lib a system one.
    rules = {"/": "read", "/ws": "write", "/ws/.git": "read", "/lib/x": "none"}
    pinned_ = pin({"/ws": "/data/ws", "/lib": "usr/lib"}, rules)
    assert pinned_.access("/data/ws") == "write"
    assert pinned_.access("/data/ws/.git") == "read"
    assert pinned_.access("/usr/lib/x") == "none"


def test_a_link_inside_the_real_path_of_a_writable_root_is_planted() -> None:
    # The workspace is the operator's link; a link inside where it leads is the sandbox's.
    rules = {"/": "read", "/ws": "write", "/ws/t": "write"}
    with pytest.raises(PlantedLink, match="/ws/t changed"):
        pin({"/ws": "/data/ws", "/data/ws/t": "/etc"}, rules)


def test_follow_is_realpath_and_names_the_first_planted_link() -> None:
    links = fs(a="b/c", b_c="../d", d_e="/f")
    assert follow("/a/e/g", links.get) == ("/f/g", None)
    assert follow("/a/e/g", links.get, ["/b"]) == ("/f/g", "/b/c")
    assert follow("/x/../a", links.get) == ("/d", None)
    with pytest.raises(PlantedLink, match="too many levels"):
        follow("/loop", {"/loop": "/loop"}.get)


# -- the property: whatever a sandbox plants where it may write, nothing else gains access ------

_names = st.sampled_from(["a", "b", "w", "t"])
_parts = st.lists(_names, min_size=1, max_size=3)
_paths = _parts.map(lambda parts: "/" + "/".join(parts))
_targets = st.one_of(_paths, _parts.map("/".join), st.just(".."), st.just("../.."))
_access = st.sampled_from(["none", "read", "write"])
_rules = st.dictionaries(_paths, _access, max_size=5)
PROBES = ["/" + "/".join(p) for n in range(1, 5) for p in itertools.product("abwt", repeat=n)]


def _prefixes(path: str) -> list[str]:
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:n]) for n in range(1, len(parts) + 1) if parts[0]]


def _beneath(path: str, top: str) -> bool:
    return top == "/" or path == top or path.startswith(top + "/")


def _writable_dirs(rules: dict[str, str], floor: dict[str, str]) -> list[str]:
    return [path for path, access in [*rules.items(), *floor.items()] if access == "write"]


@settings(derandomize=True, max_examples=400, deadline=None)
@given(_rules, st.dictionaries(_paths, _access, max_size=2), st.data())
def test_planted_links_take_access_away_and_never_add_any(
        rules: dict[str, str], floor_rules: dict[str, str], data: st.DataObject) -> None:
    rules = {"/": "read", **rules}
    floor = policy(**{"/": "read", **floor_rules}) if floor_rules else None
    # The attacker's links: only where a sandbox may write, in a directory under a write rule.
    # Mostly on the way of a rule's path, where a link changes what the rule names.
    tops = _writable_dirs(rules, floor_rules)
    on_the_way = sorted({prefix for path in rules for prefix in _prefixes(path)
                         if any(_beneath(posixpath.dirname(prefix), top) for top in tops)})
    anywhere = st.sampled_from(tops).flatmap(
        lambda top: _parts.map(lambda parts: top.rstrip("/") + "/" + "/".join(parts)))
    spots = st.one_of(st.sampled_from(on_the_way), anywhere) if on_the_way else anywhere
    attack = data.draw(st.dictionaries(spots, _targets, max_size=3)) if tops else {}
    try:
        attacked = pin(attack, rules, floor).narrow(floor)
    except PlantedLink:
        return  # the start fails: nothing runs
    clean = pin({}, rules, floor).narrow(floor)
    for probe in PROBES:
        try:
            if follow(probe, attack.get)[0] != probe:
                continue  # through a planted link: what lies there has its own access
        except PlantedLink:
            continue  # through a loop: nothing lies there
        assert RANK[attacked.access(probe)] <= RANK[clean.access(probe)], (probe, attacked, clean)


def test_a_cap_holds_at_its_name_and_where_it_leads() -> None:
    # The server's secret named through a link, and one whose name a sandbox made a loop.
    asked = Policy.of([PathRule(path="/", access="write")], False)
    capped = asked.capped(["/run/secrets/token", "/w/loop"], "none")
    links = {"/run/secrets/token": "..data/token", "/run/secrets/..data": "..2026",
             "/w/loop": "/w/loop"}
    real = pinned(capped, links.get)
    for path in ("/run/secrets/token", "/run/secrets/..2026/token", "/w/loop"):
        assert real.access(path) == "none", path
    assert real.access("/run/secrets/..2026/other") == "write"
