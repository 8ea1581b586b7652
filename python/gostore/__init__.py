"""gostore: a Mooncake-compatible distributed KV-cache store built in Go.

``from gostore import MooncakeDistributedStore, ReplicateConfig`` gives the
same class, argument order, return conventions and error numbers as
``mooncake.store.MooncakeDistributedStore``. Values are passed to and from the
native library (``libgostore.so``, loaded lazily through ctypes on first use)
without copies where the API allows.

Multiprocessing: use the ``spawn`` start method
(``multiprocessing.set_start_method("spawn")`` or
``multiprocessing.get_context("spawn")``). Once a process has loaded the Go
runtime -- its first store, master or buffer call -- a child made by
``fork()`` hangs.
"""

from __future__ import annotations

from .buffer import GostoreBuffer
from .config import ReplicateConfig
from .errors import ErrorCode
from .introspect import gpu_info, topology
from .master import EmbeddedMaster, master_binary_path
from .nano import NanoKVCache, ObjMeta, PlanError, PlanNotReady, WritePlan, plan_address
from .store import MooncakeDistributedStore
from .tasks import TaskInfo

__version__ = "0.1.0"

__all__ = [
    "MooncakeDistributedStore",
    "ReplicateConfig",
    "ErrorCode",
    "EmbeddedMaster",
    "GostoreBuffer",
    "TaskInfo",
    "master_binary_path",
    "gpu_info",
    "topology",
    "NanoKVCache",
    "WritePlan",
    "ObjMeta",
    "PlanError",
    "PlanNotReady",
    "plan_address",
    "__version__",
]
