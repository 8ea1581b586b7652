"""Typed attributes for the small value classes (``ReplicateConfig``,
``ParallelAxis``, ``Descriptor``...).

Each class declares its fields as :class:`Field` descriptors. Assigning
converts the value the way a compiled binding would and raises ``TypeError``
for a value of the wrong kind, at the assignment, not later at the call that
uses the object:

- ``u64`` / ``i64``: an ``int`` or anything with ``__index__`` (``bool``,
  ``numpy.int64``), inside the C type's range; stored as a plain ``int``.
- ``boolean``: ``None`` (false), or any object whose type defines
  ``__bool__`` (``bool``, ``int``, ``float``, ``numpy.bool_``); ``str`` and
  containers are refused.
- ``string``: ``str``, or UTF-8 ``bytes`` (decoded).
- ``str_list``: a ``list`` or ``tuple`` of strings; stored as a new list.
- ``optional(conv)``: ``None`` or what ``conv`` accepts.
- ``instance_of(cls)``: exactly an instance of ``cls`` (enums: no ints).

A list field hands out a new list on every read, so
``cfg.preferred_segments.append(x)`` changes nothing; assign a new list
instead. Struct values (``list_of``, ``instance_of(copy_value=True)``) are
copied when assigned; reading gives the held object itself, so changing
what was read changes the holder (as with Mooncake's binding).
"""

from __future__ import annotations

import copy
import operator
from typing import Any, Callable, Optional

Converter = Callable[[str, Any], Any]

_U64_MAX = 2**64 - 1
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _tname(v: Any) -> str:
    return type(v).__name__


def _integer(what: str, v: Any, lo: int, hi: int) -> int:
    try:
        n = operator.index(v)
    except TypeError:
        raise TypeError(f"{what} must be an int, not {_tname(v)}") from None
    if not lo <= n <= hi:
        raise TypeError(f"{what} must be an int in [{lo}, {hi}], not {n}")
    return int(n)


def u64(what: str, v: Any) -> int:
    return _integer(what, v, 0, _U64_MAX)


def i64(what: str, v: Any) -> int:
    return _integer(what, v, _I64_MIN, _I64_MAX)


def boolean(what: str, v: Any) -> bool:
    if v is None:
        return False
    if isinstance(v, bool):
        return v
    if hasattr(type(v), "__bool__") and not isinstance(v, (str, bytes)):
        return bool(v)
    raise TypeError(f"{what} must be a bool, not {_tname(v)}")


def string(what: str, v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bytes):
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            raise TypeError(f"{what} must be a str (bytes must be UTF-8)") from None
    raise TypeError(f"{what} must be a str, not {_tname(v)}")


def str_list(what: str, v: Any) -> list:
    if not isinstance(v, (list, tuple)):
        raise TypeError(f"{what} must be a list of str, not {_tname(v)}")
    return [string(f"{what}[{i}]", s) for i, s in enumerate(v)]


def number(what: str, v: Any) -> float:
    if isinstance(v, (str, bytes)) or not hasattr(type(v), "__float__"):
        raise TypeError(f"{what} must be a number, not {_tname(v)}")
    return float(v)


def optional(conv: Converter) -> Converter:
    def check(what: str, v: Any) -> Any:
        return None if v is None else conv(what, v)

    return check


def instance_of(cls: type, copy_value: bool = False) -> Converter:
    def check(what: str, v: Any) -> Any:
        if not isinstance(v, cls):
            raise TypeError(f"{what} must be a {cls.__name__}, not {_tname(v)}")
        return copy.deepcopy(v) if copy_value else v

    return check


def list_of(cls: type) -> Converter:
    """A list/tuple of ``cls`` instances, each copied (held by value)."""

    def check(what: str, v: Any) -> list:
        if not isinstance(v, (list, tuple)):
            raise TypeError(f"{what} must be a list of {cls.__name__}, not {_tname(v)}")
        out = []
        for i, item in enumerate(v):
            if not isinstance(item, cls):
                raise TypeError(f"{what}[{i}] must be a {cls.__name__}, not {_tname(item)}")
            out.append(copy.deepcopy(item))
        return out

    return check


class Field:
    """A typed attribute stored in the ``_<name>`` slot of its instance.

    ``default`` is a value or a zero-argument callable (for mutable
    defaults); ``readonly`` fields can only be set through :func:`init`;
    ``copy_out`` (list fields) hands out a new list on every read, holding
    the stored elements.
    """

    # No __slots__: each field carries its own __doc__ (for help()).

    def __init__(
        self,
        convert: Converter,
        default: Any,
        *,
        readonly: bool = False,
        copy_out: bool = False,
        doc: str = "",
    ) -> None:
        self.convert = convert
        self.default = default
        self.readonly = readonly
        self.copy_out = copy_out
        self.__doc__ = doc
        self.name = self.slot = self.owner = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot, self.owner = name, "_" + name, owner.__name__

    def __get__(self, obj: Any, owner: Optional[type] = None) -> Any:
        if obj is None:
            return self
        v = getattr(obj, self.slot)
        return list(v) if self.copy_out and v is not None else v

    def __set__(self, obj: Any, value: Any) -> None:
        if self.readonly:
            raise AttributeError(f"{self.owner}.{self.name} is read-only")
        self.set(obj, value)

    def __delete__(self, obj: Any) -> None:
        raise AttributeError(f"{self.owner}.{self.name} cannot be deleted")

    def set(self, obj: Any, value: Any) -> None:
        object.__setattr__(obj, self.slot, self.convert(f"{self.owner}.{self.name}", value))

    def reset(self, obj: Any) -> None:
        d = self.default
        object.__setattr__(obj, self.slot, d() if callable(d) else d)


def fields(cls: type) -> list:
    """The :class:`Field` descriptors of ``cls``, in declaration order."""
    out: dict = {}
    for klass in reversed(cls.__mro__):
        for name, attr in vars(klass).items():
            if isinstance(attr, Field):
                out[name] = attr
    return list(out.values())


def init(obj: Any, values: dict, *, allow_readonly: bool = False) -> None:
    """Set every field of ``obj`` to its default, then apply ``values``
    (unknown names raise ``TypeError`` as an unexpected keyword would)."""
    fs = {f.name: f for f in fields(type(obj))}
    for f in fs.values():
        f.reset(obj)
    for name, value in values.items():
        f = fs.get(name)
        if f is None or (f.readonly and not allow_readonly):
            raise TypeError(f"{type(obj).__name__}() got an unexpected keyword argument {name!r}")
        f.set(obj, value)


def slots(*names: str) -> tuple:
    """``__slots__`` for fields ``names`` (``_<name>`` each)."""
    return tuple("_" + n for n in names)
