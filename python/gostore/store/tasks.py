"""Replica tasks (``create_copy_task`` / ``create_move_task`` / ``query_task``).

A task copies an object to other segments or moves one of its replicas; the
client that created it carries it out in the background and the master keeps
its state, which :meth:`MooncakeDistributedStore.query_task` reports as a
:class:`QueryTaskResponse`. While a task runs on a key, ``remove`` and
``upsert`` of that key return -708 (OBJECT_HAS_REPLICATION_TASK).

Task ids have Mooncake's form, a 128-bit UUID as a tuple of two unsigned
64-bit ints ``(high, low)``. gostore's master gives each task a random 64-bit
number ``n`` (not a count), so its ids are ``(0, n)``.
"""

from __future__ import annotations

import json
import operator
from typing import Any, Optional, Tuple

from ..enums import TaskStatus, TaskType

__all__ = ["QueryTaskResponse", "TaskId", "NO_TASK_ID"]

TaskId = Tuple[int, int]
NO_TASK_ID: TaskId = (0, 0)
"""The id that ``create_copy_task`` / ``create_move_task`` return on failure."""

_U64_MAX = 2**64 - 1
_KINDS = {"copy": TaskType.REPLICA_COPY, "move": TaskType.REPLICA_MOVE}


def _uuid_text(u: TaskId) -> str:
    return f"{u[0]}-{u[1]}"


class QueryTaskResponse:
    """What the master knows about one replica task (read-only fields).

    ``id`` and ``assigned_client`` are ``(high, low)`` int pairs; ``type``
    is a :class:`TaskType`, ``status`` a :class:`TaskStatus`; ``message``
    is the error-code name of a ``FAILED`` task (``""`` otherwise).
    ``created_at_ms_epoch``, ``last_updated_at_ms_epoch`` and
    ``assigned_client`` are not reported by gostore's master yet: they read
    ``0`` and ``(0, 0)``. ``key`` (the object's key) is a gostore addition.
    ``QueryTaskResponse()`` builds the all-zero response, as in Mooncake.
    """

    __slots__ = (
        "_id",
        "_type",
        "_status",
        "_created",
        "_updated",
        "_client",
        "_message",
        "_key",
    )

    def __init__(self) -> None:
        self._id: TaskId = (0, 0)
        self._type = TaskType.REPLICA_COPY
        self._status = TaskStatus.PENDING
        self._created = 0
        self._updated = 0
        self._client: TaskId = (0, 0)
        self._message = ""
        self._key = ""

    id = property(lambda self: self._id, doc="The task id, ``(high, low)``.")
    type = property(lambda self: self._type, doc="A :class:`TaskType`.")
    status = property(lambda self: self._status, doc="A :class:`TaskStatus`.")
    created_at_ms_epoch = property(lambda self: self._created, doc="0: not reported yet.")
    last_updated_at_ms_epoch = property(lambda self: self._updated, doc="0: not reported yet.")
    assigned_client = property(lambda self: self._client, doc="(0, 0): not reported yet.")
    message = property(lambda self: self._message, doc="Error name of a FAILED task, else ''.")
    key = property(lambda self: self._key, doc="The object's key (gostore addition).")

    def __repr__(self) -> str:
        return (
            f"QueryTaskResponse(id={_uuid_text(self._id)}, type={int(self._type)}, "
            f"status={int(self._status)}, created_at={self._created}, "
            f"last_updated_at={self._updated}, "
            f"assigned_client={_uuid_text(self._client)}, message=\"{self._message}\")"
        )

    @classmethod
    def _from_json(cls, text: str) -> "QueryTaskResponse":
        """From ``gs_query_task``'s ``{"id","key","kind","status","error"}``."""
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError(f"gs_query_task returned {text!r}")
        r = cls()
        r._id = task_id_from_native(str(doc.get("id", "")))
        r._type = _KINDS[doc.get("kind", "")]
        r._status = TaskStatus[doc.get("status", "")]
        r._message = str(doc.get("error", "") or "")
        r._key = str(doc.get("key", ""))
        return r


def task_id_from_native(text: str) -> TaskId:
    """``(0, n)`` for the native library's decimal id ``n``."""
    return (0, int(text))


def task_id_to_native(task_id: Any) -> Optional[bytes]:
    """The native id of a ``(high, low)`` pair, or ``None`` for a pair that
    names no gostore task (``high != 0``). ``TypeError`` unless ``task_id``
    is a tuple or list of two ints in ``[0, 2**64)``."""
    if not isinstance(task_id, (tuple, list)) or len(task_id) != 2:
        raise TypeError(
            f"task_id must be a tuple[int, int], not {type(task_id).__name__}"
        )
    try:
        hi, lo = (operator.index(x) for x in task_id)
    except TypeError:
        raise TypeError("task_id must be a tuple of two ints") from None
    if not (0 <= hi <= _U64_MAX and 0 <= lo <= _U64_MAX):
        raise TypeError("task_id parts must be in [0, 2**64)")
    if hi != 0:
        return None
    return str(lo).encode("ascii")
