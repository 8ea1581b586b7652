"""The copying API across processes: put/get, put_parts, batches, get_buffer."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from conftest import MiB, pattern
from gostore import ErrorCode, ReplicateConfig

SIZES = [1, 4096, MiB + 3, 16 * MiB]
SIZE_IDS = ["1B", "4KiB", "1MiB+3", "16MiB"]


def _replica_segments(master, key):
    info = master.query_key(key)
    assert info is not None, f"{key!r} unknown to the master"
    return [r["segment"] for r in info["replicas"]]


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_peer_puts_on_its_segment_and_test_process_gets_same_bytes(cluster, uniq, size):
    key = uniq + "v"
    seed = size * 7 + 1
    assert cluster.a.put_pattern(key, size, seed, preferred_segment=cluster.a.hostname) == 0
    assert _replica_segments(cluster.master, key) == [cluster.a.hostname]
    assert cluster.master.query_key(key)["size"] == size
    got = cluster.store.get(key)
    assert len(got) == size
    assert got == pattern(seed, size)
    assert cluster.store.get_size(key) == size


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_test_process_puts_and_other_processes_get_same_bytes(cluster, uniq, size):
    key = uniq + "v"
    seed = size * 13 + 5
    value = pattern(seed, size)
    cfg = ReplicateConfig(preferred_segment=cluster.hostname)
    assert cluster.store.put(key, value, cfg) == 0
    assert _replica_segments(cluster.master, key) == [cluster.hostname]
    assert cluster.a.check_pattern(key, size, seed)
    assert cluster.b.check_pattern(key, size, seed)
    assert cluster.b.get_size(key) == size


def test_peer_puts_on_other_peer_and_third_process_reads(cluster, uniq):
    key = uniq + "v"
    assert cluster.a.put_pattern(key, 3 * MiB + 1, 99, preferred_segment=cluster.b.hostname) == 0
    assert _replica_segments(cluster.master, key) == [cluster.b.hostname]
    assert cluster.store.get(key) == pattern(99, 3 * MiB + 1)
    assert cluster.a.check_pattern(key, 3 * MiB + 1, 99)


def test_put_existing_key_returns_0_and_does_not_overwrite(cluster, uniq):
    s = cluster.store
    key = uniq + "k"
    assert s.put(key, b"first value") == 0
    assert s.put(key, b"second, longer value") == 0
    assert s.put(key, b"third") == 0
    assert s.get(key) == b"first value"
    # from another process too
    assert cluster.a.put(key, b"from peer") == 0
    assert s.get(key) == b"first value"
    assert cluster.b.get(key) == b"first value"
    assert cluster.master.query_key(key)["size"] == len(b"first value")


def test_empty_key_or_empty_value_is_invalid_params(cluster, uniq):
    s = cluster.store
    assert s.put("", b"value") == -600
    assert s.put(uniq + "empty", b"") == -600
    assert s.put(uniq + "empty", bytearray()) == -600
    assert s.get(uniq + "empty") == b""
    assert s.is_exist(uniq + "empty") == 0
    assert s.put_parts(uniq + "p") == -600
    assert s.put_parts(uniq + "p", b"", b"") == -600
    assert s.put_parts("", b"abc") == -600
    assert s.get("") == b""
    assert s.get_buffer("") is None


def test_put_accepts_any_buffer_type(cluster, uniq):
    s = cluster.store
    raw = pattern(4, 10000)
    arr = np.frombuffer(raw, dtype=np.uint8).reshape(100, 100)
    values = {
        "bytes": raw,
        "bytearray": bytearray(raw),
        "memoryview": memoryview(raw),
        "numpy": arr,
        "numpy-f32": np.arange(2500, dtype=np.float32),
        "ctypes": (ctypes.c_char * len(raw)).from_buffer_copy(raw),
    }
    for name, v in values.items():
        assert s.put(uniq + name, v) == 0, name
    for name, v in values.items():
        want = memoryview(v).tobytes()
        assert s.get(uniq + name) == want, name
        assert cluster.a.get(uniq + name) == want, name


def test_put_parts_stores_concatenation(cluster, uniq):
    s = cluster.store
    key = uniq + "parts"
    parts = [b"head-", bytearray(b"\x00\x01\x02"), memoryview(pattern(1, MiB + 7)),
             np.arange(1000, dtype=np.int32), b"-tail"]
    want = b"".join(memoryview(p).tobytes() for p in parts)
    assert s.put_parts(key, *parts, config=ReplicateConfig(preferred_segment=cluster.hostname)) == 0
    assert s.get(key) == want
    assert s.get_size(key) == len(want)
    assert cluster.b.get(key) == want


def test_put_parts_skips_empty_parts(cluster, uniq):
    s = cluster.store
    key = uniq + "parts"
    assert s.put_parts(key, b"", b"abc", b"", b"def") == 0
    assert s.get(key) == b"abcdef"


def test_put_batch_and_get_batch_with_misses_in_order(cluster, uniq):
    s = cluster.store
    keys = [f"{uniq}{i}" for i in range(20)]
    values = [pattern(i, 1 + i * 9973) for i in range(20)]
    assert s.put_batch(keys, values) == 0
    query = []
    want = []
    for i, (k, v) in enumerate(zip(keys, values)):
        query.append(k)
        want.append(v)
        if i % 3 == 0:
            query.append(f"{uniq}missing-{i}")
            want.append(b"")
    got = s.get_batch(query)
    assert len(got) == len(query)
    assert got == want
    for k, v in zip(keys[:3], values[:3]):
        assert cluster.a.get(k) == v


def test_put_batch_returns_first_error(cluster, uniq):
    s = cluster.store
    rc = s.put_batch([uniq + "a", "", uniq + "c"], [b"1", b"2", b"3"])
    assert rc == -600
    rc = s.put_batch([uniq + "d", uniq + "e"], [b"1", b""])
    assert rc == -600


def test_put_batch_lists_of_different_lengths_is_invalid(cluster, uniq):
    s = cluster.store
    assert s.put_batch([uniq + "a", uniq + "b"], [b"1"]) == -600
    assert s.get_batch([uniq + "a", uniq + "b"]) == [b"", b""]


def test_empty_batches(cluster):
    s = cluster.store
    assert s.put_batch([], []) == 0
    assert s.get_batch([]) == []
    assert s.batch_get_buffer([]) == []


def test_get_on_miss_returns_empty_bytes(cluster, uniq):
    got = cluster.store.get(uniq + "nope")
    assert got == b"" and isinstance(got, bytes)
    assert cluster.a.get(uniq + "nope") == b""


def test_unicode_keys_roundtrip_across_processes(cluster, uniq):
    key = uniq + "ключ/🔑/値"
    assert cluster.a.put(key, "ünïcode".encode()) == 0
    assert cluster.store.get(key) == "ünïcode".encode()
    assert cluster.store.is_exist(key) == 1
    assert cluster.master.query_key(key)["key"] == key


def test_get_buffer_holds_value_with_buffer_protocol(cluster, uniq):
    key = uniq + "buf"
    size = MiB + 3
    assert cluster.a.put_pattern(key, size, 77, preferred_segment=cluster.a.hostname) == 0
    want = pattern(77, size)
    buf = cluster.store.get_buffer(key)
    assert buf is not None
    assert len(buf) == size
    assert buf.size() == size
    assert isinstance(buf.ptr(), int) and buf.ptr() != 0
    mv = memoryview(buf)
    assert mv.nbytes == size
    assert mv.cast("B").tobytes() == want
    assert bytes(buf) == want
    assert ctypes.string_at(buf.ptr(), size) == want
    arr = np.frombuffer(buf, dtype=np.uint8)
    assert arr.shape == (size,)
    assert arr.tobytes() == want


def test_get_buffer_is_a_snapshot_that_survives_remove(cluster, uniq):
    s = cluster.store
    key = uniq + "buf"
    value = pattern(8, 5000)
    assert s.put(key, value) == 0
    buf = s.get_buffer(key)
    assert s.remove(key, force=True) == 0
    assert s.get(key) == b""
    assert bytes(buf) == value


def test_get_buffer_miss_returns_none(cluster, uniq):
    assert cluster.store.get_buffer(uniq + "missing") is None


def test_batch_get_buffer_mixed_hits_and_misses(cluster, uniq):
    s = cluster.store
    k1, k2 = uniq + "1", uniq + "2"
    v1, v2 = pattern(1, 333), pattern(2, 2 * MiB)
    assert cluster.a.put(k1, v1, preferred_segment=cluster.a.hostname) == 0
    assert cluster.b.put_pattern(k2, 2 * MiB, 2, preferred_segment=cluster.b.hostname) == 0
    out = s.batch_get_buffer([k1, uniq + "miss", k2])
    assert len(out) == 3
    assert out[1] is None
    assert bytes(out[0]) == v1 and out[0].size() == 333
    assert bytes(out[2]) == v2 and len(out[2]) == 2 * MiB


def test_many_get_buffers_released_without_leak(cluster, uniq):
    """Buffers freed by the GC must not break later reads (double free etc.)."""
    s = cluster.store
    key = uniq + "buf"
    value = pattern(3, 64 * 1024)
    assert s.put(key, value) == 0
    for _ in range(200):
        b = s.get_buffer(key)
        assert bytes(b) == value
        del b
    assert s.get(key) == value


def test_error_code_values(cluster):
    assert ErrorCode.OK == 0
    assert ErrorCode.INVALID_PARAMS == -600
    assert ErrorCode.OBJECT_NOT_FOUND == -704
    assert ErrorCode.OBJECT_HAS_LEASE == -706
    assert ErrorCode.NO_AVAILABLE_HANDLE == -200
    assert ErrorCode.REPLICA_IS_NOT_READY == -703
    assert ErrorCode.OBJECT_HAS_REPLICATION_TASK == -708
    assert ErrorCode.RPC_FAIL == -900
    assert ErrorCode(-704).name == "OBJECT_NOT_FOUND"
    # what the store returns compares equal to the enum
    assert cluster.store.get_size("error-code-values/never-put") == ErrorCode.OBJECT_NOT_FOUND


def test_preferred_segments_list_places_the_object(cluster, uniq):
    s = cluster.store
    key = uniq + "k"
    cfg = ReplicateConfig(preferred_segments=[cluster.b.hostname])
    assert s.put(key, b"on b", cfg) == 0
    assert _replica_segments(cluster.master, key) == [cluster.b.hostname]
    # preferred_segment is tried before preferred_segments
    key2 = uniq + "k2"
    cfg = ReplicateConfig(preferred_segment=cluster.a.hostname,
                          preferred_segments=[cluster.b.hostname])
    assert s.put(key2, b"on a", cfg) == 0
    assert _replica_segments(cluster.master, key2) == [cluster.a.hostname]
    assert cluster.b.get(key2) == b"on a"


def test_pin_flags_reach_the_master(cluster, uniq):
    s = cluster.store
    cfg = ReplicateConfig()
    cfg.with_hard_pin = True  # attribute assignment works like the kwarg
    assert s.put(uniq + "hard", b"h", cfg) == 0
    assert s.put(uniq + "soft", b"s", ReplicateConfig(with_soft_pin=True)) == 0
    assert s.put(uniq + "none", b"n") == 0
    hard = cluster.master.query_key(uniq + "hard")
    soft = cluster.master.query_key(uniq + "soft")
    none = cluster.master.query_key(uniq + "none")
    assert (hard["hard_pin"], hard["soft_pin"]) == (True, False)
    assert (soft["hard_pin"], soft["soft_pin"]) == (False, True)
    assert (none["hard_pin"], none["soft_pin"]) == (False, False)


@pytest.mark.parametrize("suffix", ["a\nb", "nul\x00inside", "x" * 4096, " spaces and\ttabs "],
                         ids=["newline", "nul", "4096-chars", "whitespace"])
def test_unusual_keys_roundtrip_across_processes(cluster, uniq, suffix):
    key = uniq + suffix
    other = uniq + suffix[:-1]  # a prefix of the key is a different key
    assert cluster.a.put(key, b"value:" + suffix.encode()) == 0
    assert cluster.store.get(key) == b"value:" + suffix.encode()
    assert cluster.store.batch_is_exist([key, other]) == [1, 0]
    assert cluster.store.get_batch([other, key]) == [b"", b"value:" + suffix.encode()]
    assert cluster.b.remove(key, force=True) == 0
    assert cluster.store.get(key) == b""


def test_lone_surrogate_key_is_invalid_params(cluster):
    bad = "bad\udc80key"
    assert cluster.store.put(bad, b"v") == -600
    assert cluster.store.get(bad) == b""
    assert cluster.store.is_exist(bad) == -600


def test_no_local_buffer_refuses_copying_calls_but_not_zero_copy(master, store_factory):
    """local_buffer_size=0: the copying calls answer -600 and store
    nothing (Mooncake's copying calls stage through that buffer); the
    zero-copy calls still work, on memory never registered too."""
    writer = store_factory(master, buffer=16 * MiB)
    assert writer.put("nolb-existing", b"abc") == 0
    s = store_factory(master, buffer=0)
    assert s.put("nolb-put", b"value") == -600
    assert s.put_batch(["nolb-batch"], [b"value"]) == -600
    assert s.upsert("nolb-upsert", b"value") == -600
    assert s.put_parts("nolb-parts", b"a", b"b") == -600
    assert s.batch_is_exist(["nolb-put", "nolb-batch", "nolb-upsert", "nolb-parts"]) == [0, 0, 0, 0]
    assert s.get("nolb-existing") == b""
    assert s.get_batch(["nolb-existing"]) == [b""]
    assert s.get_buffer("nolb-existing") is None
    own = (ctypes.c_char * 100)()
    ctypes.memmove(own, b"zero-copy", 9)
    assert s.put_from("nolb-from", ctypes.addressof(own), 9) == 0
    assert writer.get("nolb-from") == b"zero-copy"
    assert s.get_into("nolb-existing", ctypes.addressof(own), 100) == 3
    assert own.raw[:3] == b"abc"
