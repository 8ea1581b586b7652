"""Runs the same calls on the value types of ``mooncake.store`` or of
``gostore`` and prints what each did, as JSON: ``python parity_probe.py
gostore`` / ``python parity_probe.py mooncake.store``.

test_mooncake_parity.py runs it under both and compares; each entry is
``[label, "ok", repr]`` or ``[label, "raise", exception type name]``.
Nothing here needs a store or the native library.
"""

from __future__ import annotations

import importlib
import json
import sys


class Index:
    def __index__(self) -> int:
        return 4

    def __repr__(self) -> str:
        return "Index()"


def main(modname: str) -> None:
    m = importlib.import_module(modname)
    out = []

    def probe(label, fn):
        try:
            out.append([label, "ok", repr(fn())])
        except Exception as e:  # noqa: BLE001
            out.append([label, "raise", type(e).__name__])

    # ---- enums ----
    for name in ("SoftPinAction", "ObjectDataType", "ReplicaStatus", "TaskType", "TaskStatus"):
        e = getattr(m, name)
        probe(f"{name}.__members__", lambda: {k: int(v) for k, v in e.__members__.items()})
        for k, v in e.__members__.items():
            probe(f"{name}.{k} repr", lambda: repr(v))
            probe(f"{name}.{k} str", lambda: str(v))
            probe(f"{name}.{k} name/value", lambda: (v.name, v.value))
            probe(f"{name}.{k} == int", lambda: v == int(v))
            probe(f"{name}.{k} ctor", lambda: e(int(v)) == v)
            probe(f"{name}.{k} index", lambda: list(range(20))[v])
            probe(f"{name}.{k} hash", lambda: {v: 1}[e(int(v))])
            probe(f"{name}.{k} isinstance int", lambda: isinstance(v, int))
    consts = sorted(
        n for n in dir(m) if n.isupper() and not n.startswith("_")
    )
    probe("module constants", lambda: {n: repr(getattr(m, n)) for n in consts})

    # ---- ReplicateConfig ----
    RC = m.ReplicateConfig
    probe("ReplicateConfig() str", lambda: str(RC()))
    probe("ReplicateConfig(2)", lambda: RC(2))
    values = {
        "replica_num": [2, True, 2.0, "2", -1, 0, 2**64 - 1, 2**64, None, Index()],
        "nof_replica_num": [3, -1, None],
        "dfs_replica_num": [3, None, 1.0],
        "with_hard_pin": [True, 1, 0, 2, 1.0, "x", b"x", None, [], ()],
        "prefer_alloc_in_same_node": [True, 0, None, "yes"],
        "preferred_segment": ["a", b"a", None, 1],
        "preferred_segments": [["a", "b"], ("a",), "ab", [1], None, [b"x"], ["a\nb"]],
        "preferred_nof_segments": [["x"], None, "x"],
        "soft_pin_action": ["ENABLE", 1, None] + [getattr(m.SoftPinAction, k) for k in ("ENABLE", "DISABLE")],
        "soft_pin_ttl_ms": [5000, None, -1, 1.5, True, 0, 2**64 - 1, 2**64],
        "group_ids": [["a"], None, [1], ("a", "b"), "x", 5, []],
        "data_type": [m.ObjectDataType.KVCACHE, 1, None, m.ReplicaStatus.COMPLETE],
    }
    for field, vals in values.items():
        probe(f"RC().{field} default", lambda: getattr(RC(), field))
        for v in vals:
            def set_get(v=v):
                c = RC()
                setattr(c, field, v)
                return getattr(c, field)

            probe(f"RC().{field} = {v!r}", set_get)
    for field in values:
        def aliasing(field=field):
            c = RC()
            got = getattr(c, field)
            if isinstance(got, list):
                got.append("z")
            return getattr(c, field)

        probe(f"RC().{field} read twice after append", aliasing)
    probe("RC() unknown attribute", lambda: setattr(RC(), "replica_nums", 1))
    probe("RC() delete field", lambda: delattr(RC(), "replica_num"))

    def full():
        c = RC()
        c.replica_num = 2
        c.nof_replica_num = 1
        c.dfs_replica_num = 2
        c.soft_pin_action = m.SoftPinAction.ENABLE
        c.soft_pin_ttl_ms = 5000
        c.with_hard_pin = True
        c.preferred_segment = "h:1"
        c.preferred_segments = ["a:1", "b:2"]
        c.preferred_nof_segments = ["n:1"]
        c.prefer_alloc_in_same_node = True
        c.data_type = m.ObjectDataType.KVCACHE
        c.group_ids = ["g1", "g2"]
        return str(c)

    probe("RC full str", full)

    def partial():
        c = RC()
        c.soft_pin_action = m.SoftPinAction.DISABLE
        c.group_ids = []
        c.preferred_segment = "x"
        return str(c)

    probe("RC partial str", partial)

    # ---- QueryTaskResponse ----
    Q = m.QueryTaskResponse
    probe("QueryTaskResponse() repr", lambda: repr(Q()))
    for a in ("id", "type", "status", "created_at_ms_epoch", "last_updated_at_ms_epoch",
              "assigned_client", "message"):
        probe(f"Q().{a}", lambda: getattr(Q(), a))
        probe(f"Q().{a} = x", lambda: setattr(Q(), a, getattr(Q(), a)))

    # ---- descriptors ----
    probe("Descriptor() repr", lambda: repr(m.Descriptor()))
    for a, vals in {"buffer_address": [5, -1, None, 2**64 - 1], "size": [5, -1, 1.0],
                    "transport_endpoint": ["h:1", 1, None]}.items():
        for v in vals:
            def set_get(a=a, v=v):
                d = m.Descriptor()
                setattr(d, a, v)
                return getattr(d, a)

            probe(f"Descriptor().{a} = {v!r}", set_get)

    def desc_repr():
        d = m.Descriptor()
        d.buffer_address, d.size, d.transport_endpoint = 4096, 10, "h:1"
        return repr(d)

    probe("Descriptor repr set", desc_repr)
    for name in ("ReplicaDescriptor", "MemoryDescriptor", "DiskDescriptor", "BufferHandle",
                 "BufferLease", "BufferLeaseView"):
        probe(f"{name}()", lambda: getattr(m, name)())

    # ---- parallelism ----
    PA = m.ParallelAxis
    for a in ("kind", "rank", "size", "split_dim", "expert_id", "stage_id"):
        probe(f"ParallelAxis().{a}", lambda: getattr(PA(), a))
    for a, vals in {"kind": ["tp", 1, None, b"ep"], "rank": [1, -1, "x", None, 2**63],
                    "size": [2, -1, 1.5], "split_dim": [1, -1, None, "x"],
                    "expert_id": [3, None], "stage_id": [3, None, 2.0]}.items():
        for v in vals:
            def set_get(a=a, v=v):
                p = PA()
                setattr(p, a, v)
                return getattr(p, a)

            probe(f"ParallelAxis().{a} = {v!r}", set_get)
    TP = m.TensorParallelism
    probe("TensorParallelism().axes", lambda: TP().axes)

    def tp_axes():
        p = PA()
        p.kind, p.rank, p.size = "tp", 1, 4
        t = TP()
        t.axes = [p]
        p.rank = 3  # the holder keeps its own copy
        t.axes.append(PA())  # a copy each read
        a = t.axes
        return (len(a), a[0].kind, a[0].rank, a[0].size, a[0] is p)

    probe("TensorParallelism axes by value", tp_axes)
    for v in ([1], None, (), "x"):
        probe(f"TensorParallelism().axes = {v!r}", lambda: setattr(TP(), "axes", v))
    RT = m.ReadTarget
    probe("ReadTarget().mode", lambda: RT().mode)
    probe("ReadTarget().parallelism", lambda: RT().parallelism)
    for v in ("shard", "SHARD", "As_Stored", "as_stored", "full", "Full", " shard", "tp", 1, None):
        def set_mode(v=v):
            r = RT()
            r.mode = v
            return r.mode

        probe(f"ReadTarget().mode = {v!r}", set_mode)
    for v in (None, 1, "x"):
        probe(f"ReadTarget().parallelism = {v!r}", lambda: setattr(RT(), "parallelism", v))

    def rt_by_value():
        r = RT()
        t = TP()
        r.parallelism = t
        return (r.parallelism is t, r.parallelism is r.parallelism, type(r.parallelism).__name__)

    probe("ReadTarget parallelism by value", rt_by_value)

    def held_by_reference():
        t = TP()
        t.axes = [PA()]
        t.axes[0].rank = 9
        r = RT()
        r.parallelism = t
        r.parallelism.axes = []
        return (t.axes[0].rank, t.axes[0] is t.axes[0], len(r.parallelism.axes), len(t.axes))

    probe("held objects are the holder's", held_by_reference)

    # ---- host memory ----
    A = m.MooncakeHostMemAllocator()
    probe("alloc(0)", lambda: A.alloc(0))
    probe("alloc(-1)", lambda: A.alloc(-1))
    probe("alloc(1.0)", lambda: A.alloc(1.0))
    probe("alloc(1 << 50)", lambda: A.alloc(1 << 50))

    def alloc_free():
        p = A.alloc(8192)
        import ctypes

        ctypes.memset(p, 0x5A, 8192)
        return (p % 4096, ctypes.string_at(p, 1), A.free(p))

    probe("alloc/free", alloc_free)
    probe("free(unknown)", lambda: A.free(4096))
    probe("free(-1)", lambda: A.free(-1))
    probe("alloc func addr nonzero", lambda: m.get_alloc_func_addr() != 0)
    probe("free func addr nonzero", lambda: m.get_free_func_addr() != 0)
    probe("bind_to_numa_node('x')", lambda: m.bind_to_numa_node("x"))
    probe("bind_to_numa_node(None)", lambda: m.bind_to_numa_node(None))

    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
