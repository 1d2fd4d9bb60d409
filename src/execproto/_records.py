"""One ``__repr__`` for the core's many small attrs classes, instead of one made for each.

attrs writes and compiles a ``__repr__`` for every class it makes unless told not to, and
making the core's classes is most of what a server's start spends on the core: the repr alone
was ~35 ms of a start's ~100 classes (bench/cold_start.py). A class made with ``repr=False``
that inherits `Record` reads as attrs' own would: ``Send(conn=1, data=b'...')``, a field made
with ``repr=False`` left out and one with a function of its own shown through it.
"""

from __future__ import annotations

from typing import cast

import attrs


class Record:
    """The base of an attrs class made with ``repr=False``: attrs' repr, from one method."""

    __slots__ = ()

    def __repr__(self) -> str:
        shown = []
        for field in attrs.fields(cast("type[attrs.AttrsInstance]", type(self))):
            if field.repr is False:
                continue
            how = field.repr if callable(field.repr) else repr
            shown.append(f"{field.name}={how(getattr(self, field.name))}")
        return f"{type(self).__qualname__.rsplit('>.', 1)[-1]}({', '.join(shown)})"
