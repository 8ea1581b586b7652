"""gostore: a Mooncake-compatible distributed KV-cache store built in Go.

``from gostore import MooncakeDistributedStore, ReplicateConfig`` gives the
same class, argument order, return conventions and error numbers as
``mooncake.store.MooncakeDistributedStore``; the other names that
``mooncake.store`` exports (enums and their module-level members, replica
and task types, buffer pools, host memory helpers) are here too, with the
same names. Values are passed to and from the native library
(``libgostore.so``, loaded lazily through ctypes on first use) without copies
where the API allows.

Multiprocessing: use the ``spawn`` start method
(``multiprocessing.set_start_method("spawn")`` or
``multiprocessing.get_context("spawn")``). Once a process has loaded the Go
runtime -- its first store, master or buffer call -- a child made by
``fork()`` hangs.
"""

from __future__ import annotations

from .buffers.buffer import BufferHandle, GostoreBuffer
from .buffers.pool import (
    BufferLease,
    BufferLeaseView,
    BufferPool,
    RegisteredBufferLease,
    RegisteredBufferLeaseView,
    RegisteredBufferPool,
)
from .config import ReplicateConfig
from .store.engram import EngramStore, EngramStoreConfig
from .enums import (
    MODULE_CONSTANTS as _MODULE_CONSTANTS,
    ObjectDataType,
    ReplicaStatus,
    SoftPinAction,
    TaskStatus,
    TaskType,
)
from .errors import ErrorCode
from .buffers.hostmem import (
    MooncakeHostMemAllocator,
    bind_to_numa_node,
    get_alloc_func_addr,
    get_free_func_addr,
)
from .tools.introspect import gpu_info, topology
from .tools.master import EmbeddedMaster, master_binary_path
from .store.nano import NanoKVCache, ObjMeta, PlanError, PlanNotReady, WritePlan, plan_address
from .store.nof import MooncakeDistributedNoFRegister
from .tensors.parallel import ParallelAxis, ReadTarget, TensorParallelism
from .store.replica import Descriptor, DiskDescriptor, MemoryDescriptor, ReplicaDescriptor
from .store.distributed_store import MooncakeDistributedStore
from .store.tasks import QueryTaskResponse
from .tensors.codec import MC_HEADER_SIZE as _MC_HEADER_SIZE
from .tensors.codec import deserialize as _deserialize_tensor
from .tensors.codec import serialize as _serialize_tensor


def _tensor_metadata_size() -> int:
    """Mooncake's ``_tensor_metadata_size``: the length of a tensor
    object's header in Mooncake's form (where its data starts)."""
    return _MC_HEADER_SIZE


# Mooncake's module-level enum members: KVCACHE, COMPLETE, PENDING, FAILED...
globals().update(_MODULE_CONSTANTS)

__version__ = "0.1.0"

# Names that mooncake.store (0.3.13) exports and gostore has.
_MOONCAKE_NAMES = (
    "MooncakeDistributedStore",
    "ReplicateConfig",
    "SoftPinAction",
    "ObjectDataType",
    "ReplicaStatus",
    "ReplicaDescriptor",
    "MemoryDescriptor",
    "DiskDescriptor",
    "Descriptor",
    "TaskType",
    "TaskStatus",
    "QueryTaskResponse",
    "BufferHandle",
    "MooncakeHostMemAllocator",
    "BufferPool",
    "BufferLease",
    "BufferLeaseView",
    "RegisteredBufferPool",
    "RegisteredBufferLease",
    "RegisteredBufferLeaseView",
    "TensorParallelism",
    "ParallelAxis",
    "ReadTarget",
    "EngramStore",
    "EngramStoreConfig",
    "MooncakeDistributedNoFRegister",
    "bind_to_numa_node",
    "get_alloc_func_addr",
    "get_free_func_addr",
) + tuple(_MODULE_CONSTANTS)

# Underscore helpers mooncake.store exports for Mooncake's own Python
# modules (its structured-object store reads tensor headers through them).
_MOONCAKE_PRIVATE_NAMES = ("_serialize_tensor", "_deserialize_tensor", "_tensor_metadata_size")

__all__ = list(_MOONCAKE_NAMES) + [
    "ErrorCode",
    "EmbeddedMaster",
    "GostoreBuffer",
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
