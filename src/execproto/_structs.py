"""serde's other form of a struct: its fields in order, as a sequence.

The reference deserializes a params struct from a map or from a sequence of its fields; the
few structs whose sequence form execproto takes too read it through these, with the
reference's messages for a sequence of the wrong length. Shared by the fs calls' params and
the host's (`_host_params`), which a start loads; the fs calls' own are loaded at their first.
"""

from __future__ import annotations

from typing import Any

from ._errors import invalid_params


def as_struct(value: Any, names: tuple[str, ...]) -> Any:
    """A struct sent as a sequence, turned into the map of its fields. Too few elements is an
    error only after the present ones parsed, as serde reads them one by one: the caller
    checks that with `short_struct`."""
    if not isinstance(value, list):
        return value
    if len(value) > len(names):
        raise invalid_params(f"invalid length {len(value)}, expected fewer elements in array")
    return dict(zip(names, value, strict=False))  # fewer values than names: the rest absent


def short_struct(value: Any, struct: str, names: tuple[str, ...], required: int) -> None:
    if isinstance(value, list) and len(value) < required:
        plural = "element" if len(names) == 1 else "elements"
        raise invalid_params(
            f"invalid length {len(value)}, expected struct {struct} with {len(names)} {plural}"
        )
