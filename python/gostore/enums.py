"""The enumerations of Mooncake's Python module, with its member names and
numbers.

Each is an :class:`enum.Enum` whose members also convert to ``int``
(``int(TaskStatus.SUCCESS) == 3``) and work as indexes. As in Mooncake, a
member does not compare equal to its number (``TaskStatus.SUCCESS != 3``):
compare members, or ``int(member)`` with numbers. ``repr`` and ``str`` read
``<TaskStatus.SUCCESS: 3>`` and ``TaskStatus.SUCCESS``.

Mooncake also exports most members at module level (``gostore.KVCACHE``);
where two enums share a name the later one wins there, as in Mooncake:
``gostore.PROCESSING`` and ``gostore.FAILED`` are :class:`TaskStatus`
members. ``SoftPinAction``'s members are not exported that way.
"""

from __future__ import annotations

import enum

__all__ = [
    "SoftPinAction",
    "ObjectDataType",
    "ReplicaStatus",
    "TaskType",
    "TaskStatus",
    "MODULE_CONSTANTS",
]


class _IntConvertible(enum.Enum):
    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value


class SoftPinAction(_IntConvertible):
    """What a write does to the object's soft pin (``ReplicateConfig.soft_pin_action``).

    ``PRESERVE``: a new object is not soft-pinned; an existing one keeps
    what it had. ``ENABLE``: soft-pin it. ``DISABLE``: clear the soft pin.
    """

    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ObjectDataType(_IntConvertible):
    """What an object holds (``ReplicateConfig.data_type``); a label."""

    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class ReplicaStatus(_IntConvertible):
    """The state of one replica (``ReplicaDescriptor.status``)."""

    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class TaskType(_IntConvertible):
    """The kind of a replica task (``QueryTaskResponse.type``)."""

    REPLICA_COPY = 0
    REPLICA_MOVE = 1


class TaskStatus(_IntConvertible):
    """The state of a replica task (``QueryTaskResponse.status``).

    The numbers are Mooncake's: ``FAILED`` is 2 and ``SUCCESS`` is 3.
    """

    PENDING = 0
    PROCESSING = 1
    SUCCESS = 3
    FAILED = 2


def _module_constants() -> dict:
    out: dict = {}
    # Mooncake's export order: a later enum overwrites a shared name.
    for e in (ObjectDataType, ReplicaStatus, TaskType, TaskStatus):
        out.update(e.__members__)
    return out


MODULE_CONSTANTS = _module_constants()
"""Name -> member for the module-level constants (``gostore.KVCACHE``...)."""
