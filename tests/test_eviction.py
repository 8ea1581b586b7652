"""Eviction under sustained writes (PYTHON_API.md "Master-side semantics"):
above the high watermark, or after a failed allocation, the master frees
about ``eviction_ratio`` of the evictable objects, least recently used
first; hard-pinned and leased objects are never evicted. Writers that get
-200 retry after a short back-off and eventually succeed.
"""

from __future__ import annotations

import time

import pytest

from conftest import MiB, pattern
from gostore import ErrorCode, ReplicateConfig

NO_SPACE = int(ErrorCode.NO_AVAILABLE_HANDLE)  # -200
SEGMENT = 64 * MiB
OBJ = MiB
_BASE = pattern(999, OBJ)


def filler(i: int) -> bytes:
    """Object i's bytes: the base pattern rotated by a different amount for
    every i (4099 is odd, so i * 4099 mod 1 MiB never repeats below 1 MiB):
    distinct values without generating 400 random megabytes."""
    r = (i * 4099) % OBJ
    return _BASE[r:] + _BASE[:r]


def _put_retrying(s, key, value, between, tries=400, pause=0.005):
    """put, retried after -200 (eviction frees space within a few ticks),
    calling ``between()`` before each try; returns (rc, retries)."""
    for retries in range(tries):
        between()
        rc = s.put(key, value)
        if rc != NO_SPACE:
            return rc, retries
        time.sleep(pause)
    return rc, tries


@pytest.mark.parametrize("watermark", [0.9, 1.0], ids=["above-watermark", "after-failed-alloc"])
def test_writing_three_times_the_pool_keeps_pinned_and_leased_objects(master_factory,
                                                                      peer_factory,
                                                                      store_factory,
                                                                      watermark):
    """With watermark 1.0 only failed allocations start passes, which the
    writer's puts wait for; with 0.9 the passes run ahead."""
    m = master_factory(eviction_high_watermark_ratio=watermark, eviction_ratio=0.1,
                       tick_interval_ms=20, default_kv_lease_ttl=2000)
    for _ in range(2):
        peer_factory(m, segment=str(SEGMENT))
    s = store_factory(m, segment=0)  # writes land on the peers' segments
    capacity = 2 * SEGMENT
    assert sum(seg["Size"] for seg in m.segments()) == capacity

    pinned = [f"pinned/{i}" for i in range(8)]
    leased = [f"leased/{i}" for i in range(8)]
    seed = {k: 1000 + i for i, k in enumerate(pinned + leased)}
    for k in pinned:
        assert s.put(k, pattern(seed[k], OBJ), ReplicateConfig(with_hard_pin=True)) == 0
    for k in leased:
        assert s.put(k, pattern(seed[k], OBJ)) == 0
    assert s.get_batch(leased) == [pattern(seed[k], OBJ) for k in leased]  # leases start

    last_reread = [time.monotonic()]

    def reread_leased():
        got = s.get_batch(leased)  # extends the leases
        last_reread[0] = time.monotonic()
        for k, v in zip(leased, got):
            assert v == pattern(seed[k], OBJ), f"leased object {k} lost or changed"

    def keep_leases():
        # well within the 2 s lease, also while a put keeps retrying
        if time.monotonic() - last_reread[0] > 0.2:
            reread_leased()

    def check_pool():
        segs = m.segments()
        for seg in segs:
            assert seg["Used"] <= seg["Size"], seg
        assert sum(seg["Used"] for seg in segs) <= capacity

    n = 3 * capacity // OBJ  # 384 objects: three times the pool
    fillers = [f"fill/{i}" for i in range(n)]
    retries = 0
    failures = []
    for i, k in enumerate(fillers):
        rc, r = _put_retrying(s, k, filler(i), keep_leases)
        retries += r
        if rc != 0:
            failures.append((k, rc))
        if i % 16 == 0:
            check_pool()
    print(f"eviction test (watermark {watermark}): {n} puts of 1 MiB, "
          f"{retries} retries after -200")
    assert not failures, f"puts that never got space: {failures[:5]} ({len(failures)} in all)"
    if watermark >= 1.0:
        # Passes started by failed allocations, which the puts waited for
        # (put_space_wait_ms) instead of returning -200.
        assert m.metric("gostore_master_alloc_failure_total") > 0, "the pool never filled"
    check_pool()

    # hard-pinned and leased objects all survived, bytes intact
    assert s.get_batch(pinned) == [pattern(seed[k], OBJ) for k in pinned]
    assert all(m.query_key(k)["hard_pin"] for k in pinned)
    reread_leased()
    # whatever is still readable holds exactly its bytes; old ones went first
    got = s.get_batch(fillers)
    alive = [i for i, v in enumerate(got) if v]
    for i in alive:
        assert got[i] == filler(i), f"{fillers[i]} changed"
    assert len(alive) <= capacity // OBJ - len(pinned) - len(leased), len(alive)
    assert set(range(n - 4, n)) <= set(alive), "the newest objects must not be evicted first"
    assert m.metric("gostore_master_eviction_pass_total") > 0
    assert m.metric("gostore_master_evicted_object_total") >= n - len(alive)
    assert m.metric("gostore_master_evicted_object_total") > 0
