"""The core's classes share one ``__repr__`` (`_records.Record`) rather than each making its
own at import, and it reads as attrs' would: a server's start makes ~100 of them."""

from __future__ import annotations

import attrs

from execproto import _params
from execproto._records import Record
from execproto.actions import ACTION_TYPES, FsRequest, HttpRequest, SpawnSpec
from execproto.events import EVENT_TYPES, Encoded


@attrs.frozen(kw_only=True, repr=False)
class Mine(Record):
    number: int
    data: bytes
    hidden: str = attrs.field(repr=False, default="secret")
    shown: str = attrs.field(repr=lambda value: "<" + value + ">", default="as told")


@attrs.frozen(kw_only=True)
class Theirs:
    number: int
    data: bytes
    hidden: str = attrs.field(repr=False, default="secret")
    shown: str = attrs.field(repr=lambda value: "<" + value + ">", default="as told")


def test_a_record_reads_as_attrs_own_repr() -> None:
    mine, theirs = Mine(number=1, data=b"\x00'"), Theirs(number=1, data=b"\x00'")
    assert repr(mine) == repr(theirs).replace("Theirs", "Mine", 1)
    assert "secret" not in repr(mine)


def test_every_event_action_and_params_class_uses_the_shared_repr() -> None:
    params = [value for value in vars(_params).values()
              if isinstance(value, type) and attrs.has(value)
              and value.__module__ == _params.__name__]
    classes = [*EVENT_TYPES, *ACTION_TYPES, Encoded, SpawnSpec, FsRequest, HttpRequest, *params]
    assert [cls for cls in classes if cls.__repr__ is not Record.__repr__] == []
