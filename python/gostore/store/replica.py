"""Where an object's replicas are: ``ReplicaDescriptor`` and the
descriptors it holds.

A :class:`ReplicaDescriptor` is either a memory replica, whose
:class:`MemoryDescriptor` holds one :class:`Descriptor` (address, size and
transport endpoint of the bytes), or a disk replica described by a
:class:`DiskDescriptor` (file path and size). As in Mooncake,
``ReplicaDescriptor``, ``MemoryDescriptor`` and ``DiskDescriptor`` cannot
be built by user code (``TypeError``); the store makes them. ``Descriptor``
can be.
"""

from __future__ import annotations

from typing import Any

from .. import _fields as F
from ..enums import ReplicaStatus

__all__ = ["Descriptor", "MemoryDescriptor", "DiskDescriptor", "ReplicaDescriptor"]


def _no_constructor(cls: type) -> TypeError:
    return TypeError(f"{cls.__module__}.{cls.__name__}: no public constructor")


class Descriptor:
    """One range of bytes of a memory replica: ``buffer_address`` and
    ``size`` (unsigned ints) and the ``transport_endpoint`` ("host:port")
    of the process that holds it."""

    __slots__ = F.slots("buffer_address", "size", "transport_endpoint")

    buffer_address = F.Field(F.u64, 0, doc="Address in the holder's memory.")
    size = F.Field(F.u64, 0, doc="Length in bytes.")
    transport_endpoint = F.Field(F.string, "", doc="The holder's transfer endpoint.")

    def __init__(self, **fields: Any) -> None:
        F.init(self, fields)

    def __repr__(self) -> str:
        return (
            f"<Descriptor size={self._size} buffer_address={self._buffer_address} "
            f"transport_endpoint={self._transport_endpoint}>"
        )


class MemoryDescriptor:
    """A memory replica: its ``buffer_descriptor`` (a :class:`Descriptor`)."""

    __slots__ = F.slots("buffer_descriptor")

    buffer_descriptor = F.Field(F.instance_of(Descriptor), Descriptor, doc="The bytes.")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise _no_constructor(type(self))

    @classmethod
    def _make(cls, descriptor: Descriptor) -> "MemoryDescriptor":
        self = cls.__new__(cls)
        F.init(self, {"buffer_descriptor": descriptor})
        return self


class DiskDescriptor:
    """A disk replica: ``file_path`` and ``object_size`` (bytes)."""

    __slots__ = F.slots("file_path", "object_size")

    file_path = F.Field(F.string, "", doc="Path of the file holding the object.")
    object_size = F.Field(F.u64, 0, doc="Object size in bytes.")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise _no_constructor(type(self))

    @classmethod
    def _make(cls, file_path: str, object_size: int) -> "DiskDescriptor":
        self = cls.__new__(cls)
        F.init(self, {"file_path": file_path, "object_size": object_size})
        return self


_MEMORY, _DISK, _LOCAL_DISK = "memory", "disk", "local_disk"


class ReplicaDescriptor:
    """One replica of an object: its ``status`` (a :class:`ReplicaStatus`)
    and where it lives.

    ``is_memory_replica()`` / ``is_disk_replica()`` /
    ``is_local_disk_replica()`` tell the kind; ``get_memory_descriptor()``
    and ``get_disk_descriptor()`` return the descriptor and raise
    ``RuntimeError`` for a replica of the other kind.
    """

    __slots__ = ("_status", "_kind", "_memory", "_disk")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise _no_constructor(type(self))

    @property
    def status(self) -> ReplicaStatus:
        return self._status

    def is_memory_replica(self) -> bool:
        return self._kind == _MEMORY

    def is_disk_replica(self) -> bool:
        return self._kind == _DISK

    def is_local_disk_replica(self) -> bool:
        return self._kind == _LOCAL_DISK

    def get_memory_descriptor(self) -> MemoryDescriptor:
        if self._kind != _MEMORY:
            raise RuntimeError("Expected MemoryDescriptor")
        return self._memory

    def get_disk_descriptor(self) -> DiskDescriptor:
        if self._kind != _DISK:
            raise RuntimeError("Expected DiskDescriptor")
        return self._disk

    def __repr__(self) -> str:
        return f"<ReplicaDescriptor {self._kind} status={self._status.name}>"

    @classmethod
    def _new(cls, kind: str, status: ReplicaStatus) -> "ReplicaDescriptor":
        if not isinstance(status, ReplicaStatus):
            raise TypeError(f"status must be a ReplicaStatus, not {type(status).__name__}")
        self = cls.__new__(cls)
        self._status, self._kind, self._memory, self._disk = status, kind, None, None
        return self

    @classmethod
    def _for_memory(
        cls, status: ReplicaStatus, buffer_address: int, size: int, transport_endpoint: str
    ) -> "ReplicaDescriptor":
        """A memory replica (for the store methods that report replicas)."""
        self = cls._new(_MEMORY, status)
        d = Descriptor(
            buffer_address=buffer_address, size=size, transport_endpoint=transport_endpoint
        )
        self._memory = MemoryDescriptor._make(d)
        return self

    @classmethod
    def _for_disk(cls, status: ReplicaStatus, file_path: str, object_size: int) -> "ReplicaDescriptor":
        """A disk replica (for the store methods that report replicas)."""
        self = cls._new(_DISK, status)
        self._disk = DiskDescriptor._make(file_path, object_size)
        return self

    @classmethod
    def _for_local_disk(cls, status: ReplicaStatus) -> "ReplicaDescriptor":
        """A replica on a client's local disk (no descriptor is exposed)."""
        return cls._new(_LOCAL_DISK, status)
