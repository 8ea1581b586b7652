"""``ReplicateConfig``: how many replicas a put makes and where they go."""

from __future__ import annotations

import operator
from typing import List, Optional, Tuple

__all__ = ["ReplicateConfig"]

# Flag bits of gs_put_batch (bindings/ABI.md).
FLAG_SOFT_PIN = 1
FLAG_HARD_PIN = 2
FLAG_PREFER_SAME_NODE = 4

_INT32_MAX = 2**31 - 1


class ReplicateConfig:
    """Replication options of a put (same fields as Mooncake's class).

    ``replica_num`` is best effort: the store places as many replicas on
    distinct segments as it can and fails (-200) only when it can place none.
    ``preferred_segment`` (a ``get_hostname()`` value) and then
    ``preferred_segments`` are tried first.

    Fields are plain attributes: ``ReplicateConfig(replica_num=2)`` and
    ``cfg.with_soft_pin = True`` both work. Types are checked when the config
    is used by a call (``TypeError`` there).
    """

    __slots__ = (
        "replica_num",
        "with_soft_pin",
        "with_hard_pin",
        "preferred_segment",
        "preferred_segments",
        "prefer_alloc_in_same_node",
    )

    def __init__(
        self,
        replica_num: int = 1,
        with_soft_pin: bool = False,
        with_hard_pin: bool = False,
        preferred_segment: str = "",
        preferred_segments: Optional[List[str]] = None,
        prefer_alloc_in_same_node: bool = False,
    ) -> None:
        self.replica_num = replica_num
        self.with_soft_pin = with_soft_pin
        self.with_hard_pin = with_hard_pin
        self.preferred_segment = preferred_segment
        # A fresh list per instance (never a shared mutable default).
        self.preferred_segments = [] if preferred_segments is None else preferred_segments
        self.prefer_alloc_in_same_node = prefer_alloc_in_same_node

    def __repr__(self) -> str:
        return (
            f"ReplicateConfig(replica_num={self.replica_num!r}, "
            f"with_soft_pin={self.with_soft_pin!r}, "
            f"with_hard_pin={self.with_hard_pin!r}, "
            f"preferred_segment={self.preferred_segment!r}, "
            f"preferred_segments={self.preferred_segments!r}, "
            f"prefer_alloc_in_same_node={self.prefer_alloc_in_same_node!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReplicateConfig):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self.__slots__)

    __hash__ = None  # mutable

    def _to_native(self) -> Optional[Tuple[int, int, bytes]]:
        """``(replica_num, flags, preferred)`` for ``gs_put_batch``.

        Raises ``TypeError`` for wrong field types; returns ``None`` when a
        value has the right type but cannot be expressed (the caller then
        returns -600 without calling native code).
        """
        replica_num = _index("ReplicateConfig.replica_num", self.replica_num)
        flags = 0
        for name, bit in (
            ("with_soft_pin", FLAG_SOFT_PIN),
            ("with_hard_pin", FLAG_HARD_PIN),
            ("prefer_alloc_in_same_node", FLAG_PREFER_SAME_NODE),
        ):
            if _flag(name, getattr(self, name)):
                flags |= bit
        segs = []
        if not isinstance(self.preferred_segment, str):
            raise TypeError(
                "ReplicateConfig.preferred_segment must be str, not "
                f"{type(self.preferred_segment).__name__}"
            )
        if self.preferred_segment:
            segs.append(self.preferred_segment)
        if not isinstance(self.preferred_segments, (list, tuple)):
            raise TypeError(
                "ReplicateConfig.preferred_segments must be a list of str, not "
                f"{type(self.preferred_segments).__name__}"
            )
        for s in self.preferred_segments:
            if not isinstance(s, str):
                raise TypeError(
                    "ReplicateConfig.preferred_segments must contain only str, "
                    f"found {type(s).__name__}"
                )
            if s and s not in segs:
                segs.append(s)
        if not (0 <= replica_num <= _INT32_MAX):
            return None
        try:
            blob = "\n".join(segs).encode("utf-8")
        except UnicodeEncodeError:
            return None
        if any("\n" in s for s in segs):
            return None
        return replica_num, flags, blob


def _index(what: str, value: object) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{what} must be int, not bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be int, not {type(value).__name__}") from None


def _flag(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):  # 0/1 as from C-ish callers
        return value != 0
    if type(value).__name__ == "bool_":  # numpy.bool_, without importing numpy
        return bool(value)
    raise TypeError(f"ReplicateConfig.{name} must be bool, not {type(value).__name__}")


DEFAULT_CONFIG_NATIVE: Tuple[int, int, bytes] = (1, 0, b"")
