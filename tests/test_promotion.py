"""Promotion on hit end to end (docs/master-flags.md "Promotion on hit"),
with the real master binary, a real client process holding the SSD tier
and an in-process reader.

A storage peer with a 16 MiB segment and an SSD tier takes 24 objects of
1 MiB: the master's eviction leaves most of them on disk only. Reads of
such an object are served from the holder's disk; with
``--promotion_on_hit`` the master counts them and, at
``--promotion_admission_threshold``, has the holder load the object back
into its memory, after which reads are served from memory.
"""

from __future__ import annotations

import os

from conftest import MiB, wait_until
from test_ssd_tier import OBJ, SEGMENT, disk_only, offload_master, put_retrying, tier_env, value

N = 24


def promo(m, what: str) -> float:
    return m.metric(f"master_promotion_{what}")


def fill(master_factory, peer_factory, store_factory, tmp_path, prefix: str, **flags):
    """A master with the SSD tier (and flags), the holder peer, a writer
    that is also the reader, and the keys left on disk only."""
    m = offload_master(master_factory, **flags)
    ssd = str(tmp_path / "ssd")
    os.mkdir(ssd)
    holder = peer_factory(m, segment=str(SEGMENT), ssd=ssd, env=tier_env("bucket_storage_backend", False))
    reader = store_factory(m, segment=0)  # every object lands on the holder
    keys = [f"{prefix}/{i}" for i in range(N)]
    for i, k in enumerate(keys):
        put_retrying(reader, k, value(i))
    wait_until(lambda: sum(disk_only(m, k) for k in keys) >= 4, timeout=20, what="objects on disk only")
    cold = [k for k in keys if disk_only(m, k)]
    return m, holder, reader, keys, cold


def test_an_object_read_from_disk_twice_is_served_from_memory_after(master_factory, peer_factory,
                                                                    store_factory, tmp_path):
    m, holder, reader, keys, cold = fill(master_factory, peer_factory, store_factory, tmp_path, "promo",
                                         promotion_on_hit=True)
    k = cold[0]
    want = value(keys.index(k))
    # The first disk read is below the threshold (2): counted, nothing queued.
    files = m.metric("file_cache_hit_nums_")
    assert reader.get(k) == want
    assert m.metric("file_cache_hit_nums_") == files + 1
    assert promo(m, "rejected_frequency_total") == 1 and promo(m, "admitted_total") == 0
    assert disk_only(m, k)
    # The second queues it; the holder loads it into its segment.
    assert reader.get(k) == want
    assert promo(m, "admitted_total") == 1
    wait_until(lambda: promo(m, "completed_total") == 1, timeout=10, what="the promotion completed")
    assert promo(m, "completed_bytes_total") == OBJ
    assert promo(m, "in_flight") == 0
    info = m.query_key(k)
    assert info["replicas"] and info["disk"], info
    # Reads now come from the memory replica, with the same bytes.
    mem, files = m.metric("mem_cache_hit_nums_"), m.metric("file_cache_hit_nums_")
    for _ in range(3):
        assert reader.get(k) == want
    assert m.metric("mem_cache_hit_nums_") == mem + 3
    assert m.metric("file_cache_hit_nums_") == files
    assert promo(m, "failed_total") == 0 and promo(m, "cancelled_total") == 0


def test_queue_limit_and_per_heartbeat_cap_hold(master_factory, peer_factory, store_factory, tmp_path):
    """promotion_queue_limit=1: of three cold objects read in one batch only
    the first is admitted; promotion_max_per_heartbeat=1 then lets the
    holder take one per heartbeat, and the rest come on later reads."""
    m, holder, reader, keys, cold = fill(master_factory, peer_factory, store_factory, tmp_path, "cap",
                                         promotion_on_hit=True, promotion_admission_threshold=1,
                                         promotion_queue_limit=1, promotion_max_per_heartbeat=1)
    three = cold[:3]
    got = reader.get_batch(three)
    assert got == [value(keys.index(k)) for k in three]
    assert promo(m, "admitted_total") == 1
    assert promo(m, "rejected_cap_total") == 2
    assert promo(m, "in_flight") <= 1
    wait_until(lambda: promo(m, "completed_total") == 1, timeout=10, what="the admitted promotion completed")
    # With room in the queue again, reads admit the others one at a time:
    # in flight never passes the limit.
    for k in three[1:]:
        assert reader.get(k) == value(keys.index(k))
        assert promo(m, "in_flight") <= 1
        done = promo(m, "completed_total")
        wait_until(lambda: promo(m, "completed_total") == done + 1 or not disk_only(m, k), timeout=10,
                   what=f"{k} promoted")
    assert promo(m, "admitted_total") == 3


def test_off_changes_nothing(master_factory, peer_factory, store_factory, tmp_path):
    m, holder, reader, keys, cold = fill(master_factory, peer_factory, store_factory, tmp_path, "off")
    k = cold[0]
    files = m.metric("file_cache_hit_nums_")
    for _ in range(5):
        assert reader.get(k) == value(keys.index(k))
    # Admission is decided on the read itself: nothing was counted.
    assert m.metric("file_cache_hit_nums_") == files + 5
    for what in ("admitted_total", "rejected_frequency_total", "completed_total", "in_flight"):
        assert promo(m, what) == 0, what
    assert disk_only(m, k)
