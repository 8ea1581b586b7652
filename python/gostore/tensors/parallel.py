"""How a tensor is split across ranks: ``ParallelAxis``, ``TensorParallelism``
and ``ReadTarget``, the request types of Mooncake's ``*_with_parallelism``
tensor calls.

They are plain typed records (same fields, defaults and type checks as
Mooncake's). ``TensorParallelism.axes`` and ``ReadTarget.parallelism`` copy
what is assigned to them: changing an axis after assigning it changes
nothing in the holder. Reading them gives the held objects (``axes``: in a
new list each time), so ``tp.axes[0].rank = 2`` changes ``tp``.
"""

from __future__ import annotations

import copy
from typing import Any

from .. import _fields as F

__all__ = ["ParallelAxis", "TensorParallelism", "ReadTarget", "READ_MODES"]

READ_MODES = ("as_stored", "shard", "full")
"""``ReadTarget.mode`` values: the tensor as written, this rank's shard, or
the whole tensor put back together from its shards."""


class _Record:
    __slots__ = ()

    def __init__(self, **fields: Any) -> None:
        F.init(self, fields)

    def __repr__(self) -> str:
        body = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in F.fields(type(self)))
        return f"{type(self).__name__}({body})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # mutable

    def __deepcopy__(self, memo: dict) -> Any:
        new = type(self).__new__(type(self))
        for f in F.fields(type(self)):
            object.__setattr__(new, f.slot, copy.deepcopy(getattr(self, f.slot), memo))
        return new

    __copy__ = lambda self: self.__deepcopy__({})  # noqa: E731


class ParallelAxis(_Record):
    """One axis of a split: its ``kind`` (a free-form label such as
    ``"tp"``), this process's ``rank`` on it, the axis ``size``, and the
    optional ``split_dim``, ``expert_id`` and ``stage_id``."""

    __slots__ = F.slots("kind", "rank", "size", "split_dim", "expert_id", "stage_id")

    kind = F.Field(F.string, "", doc="Axis label, e.g. 'tp'.")
    rank = F.Field(F.i64, 0, doc="This process's rank on the axis.")
    size = F.Field(F.i64, 1, doc="Number of ranks on the axis.")
    split_dim = F.Field(F.optional(F.i64), None, doc="Tensor dimension split, or None.")
    expert_id = F.Field(F.optional(F.i64), None, doc="Expert index, or None.")
    stage_id = F.Field(F.optional(F.i64), None, doc="Pipeline stage, or None.")


class TensorParallelism(_Record):
    """A split of one tensor: ``axes``, a list of :class:`ParallelAxis`."""

    __slots__ = F.slots("axes")

    axes = F.Field(F.list_of(ParallelAxis), list, copy_out=True, doc="list[ParallelAxis].")


def _mode(what: str, v: Any) -> str:
    s = F.string(what, v)
    low = s.lower()
    if low not in READ_MODES:
        raise RuntimeError(f"unsupported ReadTarget mode {s!r} (one of {', '.join(READ_MODES)})")
    return low


class ReadTarget(_Record):
    """What a parallel read asks for: ``mode`` (``"as_stored"``,
    ``"shard"`` or ``"full"``, any case) and an optional ``parallelism``
    (:class:`TensorParallelism`). An unknown mode raises ``RuntimeError``,
    as in Mooncake."""

    __slots__ = F.slots("mode", "parallelism")

    mode = F.Field(_mode, "as_stored", doc="'as_stored', 'shard' or 'full'.")
    parallelism = F.Field(
        F.optional(F.instance_of(TensorParallelism, copy_value=True)),
        None,
        doc="A TensorParallelism, or None.",
    )
