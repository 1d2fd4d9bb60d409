"""The core's classes share one ``__repr__``, ``__eq__`` and ``__hash__`` (`_records.Record`)
rather than each compiling its own at import, and they behave as attrs' would: a server's start
makes ~100 of them."""

from __future__ import annotations

import ast
import subprocess
import sys

import attrs

from execproto import _params, fs
from execproto._http_service import HttpParams
from execproto._records import Record
from execproto.actions import ACTION_TYPES, FsRequest, HttpRequest, Send, SpawnSpec
from execproto.events import EVENT_TYPES, Encoded, MessageReceived


@attrs.frozen(kw_only=True, repr=False, eq=False)
class Mine(Record):
    number: int
    data: bytes
    hidden: str = attrs.field(repr=False, default="secret")
    shown: str = attrs.field(repr=lambda value: "<" + value + ">", default="as told")
    loose: str = attrs.field(eq=False, default="")
    folded: str = attrs.field(eq=str.lower, default="")


@attrs.frozen(kw_only=True)
class Theirs:
    number: int
    data: bytes
    hidden: str = attrs.field(repr=False, default="secret")
    shown: str = attrs.field(repr=lambda value: "<" + value + ">", default="as told")
    loose: str = attrs.field(eq=False, default="")
    folded: str = attrs.field(eq=str.lower, default="")


@attrs.frozen(kw_only=True, repr=False, eq=False)
class Twin(Record):
    number: int
    data: bytes


def test_a_record_reads_as_attrs_own_repr() -> None:
    mine, theirs = Mine(number=1, data=b"\x00'"), Theirs(number=1, data=b"\x00'")
    assert repr(mine) == repr(theirs).replace("Theirs", "Mine", 1)
    assert "secret" not in repr(mine)


def test_a_record_compares_and_hashes_as_attrs_own() -> None:
    cases = [({"number": 1, "data": b"a"}, {"number": 1, "data": b"a"}),
             ({"number": 1, "data": b"a"}, {"number": 2, "data": b"a"}),
             ({"number": 1, "data": b"a"}, {"number": 1, "data": b"b"}),
             ({"number": 1, "data": b"a", "loose": "x"}, {"number": 1, "data": b"a", "loose": "y"}),
             ({"number": 1, "data": b"a", "folded": "X"}, {"number": 1, "data": b"a",
                                                           "folded": "x"}),
             ({"number": 1, "data": b"a", "folded": "X"}, {"number": 1, "data": b"a",
                                                           "folded": "y"}),
             ({"number": 1, "data": b"a", "hidden": "p"}, {"number": 1, "data": b"a"})]
    for one, other in cases:
        same = Theirs(**one) == Theirs(**other)
        assert (Mine(**one) == Mine(**other)) is same, (one, other)
        assert (Mine(**one) != Mine(**other)) is not same, (one, other)
        if same:
            assert hash(Mine(**one)) == hash(Mine(**other)), (one, other)
    # Only the very same class: equal fields of another class are not equal, as with attrs.
    assert Twin(number=1, data=b"a") != Mine(number=1, data=b"a")
    assert Mine(number=1, data=b"a") != Theirs(number=1, data=b"a")
    assert len({Send(conn=1, data=b"x"), Send(conn=1, data=b"x"), Send(conn=2, data=b"x")}) == 2
    assert MessageReceived(conn=1, data=b"x") != Send(conn=1, data=b"x")


def test_every_event_action_and_params_class_uses_the_shared_methods() -> None:
    params = [value for value in vars(_params).values()
              if isinstance(value, type) and attrs.has(value)
              and value.__module__ == _params.__name__]
    requests = [value for value in vars(fs).values()
                if isinstance(value, type) and attrs.has(value) and value.__module__ == fs.__name__]
    assert FsRequest in requests and len(requests) == 19  # the base, 17 calls, SkillRoot
    classes = [*EVENT_TYPES, *ACTION_TYPES, Encoded, SpawnSpec, HttpRequest, HttpParams,
               *requests, *params]
    for method in ("__repr__", "__eq__", "__hash__"):
        assert [cls for cls in classes
                if getattr(cls, method) is not getattr(Record, method)] == [], method


# The classes of the server's side that keep attrs' own repr: an output chunk's, and an
# exception's.
OWN_REPR = {"execproto._output.Chunk", "execproto._errors.RpcError"}
# What the server's side is: what its core loads, every family made, listed in a fresh
# interpreter.
LIST_OWN_REPRS = """
import attrs, sys
import execproto._server, execproto._fs_service, execproto._http_service, execproto._forwards
from execproto._records import Record
print(sorted(f"{name}.{value.__name__}" for name, module in list(sys.modules.items())
             if name.startswith("execproto.") for value in vars(module).values()
             if isinstance(value, type) and attrs.has(value) and value.__module__ == name
             and value.__repr__ is not Record.__repr__))
"""


def test_every_class_of_the_servers_side_shares_the_repr() -> None:
    done = subprocess.run([sys.executable, "-c", LIST_OWN_REPRS], capture_output=True,
                          text=True, timeout=60, check=True)
    found = set(ast.literal_eval(done.stdout))
    assert found <= OWN_REPR, found - OWN_REPR
