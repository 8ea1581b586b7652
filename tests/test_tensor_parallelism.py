"""The ``*_with_parallelism`` tensor calls and ``get_tensor_into_cuda``
against the real master and an in-process client, with numpy arrays (torch
is optional here).

What is pinned: which objects each kind of write leaves (names as in
Mooncake 0.3.13, whose wheel was probed for them), the bytes of every shard
and of every tensor read back (as stored, one shard, the whole, a shard cut
from shards of another split), -600 / None for requests that cannot be
served with nothing stored, TypeError for arguments of the wrong type.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from gostore import ErrorCode, ParallelAxis, ReadTarget, ReplicateConfig, TensorParallelism
from gostore.tensors import codec

INVALID = int(ErrorCode.INVALID_PARAMS)
HERE = os.path.dirname(os.path.abspath(__file__))


def axis(kind, rank, size, split_dim=None, expert_id=None, stage_id=None):
    return ParallelAxis(kind=kind, rank=rank, size=size, split_dim=split_dim, expert_id=expert_id,
                        stage_id=stage_id)


def par(*axes):
    return TensorParallelism(axes=list(axes))


def tp(rank, size, split_dim):
    return par(axis("tp", rank, size, split_dim))


def target(mode, parallelism=None):
    return ReadTarget(mode=mode, parallelism=parallelism)


def writer(rank, size, split_dim):
    return SimpleNamespace(rank=rank, size=size, split_dim=split_dim)


def same(a, b) -> bool:
    return (a is not None and b is not None and type(a) is type(b) and a.dtype == b.dtype
            and a.shape == b.shape and a.tobytes() == b.tobytes())


def stored_keys(store, prefix, names):
    """Which of ``prefix + name`` exist."""
    return [n for n, e in zip(names, store.batch_is_exist([prefix + n for n in names])) if e == 1]


def nothing_under(store, prefix) -> bool:
    return store.remove_by_regex("^" + re.escape(prefix), force=True) == 0


A = np.arange(48, dtype=np.float32).reshape(4, 12)


def test_no_request_stores_the_tensor_as_put_tensor_does(store, uniq):
    k = uniq + "plain"
    assert store.put_tensor_with_parallelism(k, A) == 0
    assert stored_keys(store, k, ["", "__parallelism_manifest", "__writer_manifest"]) == [""]
    assert same(store.get_tensor(k), A)
    for t in (None, ReadTarget(), target("AS_STORED"), target("full")):  # full: no manifest, read as stored
        assert same(store.get_tensor_with_parallelism(k, t), A), t
    assert store.get_tensor_with_parallelism(k, target("shard")) is None  # a shard of what?
    assert store.get_tensor_with_parallelism(k, target("as_stored", tp(0, 2, 0))) is None
    assert store.get_tensor_with_parallelism(uniq + "missing") is None


def test_a_tp_axis_alone_stores_the_given_shard(store, uniq):
    k = uniq + "tp"
    for r in range(4):
        assert store.put_tensor_with_parallelism(k, A[:, 3 * r:3 * r + 3], tp(r, 4, 1)) == 0
    names = ["", "_tp_0", "_tp_1", "_tp_2", "_tp_3", "__parallelism_manifest"]
    assert stored_keys(store, k, names) == names[1:]
    for r in range(4):
        assert same(store.get_tensor(f"{k}_tp_{r}"), A[:, 3 * r:3 * r + 3].copy())
        assert same(store.get_tensor_with_parallelism(k, target("shard", tp(r, 4, 1))), A[:, 3 * r:3 * r + 3].copy())
    # Shards of a split in 4 make those of a split in 2, and the whole.
    assert same(store.get_tensor_with_parallelism(k, target("shard", tp(1, 2, 1))), A[:, 6:].copy())
    assert same(store.get_tensor_with_parallelism(k, target("full", tp(0, 4, 1))), A)
    assert same(store.get_tensor_with_parallelism(k, target("full", tp(1, 2, 1))), A)
    # Another split dimension matches nothing: the shard of that rank as
    # stored, unchecked (as in the wheel, whose _into form finds nothing).
    assert same(store.get_tensor_with_parallelism(k, target("shard", tp(0, 4, 0))), A[:, :3].copy())
    assert store.get_tensor_with_parallelism(k, target("full", tp(0, 4, 0))) is None
    assert store.get_tensor_with_parallelism(k) is None  # nothing under the base key


def test_a_missing_shard_fails_the_whole(store, uniq):
    k = uniq + "half"
    assert store.put_tensor_with_parallelism(k, A[:, :6], tp(0, 2, 1)) == 0
    assert same(store.get_tensor_with_parallelism(k, target("shard", tp(0, 2, 1))), A[:, :6].copy())
    assert store.get_tensor_with_parallelism(k, target("shard", tp(1, 2, 1))) is None
    assert store.get_tensor_with_parallelism(k, target("full", tp(0, 2, 1))) is None


def test_several_axes_cut_the_slice_they_name(store, uniq):
    k = uniq + "dptp"
    for r in range(2):  # axes given in any order: keys name them dp, tp, ep, pp
        assert store.put_tensor_with_parallelism(k, A, par(axis("tp", r, 2, 0), axis("dp", 1, 2))) == 0
    names = ["__dp_1of2__tp_0of2_sd0", "__dp_1of2__tp_1of2_sd0", "__parallelism_manifest", "_tp_0", ""]
    assert stored_keys(store, k, names) == names[:3]
    assert same(store.get_tensor(k + "__dp_1of2__tp_1of2_sd0"), A[2:].copy())
    want = par(axis("dp", 1, 2), axis("tp", 1, 2, 0))
    assert same(store.get_tensor_with_parallelism(k, target("shard", want)), A[2:].copy())
    assert store.get_tensor_with_parallelism(k, target("shard", par(axis("dp", 0, 2), axis("tp", 1, 2, 0)))) is None
    assert same(store.get_tensor_with_parallelism(k, target("full", want)), A)
    quarter = par(axis("dp", 1, 2), axis("tp", 3, 4, 0))
    assert same(store.get_tensor_with_parallelism(k, target("shard", quarter)), A[3:].copy())
    k4 = uniq + "all4"
    four = par(axis("pp", 0, 2, stage_id=1), axis("ep", 1, 2, expert_id=0), axis("tp", 1, 2, 1), axis("dp", 0, 1))
    assert store.put_tensor_with_parallelism(k4, A, four) == 0
    assert stored_keys(store, k4, ["__dp_0of1__tp_1of2_sd1__ep_1of2_eid0__pp_0of2_sid1"])


def test_axes_without_tp_tag_the_whole_tensor(store, uniq):
    k = uniq + "ep"
    assert store.put_tensor_with_parallelism(k, A, par(axis("EP", 0, 2, expert_id=11))) == 0
    assert stored_keys(store, k, ["", "__ep_0of2_eid11", "__parallelism_manifest"]) == ["__ep_0of2_eid11"]
    ep = par(axis("ep", 0, 2, expert_id=11))
    assert same(store.get_tensor_with_parallelism(k, target("shard", ep)), A)
    assert store.get_tensor_with_parallelism(k, target("shard", par(axis("ep", 0, 2, expert_id=12)))) is None
    assert store.get_tensor_with_parallelism(k, target("full", ep)) is None  # nothing to join along
    s = np.array(7.0)  # a 0-d tensor can be tagged, not cut
    assert store.put_tensor_with_parallelism(uniq + "s", s, par(axis("dp", 0, 2))) == 0
    assert same(store.get_tensor_with_parallelism(uniq + "s", target("shard", par(axis("dp", 0, 2)))), s)
    assert store.put_tensor_with_parallelism(uniq + "s2", s, tp(0, 2, 0)) == INVALID


def test_writer_partitions_store_a_slice_each(store, uniq):
    k = uniq + "w"
    for r in range(3):
        assert store.put_tensor_with_parallelism(k, A, writer_partition=writer(r, 3, 1)) == 0
    names = [f"__writer_{r}of3_sd1" for r in range(3)] + ["__writer_manifest", "__parallelism_manifest", ""]
    assert stored_keys(store, k, names) == names[:4]
    assert same(store.get_tensor(k + "__writer_2of3_sd1"), A[:, 8:].copy())
    assert same(store.get_tensor_with_parallelism(k, target("full")), A)
    assert same(store.get_tensor_with_parallelism(k, target("shard", tp(1, 3, 1))), A[:, 4:8].copy())
    assert store.get_tensor_with_parallelism(k, target("shard", tp(1, 2, 1))) is None
    assert store.get_tensor_with_parallelism(k, target("full", tp(0, 3, 1))) is None
    # A ParallelAxis has the fields a writer_partition needs.
    assert store.put_tensor_with_parallelism(uniq + "w2", A, writer_partition=axis("tp", 0, 2, 0)) == 0
    assert store.get_tensor_with_parallelism(uniq + "w2", target("full")) is None  # rank 1 never came


BAD_REQUESTS = {
    "both": (tp(0, 2, 0), writer(0, 2, 0)),
    "unknown kind": (par(axis("xx", 0, 2, 0)), None),
    "repeated kind": (par(axis("tp", 0, 2, 0), axis("TP", 1, 2, 0)), None),
    "no axes": (par(), None),
    "rank past size": (tp(2, 2, 0), None),
    "tp without split_dim": (par(axis("tp", 0, 2)), None),
    "dp with split_dim": (par(axis("dp", 0, 2, 0)), None),
    "ep without expert": (par(axis("ep", 0, 2)), None),
    "ep with split_dim": (par(axis("ep", 0, 2, 0, expert_id=1)), None),
    "pp without stage": (par(axis("pp", 0, 2)), None),
    "split_dim past ndim": (tp(0, 2, 2), None),
    "negative split_dim": (tp(0, 2, -1), None),
    "uneven several axes": (par(axis("tp", 0, 5, 1), axis("dp", 0, 2)), None),
    "not a TensorParallelism": (object(), None),
    "uneven writer": (None, writer(0, 5, 1)),
    "writer rank past size": (None, writer(3, 3, 0)),
    "writer negative split_dim": (None, writer(0, 1, -1)),
    "writer split_dim past ndim": (None, writer(0, 1, 2)),
    "writer without split_dim": (None, SimpleNamespace(rank=0, size=2)),
}


@pytest.mark.parametrize("name", list(BAD_REQUESTS))
def test_requests_that_cannot_be_served_store_nothing(store, uniq, name):
    parallelism, wp = BAD_REQUESTS[name]
    k = uniq + "bad"
    assert store.put_tensor_with_parallelism(k, A, parallelism, None, wp) == INVALID
    assert store.upsert_tensor_with_parallelism(k, A, parallelism, writer_partition=wp) == INVALID
    assert store.batch_put_tensor_with_parallelism([k], [A], None if parallelism is None else [parallelism],
                                                   writer_partitions=None if wp is None else [wp]) == [INVALID]
    assert nothing_under(store, k)


def test_an_empty_key_names_nothing(store, uniq):
    assert store.put_tensor_with_parallelism("", A, tp(0, 2, 0)) == INVALID
    assert store.batch_put_tensor_with_parallelism(["", uniq + "k"], [A, A], writer_partitions=[writer(0, 2, 0)] * 2) == [
        INVALID, 0]
    assert store.batch_is_exist(["_tp_0", "__parallelism_manifest", "__writer_0of2_sd0"]) == [0, 0, 0]
    assert store.get_tensor_with_parallelism("", target("shard", tp(0, 2, 0))) is None


def test_wrong_types_raise(store, uniq):
    with pytest.raises(TypeError):
        store.put_tensor_with_parallelism(1, A)
    with pytest.raises(TypeError):
        store.put_tensor_with_parallelism(uniq + "x", [1, 2, 3], tp(0, 1, 0))
    with pytest.raises(TypeError):
        store.put_tensor_with_parallelism(uniq + "x", "not a tensor")
    with pytest.raises(TypeError):
        store.put_tensor_with_parallelism(uniq + "x", A, config="replicas")
    with pytest.raises(TypeError):  # even when the request is refused
        store.put_tensor_with_parallelism(uniq + "x", A, par(), config="replicas")
    with pytest.raises(TypeError):  # a look-alike axis with a kind that is no str
        store.put_tensor_with_parallelism(uniq + "x", A, SimpleNamespace(axes=[SimpleNamespace(kind=1, rank=0, size=1)]))
    with pytest.raises(TypeError):
        store.batch_put_tensor_with_parallelism(uniq + "x", [A])
    with pytest.raises(TypeError):
        store.put_tensor_with_parallelism_from(uniq + "x", "0", 10)
    with pytest.raises(TypeError):
        store.get_tensor_with_parallelism(uniq + "x", SimpleNamespace(mode=1, parallelism=None))
    with pytest.raises(TypeError):
        store.batch_get_tensor_with_parallelism_into([uniq + "x"], [None], [1])
    with pytest.raises(TypeError):
        store.get_tensor_into_cuda(uniq + "x", A)  # a numpy array is not a torch tensor
    with pytest.raises(TypeError):
        store.batch_get_tensor_into_cuda([uniq + "x"], (A,))
    assert nothing_under(store, uniq)


def test_batches(store, uniq):
    a, b = A, A[::-1].copy()
    assert store.batch_put_tensor_with_parallelism([uniq + "a", uniq + "b"], [a[:, :6], b],
                                                   [tp(0, 2, 1), None]) == [0, 0]
    assert stored_keys(store, uniq, ["a_tp_0", "a__parallelism_manifest", "b"]) == [
        "a_tp_0", "a__parallelism_manifest", "b"]
    assert store.batch_put_tensor_with_parallelism([uniq + "c", uniq + "d"], [a, a],
                                                   writer_partitions=[writer(0, 2, 0), None]) == [0, 0]
    assert stored_keys(store, uniq, ["c__writer_0of2_sd0", "d"]) == ["c__writer_0of2_sd0", "d"]
    # One unusable entry fails that key alone; unusable lists fail them all.
    assert store.batch_put_tensor_with_parallelism([uniq + "e", uniq + "f"], [a, a],
                                                   [par(axis("dp", 0, 2)), 5]) == [0, INVALID]
    for parallelisms, writers, tensors in (([None], [None], [a]), (None, None, [a, a]), ([None, None], None, [a]),
                                           ((None,), None, [a]), (None, (writer(0, 1, 0),), [a])):
        assert store.batch_put_tensor_with_parallelism([uniq + "g"], tensors, parallelisms,
                                                       writer_partitions=writers) == [INVALID]
    assert store.is_exist(uniq + "g") == 0
    assert store.batch_put_tensor_with_parallelism([], []) == []
    got = store.batch_get_tensor_with_parallelism([uniq + "b", uniq + "a", uniq + "none"],
                                                  [None, target("shard", tp(0, 2, 1)), None])
    assert same(got[0], b) and same(got[1], a[:, :6].copy()) and got[2] is None
    assert [same(x, y) for x, y in zip(store.batch_get_tensor_with_parallelism([uniq + "b", uniq + "d"]), [b, a])] == [
        True, True]
    assert store.batch_get_tensor_with_parallelism([uniq + "b", uniq + "d"], [None]) == [None, None]
    assert store.batch_get_tensor_with_parallelism([uniq + "b"], (None,)) == [None]
    assert store.batch_get_tensor_with_parallelism([], []) == []


def test_put_keeps_and_upsert_replaces(store, uniq):
    k = uniq + "u"
    assert store.upsert_tensor_with_parallelism(k, A[:2], tp(0, 2, 0)) == 0
    assert store.put_tensor_with_parallelism(k, A[:2] + 1, tp(0, 2, 0)) == 0  # an existing key is kept
    assert same(store.get_tensor(k + "_tp_0"), A[:2].copy())
    assert store.upsert_tensor_with_parallelism(k, A[:2] * 2, tp(0, 2, 0)) == 0
    assert same(store.get_tensor(k + "_tp_0"), A[:2] * 2)
    assert store.batch_upsert_tensor_with_parallelism([k], [A[2:] * 2], [tp(1, 2, 0)], ReplicateConfig()) == [0]
    assert same(store.get_tensor_with_parallelism(k, target("full", tp(0, 2, 0))), A * 2)
    # Resized in place: the manifest follows the latest writer.
    wide = np.arange(20, dtype=np.float32).reshape(2, 10)
    assert store.batch_upsert_tensor_with_parallelism([k], [wide], writer_partitions=[writer(0, 1, 0)]) == [0]
    assert same(store.get_tensor_with_parallelism(k, target("full")), wide)


def registered(store, n):
    buf = (ctypes.c_uint8 * n)()
    addr = ctypes.addressof(buf)
    assert store.register_buffer(addr, n) == 0
    return buf, addr


def test_from_forms_read_a_tensor_object_in_registered_memory(store, uniq):
    assert store.put_tensor(uniq + "src", A) == 0
    size = store.get_size(uniq + "src")
    buf, addr = registered(store, 1 << 20)
    try:
        assert same(store.get_tensor_into(uniq + "src", addr, size), A)
        # With a TP axis every TP shard of it is stored (no manifest).
        assert store.put_tensor_with_parallelism_from(uniq + "t", addr, size, tp(1, 2, 1)) == 0
        assert stored_keys(store, uniq + "t", ["_tp_0", "_tp_1", "__parallelism_manifest"]) == ["_tp_0", "_tp_1"]
        assert same(store.get_tensor(uniq + "t_tp_1"), A[:, 6:].copy())
        assert same(store.get_tensor_with_parallelism(uniq + "t", target("full", tp(0, 2, 1))), A)
        assert same(store.get_tensor_with_parallelism(uniq + "t", target("shard", tp(3, 4, 1))), A[:, 9:].copy())
        dptp = par(axis("tp", 0, 2, 0), axis("dp", 1, 2))
        assert store.upsert_tensor_with_parallelism_from(uniq + "m", addr, size, dptp) == 0
        assert stored_keys(store, uniq + "m", ["__dp_1of2__tp_0of2_sd0", "__dp_1of2__tp_1of2_sd0"]) == [
            "__dp_1of2__tp_0of2_sd0", "__dp_1of2__tp_1of2_sd0"]
        assert same(store.get_tensor_with_parallelism(uniq + "m", target("full", dptp)), A)
        assert store.put_tensor_with_parallelism_from(uniq + "w", addr, size, writer_partition=writer(1, 2, 1)) == 0
        assert stored_keys(store, uniq + "w", ["__writer_1of2_sd1", "__writer_manifest"]) == [
            "__writer_1of2_sd1", "__writer_manifest"]
        assert store.put_tensor_with_parallelism_from(uniq + "e", addr, size, par(axis("ep", 0, 2, expert_id=3))) == 0
        assert same(store.get_tensor(uniq + "e__ep_0of2_eid3"), A)
        assert store.put_tensor_with_parallelism_from(uniq + "p", addr, size, None, ReplicateConfig()) == 0
        assert same(store.get_tensor(uniq + "p"), A)
        # Memory that holds no whole tensor object: nothing stored.
        assert store.put_tensor_with_parallelism_from(uniq + "x1", addr, size - 1, tp(0, 2, 1)) == INVALID
        assert store.put_tensor_with_parallelism_from(uniq + "x2", addr + 64, 100) == INVALID
        plain = (ctypes.c_uint8 * size).from_buffer_copy(bytes(buf[:size]))
        assert store.put_tensor_with_parallelism_from(uniq + "x3", ctypes.addressof(plain), size, tp(0, 2, 1)) == INVALID
        assert nothing_under(store, uniq + "x")
        res = store.batch_put_tensor_with_parallelism_from([uniq + "b1", uniq + "b2", uniq + "b3"], [addr] * 3,
                                                           [size, size, 10], [tp(0, 2, 0), None, None])
        assert res == [0, 0, INVALID]
        assert stored_keys(store, uniq, ["b1_tp_0", "b1_tp_1", "b2", "b3"]) == ["b1_tp_0", "b1_tp_1", "b2"]
        assert store.batch_upsert_tensor_with_parallelism_from([uniq + "b2"], [addr], [size],
                                                               writer_partitions=[writer(0, 4, 0)]) == [0]
        assert same(store.get_tensor(uniq + "b2__writer_0of4_sd0"), A[:1].copy())
        assert store.batch_put_tensor_with_parallelism_from([uniq + "b4", uniq + "b5"], [addr], [size]) == [
            INVALID, INVALID]
        assert store.batch_put_tensor_with_parallelism_from([], [], []) == []
    finally:
        store.unregister_buffer(addr)


def test_into_forms_leave_the_tensor_object_in_the_buffer(store, uniq):
    k = uniq + "i"
    for r in range(2):
        assert store.put_tensor_with_parallelism(k, A[:, 6 * r:6 * r + 6], tp(r, 2, 1)) == 0
    assert store.put_tensor(uniq + "plain", A) == 0
    n = 1 << 16
    buf, addr = registered(store, 4 * n)
    try:
        def inside(t, base):
            return base <= t.ctypes.data < base + n

        got = store.get_tensor_with_parallelism_into(uniq + "plain", addr, n)
        assert same(got, A) and inside(got, addr)
        got = store.get_tensor_with_parallelism_into(k, addr, n, target("full", tp(0, 2, 1)))
        assert same(got, A) and inside(got, addr)
        assert codec.decode_prefix(bytes(buf[:n])).layout is None  # a whole tensor
        got = store.get_tensor_with_parallelism_into(k, addr, n, target("shard", tp(1, 2, 1)))
        assert same(got, A[:, 6:].copy()) and inside(got, addr)
        got = store.get_tensor_with_parallelism_into(k, addr, n, target("shard", tp(3, 4, 1)))
        assert same(got, A[:, 9:].copy()) and inside(got, addr)
        lay = codec.decode_prefix(bytes(buf[:n])).layout  # the cut shard says what it is
        assert lay == codec.ShardLayout((4, 12), (codec.Axis("tp", 3, 4, 1),))
        # The tensor put back together is a tensor object like any other.
        size = store.get_size(uniq + "plain")
        assert store.put_tensor_from(uniq + "again", addr, codec.decode_prefix(bytes(buf[:n])).offset + 4 * 3 * 4) == 0
        assert same(store.get_tensor(uniq + "again"), A[:, 9:].copy())
        assert store.get_tensor_with_parallelism_into(uniq + "none", addr, n) is None
        assert store.get_tensor_with_parallelism_into(uniq + "plain", addr, size - 1) is None
        assert store.get_tensor_with_parallelism_into(k, addr, 200, target("full", tp(0, 2, 1))) is None
        assert store.get_tensor_with_parallelism_into(k, addr, n, target("as_stored", tp(0, 2, 1))) is None
        assert store.get_tensor_with_parallelism_into(k, addr, n, target("shard", tp(0, 2, 0))) is None
        res = store.batch_get_tensor_with_parallelism_into(
            [uniq + "plain", uniq + "none", k], [addr, addr + n, addr + 2 * n], [n, n, n],
            [None, None, target("full", tp(0, 2, 1))])
        assert same(res[0], A) and res[1] is None and same(res[2], A) and inside(res[2], addr + 2 * n)
        assert store.batch_get_tensor_with_parallelism_into([k, k], [addr], [n]) == [None, None]
        assert store.batch_get_tensor_with_parallelism_into([k], [addr], [n], [None, None]) == [None]
        assert store.batch_get_tensor_with_parallelism_into([], [], []) == []
    finally:
        store.unregister_buffer(addr)


def test_put_tensor_with_tp_shards_can_be_rejoined(store, uniq):
    k = uniq + "legacy"
    assert store.put_tensor_with_tp(k, A, tp_rank=0, tp_size=2, split_dim=1) == 0
    assert stored_keys(store, k, ["_tp_0", "_tp_1", "__parallelism_manifest"]) == ["_tp_0", "_tp_1"]
    assert same(store.get_tensor_with_parallelism(k, target("shard", tp(1, 2, 1))), A[:, 6:].copy())
    assert same(store.get_tensor_with_parallelism(k, target("shard", tp(1, 4, 1))), A[:, 3:6].copy())
    assert same(store.get_tensor_with_parallelism(k, target("full", tp(0, 4, 1))), A)  # the shards say 2
    assert store.get_tensor_with_parallelism(k, target("full", tp(0, 1, 1))) is None  # in one piece: the base key
    # An uneven split records no layout: its shards are read as stored, never joined.
    odd = np.arange(15, dtype=np.int16).reshape(5, 3)
    assert store.put_tensor_with_tp(uniq + "odd", odd, tp_size=2, split_dim=0) == 0
    assert same(store.get_tensor_with_parallelism(uniq + "odd", target("shard", tp(1, 2, 0))), odd[3:].copy())
    assert store.get_tensor_with_parallelism(uniq + "odd", target("full", tp(0, 2, 0))) is None


class _FakeDevice:
    def __init__(self, kind):
        self.type = kind


class _FakeDtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return "torch." + self.name


class Tensor:
    """Just enough of a torch tensor for get_tensor_into_cuda: memory at an
    address, a dtype, a shape (torch is not needed to test the reads)."""

    def __init__(self, ptr, shape, dtype="float32", itemsize=4, device="cpu", contiguous=True):
        self.ptr, self.shape, self.dtype = ptr, tuple(shape), _FakeDtype(dtype)
        self.itemsize, self.device, self.contiguous = itemsize, _FakeDevice(device), contiguous

    def data_ptr(self):
        return self.ptr

    def numel(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def element_size(self):
        return self.itemsize

    def is_contiguous(self):
        return self.contiguous


Tensor.__module__ = "torch"  # what the store checks to tell a torch tensor


def test_get_tensor_into_cuda_reads_the_data_only(store, uniq):
    assert store.put_tensor(uniq + "a", A) == 0
    assert store.put_tensor_with_parallelism(uniq + "s", A, par(axis("ep", 0, 2, expert_id=1))) == 0  # longer header
    out = np.full_like(A, -1)
    dest = Tensor(out.ctypes.data, A.shape)
    assert store.get_tensor_into_cuda(uniq + "a", dest) == A.nbytes
    assert same(out, A)
    out[:] = -1
    assert store.batch_get_tensor_into_cuda([uniq + "s__ep_0of2_eid1", uniq + "a"], [dest, dest]) == [A.nbytes] * 2
    assert same(out, A)
    out[:] = -1
    # What does not fit is refused before the memory is touched.
    for bad in (Tensor(out.ctypes.data, (12, 4)), Tensor(out.ctypes.data, A.shape, "int32"),
                Tensor(out.ctypes.data, A.shape, contiguous=False), Tensor(out.ctypes.data, A.shape, device="meta")):
        assert store.get_tensor_into_cuda(uniq + "a", bad) == INVALID
    assert store.get_tensor_into_cuda(uniq + "missing", dest) == INVALID  # as in Mooncake
    assert store.put(uniq + "bytes", b"x" * A.nbytes) == 0
    assert store.get_tensor_into_cuda(uniq + "bytes", dest) == INVALID
    assert (out == -1).all()
    empty = np.empty((0, 3), np.float32)
    assert store.put_tensor(uniq + "empty", empty) == 0
    assert store.get_tensor_into_cuda(uniq + "empty", Tensor(out.ctypes.data, (0, 3))) == 0
    assert store.batch_get_tensor_into_cuda([uniq + "a"], [dest, dest]) == [INVALID]
    assert store.batch_get_tensor_into_cuda([], []) == []


CUDA_CHILD = r'''
import ctypes, os, sys
import numpy as np
sys.path.insert(0, os.environ["GOSTORE_TESTS"])
from test_tensor_parallelism import Tensor, tp, target
from gostore import MooncakeDistributedStore

cuda = ctypes.CDLL(os.environ["GOSTORE_LIBCUDA"])
ctx = ctypes.c_void_p()
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0

def device_alloc(n):
    ptr = ctypes.c_uint64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), n) == 0
    assert cuda.cuMemcpyHtoD_v2(ptr, b"\xff" * n, n) == 0
    return ptr.value

def device_bytes(ptr, n):
    out = ctypes.create_string_buffer(n)
    assert cuda.cuMemcpyDtoH_v2(out, ctypes.c_uint64(ptr), n) == 0
    return out.raw

st = MooncakeDistributedStore()
assert st.setup("127.0.0.1", "P2PHANDSHAKE", 32 << 20, 16 << 20, "tcp", "", sys.argv[1]) == 0
a = np.arange(48, dtype=np.float32).reshape(4, 12)
assert st.put_tensor("cuda/a", a) == 0
ptr = device_alloc(a.nbytes)
assert st.get_tensor_into_cuda("cuda/a", Tensor(ptr, a.shape, device="cuda")) == a.nbytes
assert device_bytes(ptr, a.nbytes) == a.tobytes()
other = device_alloc(a.nbytes)
assert st.get_tensor_into_cuda("cuda/a", Tensor(other, (2, 24), device="cuda")) == -600
assert device_bytes(other, a.nbytes) == b"\xff" * a.nbytes  # refused before it was written

# A tensor put back together lands in registered GPU memory.
for r in range(2):
    assert st.put_tensor_with_parallelism("cuda/t", a[:, 6 * r:6 * r + 6], tp(r, 2, 1)) == 0
n = 1 << 16
region = device_alloc(n)
assert st.register_buffer(region, n) == 0
try:
    st.get_tensor_with_parallelism_into("cuda/t", region, n, target("full", tp(0, 2, 1)))
except TypeError as e:  # a view of GPU memory needs torch; the bytes are there all the same
    assert "torch" in str(e), e
assert st.put_tensor_from("cuda/copy", region, st.get_size("cuda/a")) == 0
assert st.get_tensor("cuda/copy").tobytes() == a.tobytes()
st.close()
print("child: ok")
'''


def test_get_tensor_into_cuda_with_the_fake_driver(master, tmp_path):
    """Device memory of the fake CUDA driver (gostore/gpu/testdata): host
    memory it tracks, so the driver path runs where no GPU is."""
    if not shutil.which("gcc"):
        pytest.skip("gcc is needed to build the fake CUDA driver")
    lib = tmp_path / "libcuda-fake.so"
    src = os.path.join(HERE, "..", "gostore", "gpu", "testdata", "fakecuda.c")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), src], check=True)
    env = dict(os.environ, GOSTORE_LIBCUDA=str(lib), GOSTORE_TESTS=HERE)
    proc = subprocess.run([sys.executable, "-c", CUDA_CHILD, master.addr], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert proc.returncode == 0 and "child: ok" in proc.stdout, proc.stdout[-4000:]


try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None


@pytest.mark.skipif(torch is None, reason="torch is not installed here (a 1+ GB download); "
                    "the numpy tests cover the same requests")
def test_torch_tensors(store, uniq):
    t = torch.arange(24, dtype=torch.bfloat16).reshape(4, 6)
    for r in range(2):
        assert store.put_tensor_with_parallelism(uniq + "t", t, par(axis("tp", r, 2, 1), axis("dp", 0, 1))) == 0
    whole = store.get_tensor_with_parallelism(uniq + "t", target("full", par(axis("tp", 0, 2, 1), axis("dp", 0, 1))))
    assert isinstance(whole, torch.Tensor) and whole.dtype == torch.bfloat16 and torch.equal(whole, t)
    shard = store.get_tensor_with_parallelism(uniq + "t", target("shard", par(axis("tp", 2, 3, 1), axis("dp", 0, 1))))
    assert torch.equal(shard, t[:, 4:]) and shard.is_contiguous()
    out = torch.empty(4, 6, dtype=torch.bfloat16)
    assert store.put_tensor(uniq + "plain", t) == 0
    assert store.get_tensor_into_cuda(uniq + "plain", out) == t.numel() * 2 and torch.equal(out, t)
