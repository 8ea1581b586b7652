"""The types and helpers gostore exports under mooncake.store's names:
enums, ReplicateConfig, QueryTaskResponse, replica descriptors, the
parallelism records, host memory, NUMA binding. Pure Python: no master, no
libgostore.so (except where a test says so).
"""

from __future__ import annotations

import copy
import ctypes
import json
import os
import pickle
import threading
import warnings

import pytest

import gostore
from gostore import (
    Descriptor,
    DiskDescriptor,
    MemoryDescriptor,
    MooncakeHostMemAllocator,
    ObjectDataType,
    ParallelAxis,
    QueryTaskResponse,
    ReadTarget,
    ReplicaDescriptor,
    ReplicaStatus,
    ReplicateConfig,
    SoftPinAction,
    TaskStatus,
    TaskType,
    TensorParallelism,
)
from gostore.buffers import hostmem
from gostore.store import tasks

# ---- the module surface -----------------------------------------------------

# What mooncake.store 0.3.13 exports, less its underscore helpers (checked
# below: those its own Python modules call).
MOONCAKE_PUBLIC = """
ACTIVATION BufferHandle BufferLease BufferLeaseView BufferPool COMPLETE Descriptor
DiskDescriptor EngramStore EngramStoreConfig FAILED GENERAL GRADIENT INITIALIZED KVCACHE METADATA MemoryDescriptor
MooncakeDistributedNoFRegister MooncakeDistributedStore MooncakeHostMemAllocator OPTIMIZER_STATE ObjectDataType PENDING
PROCESSING ParallelAxis QueryTaskResponse REMOVED REPLICA_COPY REPLICA_MOVE ReadTarget
RegisteredBufferLease RegisteredBufferLeaseView RegisteredBufferPool ReplicaDescriptor
ReplicaStatus ReplicateConfig SAMPLE SUCCESS SoftPinAction TENSOR TaskStatus TaskType
TensorParallelism UNDEFINED UNKNOWN WEIGHT bind_to_numa_node get_alloc_func_addr
get_free_func_addr
""".split()


def test_every_mooncake_name_is_exported():
    missing = [n for n in MOONCAKE_PUBLIC if not hasattr(gostore, n)]
    assert missing == []
    assert sorted(gostore._MOONCAKE_NAMES) == sorted(MOONCAKE_PUBLIC)
    assert set(MOONCAKE_PUBLIC) <= set(gostore.__all__)
    # The underscore helpers Mooncake's structured-object store calls.
    assert all(callable(getattr(gostore, n)) for n in gostore._MOONCAKE_PRIVATE_NAMES)
    assert gostore._tensor_metadata_size() == 304
    ns: dict = {}
    exec("from gostore import " + ", ".join(MOONCAKE_PUBLIC), ns)
    exec("from gostore import *", ns)


def test_module_level_constants_are_enum_members():
    assert gostore.KVCACHE is ObjectDataType.KVCACHE
    assert gostore.GENERAL is ObjectDataType.GENERAL
    assert gostore.UNKNOWN is ObjectDataType.UNKNOWN
    assert gostore.COMPLETE is ReplicaStatus.COMPLETE
    assert gostore.UNDEFINED is ReplicaStatus.UNDEFINED
    assert gostore.REPLICA_MOVE is TaskType.REPLICA_MOVE
    assert gostore.PENDING is TaskStatus.PENDING
    # names in two enums: the later export (TaskStatus) wins, as in Mooncake
    assert gostore.FAILED is TaskStatus.FAILED
    assert gostore.PROCESSING is TaskStatus.PROCESSING
    # SoftPinAction's members stay in their class
    assert not hasattr(gostore, "PRESERVE") and not hasattr(gostore, "ENABLE")


# ---- enums ------------------------------------------------------------------

ENUMS = {
    SoftPinAction: {"PRESERVE": 0, "ENABLE": 1, "DISABLE": 2},
    ObjectDataType: {"UNKNOWN": 0, "KVCACHE": 1, "TENSOR": 2, "WEIGHT": 3, "SAMPLE": 4,
                     "ACTIVATION": 5, "GRADIENT": 6, "OPTIMIZER_STATE": 7, "METADATA": 8,
                     "GENERAL": 9},
    ReplicaStatus: {"UNDEFINED": 0, "INITIALIZED": 1, "PROCESSING": 2, "COMPLETE": 3,
                    "REMOVED": 4, "FAILED": 5},
    TaskType: {"REPLICA_COPY": 0, "REPLICA_MOVE": 1},
    TaskStatus: {"PENDING": 0, "PROCESSING": 1, "SUCCESS": 3, "FAILED": 2},
}


@pytest.mark.parametrize("enum", list(ENUMS), ids=lambda e: e.__name__)
def test_enum_names_numbers_and_conversions(enum):
    assert {k: int(v) for k, v in enum.__members__.items()} == ENUMS[enum]
    assert list(enum.__members__) == list(ENUMS[enum])  # Mooncake's order
    for name, number in ENUMS[enum].items():
        m = enum[name]
        assert enum(number) is m and m.name == name and m.value == number
        assert int(m) == number and [*range(10)][m] == number  # __index__
        assert m != number  # members are not ints, as in Mooncake
        assert not isinstance(m, int)
        assert repr(m) == f"<{enum.__name__}.{name}: {number}>"
        assert str(m) == f"{enum.__name__}.{name}"
        assert pickle.loads(pickle.dumps(m)) is m
    with pytest.raises(ValueError):
        enum(99)  # Mooncake makes a nameless member; gostore refuses


# ---- ReplicateConfig ----------------------------------------------------------


def test_replicate_config_fields_and_defaults():
    c = ReplicateConfig()
    assert (c.replica_num, c.nof_replica_num, c.dfs_replica_num) == (1, 0, 0)
    assert c.soft_pin_action is SoftPinAction.PRESERVE and c.soft_pin_ttl_ms is None
    assert c.with_hard_pin is False and c.with_soft_pin is False
    assert (c.preferred_segment, c.preferred_segments, c.preferred_nof_segments) == ("", [], [])
    assert c.prefer_alloc_in_same_node is False
    assert c.data_type is ObjectDataType.UNKNOWN and c.group_ids is None
    assert str(c) == (
        "ReplicateConfig: { replica_num: 1, nof_replica_num: 0, dfs_replica_num: 0, "
        "soft_pin_action: PRESERVE, soft_pin_ttl_ms: default, with_hard_pin: 0, "
        "preferred_segments: [], preferred_nof_segments: [], prefer_alloc_in_same_node: 0, "
        "data_type: UNKNOWN }"
    )


def test_replicate_config_str_shows_what_is_set():
    c = ReplicateConfig()
    c.replica_num, c.nof_replica_num, c.dfs_replica_num = 2, 1, 2
    c.soft_pin_action, c.soft_pin_ttl_ms = SoftPinAction.ENABLE, 5000
    c.with_hard_pin, c.prefer_alloc_in_same_node = True, True
    c.preferred_segment, c.preferred_segments = "h:1", ["a:1", "b:2"]
    c.preferred_nof_segments, c.group_ids = ["n:1"], ["g1", "g2"]
    c.data_type = ObjectDataType.KVCACHE
    assert str(c) == (
        "ReplicateConfig: { replica_num: 2, nof_replica_num: 1, dfs_replica_num: 2, "
        "soft_pin_action: ENABLE, soft_pin_ttl_ms: 5000, with_hard_pin: 1, "
        "preferred_segments: [a:1, b:2], preferred_segment (deprecated): h:1, "
        "preferred_nof_segments: [n:1], prefer_alloc_in_same_node: 1, data_type: KVCACHE, "
        "group_ids: [g1, g2] }"
    )


@pytest.mark.parametrize("field,value,stored", [
    ("replica_num", True, 1),
    ("replica_num", 2**64 - 1, 2**64 - 1),
    ("soft_pin_ttl_ms", 0, 0),
    ("with_hard_pin", 2, True),
    ("with_hard_pin", 1.0, True),
    ("with_hard_pin", None, False),
    ("preferred_segment", b"h:1", "h:1"),
    ("preferred_segments", ("a", b"b"), ["a", "b"]),
    ("group_ids", ("g",), ["g"]),
    ("group_ids", None, None),
])
def test_replicate_config_converts_like_the_binding(field, value, stored):
    c = ReplicateConfig()
    setattr(c, field, value)
    got = getattr(c, field)
    assert got == stored and type(got) is type(stored)


@pytest.mark.parametrize("field,value", [
    ("replica_num", -1), ("replica_num", 2**64), ("replica_num", 2.0), ("replica_num", "2"),
    ("replica_num", None), ("nof_replica_num", -1), ("dfs_replica_num", None),
    ("soft_pin_action", 1), ("soft_pin_action", "ENABLE"), ("soft_pin_action", None),
    ("soft_pin_ttl_ms", -1), ("soft_pin_ttl_ms", 1.5),
    ("with_hard_pin", "yes"), ("with_hard_pin", []), ("prefer_alloc_in_same_node", b"x"),
    ("preferred_segment", None), ("preferred_segment", 1),
    ("preferred_segments", "ab"), ("preferred_segments", None), ("preferred_segments", [1]),
    ("preferred_nof_segments", None), ("group_ids", [1]), ("group_ids", "x"),
    ("data_type", 1), ("data_type", ReplicaStatus.COMPLETE), ("data_type", None),
])
def test_replicate_config_wrong_types_fail_on_assignment(field, value):
    c = ReplicateConfig()
    before = getattr(c, field)
    with pytest.raises(TypeError):
        setattr(c, field, value)
    assert getattr(c, field) == before
    with pytest.raises(TypeError):
        ReplicateConfig(**{field: value})


def test_replicate_config_lists_are_copies():
    c = ReplicateConfig()
    c.preferred_segments = ["a"]
    c.preferred_segments.append("b")  # a new list each read, as in Mooncake
    assert c.preferred_segments == ["a"]
    src = ["x"]
    c.group_ids = src
    src.append("y")
    assert c.group_ids == ["x"]


def test_replicate_config_with_soft_pin_is_soft_pin_action_enable():
    c = ReplicateConfig(with_soft_pin=True)
    assert c.soft_pin_action is SoftPinAction.ENABLE and c.with_soft_pin
    c.with_soft_pin = False
    assert c.soft_pin_action is SoftPinAction.PRESERVE
    c.soft_pin_action = SoftPinAction.DISABLE
    c.with_soft_pin = False  # not ENABLE: left alone
    assert c.soft_pin_action is SoftPinAction.DISABLE
    with pytest.raises(TypeError):
        c.with_soft_pin = "yes"
    assert "with_soft_pin" not in str(c)


def test_replicate_config_native_mapping():
    c = ReplicateConfig()
    assert c._to_native() == (1, 0, b"")
    c.replica_num = 3
    c.soft_pin_action = SoftPinAction.ENABLE
    assert c._to_native() == (3, 1, b"")
    c.soft_pin_action = SoftPinAction.DISABLE
    c.with_hard_pin = True
    c.prefer_alloc_in_same_node = True
    assert c._to_native() == (3, 2 | 4, b"")
    # preferred_segment first, then preferred_segments; empties and repeats dropped
    c.preferred_segment = "b:2"
    c.preferred_segments = ["a:1", "", "b:2", "c:3", "a:1"]
    assert c._to_native()[2] == b"b:2\na:1\nc:3"
    # fields kept on the object without an effect: same native request
    c.data_type = ObjectDataType.KVCACHE
    c.group_ids = ["g"]
    c.preferred_nof_segments = ["n:1"]
    assert c._to_native() == (3, 2 | 4, b"b:2\na:1\nc:3")


@pytest.mark.parametrize("change", [
    dict(replica_num=0),
    dict(replica_num=2**31),
    dict(nof_replica_num=1),  # no NVMe-oF tier
    dict(dfs_replica_num=1),  # no DFS tier
    dict(soft_pin_ttl_ms=5000),  # a TTL needs ENABLE
    dict(soft_pin_ttl_ms=5000, soft_pin_action=SoftPinAction.DISABLE),
    dict(preferred_segments=["a\nb"]),
    dict(preferred_segment="\ud800"),
])
def test_replicate_config_requests_this_store_refuses(change):
    assert ReplicateConfig(**change)._to_native() is None  # the call returns -600


def test_replicate_config_ttl_with_enable_is_accepted():
    c = ReplicateConfig(soft_pin_action=SoftPinAction.ENABLE, soft_pin_ttl_ms=5000)
    assert c._to_native() == (1, 1, b"")


def test_replicate_config_equality_copy_pickle():
    c = ReplicateConfig(replica_num=2, preferred_segments=["a"], group_ids=["g"],
                        data_type=ObjectDataType.TENSOR)
    for other in (copy.copy(c), copy.deepcopy(c), pickle.loads(pickle.dumps(c))):
        assert other == c and other is not c
    d = copy.copy(c)
    d.preferred_segments = ["b"]
    assert c.preferred_segments == ["a"] and d != c
    with pytest.raises(TypeError):
        hash(c)
    with pytest.raises(AttributeError):
        del c.replica_num


# ---- QueryTaskResponse and task ids -----------------------------------------------


def test_query_task_response_defaults_and_repr():
    r = QueryTaskResponse()
    assert (r.id, r.type, r.status, r.created_at_ms_epoch, r.last_updated_at_ms_epoch,
            r.assigned_client, r.message) == (
        (0, 0), TaskType.REPLICA_COPY, TaskStatus.PENDING, 0, 0, (0, 0), "")
    assert repr(r) == (
        'QueryTaskResponse(id=0-0, type=0, status=0, created_at=0, last_updated_at=0, '
        'assigned_client=0-0, message="")'
    )
    for name in ("id", "type", "status", "message", "assigned_client", "created_at_ms_epoch"):
        with pytest.raises(AttributeError):
            setattr(r, name, getattr(r, name))


def test_query_task_response_from_the_native_answer():
    doc = {"id": "17", "key": "k/1", "kind": "move", "status": "FAILED", "error": "TRANSFER_FAIL"}
    r = QueryTaskResponse._from_json(json.dumps(doc))
    assert (r.id, r.key, r.type, r.status, r.message) == (
        (0, 17), "k/1", TaskType.REPLICA_MOVE, TaskStatus.FAILED, "TRANSFER_FAIL")
    assert repr(r).startswith("QueryTaskResponse(id=0-17, type=1, status=2,")
    doc.update(kind="copy", status="SUCCESS", error="")
    r = QueryTaskResponse._from_json(json.dumps(doc))
    assert (r.type, r.status, r.message) == (TaskType.REPLICA_COPY, TaskStatus.SUCCESS, "")


def test_task_ids():
    assert tasks.task_id_from_native("42") == (0, 42)
    assert tasks.task_id_to_native((0, 42)) == b"42"
    assert tasks.task_id_to_native([0, 2**64 - 1]) == str(2**64 - 1).encode()
    assert tasks.task_id_to_native((5, 1)) is None  # not a gostore id
    for bad in ("42", b"42", 42, None, (1,), (1, 2, 3), (0, -1), (0, 2**64), (0, 1.0), ("0", "1")):
        with pytest.raises(TypeError):
            tasks.task_id_to_native(bad)


# ---- replica descriptors ------------------------------------------------------------


def test_descriptor_fields_and_repr():
    d = Descriptor()
    assert (d.buffer_address, d.size, d.transport_endpoint) == (0, 0, "")
    assert repr(d) == "<Descriptor size=0 buffer_address=0 transport_endpoint=>"
    d.buffer_address, d.size, d.transport_endpoint = 4096, 10, "h:1"
    assert repr(d) == "<Descriptor size=10 buffer_address=4096 transport_endpoint=h:1>"
    for name, bad in (("buffer_address", -1), ("size", None), ("transport_endpoint", 1)):
        with pytest.raises(TypeError):
            setattr(d, name, bad)


def test_replica_descriptors_are_made_by_the_store_only():
    for cls in (ReplicaDescriptor, MemoryDescriptor, DiskDescriptor, gostore.BufferHandle,
                gostore.BufferLease, gostore.BufferLeaseView):
        with pytest.raises(TypeError):
            cls()


def test_memory_replica_descriptor():
    r = ReplicaDescriptor._for_memory(ReplicaStatus.COMPLETE, 0x1000, 500, "127.0.0.1:15701")
    assert r.status is ReplicaStatus.COMPLETE
    assert (r.is_memory_replica(), r.is_disk_replica(), r.is_local_disk_replica()) == (
        True, False, False)
    bd = r.get_memory_descriptor().buffer_descriptor
    assert isinstance(bd, Descriptor)
    assert (bd.buffer_address, bd.size, bd.transport_endpoint) == (0x1000, 500, "127.0.0.1:15701")
    with pytest.raises(RuntimeError, match="Expected DiskDescriptor"):
        r.get_disk_descriptor()
    with pytest.raises(AttributeError):
        r.status = ReplicaStatus.REMOVED


def test_disk_replica_descriptor():
    r = ReplicaDescriptor._for_disk(ReplicaStatus.PROCESSING, "/ssd/obj", 123)
    assert (r.is_memory_replica(), r.is_disk_replica()) == (False, True)
    dd = r.get_disk_descriptor()
    assert (dd.file_path, dd.object_size) == ("/ssd/obj", 123)
    with pytest.raises(RuntimeError, match="Expected MemoryDescriptor"):
        r.get_memory_descriptor()
    local = ReplicaDescriptor._for_local_disk(ReplicaStatus.COMPLETE)
    assert local.is_local_disk_replica() and not local.is_disk_replica()
    with pytest.raises(TypeError):
        ReplicaDescriptor._for_disk(3, "/x", 1)  # status must be a ReplicaStatus


# ---- parallelism records -------------------------------------------------------------


def test_parallel_axis_fields():
    a = ParallelAxis()
    assert (a.kind, a.rank, a.size, a.split_dim, a.expert_id, a.stage_id) == (
        "", 0, 1, None, None, None)
    a.kind, a.rank, a.size, a.split_dim, a.expert_id = "tp", -1, 8, 1, 3
    assert (a.kind, a.rank, a.size, a.split_dim, a.expert_id) == ("tp", -1, 8, 1, 3)
    for name, bad in (("kind", 1), ("rank", "x"), ("size", 1.5), ("split_dim", "0"),
                      ("rank", None), ("stage_id", 2.0)):
        with pytest.raises(TypeError):
            setattr(a, name, bad)


def test_tensor_parallelism_holds_copies_of_what_is_assigned():
    a = ParallelAxis(kind="tp", rank=1, size=4)
    tp = TensorParallelism()
    assert tp.axes == []
    tp.axes = [a]
    a.rank = 3  # the caller's object, not the held copy
    assert tp.axes[0].rank == 1 and tp.axes[0] is not a
    tp.axes.append(ParallelAxis())  # a new list each read
    assert len(tp.axes) == 1
    tp.axes[0].rank = 2  # the held object itself
    assert tp.axes[0].rank == 2 and tp.axes[0] is tp.axes[0]
    for bad in ([1], None, "x"):
        with pytest.raises(TypeError):
            tp.axes = bad


def test_read_target():
    r = ReadTarget()
    assert (r.mode, r.parallelism) == ("as_stored", None)
    for given, stored in (("shard", "shard"), ("SHARD", "shard"), ("As_Stored", "as_stored"), ("Full", "full")):
        r.mode = given
        assert r.mode == stored
    for bad in (" shard", "tp", ""):
        with pytest.raises(RuntimeError):
            r.mode = bad
    with pytest.raises(TypeError):
        r.mode = None
    tp = TensorParallelism(axes=[ParallelAxis(kind="tp")])
    r.parallelism = tp
    assert r.parallelism is not tp and r.parallelism is r.parallelism
    assert r.parallelism == tp
    r.parallelism = None
    with pytest.raises(TypeError):
        r.parallelism = 1


# ---- host memory ------------------------------------------------------------------


def test_host_allocator_maps_real_memory():
    a = MooncakeHostMemAllocator()
    p = a.alloc(3 * 4096 + 1)
    try:
        assert p % 4096 == 0
        assert ctypes.string_at(p, 16) == b"\0" * 16  # zero-filled
        ctypes.memset(p, 0x5A, 3 * 4096 + 1)
        assert ctypes.string_at(p + 3 * 4096, 1) == b"\x5a"
        q = MooncakeHostMemAllocator().alloc(100)
        assert not (p <= q < p + 4 * 4096)  # disjoint
        assert a.free(q) == 0  # any allocator frees what another handed out
    finally:
        assert a.free(p) == 0
    assert a.free(p) == -1  # already freed
    assert a.free(4096) == -1  # never handed out


def test_host_allocator_errors():
    a = MooncakeHostMemAllocator()
    with pytest.raises(RuntimeError):
        a.alloc(0)
    with pytest.raises(RuntimeError):
        a.alloc(1 << 62)  # more than the kernel maps
    for bad in (-1, 1.0, "1", None):
        with pytest.raises(TypeError):
            a.alloc(bad)
    with pytest.raises(TypeError):
        a.free(-1)


def test_alloc_and_free_function_pointers():
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(gostore.get_alloc_func_addr())
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(gostore.get_free_func_addr())
    assert gostore.get_alloc_func_addr() == gostore.get_alloc_func_addr() != 0
    p = alloc(1 << 20)
    assert p and p % 4096 == 0
    ctypes.memset(p, 1, 1 << 20)
    assert MooncakeHostMemAllocator().free(p) == 0  # the same table
    q = alloc(64)
    free(q)
    assert MooncakeHostMemAllocator().free(q) == -1  # free() released it
    free(None)  # NULL and unknown pointers are ignored
    free(4096)
    assert alloc(0) is None  # NULL


# ---- NUMA ----------------------------------------------------------------------


def _fake_sysfs(tmp_path, online: str, cpus: dict):
    (tmp_path / "online").write_text(online + "\n")
    for node, cpulist in cpus.items():
        d = tmp_path / f"node{node}"
        d.mkdir()
        (d / "cpulist").write_text(cpulist + "\n")
    return str(tmp_path)


def _in_thread(fn):
    """Run ``fn`` in a new thread (binding changes that thread only)."""
    out: dict = {}

    def run():
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out["ret"] = fn()
            out["affinity"] = os.sched_getaffinity(0)
        out["warnings"] = [str(x.message) for x in w]

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out


def test_bind_to_numa_node_reports_what_it_cannot_do(tmp_path, monkeypatch):
    monkeypatch.setattr(hostmem, "_NODE_ROOT", str(tmp_path / "none"))
    out = _in_thread(lambda: gostore.bind_to_numa_node(0))
    assert out["ret"] is None and any("not available" in w for w in out["warnings"])
    monkeypatch.setattr(hostmem, "_NODE_ROOT", _fake_sysfs(tmp_path, "0", {0: "0"}))
    out = _in_thread(lambda: gostore.bind_to_numa_node(7))
    assert out["ret"] is None and any("invalid NUMA node 7" in w for w in out["warnings"])
    with pytest.raises(TypeError):
        gostore.bind_to_numa_node("0")
    with pytest.raises(TypeError):
        gostore.bind_to_numa_node(None)


def test_bind_to_numa_node_binds_the_calling_thread_only(tmp_path, monkeypatch):
    allowed = sorted(os.sched_getaffinity(0))
    one = allowed[-1]
    # node 0 of a fake topology holds one of the CPUs this process may use
    monkeypatch.setattr(hostmem, "_NODE_ROOT", _fake_sysfs(tmp_path, "0", {0: str(one)}))
    before = os.sched_getaffinity(0)
    out = _in_thread(lambda: gostore.bind_to_numa_node(0))
    assert out["affinity"] == {one}
    assert os.sched_getaffinity(0) == before  # this thread is untouched
    real_numa = os.path.exists("/sys/devices/system/node/node0")
    if real_numa:  # set_mempolicy(MPOL_PREFERRED, node 0) is real there
        assert not any("set_mempolicy" in w for w in out["warnings"]), out["warnings"]
