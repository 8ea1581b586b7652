"""Replica tasks (``create_copy_task`` / ``create_move_task`` / ``query_task``).

A task copies an object to other segments or moves one of its replicas; the
client that created it carries it out in the background and the master keeps
its state, which :meth:`MooncakeDistributedStore.query_task` reports as a
:class:`TaskInfo`. While a task runs on a key, ``remove`` and ``upsert`` of
that key return -708 (OBJECT_HAS_REPLICATION_TASK).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["TaskInfo", "TASK_STATUSES"]

# The values of TaskInfo.status. The master starts tasks as PROCESSING;
# PENDING is accepted for Mooncake compatibility (a queued task).
TASK_STATUSES = ("PENDING", "PROCESSING", "SUCCESS", "FAILED")


@dataclass(frozen=True)
class TaskInfo:
    """What the master knows about one replica task.

    ``status`` is one of ``"PENDING"``, ``"PROCESSING"``, ``"SUCCESS"``,
    ``"FAILED"``; ``error`` is the failure's error-code name (``""`` unless
    ``FAILED``); ``kind`` is ``"copy"`` or ``"move"``.
    """

    task_id: str
    key: str
    kind: str
    status: str
    error: str = ""

    @property
    def done(self) -> bool:
        """True once the task ended (``SUCCESS`` or ``FAILED``)."""
        return self.status in ("SUCCESS", "FAILED")

    @classmethod
    def _from_json(cls, text: str) -> "TaskInfo":
        """From ``gs_query_task``'s ``{"id","key","kind","status","error"}``."""
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError(f"gs_query_task returned {text!r}")
        return cls(
            task_id=str(doc.get("id", "")),
            key=str(doc.get("key", "")),
            kind=str(doc.get("kind", "")),
            status=str(doc.get("status", "")),
            error=str(doc.get("error", "") or ""),
        )
