"""``ReplicateConfig``: how many replicas a put makes and where they go."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from . import _fields as F
from .enums import ObjectDataType, SoftPinAction

__all__ = ["ReplicateConfig"]

# Flag bits of gs_put_batch (bindings/ABI.md).
FLAG_SOFT_PIN = 1
FLAG_HARD_PIN = 2
FLAG_PREFER_SAME_NODE = 4

_INT32_MAX = 2**31 - 1

_FIELDS = (
    "replica_num",
    "nof_replica_num",
    "dfs_replica_num",
    "soft_pin_action",
    "soft_pin_ttl_ms",
    "with_hard_pin",
    "preferred_segments",
    "preferred_segment",
    "preferred_nof_segments",
    "prefer_alloc_in_same_node",
    "data_type",
    "group_ids",
)


class ReplicateConfig:
    """Replication options of a write: the fields of Mooncake 0.3.13's class.

    Build one with ``ReplicateConfig()`` and set fields, or pass them as
    keywords (``ReplicateConfig(replica_num=2)``, a gostore extension). A
    value of the wrong type raises ``TypeError`` when it is assigned.

    What the store does with each field (docs/python-api.md has the table):

    - ``replica_num``: replicas on distinct segments, best effort (``-200``
      only when none can be placed; ``0`` gives ``-600``).
    - ``soft_pin_action``: ``ENABLE`` soft-pins the object for the master's
      ``--default_kv_soft_pin_ttl``; ``DISABLE`` and ``PRESERVE`` leave it
      unpinned (an upsert with ``PRESERVE`` also drops an existing soft pin:
      not yet as in Mooncake). ``with_soft_pin`` (older Mooncake releases)
      reads and sets ``soft_pin_action == ENABLE``.
    - ``soft_pin_ttl_ms``: must be ``None`` unless ``soft_pin_action`` is
      ``ENABLE`` (else the write returns ``-600``); the per-object TTL
      itself is not applied yet.
    - ``with_hard_pin``, ``prefer_alloc_in_same_node``: applied.
    - ``preferred_segment`` then ``preferred_segments``: tried first, in
      that order.
    - ``nof_replica_num`` / ``dfs_replica_num``: gostore has no NVMe-oF or
      DFS tier; a value above 0 makes the write return ``-600``.
    - ``preferred_nof_segments``, ``data_type``, ``group_ids``: kept on the
      object, no effect yet.
    """

    __slots__ = F.slots(*_FIELDS)

    replica_num = F.Field(F.u64, 1, doc="Replicas to place (best effort); >= 1 to write.")
    nof_replica_num = F.Field(F.u64, 0, doc="NVMe-oF replicas; gostore has none (> 0: -600).")
    dfs_replica_num = F.Field(F.u64, 0, doc="DFS replicas; gostore has none (> 0: -600).")
    soft_pin_action = F.Field(
        F.instance_of(SoftPinAction), SoftPinAction.PRESERVE, doc="A SoftPinAction."
    )
    soft_pin_ttl_ms = F.Field(
        F.optional(F.u64), None, doc="Soft-pin TTL in ms, only with ENABLE; not applied yet."
    )
    with_hard_pin = F.Field(F.boolean, False, doc="Never evict the object.")
    preferred_segments = F.Field(
        F.str_list, list, copy_out=True, doc="Segments (get_hostname() values) tried first."
    )
    preferred_segment = F.Field(F.string, "", doc="One segment tried before preferred_segments.")
    preferred_nof_segments = F.Field(
        F.str_list, list, copy_out=True, doc="NVMe-oF segments; no effect."
    )
    prefer_alloc_in_same_node = F.Field(F.boolean, False, doc="Prefer segments on this host.")
    data_type = F.Field(
        F.instance_of(ObjectDataType), ObjectDataType.UNKNOWN, doc="An ObjectDataType label; no effect."
    )
    group_ids = F.Field(
        F.optional(F.str_list), None, copy_out=True, doc="Placement groups; no effect."
    )

    def __init__(self, **fields: Any) -> None:
        with_soft_pin = fields.pop("with_soft_pin", None)
        F.init(self, fields)
        if with_soft_pin is not None:
            self.with_soft_pin = with_soft_pin

    @property
    def with_soft_pin(self) -> bool:
        """``soft_pin_action == SoftPinAction.ENABLE`` (the field of Mooncake
        releases before ``soft_pin_action``). Setting ``True`` selects
        ``ENABLE``; setting ``False`` turns ``ENABLE`` into ``PRESERVE``."""
        return self._soft_pin_action is SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, value: Any) -> None:
        if F.boolean("ReplicateConfig.with_soft_pin", value):
            self._soft_pin_action = SoftPinAction.ENABLE
        elif self._soft_pin_action is SoftPinAction.ENABLE:
            self._soft_pin_action = SoftPinAction.PRESERVE

    def __str__(self) -> str:
        def names(xs: List[str]) -> str:
            return "[" + ", ".join(xs) + "]"

        ttl = "default" if self._soft_pin_ttl_ms is None else str(self._soft_pin_ttl_ms)
        parts = [
            f"replica_num: {self._replica_num}",
            f"nof_replica_num: {self._nof_replica_num}",
            f"dfs_replica_num: {self._dfs_replica_num}",
            f"soft_pin_action: {self._soft_pin_action.name}",
            f"soft_pin_ttl_ms: {ttl}",
            f"with_hard_pin: {int(self._with_hard_pin)}",
            f"preferred_segments: {names(self._preferred_segments)}",
        ]
        if self._preferred_segment:
            parts.append(f"preferred_segment (deprecated): {self._preferred_segment}")
        parts += [
            f"preferred_nof_segments: {names(self._preferred_nof_segments)}",
            f"prefer_alloc_in_same_node: {int(self._prefer_alloc_in_same_node)}",
            f"data_type: {self._data_type.name}",
        ]
        if self._group_ids is not None:
            parts.append(f"group_ids: {names(self._group_ids)}")
        return "ReplicateConfig: { " + ", ".join(parts) + " }"

    def __repr__(self) -> str:
        body = ", ".join(f"{f}={getattr(self, '_' + f)!r}" for f in _FIELDS)
        return f"ReplicateConfig({body})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReplicateConfig):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # mutable

    def __copy__(self) -> "ReplicateConfig":
        new = ReplicateConfig.__new__(ReplicateConfig)
        for s in self.__slots__:
            v = getattr(self, s)
            object.__setattr__(new, s, list(v) if isinstance(v, list) else v)
        return new

    def __deepcopy__(self, memo: dict) -> "ReplicateConfig":
        return self.__copy__()

    def __reduce__(self):
        return (_rebuild, ({f: getattr(self, "_" + f) for f in _FIELDS},))

    def _to_native(self) -> Optional[Tuple[int, int, bytes]]:
        """``(replica_num, flags, preferred)`` for ``gs_put_batch``, or
        ``None`` when the config asks for something this store cannot do
        (the caller then returns -600 without calling native code).

        ``preferred`` lists ``preferred_segment`` then ``preferred_segments``
        (duplicates and empty names dropped), newline-separated.
        """
        replica_num = self._replica_num
        if not (1 <= replica_num <= _INT32_MAX):
            return None
        if self._nof_replica_num or self._dfs_replica_num:
            return None  # no NVMe-oF / DFS tier here
        action = self._soft_pin_action
        if self._soft_pin_ttl_ms is not None and action is not SoftPinAction.ENABLE:
            return None  # a TTL without ENABLE is invalid, as in Mooncake
        flags = 0
        if action is SoftPinAction.ENABLE:
            flags |= FLAG_SOFT_PIN
        if self._with_hard_pin:
            flags |= FLAG_HARD_PIN
        if self._prefer_alloc_in_same_node:
            flags |= FLAG_PREFER_SAME_NODE
        segs: List[str] = []
        for s in [self._preferred_segment, *self._preferred_segments]:
            if s and s not in segs:
                segs.append(s)
        if any("\n" in s for s in segs):
            return None
        try:
            blob = "\n".join(segs).encode("utf-8")
        except UnicodeEncodeError:
            return None
        return replica_num, flags, blob


def _rebuild(values: dict) -> ReplicateConfig:
    return ReplicateConfig(**values)


DEFAULT_CONFIG_NATIVE: Tuple[int, int, bytes] = (1, 0, b"")
