"""Existence, size, removal and read leases.

The shared cluster's master grants 3 s leases (so "still leased" checks do not
race the expiry); lease expiry is tested on a master with
``--default_kv_lease_ttl=500``.
"""

from __future__ import annotations

import calendar
import re
import time

from conftest import MiB, pattern, wait_until
from gostore import ErrorCode

LEASE_S = 0.5


def _present(master, keys):
    """Which keys the master knows, without granting leases."""
    return [master.query_key(k) is not None for k in keys]


def test_is_exist_1_for_present_0_for_missing(cluster, uniq):
    s = cluster.store
    assert s.put(uniq + "k", b"v") == 0
    assert s.is_exist(uniq + "k") == 1
    assert s.is_exist(uniq + "missing") == 0
    assert cluster.a.is_exist(uniq + "k") == 1
    assert cluster.a.is_exist(uniq + "missing") == 0


def test_batch_is_exist_in_order(cluster, uniq):
    s = cluster.store
    assert cluster.a.put(uniq + "1", b"one") == 0
    assert s.put(uniq + "3", b"three") == 0
    got = s.batch_is_exist([uniq + "1", uniq + "2", uniq + "3", uniq + "4"])
    assert got == [1, 0, 1, 0]
    assert s.batch_is_exist([]) == []


def test_get_size_reports_size_and_704_when_missing(cluster, uniq):
    s = cluster.store
    assert cluster.b.put_pattern(uniq + "k", 2 * MiB + 5, 1) == 0
    assert s.get_size(uniq + "k") == 2 * MiB + 5
    assert s.get_size(uniq + "missing") == -704
    assert s.get_size(uniq + "missing") == ErrorCode.OBJECT_NOT_FOUND


def test_remove_then_missing(cluster, uniq):
    s = cluster.store
    key = uniq + "k"
    assert s.put(key, b"value") == 0
    assert s.remove(key) == 0  # a put grants no lease
    assert s.remove(key) == -704
    assert s.get(key) == b""
    assert s.is_exist(key) == 0
    assert s.get_size(key) == -704
    assert cluster.master.query_key(key) is None
    assert cluster.a.get(key) == b""
    # the key can be written again with a new value after removal
    assert s.put(key, b"new value") == 0
    assert cluster.a.get(key) == b"new value"


def test_remove_of_key_put_by_another_process(cluster, uniq):
    key = uniq + "k"
    assert cluster.a.put(key, b"peer value") == 0
    assert cluster.store.remove(key) == 0
    assert cluster.a.get(key) == b""


def _lease_end_ns(master, key) -> int:
    """When ``key``'s read lease ends, as the master reports it
    (``lease_until``: RFC 3339 in UTC with up to nine fractional digits),
    in nanoseconds since the epoch."""
    stamp = master.query_key(key)["lease_until"]
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z", stamp)
    assert m, f"lease_until {stamp!r}"
    seconds = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    return seconds * 10**9 + int((m.group(2) or "").ljust(9, "0"))


def test_remove_leased_object_is_706_until_lease_expires(master_factory, store_factory,
                                                         peer_factory):
    m = master_factory(default_kv_lease_ttl=500)
    p = peer_factory(m, segment="8MB")
    s = store_factory(m, segment=8 * MiB)
    key = "lease-expiry/k"
    assert p.put(key, b"leased") == 0
    read_at = time.time_ns()
    assert s.get(key) == b"leased"  # grants a lease of 500 ms
    lease_end = _lease_end_ns(m, key)
    assert lease_end >= read_at + int(LEASE_S * 1e9), "the lease is shorter than its ttl"
    assert s.remove(key) == -706
    assert p.remove(key) == ErrorCode.OBJECT_HAS_LEASE
    assert s.get(key) == b"leased"  # still there; the read extends the lease
    lease_end = _lease_end_ns(m, key)
    # Nothing announces a lease's end (the master compares it with its
    # clock when asked), so removal is polled; it must not succeed before
    # the end the master reported. Same host, same clock.
    removed_at = []

    def removed() -> bool:
        if s.remove(key) != 0:
            return False
        removed_at.append(time.time_ns())
        return True

    wait_until(removed, timeout=5, interval=0.05,
               what="remove() to succeed after the lease expired")
    early_ms = (lease_end - removed_at[0]) / 1e6
    assert removed_at[0] >= lease_end, f"lease released {early_ms:.1f} ms before its end"
    assert s.is_exist(key) == 0
    assert p.get(key) == b""
    # an expired lease does not come back: a fresh put can be removed at once
    assert s.put(key, b"again") == 0
    assert s.remove(key) == 0


def test_is_exist_and_get_size_grant_leases(cluster, uniq):
    s = cluster.store
    k1, k2 = uniq + "exist", uniq + "size"
    assert s.put(k1, b"a") == 0 and s.put(k2, b"bb") == 0
    assert s.is_exist(k1) == 1
    assert s.get_size(k2) == 2
    assert s.remove(k1) == -706
    assert s.remove(k2) == -706


def test_lease_granted_by_another_process_blocks_remove(cluster, uniq):
    key = uniq + "k"
    assert cluster.store.put(key, b"v") == 0
    assert cluster.a.get(key) == b"v"
    assert cluster.store.remove(key) == -706
    assert cluster.b.remove(key) == -706


def test_remove_force_removes_leased_object(cluster, uniq):
    s = cluster.store
    key = uniq + "k"
    assert s.put(key, b"v") == 0
    assert s.get(key) == b"v"
    assert s.remove(key) == -706
    assert s.remove(key, force=True) == 0
    assert s.remove(key, force=True) == -704
    assert cluster.master.query_key(key) is None


def test_batch_remove_list(cluster, uniq):
    s = cluster.store
    k1, k2, k3 = uniq + "1", uniq + "2", uniq + "3"
    for k in (k1, k2, k3):
        assert s.put(k, k.encode()) == 0
    assert s.get(k3) == k3.encode()  # leased
    got = s.batch_remove([k1, uniq + "missing", k2, k3])
    assert got == [0, -704, 0, -706]
    assert s.batch_is_exist([k1, k2]) == [0, 0]
    assert s.batch_remove([k3], force=True) == [0]
    assert s.batch_remove([]) == []


def test_remove_by_regex_uses_search_semantics_and_returns_count(cluster, uniq):
    s = cluster.store
    keys = [uniq + "x/1", uniq + "x/2", uniq + "y/1", uniq + "xx"]
    for k in keys:
        assert s.put(k, b"v") == 0
    # A pattern that matches in the middle of the keys: only search()
    # semantics (not match()/fullmatch()) find these.
    middle = re.escape(uniq[len(uniq) // 2:]) + r"x/\d"
    assert s.remove_by_regex(middle) == 2
    # (checked through the master's HTTP view: is_exist would grant leases)
    assert _present(cluster.master, keys) == [False, False, True, True]
    assert s.remove_by_regex(re.escape(uniq) + "nothing-matches") == 0
    assert s.remove_by_regex("^" + re.escape(uniq)) == 2
    assert _present(cluster.master, keys) == [False] * 4


def test_remove_by_regex_skips_leased_unless_force(cluster, uniq):
    s = cluster.store
    keys = [f"{uniq}k{i}" for i in range(5)]
    for k in keys:
        assert s.put(k, b"v") == 0
    assert cluster.a.get(keys[1]) == b"v"  # leased by another process
    assert s.is_exist(keys[3]) == 1  # leased by this one
    assert s.remove_by_regex("^" + re.escape(uniq)) == 3
    assert s.batch_is_exist(keys) == [0, 1, 0, 1, 0]
    assert s.remove_by_regex("^" + re.escape(uniq), force=True) == 2
    assert s.batch_is_exist(keys) == [0] * 5


def test_remove_by_regex_invalid_pattern_is_negative(cluster, uniq):
    s = cluster.store
    assert s.put(uniq + "k", b"v") == 0
    assert s.remove_by_regex("(unclosed") < 0
    assert s.is_exist(uniq + "k") == 1


def test_remove_all_counts_and_skips_leased_unless_force(master_factory, store_factory,
                                                        peer_factory):
    m = master_factory(default_kv_lease_ttl=60000)
    p = peer_factory(m, segment="16MB")
    s = store_factory(m, segment=16 * MiB)
    keys = [f"remove-all/{i}" for i in range(10)]
    for i, k in enumerate(keys):
        assert s.put(k, pattern(i, 1000 + i)) == 0
    assert p.get(keys[0]) == pattern(0, 1000)  # leased
    assert s.remove_all() == 9
    assert s.batch_is_exist(keys) == [1] + [0] * 9
    assert s.get(keys[0]) == pattern(0, 1000)
    assert s.remove_all(force=True) == 1
    assert s.batch_is_exist(keys) == [0] * 10
    assert s.remove_all() == 0
    # the pool is empty again: every byte is free for new puts
    assert all(seg["Used"] == 0 for seg in m.segments()), m.segments()
