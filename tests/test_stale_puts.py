"""Puts that never end (PYTHON_API.md "Master-side semantics"): the writer
is left between PutStart and PutEnd by suspending the peer that holds the
replica while the writer reaches it over TCP (conftest.stuck_put).

* an unfinished put older than ``put_start_discard_timeout_sec`` may be
  taken over by a new put; the old writer's late PutEnd is refused;
* the unfinished puts of a writer that dies are dropped once the master
  expires it (``client_ttl``), and their space is freed.
"""

from __future__ import annotations

import time

from conftest import MiB, pattern, stuck_put, wait_until

NOT_FOUND = -704


def _used(m):
    return {g["Name"]: g["Used"] for g in m.segments()}


def test_an_abandoned_put_is_taken_over_after_the_discard_timeout(master_factory, peer_factory,
                                                                  store_factory):
    m = master_factory(put_start_discard_timeout_sec=1)
    a = peer_factory(m, segment="32MB")
    b = peer_factory(m, segment="32MB")
    x = peer_factory(m, segment="0", transport="tcp")
    s = store_factory(m, segment=0)
    key, size = "stale/k", MiB
    # The stuck put ends once, either way: taken over by the new put, or
    # reclaimed by the master's own sweep just before it (abandoned writes
    # are reclaimed after put_start_discard_timeout too).
    def ended():
        return (m.metric("gostore_master_put_taken_over_total")
                + m.metric("gostore_master_puts_reclaimed_total"))

    before = ended()
    with b.suspended():
        stuck_put(m, x, key, size, 500, holder=b)
        started = time.monotonic()
        assert s.put(key, pattern(501, size)) == 0  # too young: kept, nothing written
        assert s.get(key) == b""
        assert s.is_exist(key) == 0
        assert m.query_key(key)["replicas"][0]["segment"] == b.hostname
        time.sleep(max(0.0, 1.3 - (time.monotonic() - started)))
        assert s.put(key, pattern(502, size)) == 0  # old enough: taken over
        assert s.get(key) == pattern(502, size)
        assert ended() == before + 1
    assert x.recv("put_pattern", timeout=30)["rc"] == NOT_FOUND
    assert s.get(key) == pattern(502, size)
    assert a.check_pattern(key, size, 502)
    info = m.query_key(key)
    assert all(r["status"] == "COMPLETE" for r in info["replicas"]), info


def test_the_unfinished_put_of_a_dead_writer_is_dropped(master_factory, peer_factory,
                                                        store_factory):
    m = master_factory(client_ttl=1)
    a = peer_factory(m, segment="32MB")
    b = peer_factory(m, segment="32MB")
    x = peer_factory(m, segment="0", transport="tcp")
    s = store_factory(m, segment=0)
    key, size = "dead-writer/k", 4 * MiB
    with b.suspended():
        stuck_put(m, x, key, size, 600, holder=b)
        assert _used(m)[b.hostname] >= size
        x.kill()  # SIGKILL between PutStart and PutEnd
    assert s.get(key) == b""
    wait_until(lambda: m.query_key(key) is None, timeout=10,
               what="the dead writer's unfinished put to be dropped")
    wait_until(lambda: _used(m)[b.hostname] == 0, timeout=5, what="its space on b to be freed")
    assert b.alive() and b.health_check() == 0
    assert s.put(key, pattern(601, size)) == 0
    assert s.get(key) == pattern(601, size)
    assert a.check_pattern(key, size, 601) and b.check_pattern(key, size, 601)
