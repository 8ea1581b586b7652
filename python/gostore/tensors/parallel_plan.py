"""The requests of the ``*_with_parallelism`` tensor calls read into plain
records, and the names of the objects those calls write and read.

Pure Python: nothing here touches a store, so the rules are unit-tested on
their own (tests/unit). Any object with the right attributes is accepted
where the wheel accepts one (a :class:`~gostore.ParallelAxis` or a
look-alike); a request that is well typed but can never be served raises
:class:`Invalid`, which the store answers with -600 or ``None``.

Objects a parallel write leaves, for base key ``k``:

* ``k`` itself, when no split is asked for;
* ``k_tp_<rank>`` for a split on a TP axis alone (the name
  ``put_tensor_with_tp`` uses);
* ``k__<axis>__<axis>...`` for other splits, one part per axis in the order
  dp, tp, ep, pp: ``<kind>_<rank>of<size>`` then ``_sd<split_dim>``,
  ``_eid<expert_id>``, ``_sid<stage_id>`` for the fields that are set;
* ``k__writer_<rank>of<size>_sd<split_dim>`` for a ``writer_partition``;
* ``k__parallelism_manifest`` / ``k__writer_manifest``: the shape of the
  whole tensor, its split dimension and shard count, so a reader can put it
  back together.
"""

from __future__ import annotations

import json
import operator
from typing import Any, NamedTuple, Optional, Sequence, Tuple

from .codec import AXIS_KINDS, Axis

__all__ = [
    "Invalid", "WriterPartition", "READ_AS_STORED", "READ_SHARD", "READ_FULL", "axes_of", "writer_of",
    "read_target_of", "tp_axis", "with_tp_rank", "shard_key", "writer_key", "tp_read_key",
    "PARALLELISM_MANIFEST", "WRITER_MANIFEST", "Manifest", "encode_manifest", "decode_manifest",
    "shard_range", "splits_evenly",
]

READ_AS_STORED, READ_SHARD, READ_FULL = "as_stored", "shard", "full"
PARALLELISM_MANIFEST = "__parallelism_manifest"
WRITER_MANIFEST = "__writer_manifest"
_INT32 = (-(2**31), 2**31 - 1)  # axis fields travel as 32-bit ints, as in the wheel
_MANIFEST_MAGIC = b"GSTM1"


class Invalid(ValueError):
    """A request that is well typed but cannot be served (-600 / None)."""


class WriterPartition(NamedTuple):
    """Which even slice of a whole tensor one writer stores."""

    rank: int
    size: int
    split_dim: int


def _int_attr(obj: Any, name: str, what: str) -> int:
    v = getattr(obj, name)
    try:
        n = operator.index(v)
    except TypeError:
        raise TypeError(f"{what}.{name} must be int, not {type(v).__name__}") from None
    if not _INT32[0] <= n <= _INT32[1]:
        raise Invalid(f"{what}.{name} {n} is out of range")
    return n


def _opt_int_attr(obj: Any, name: str, what: str) -> Optional[int]:
    if getattr(obj, name, None) is None:
        return None
    return _int_attr(obj, name, what)


def _axis_of(obj: Any) -> Axis:
    if not all(hasattr(obj, f) for f in ("kind", "rank", "size")):
        raise Invalid("a ParallelAxis needs kind, rank and size")
    kind = obj.kind
    if not isinstance(kind, str):
        raise TypeError(f"ParallelAxis.kind must be str, not {type(kind).__name__}")
    kind = kind.lower()
    if kind not in AXIS_KINDS:
        raise Invalid(f"unknown axis kind {obj.kind!r} (one of {', '.join(AXIS_KINDS)})")
    return Axis(kind, _int_attr(obj, "rank", "ParallelAxis"), _int_attr(obj, "size", "ParallelAxis"),
                _opt_int_attr(obj, "split_dim", "ParallelAxis"), _opt_int_attr(obj, "expert_id", "ParallelAxis"),
                _opt_int_attr(obj, "stage_id", "ParallelAxis"))


def axes_of(parallelism: Any) -> Tuple[Axis, ...]:
    """The axes of a TensorParallelism (or look-alike), checked and in key
    order. Raises :class:`Invalid` for: no axes, an unknown or repeated
    kind, a rank outside ``[0, size)``, a TP axis without ``split_dim``, a
    DP/EP/PP axis with one, an EP axis without ``expert_id``, a PP axis
    without ``stage_id``. (A split_dim the tensor lacks is refused when
    the tensor is cut.)"""
    if not hasattr(parallelism, "axes"):
        raise Invalid("a TensorParallelism needs axes")
    raw = parallelism.axes
    if not isinstance(raw, (list, tuple)):
        raise TypeError(f"TensorParallelism.axes must be a list, not {type(raw).__name__}")
    axes = [_axis_of(a) for a in raw]
    if not axes:
        raise Invalid("a TensorParallelism needs at least one axis")
    kinds = [a.kind for a in axes]
    if len(set(kinds)) != len(kinds):
        raise Invalid("each axis kind may appear once")
    for a in axes:
        if not 0 <= a.rank < a.size:
            raise Invalid(f"{a.kind} axis: rank {a.rank} is outside [0, {a.size})")
        if (a.kind == "tp") != (a.split_dim is not None):
            raise Invalid("a tp axis needs split_dim; dp, ep and pp axes take none")
        if a.kind == "ep" and a.expert_id is None:
            raise Invalid("an ep axis needs expert_id")
        if a.kind == "pp" and a.stage_id is None:
            raise Invalid("a pp axis needs stage_id")
    return tuple(sorted(axes, key=lambda a: AXIS_KINDS.index(a.kind)))


def writer_of(obj: Any) -> WriterPartition:
    """A ``writer_partition`` (any object with rank, size and split_dim),
    checked; raises :class:`Invalid`."""
    if not all(hasattr(obj, f) for f in ("rank", "size", "split_dim")):
        raise Invalid("a writer_partition needs rank, size and split_dim")
    wp = WriterPartition(*(_int_attr(obj, f, "writer_partition") for f in ("rank", "size", "split_dim")))
    if not 0 <= wp.rank < wp.size or wp.split_dim < 0:
        raise Invalid(f"writer_partition {tuple(wp)} names no slice")
    return wp


def read_target_of(target: Any) -> Tuple[str, Any]:
    """(mode, parallelism or None) of a ReadTarget (or look-alike; None
    reads as stored)."""
    if target is None:
        return READ_AS_STORED, None
    if not (hasattr(target, "mode") and hasattr(target, "parallelism")):
        raise Invalid("a ReadTarget needs mode and parallelism")
    mode = target.mode
    if not isinstance(mode, str):
        raise TypeError(f"ReadTarget.mode must be str, not {type(mode).__name__}")
    mode = mode.lower()
    if mode not in (READ_AS_STORED, READ_SHARD, READ_FULL):
        raise Invalid(f"unknown ReadTarget mode {target.mode!r}")
    return mode, target.parallelism


def tp_axis(axes: Sequence[Axis]) -> Optional[Axis]:
    return next((a for a in axes if a.kind == "tp"), None)


def with_tp_rank(axes: Sequence[Axis], rank: int, size: Optional[int] = None) -> Tuple[Axis, ...]:
    """``axes`` with the TP axis moved to ``rank`` (and ``size``)."""
    return tuple(a._replace(rank=rank, size=a.size if size is None else size) if a.kind == "tp" else a
                 for a in axes)


def _axis_name(a: Axis) -> str:
    name = f"{a.kind}_{a.rank}of{a.size}"
    if a.split_dim is not None:
        name += f"_sd{a.split_dim}"
    if a.expert_id is not None:
        name += f"_eid{a.expert_id}"
    if a.stage_id is not None:
        name += f"_sid{a.stage_id}"
    return name


def shard_key(base: str, axes: Sequence[Axis]) -> str:
    """The object holding the shard ``axes`` names (``axes`` in key order)."""
    if len(axes) == 1 and axes[0].kind == "tp":
        return f"{base}_tp_{axes[0].rank}"  # where put_tensor_with_tp puts it
    return base + "".join("__" + _axis_name(a) for a in axes)


def writer_key(base: str, wp: WriterPartition) -> str:
    return f"{base}__writer_{wp.rank}of{wp.size}_sd{wp.split_dim}"


def tp_read_key(base: str, rank: int, size: int) -> str:
    """Where a TP shard written by ``put_tensor_with_tp`` lies: a split in
    one piece is read from the base key itself."""
    return base if size <= 1 else f"{base}_tp_{rank}"


class Manifest(NamedTuple):
    """How a whole tensor was cut: enough to put it back together."""

    global_shape: Tuple[int, ...]
    split_dim: int
    shards: int


def encode_manifest(m: Manifest) -> bytes:
    body = {"shape": list(m.global_shape), "split_dim": m.split_dim, "shards": m.shards}
    return _MANIFEST_MAGIC + json.dumps(body, separators=(",", ":")).encode("ascii")


def decode_manifest(raw: bytes) -> Optional[Manifest]:
    """The manifest in ``raw``, or None when it holds none (a miss, or an
    object of another kind under that key)."""
    if not raw.startswith(_MANIFEST_MAGIC):
        return None
    try:
        body = json.loads(raw[len(_MANIFEST_MAGIC):])
        shape = tuple(int(n) for n in body["shape"])
        m = Manifest(shape, int(body["split_dim"]), int(body["shards"]))
    except (ValueError, KeyError, TypeError):
        return None
    if any(n < 0 for n in shape) or not 0 <= m.split_dim < len(shape) or m.shards <= 0:
        return None
    return m


def shard_range(dim_size: int, rank: int, count: int) -> Tuple[int, int]:
    """(start, length) of shard ``rank`` of ``count`` along a dimension of
    ``dim_size``."""
    start = dim_size * rank // count
    return start, dim_size * (rank + 1) // count - start


def splits_evenly(shape: Sequence[int], split_dim: int, count: int) -> bool:
    """Whether ``shape`` cuts into ``count`` equal shards along ``split_dim``
    (the only splits the parallel calls write or put back together)."""
    return 0 <= split_dim < len(shape) and count > 0 and shape[split_dim] % count == 0
