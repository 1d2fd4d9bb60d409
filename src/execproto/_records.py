"""One ``__repr__``, ``__eq__`` and ``__hash__`` for the core's many small attrs classes,
instead of the ones attrs writes and compiles for each class it makes.

Making the core's classes is most of what a server's start spends on the core, and most of
that is compiling the methods attrs generates (bench/cold_start.py: the repr alone was ~35 ms
of the ~100 classes a start makes). A frozen class made with ``repr=False, eq=False`` that
inherits `Record` behaves as attrs' own would:

- its repr reads ``Send(conn=1, data=b'...')``, leaving out a field made with ``repr=False``
  and showing one with a function of its own through it;
- it equals only an instance of the very same class whose compared fields are equal (a
  field's ``eq=False`` or ``eq=key`` honoured), and is hashed by the same fields.

Most are made with ``slots=False`` too: attrs makes a slotted class twice (the class, then a
copy with its slots, the first left as garbage), ~30 µs of every start for each. Slots are kept
where instances are many or on the stream's path: output, messages, stdin, sends and their flow
control, fs calls, a forward's bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import attrs

# Per class: each compared field's name and key (None: the value itself), and those hashed.
_Compared = tuple[tuple[str, Callable[[Any], Any] | None], ...]
_compared: dict[type, tuple[_Compared, _Compared]] = {}


def _fields(cls: type) -> tuple[attrs.Attribute[Any], ...]:
    fields: tuple[attrs.Attribute[Any], ...] = attrs.fields(
        cast("type[attrs.AttrsInstance]", cls))
    return fields


def _how_compared(cls: type) -> tuple[_Compared, _Compared]:
    found = _compared.get(cls)
    if found is None:
        fields = _fields(cls)
        # `eq_key` is the function a field's ``eq=`` gave (its stubs leave it out).
        eq = tuple((field.name, getattr(field, "eq_key", None)) for field in fields
                   if field.eq)
        hashed = tuple((field.name, getattr(field, "eq_key", None)) for field in fields
                       if field.hash is True or (field.hash is None and field.eq))
        found = _compared[cls] = (eq, hashed)
    return found


def _values(record: Record, compared: _Compared) -> tuple[Any, ...]:
    return tuple(getattr(record, name) if key is None else key(getattr(record, name))
                 for name, key in compared)


class Record:
    """The base of a frozen attrs class made with ``repr=False, eq=False``: attrs' repr,
    equality and hash, from one method each."""

    __slots__ = ()

    def __repr__(self) -> str:
        shown = []
        for field in _fields(type(self)):
            if field.repr is False:
                continue
            how = field.repr if callable(field.repr) else repr
            shown.append(f"{field.name}={how(getattr(self, field.name))}")
        return f"{type(self).__qualname__.rsplit('>.', 1)[-1]}({', '.join(shown)})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Record)
        compared = _how_compared(type(self))[0]
        return _values(self, compared) == _values(other, compared)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash((type(self), *_values(self, _how_compared(type(self))[1])))


def later_names(namespace: dict[str, Any], later: dict[str, str], base: type,
                every: str) -> Callable[[str], Any]:
    """A module's ``__getattr__`` (PEP 562) for the classes of families made at their first
    use: a name in ``later`` is found in its module (named relative to the package), and
    ``every`` is the tuple of every ``base`` class, those made later included. Each is found
    once, then kept in ``namespace`` (the module's globals) as a plain global."""
    package = namespace["__package__"]

    def find(name: str) -> Any:
        module = later.get(name)
        if module is not None:
            # The import statement's own path, as the package's `__getattr__` takes.
            value = getattr(__import__(f"{package}.{module}", fromlist=[name]), name)
        elif name == every:
            # Not base.__subclasses__(): attrs replaces a slotted class with a copy, and the
            # first one lingers there until collected.
            found = {**namespace, **{name: find(name) for name in later}}
            value = tuple(item for item in found.values()
                          if isinstance(item, type) and issubclass(item, base) and item is not base)
        else:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    return find
