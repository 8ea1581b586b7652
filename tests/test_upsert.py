"""Upsert (insert or replace), after the Hard Pin and Upsert RFC (seed 002,
section 2.3) and PYTHON_API.md "Upsert":

* a new key is stored like a put;
* the same size is rewritten in place (same replica ranges; the key reads
  -703 while the write runs);
* another size gets new ranges;
* -714 while readers copy out of the object, -708 while a replica task runs
  (tests/test_replica_tasks.py);
* an unfinished put/upsert of the key is preempted;
* a hard pin survives upserts.

Concurrency tests check bytes: every read is ``b""`` or exactly one version
that was written, never a mix.
"""

from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
import pytest

from conftest import MiB, pattern, stuck_put, wait_until
from gostore import ErrorCode, ReplicateConfig

BUSY = int(ErrorCode.OBJECT_REPLICA_BUSY)  # -714
NOT_FOUND = int(ErrorCode.OBJECT_NOT_FOUND)  # -704


def settled(call, *args, **kw) -> int:
    """``call(*args, **kw)`` (an upsert), again while it returns -714 for at
    most 2 s: a client tells the master that its reads ended in the
    background (ReadDone), so an upsert by *another* client right after a
    get may still see the reader for a moment. (A client's own finished
    reads never make its upsert busy: see
    test_an_upsert_right_after_a_finished_get_is_not_busy.)"""
    deadline = time.monotonic() + 2
    while True:
        rc = call(*args, **kw)
        if rc != BUSY or time.monotonic() > deadline:
            return rc
        time.sleep(0.002)


def _replicas(master, key):
    info = master.query_key(key)
    assert info is not None, f"{key} missing from /query_key"
    return sorted((r["segment"], r["offset"]) for r in info["replicas"]), info


def _all_complete(info) -> bool:
    return bool(info["replicas"]) and all(r["status"] == "COMPLETE" for r in info["replicas"])


# ---------------------------------------------------------------------------
# the three cases


def test_upsert_of_a_new_key_is_a_put(cluster, store, uniq):
    key = uniq + "k"
    data = pattern(1, 300_001)
    assert store.upsert(key, data) == 0
    assert store.get(key) == data
    assert store.get_size(key) == len(data)
    assert cluster.a.check_pattern(key, len(data), 1)
    info = cluster.master.query_key(key)
    assert info["size"] == len(data)
    assert len(info["replicas"]) == 1 and _all_complete(info), info
    assert info["hard_pin"] is False


def test_upsert_same_size_rewrites_the_same_ranges(cluster, store, uniq):
    a, b = cluster.a, cluster.b
    key = uniq + "k"
    size = MiB + 17
    cfg = ReplicateConfig(replica_num=2, preferred_segments=[a.hostname, b.hostname])
    assert store.put(key, pattern(10, size), cfg) == 0
    before, info = _replicas(cluster.master, key)
    assert [seg for seg, _ in before] == sorted([a.hostname, b.hostname]), info
    new = pattern(11, size)
    assert store.upsert(key, new) == 0  # default config: replica_num 1 is ignored in place
    after, info = _replicas(cluster.master, key)
    assert after == before, "an upsert of the same size must reuse the replicas in place"
    assert _all_complete(info), info
    assert info["size"] == size
    assert store.get(key) == new
    # each peer reads its own (shared-memory) replica first: both were rewritten
    assert a.check_pattern(key, size, 11)
    assert b.check_pattern(key, size, 11)


@pytest.mark.parametrize("old_size,new_size", [(100_000, 3 * MiB + 5), (2 * MiB, 4097)])
def test_upsert_other_size_stores_new_bytes_and_size(cluster, store, uniq, old_size, new_size):
    key = uniq + "k"
    assert store.put(key, pattern(20, old_size)) == 0
    assert store.get_size(key) == old_size
    assert store.upsert(key, pattern(21, new_size)) == 0
    assert store.get_size(key) == new_size
    assert store.get(key) == pattern(21, new_size)
    assert cluster.b.get_size(key) == new_size
    assert cluster.b.check_pattern(key, new_size, 21)
    info = cluster.master.query_key(key)
    assert info["size"] == new_size and _all_complete(info), info


def test_put_keeps_an_existing_key_upsert_replaces_it(cluster, store, uniq):
    key = uniq + "k"
    assert store.put(key, b"first") == 0
    assert store.put(key, b"second") == 0  # put: 0, not overwritten
    assert store.get(key) == b"first"
    assert store.upsert(key, b"third") == 0
    assert store.get(key) == b"third"
    assert store.put(key, b"fourth!!") == 0
    assert store.get(key) == b"third"
    # the other processes see the replacement too
    assert cluster.a.get(key) == b"third"


def test_upsert_from_another_process_is_seen_by_everyone(cluster, store, uniq):
    a, b = cluster.a, cluster.b
    key = uniq + "k"
    assert a.put(key, b"v1" * 1000) == 0
    assert b.upsert(key, b"v2" * 1000) == 0
    assert store.get(key) == b"v2" * 1000
    assert settled(a.upsert_pattern, key, 5000, 3) == 0
    assert b.check_pattern(key, 5000, 3)


def test_upsert_invalid_values_are_600_and_leave_the_old_value(cluster, store, uniq):
    key = uniq + "k"
    assert store.put(key, b"old") == 0
    assert store.upsert("", b"x") == -600
    assert store.upsert(key, b"") == -600
    assert store.upsert(key, bytearray()) == -600
    assert store.upsert_parts(key) == -600
    assert store.upsert_parts(key, b"", b"") == -600
    assert store.upsert("", b"x", ReplicateConfig(with_hard_pin=True)) == -600
    assert store.upsert(key, b"x", ReplicateConfig(replica_num=0)) == -600
    assert store.upsert_from(key, 0, 10) == -600  # null / unregistered range
    assert store.upsert_from(key, 1 << 40, 0) == -600
    assert store.upsert_batch([key], []) == -600
    assert store.upsert_batch([key, uniq + "b"], [b"x"]) == -600
    assert store.batch_upsert_from([key, uniq + "b"], [1], [1]) == [-600, -600]
    assert store.batch_upsert_from([], [], []) == []
    assert store.upsert_batch([], []) == 0
    assert store.get(key) == b"old"
    assert cluster.master.query_key(uniq + "b") is None
    # one bad item does not stop the others; the result is the first error
    assert store.upsert_batch([uniq + "c", key], [b"", b"new"]) == -600
    assert store.get(key) == b"new"
    assert cluster.master.query_key(uniq + "c") is None


# ---------------------------------------------------------------------------
# pins


def test_hard_pin_survives_upserts_of_either_size(cluster, store, uniq):
    key = uniq + "k"
    assert store.put(key, pattern(30, 4096), ReplicateConfig(with_hard_pin=True)) == 0
    assert cluster.master.query_key(key)["hard_pin"] is True
    assert store.upsert(key, pattern(31, 4096)) == 0  # in place, no pin asked
    info = cluster.master.query_key(key)
    assert info["hard_pin"] is True, info
    assert store.get(key) == pattern(31, 4096)
    assert store.upsert(key, pattern(32, 9000)) == 0  # reallocated, no pin asked
    info = cluster.master.query_key(key)
    assert info["hard_pin"] is True, info
    assert info["size"] == 9000
    assert cluster.a.check_pattern(key, 9000, 32)


def test_upsert_can_add_a_hard_pin(cluster, store, uniq):
    key = uniq + "k"
    assert store.put(key, b"x" * 100) == 0
    assert cluster.master.query_key(key)["hard_pin"] is False
    assert store.upsert(key, b"y" * 100, ReplicateConfig(with_hard_pin=True)) == 0
    assert cluster.master.query_key(key)["hard_pin"] is True
    assert store.upsert(key, b"z" * 100) == 0
    assert cluster.master.query_key(key)["hard_pin"] is True
    assert store.get(key) == b"z" * 100


# ---------------------------------------------------------------------------
# the other forms


def test_upsert_parts_concatenates(cluster, store, uniq):
    key = uniq + "k"
    assert store.put(key, b"0" * 10) == 0
    assert store.upsert_parts(key, b"abc", bytearray(b"de"), memoryview(b"fghij")) == 0
    assert store.get(key) == b"abcdefghij"  # same size: in place
    assert store.upsert_parts(key, b"", b"xy", np.frombuffer(b"z" * 5, dtype=np.uint8)) == 0
    assert store.get(key) == b"xyzzzzz"


def test_upsert_batch_mixes_new_same_size_and_other_size_keys(cluster, store, uniq):
    keys = [uniq + f"k{i}" for i in range(6)]
    assert store.put_batch(keys[:4], [pattern(40 + i, 50_000) for i in range(4)]) == 0
    sizes = [50_000, 50_000, 70_000, 1234, 50_000, 2 * MiB]  # 2 in place, 2 resized, 2 new
    values = [pattern(50 + i, n) for i, n in enumerate(sizes)]
    before = [_replicas(cluster.master, k)[0] for k in keys[:2]]
    assert store.upsert_batch(keys, values) == 0
    assert [_replicas(cluster.master, k)[0] for k in keys[:2]] == before
    assert store.get_batch(keys) == values
    for i, (k, n) in enumerate(zip(keys, sizes)):
        assert cluster.b.check_pattern(k, n, 50 + i), k


def test_a_key_named_twice_in_a_batch_is_written_once_from_its_first_item(store, uniq):
    """As Mooncake's batch calls: the first item naming a key is written and
    every item naming it gets that result. (Written twice, an upsert
    replaced its own unfinished first write and failed it with -704.)"""
    a, b, c = (uniq + n for n in "abc")
    assert store.upsert_batch([a, a], [b"1", b"22"]) == 0
    assert store.get(a) == b"1"
    assert store.upsert_batch([a, a, c], [b"333", b"4444", b"c"]) == 0
    assert store.get_batch([a, c]) == [b"333", b"c"]
    assert store.put_batch([b, b], [b"first", b"second"]) == 0
    assert store.get(b) == b"first"
    src = np.frombuffer(b"xyzw", dtype=np.uint8).copy()
    assert store.batch_upsert_from([c, c], [src.ctypes.data, src.ctypes.data + 2], [2, 2]) == [0, 0]
    assert store.get(c) == b"xy"


def test_upsert_from_and_batch_upsert_from_roundtrip(cluster, store, uniq):
    n = 3
    size = 256 * 1024 + 3
    src = np.zeros(n * size, dtype=np.uint8)
    ptr = src.ctypes.data
    assert store.register_buffer(ptr, src.nbytes) == 0
    try:
        keys = [uniq + f"k{i}" for i in range(n)]
        for i in range(n):
            src[i * size:(i + 1) * size] = np.frombuffer(pattern(60 + i, size), dtype=np.uint8)
        assert store.upsert_from(keys[0], ptr, size) == 0  # new key
        assert store.get(keys[0]) == pattern(60, size)
        assert store.upsert_from(keys[0], ptr + size, size) == 0  # in place
        assert store.get(keys[0]) == pattern(61, size)
        res = store.batch_upsert_from(keys, [ptr + i * size for i in range(n)], [size] * n)
        assert res == [0, 0, 0]
        assert store.get_batch(keys) == [pattern(60 + i, size) for i in range(n)]
        # other sizes, and one range that runs past the registered buffer's
        # end (-600 for it only)
        res = store.batch_upsert_from(
            keys, [ptr, ptr + 1, ptr + src.nbytes - 5], [100, 2 * size, 10])
        assert res == [0, 0, -600]
        assert store.get(keys[0]) == pattern(60, 100)
        whole = b"".join(pattern(60 + i, size) for i in range(n))
        assert store.get(keys[1]) == whole[1:2 * size + 1]
        assert store.get(keys[2]) == pattern(62, size)
        assert cluster.a.check_pattern(keys[2], size, 62)
    finally:
        store.unregister_buffer(ptr)


def test_an_upsert_right_after_a_finished_get_is_not_busy(cluster, store, uniq):
    """A read is over when the call returns: the client's own upsert right
    after it must not see it as a reader in flight (-714). Regression: the
    client used to report ended reads only in the background."""
    dst = np.zeros(64, dtype=np.uint8)
    assert store.register_buffer(dst.ctypes.data, dst.nbytes) == 0
    reads = {
        "get": lambda k: store.get(k) == b"v1",
        "get_batch": lambda k: store.get_batch([k]) == [b"v1"],
        "get_buffer": lambda k: bytes(store.get_buffer(k)) == b"v1",
        "get_into": lambda k: store.get_into(k, dst.ctypes.data, dst.nbytes) == 2,
    }
    codes = {}
    try:
        for i in range(40):
            name = list(reads)[i % len(reads)]
            key = uniq + f"k{i}"
            assert store.put(key, b"v1") == 0
            assert reads[name](key), name
            rc = store.upsert(key, b"v2")
            codes[(name, rc)] = codes.get((name, rc), 0) + 1
            assert store.get(key) == b"v2" or rc != 0
    finally:
        store.unregister_buffer(dst.ctypes.data)
    assert all(rc == 0 for _, rc in codes), f"upsert results right after a finished read: {codes}"


def test_upsert_into_a_ctypes_registered_buffer_reads_back_with_get_into(cluster, store, uniq):
    key = uniq + "k"
    size = 64 * 1024
    src = (ctypes.c_char * size).from_buffer_copy(pattern(70, size))
    dst = (ctypes.c_char * size)()
    sp, dp = ctypes.addressof(src), ctypes.addressof(dst)
    assert store.register_buffer(sp, size) == 0
    assert store.register_buffer(dp, size) == 0
    try:
        assert store.put(key, pattern(71, size)) == 0
        assert store.upsert_from(key, sp, size) == 0
        assert store.get_into(key, dp, size) == size
        assert dst.raw == pattern(70, size)
    finally:
        store.unregister_buffer(sp)
        store.unregister_buffer(dp)


# ---------------------------------------------------------------------------
# readers and writers at once

BIG = 16 * MiB


def test_upsert_is_refused_with_714_while_readers_copy_and_reads_are_never_torn(
        cluster, store, uniq, tmp_path):
    """A peer reads a 16 MiB object from several threads while this process
    upserts it in place again and again: every upsert is 0 or -714, both
    happen, and every read is b"" (-703 during a write) or exactly one of
    the versions."""
    a, b = cluster.a, cluster.b
    key = uniq + "k"
    seeds = [101, 102, 103]
    versions = [pattern(s, BIG) for s in seeds]
    assert store.put(key, versions[0], ReplicateConfig(preferred_segment=b.hostname)) == 0
    stop = tmp_path / "stop"
    a.send("read_loop", key=key, size=BIG, seeds=seeds, threads=3, seconds=20,
           stop_file=str(stop))
    codes = {}
    last_ok = 0
    i = 0
    deadline = time.monotonic() + 8
    time.sleep(0.05)  # let the readers start
    try:
        while time.monotonic() < deadline:
            v = 1 + i % 2  # alternate versions 1 and 2 (0 was the put)
            rc = store.upsert(key, versions[v])
            codes[rc] = codes.get(rc, 0) + 1
            if rc == 0:
                last_ok = v
                i += 1
            if codes.get(0, 0) >= 30 and codes.get(BUSY, 0) >= 8:
                break
    finally:
        stop.touch()
        ans = a.recv("read_loop", timeout=60)
    assert set(codes) <= {0, BUSY}, f"upsert results {codes}"
    assert codes.get(BUSY, 0) >= 1, f"no -714 although readers were copying: {codes}, {ans}"
    assert codes.get(0, 0) >= 1, f"no upsert got through between the reads: {codes}, {ans}"
    assert ans["bad"] == 0, f"torn reads: {ans['bad_samples']}"
    assert ans["reads"] - ans["empty"] >= 1, ans
    assert sum(ans["match"].values()) + ans["empty"] == ans["reads"]
    assert store.get(key) == versions[last_ok]
    info = cluster.master.query_key(key)
    assert [r["segment"] for r in info["replicas"]] == [b.hostname]
    assert _all_complete(info)


def test_readers_during_in_place_upserts_get_nothing_or_one_whole_version(cluster, store, uniq):
    """A peer rewrites a 4 MiB object in place, cycling through three versions;
    threads here read it with get, get_buffer and get_into meanwhile."""
    a, b = cluster.a, cluster.b
    key = uniq + "k"
    size = 4 * MiB
    seeds = [201, 202, 203]
    versions = {pattern(s, size): s for s in seeds}
    assert b.upsert_pattern(key, size, seeds[0], preferred_segment=a.hostname) == 0
    b.send("upsert_loop", key=key, size=size, seeds=seeds, iters=120, min_ok=5)

    dst = np.zeros(size, dtype=np.uint8)
    assert store.register_buffer(dst.ctypes.data, size) == 0
    lock = threading.Lock()
    seen = {"empty": 0, "whole": 0, "torn": []}
    done = threading.Event()

    def record(got):
        with lock:
            if not got:
                seen["empty"] += 1
            elif bytes(got) in versions:
                seen["whole"] += 1
            elif len(seen["torn"]) < 3:
                seen["torn"].append(len(got))

    def reader(kind):
        while not done.is_set():
            if kind == "get":
                record(store.get(key))
            elif kind == "buffer":
                buf = store.get_buffer(key)
                record(b"" if buf is None else bytes(buf))
            else:
                n = store.get_into(key, dst.ctypes.data, size)
                record(dst.tobytes() if n == size else b"")

    threads = [threading.Thread(target=reader, args=(k,)) for k in ("get", "buffer", "into")]
    for t in threads:
        t.start()
    try:
        ans = b.recv("upsert_loop", timeout=120)
    finally:
        done.set()
        for t in threads:
            t.join()
        store.unregister_buffer(dst.ctypes.data)
    codes = {int(k): v for k, v in ans["codes"].items()}
    assert set(codes) <= {0, BUSY}, codes
    assert codes.get(0, 0) >= 5, codes
    assert not seen["torn"], f"torn reads (sizes): {seen}"
    assert seen["whole"] >= 1, seen
    final = store.get(key)
    assert versions.get(final) == ans["last_ok_seed"], (versions.get(final), ans)


def test_two_writers_upserting_one_key_leave_one_whole_version(master_factory, peer_factory,
                                                               store_factory):
    """Two peers upsert the same key concurrently (same size, each its own
    pattern), preempting each other; readers here meanwhile. Afterwards the
    key holds exactly one writer's pattern; no read was ever a mix."""
    m = master_factory(put_start_release_timeout_sec=1)  # preempted ranges come back soon
    w1 = peer_factory(m, segment="64MB")
    w2 = peer_factory(m, segment="64MB")
    s = store_factory(m, segment=0)
    key = "two-writers"
    size = MiB
    p0, p1, p2 = pattern(300, size), pattern(301, size), pattern(302, size)
    known = {p0: 0, p1: 1, p2: 2}
    assert s.put(key, p0) == 0
    w1.send("upsert_loop", key=key, size=size, seeds=[301], iters=150, min_ok=3)
    w2.send("upsert_loop", key=key, size=size, seeds=[302], iters=150, min_ok=3)
    torn = []
    counts = {0: 0, 1: 0, 2: 0, "empty": 0}
    while not (w1.answered() and w2.answered()):
        got = s.get(key)
        if not got:
            counts["empty"] += 1
        elif got in known:
            counts[known[got]] += 1
        else:
            torn.append(len(got))
    r1 = w1.recv("upsert_loop")
    r2 = w2.recv("upsert_loop")
    allowed = {0, BUSY, NOT_FOUND, int(ErrorCode.ILLEGAL_CLIENT)}
    for r in (r1, r2):
        codes = {int(k): v for k, v in r["codes"].items()}
        assert set(codes) <= allowed, f"writer results {r1} {r2}"
        assert codes.get(0, 0) >= 1, f"a writer never succeeded: {r1} {r2}"
    assert not torn, f"{len(torn)} torn reads while two writers upserted; counts {counts}"
    final = s.get(key)
    assert final in (p1, p2), "the key must hold one writer's whole pattern"
    assert w1.get(key) == final and w2.get(key) == final
    info = m.query_key(key)
    assert info["size"] == size and _all_complete(info), info


def test_upsert_preempts_an_unfinished_put(master_factory, peer_factory, store_factory):
    """Writer x is stuck between PutStart and PutEnd (its TCP transfer to
    the suspended peer b cannot finish). An upsert takes the key at once;
    x's late PutEnd is refused (-704) and its bytes never become visible;
    the preempted range is quarantined, then released."""
    m = master_factory(put_start_release_timeout_sec=1)
    a = peer_factory(m, segment="32MB")
    b = peer_factory(m, segment="32MB")
    x = peer_factory(m, segment="0", transport="tcp")
    s = store_factory(m, segment=0)
    key, size = "preempt/k", 2 * MiB
    used = lambda: {g["Name"]: g["Used"] for g in m.segments()}  # noqa: E731
    with b.suspended():
        stuck_put(m, x, key, size, 400, holder=b)
        assert s.get(key) == b""  # not readable while unfinished
        assert s.put(key, pattern(401, size)) == 0  # put does not overwrite...
        assert m.query_key(key)["replicas"][0]["segment"] == b.hostname  # ...nor take over
        assert s.upsert(key, pattern(402, size), ReplicateConfig(preferred_segment=a.hostname)) == 0
        assert s.get(key) == pattern(402, size)
        info = m.query_key(key)
        assert [(r["segment"], r["status"]) for r in info["replicas"]] == [(a.hostname, "COMPLETE")]
        assert used()[b.hostname] >= size  # the preempted range is quarantined, not freed
    assert x.recv("put_pattern", timeout=30)["rc"] == NOT_FOUND  # preempted: its put is gone
    assert s.get(key) == pattern(402, size)
    assert b.check_pattern(key, size, 402)
    wait_until(lambda: used()[b.hostname] == 0, timeout=10,
               what="the quarantined range on b to be released")
    assert a.check_pattern(key, size, 402)
