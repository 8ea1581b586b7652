"""Ranged writes and reads (Mooncake 0.3.13's put and get sessions,
``get_into_ranges``, ``put_from_with_metadata``) against the real master and
storage peers in other processes: bytes checked, and the codes the wheel
answers for each misuse (measured on mooncake-transfer-engine-non-cuda
0.3.13.post1)."""

from __future__ import annotations

import ctypes

import pytest

INVALID, EXISTS, MISSING, NOT_READY = -600, -705, -704, -703


@pytest.fixture
def arena(store):
    """1 MiB of registered memory: (base address, the ctypes buffer)."""
    buf = ctypes.create_string_buffer(1 << 20)
    base = ctypes.addressof(buf)
    assert store.register_buffer(base, 1 << 20) == 0
    yield base, buf
    store.unregister_buffer(base)


def fill(base: int, off: int, data: bytes) -> None:
    ctypes.memmove(base + off, data, len(data))


def read(base: int, off: int, n: int) -> bytes:
    return ctypes.string_at(base + off, n)


def pattern(seed: int, n: int) -> bytes:
    return bytes((seed * 31 + i * 7) % 256 for i in range(n))


def test_put_session_writes_ranges_then_publishes(store, arena, uniq):
    base, _ = arena
    k_exists, k1, k2 = f"{uniq}/exists", f"{uniq}/s1", f"{uniq}/s2"
    assert store.put(k_exists, b"x" * 100) == 0
    assert store.batch_put_session_start([k_exists, k1, "", k2], [100, 3000, 10, 50]) == [EXISTS, 0, INVALID, 0]
    assert store.batch_put_session_start([k1], [3000]) == [INVALID]  # already open
    assert store.get_size(k1) == NOT_READY and store.is_exist(k1) == 0

    a, b = pattern(1, 1000), pattern(2, 500)
    fill(base, 0, a)
    fill(base, 4096, b)
    assert store.batch_put_from_multi_buffer_ranges([k1], [[base, base + 4096]], [[1000, 500]], [[0, 2500]]) == [1500]
    # Outside the object, and lists of different lengths: nothing written.
    assert store.batch_put_from_multi_buffer_ranges([k1], [[base]], [[600]], [[2500]]) == [INVALID]
    assert store.batch_put_from_multi_buffer_ranges([k1], [[base, base]], [[10]], [[0, 5]]) == [INVALID]
    assert store.batch_put_from_multi_buffer_ranges([f"{uniq}/none"], [[base]], [[10]], [[0]]) == [INVALID]

    assert store.batch_put_session_end([f"{uniq}/none", k1]) == [INVALID, 0]
    assert store.batch_put_session_end([k1]) == [INVALID]  # ended
    got = store.get(k1)
    assert len(got) == 3000 and got[:1000] == a and got[2500:] == b

    assert store.batch_put_session_revoke([k2, f"{uniq}/none"]) == [0, INVALID]
    assert store.is_exist(k2) == 0
    assert store.batch_put_session_end([k2]) == [INVALID]


def test_get_session_reads_ranges_until_it_ends(store, arena, uniq):
    base, _ = arena
    key = f"{uniq}/obj"
    value = pattern(3, 5000)
    assert store.put(key, value) == 0
    assert store.batch_get_session_start([key, f"{uniq}/missing", ""]) == [0, MISSING, MISSING]
    got = store.batch_get_into_multi_buffer_ranges(
        [key], [[base, base + 200]], [[100, 300]], [[900, 4700]])
    assert got == [400]
    assert read(base, 0, 100) == value[900:1000] and read(base, 200, 300) == value[4700:]
    assert store.batch_get_into_multi_buffer_ranges([key], [[base]], [[10]], [[4995]]) == [INVALID]
    assert store.batch_get_session_end([key, f"{uniq}/missing"]) == 0
    assert store.batch_get_into_multi_buffer_ranges([key], [[base]], [[10]], [[0]]) == [INVALID]


def test_get_into_ranges_without_a_session(store, arena, uniq):
    base, _ = arena
    k1, k2 = f"{uniq}/a", f"{uniq}/b"
    v1, v2 = pattern(4, 4096), pattern(5, 100)
    assert store.put(k1, v1) == 0 and store.put(k2, v2) == 0
    dst = base + 65536
    out = store.get_into_ranges(
        [dst, dst + 8192],
        [[k1, f"{uniq}/missing"], [k2]],
        [[[0, 100], [0]], [[0]]],
        [[[10, 200], [0]], [[90]]],
        [[[5, 7], [5]], [[10]]],
    )
    assert out == [[[5, 7], [MISSING]], [[10]]]
    assert read(dst, 0, 5) == v1[10:15] and read(dst, 100, 7) == v1[200:207]
    assert read(dst + 8192, 0, 10) == v2[90:]
    assert store.get_into_ranges([dst], [[k2]], [[[0]]], [[[95]]], [[[20]]]) == [[[INVALID]]]
    assert store.get_into_ranges([dst], [[k2]], [[[0, 1]]], [[[0]]], [[[5]]]) == [[[INVALID, INVALID]]]


def test_put_from_with_metadata_stores_metadata_first(store, arena, uniq):
    base, _ = arena
    fill(base, 0, b"DATA" * 4)
    fill(base, 4096, b"meta" * 2)
    key = f"{uniq}/m"
    assert store.put_from_with_metadata(key, base, base + 4096, 16, 8) == 0
    assert store.get(key) == b"metameta" + b"DATA" * 4
    assert store.put_from_with_metadata("", base, base + 4096, 16, 8) == INVALID
    with pytest.raises(TypeError):
        store.put_from_with_metadata(key, "addr", base, 16, 8)


def test_replica_descriptors(store, cluster, uniq):
    """get_replica_desc reports each memory replica: its size, its holder's
    segment name and the address there (the bytes at that address in the
    holder are the object's); a missing key has none."""
    from gostore import ReplicaStatus

    key = f"{uniq}/two"
    value = b"replica" * 100
    from gostore import ReplicateConfig

    assert store.put(key, value, ReplicateConfig(replica_num=2)) == 0
    reps = store.get_replica_desc(key)
    assert len(reps) == 2
    holders = {cluster.a.get_hostname(), cluster.b.get_hostname(), store.get_hostname()}
    for r in reps:
        assert r.is_memory_replica() and not r.is_disk_replica() and r.status == ReplicaStatus.COMPLETE
        d = r.get_memory_descriptor().buffer_descriptor
        assert d.size == len(value) and d.transport_endpoint in holders and d.buffer_address > 0
        with pytest.raises(RuntimeError):
            r.get_disk_descriptor()
    assert len({r.get_memory_descriptor().buffer_descriptor.transport_endpoint for r in reps}) == 2
    assert store.get_replica_desc(f"{uniq}/missing") == []
    both = store.batch_get_replica_desc([key, f"{uniq}/missing"])
    assert list(both) == [key] and len(both[key]) == 2


def test_replica_descriptor_address_holds_the_bytes(store, uniq):
    """On this process's own segment the reported address can be read here:
    it holds the object's bytes."""
    from gostore import ReplicateConfig

    key = f"{uniq}/own"
    value = bytes(range(256)) * 4
    rc = store.put(key, value, ReplicateConfig(preferred_segment=store.get_hostname()))
    assert rc == 0
    (rep,) = store.get_replica_desc(key)
    d = rep.get_memory_descriptor().buffer_descriptor
    if d.transport_endpoint != store.get_hostname():
        pytest.skip("this store contributes no segment here")
    assert ctypes.string_at(d.buffer_address, d.size) == value


def test_batch_replica_clear(store, cluster, uniq):
    """batch_replica_clear drops what this client wrote: whole objects, or
    only their replicas on one segment (the rest still serves the bytes);
    an object under a lease, or another client's, stays."""
    from gostore import ReplicateConfig

    k_leased, k_whole, k_part, k_theirs = (f"{uniq}/{n}" for n in ("leased", "whole", "part", "theirs"))
    value = b"clear" * 200
    for k in (k_leased, k_whole, k_part):
        assert store.put(k, value, ReplicateConfig(replica_num=2)) == 0
    assert cluster.a.put_pattern(k_theirs, 1000, 3) == 0
    assert store.get(k_leased) == value  # a read leases the object
    assert store.batch_replica_clear([k_leased, k_whole, f"{uniq}/missing", k_theirs, ""]) == [k_whole]
    assert store.is_exist(k_whole) == 0 and store.is_exist(k_leased) == 1 and store.is_exist(k_theirs) == 1

    holders = [r.get_memory_descriptor().buffer_descriptor.transport_endpoint
               for r in store.get_replica_desc(k_part)]
    assert len(holders) == 2
    import time

    # The descriptor lookup leased k_part: clear once the lease has ended.
    deadline = time.monotonic() + 30
    cleared = []
    while not cleared and time.monotonic() < deadline:
        cleared = store.batch_replica_clear([k_part], holders[0])
        if not cleared:
            time.sleep(0.1)  # nothing signals a lease's end: poll it
    assert cleared == [k_part]
    left = store.get_replica_desc(k_part)
    assert [r.get_memory_descriptor().buffer_descriptor.transport_endpoint for r in left] == [holders[1]]
    assert store.get(k_part) == value
    assert store.batch_replica_clear([k_part], "no-such-segment") == []
    with pytest.raises(TypeError):
        store.batch_replica_clear([k_part], 5)


def test_batch_replica_clear_answers_every_key_it_cleared(store, uniq):
    """The answer names every key cleared, however long the list: the call
    cannot be asked twice (the first one already cleared the keys), so an
    answer that did not fit would lose them."""
    keys = [f"{uniq}/a-rather-long-key-name-for-the-answer/{i:04d}" for i in range(200)]
    for k in keys:
        assert store.put(k, b"v" * 64) == 0
    assert store.batch_replica_clear(keys + keys[:3]) == keys
    assert store.batch_is_exist(keys) == [0] * len(keys)
