"""Replication and client liveness: close(), SIGKILL and client_ttl."""

from __future__ import annotations

import re

from conftest import MiB, pattern, wait_until
from gostore import ReplicateConfig


def _replicas(master, key):
    info = master.query_key(key)
    return None if info is None else [r["segment"] for r in info["replicas"]]


def _metric(master, name: str) -> float:
    status, body = master.http("/metrics")
    assert status == 200
    m = re.search(rf"^{re.escape(name)} (\S+)$", body, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def test_replica_num_2_object_survives_writer_close(master, peer_factory, store_factory):
    a = peer_factory(master, segment="32MB")
    b = peer_factory(master, segment="32MB")
    s = store_factory(master, segment=32 * MiB)
    keys = [f"repl2/{i}" for i in range(6)]
    sizes = [1, 4096, MiB + 3, 2 * MiB, 77, 3 * MiB + 5]
    for i, (k, n) in enumerate(zip(keys, sizes)):
        assert a.put_pattern(k, n, 100 + i, replica_num=2, preferred_segment=a.hostname) == 0
        reps = _replicas(master, k)
        assert len(reps) == 2 and len(set(reps)) == 2, reps
        assert a.hostname in reps, reps
    assert a.close() == 0
    assert a.hostname not in master.segment_names()
    for i, (k, n) in enumerate(zip(keys, sizes)):
        reps = _replicas(master, k)
        assert reps is not None and len(reps) == 1 and a.hostname not in reps, reps
        assert s.get(k) == pattern(100 + i, n), k
        assert b.check_pattern(k, n, 100 + i), k


def test_replica_num_is_best_effort_over_distinct_segments(master, peer_factory, store_factory):
    a = peer_factory(master, segment="16MB")
    s = store_factory(master, segment=16 * MiB)
    assert s.put("best-effort/k", b"x" * 1000, ReplicateConfig(replica_num=5)) == 0
    reps = _replicas(master, "best-effort/k")
    assert sorted(reps) == sorted([a.hostname, s.get_hostname()])
    assert a.get("best-effort/k") == b"x" * 1000


def test_objects_only_on_closed_peer_disappear(master, peer_factory, store_factory):
    a = peer_factory(master, segment="32MB")
    b = peer_factory(master, segment="32MB")
    s = store_factory(master, segment=32 * MiB)
    on_a = [f"closing/a/{i}" for i in range(5)]
    for i, k in enumerate(on_a):
        assert a.put_pattern(k, 1000 + i * 100_000, i, preferred_segment=a.hostname) == 0
        assert _replicas(master, k) == [a.hostname]
    assert b.put("closing/b", b"stays", preferred_segment=b.hostname) == 0
    assert s.get(on_a[1]) == pattern(1, 101_000)  # readable while a lives
    assert a.close() == 0
    assert a.hostname not in master.segment_names()
    for k in on_a:
        assert s.get(k) == b"", k
        assert s.is_exist(k) == 0, k
        assert master.query_key(k) is None, k
        assert b.get(k) == b"", k
    assert s.get("closing/b") == b"stays"
    # the space the closed peer held is not needed for new puts
    assert s.put("closing/new", pattern(9, 2 * MiB)) == 0
    assert b.check_pattern("closing/new", 2 * MiB, 9)
    assert a.health_check() == 1


def test_sigkilled_peer_loses_segment_after_client_ttl(master_factory, peer_factory,
                                                       store_factory):
    m = master_factory(client_ttl=2)
    a = peer_factory(m, segment="32MB")
    b = peer_factory(m, segment="32MB")
    s = store_factory(m, segment=32 * MiB)
    on_a = [f"killed/a/{i}" for i in range(4)]
    for i, k in enumerate(on_a):
        assert a.put_pattern(k, MiB + i, i, preferred_segment=a.hostname) == 0
    assert b.put_pattern("killed/b", 2 * MiB + 1, 50, preferred_segment=b.hostname) == 0
    assert s.put("killed/s", pattern(51, 3000), ReplicateConfig(preferred_segment=s.get_hostname())) == 0
    assert a.put_pattern("killed/both", MiB, 52, replica_num=2, preferred_segment=a.hostname) == 0
    assert len(_replicas(m, "killed/both")) == 2
    assert s.get(on_a[0]) == pattern(0, MiB)
    expired_before = _metric(m, "gostore_master_clients_expired_total")

    a.kill()
    wait_until(lambda: a.hostname not in m.segment_names(), timeout=10,
               what=f"segment {a.hostname} of the killed peer to be dropped")
    assert _metric(m, "gostore_master_clients_expired_total") >= expired_before + 1

    for k in on_a:
        assert s.get(k) == b"", k
        assert s.is_exist(k) == 0, k
        assert b.is_exist(k) == 0, k
    # what lived elsewhere is intact
    assert s.get("killed/b") == pattern(50, 2 * MiB + 1)
    assert b.get("killed/s") == pattern(51, 3000)
    assert s.get("killed/both") == pattern(52, MiB)
    assert a.hostname not in _replicas(m, "killed/both")
    # and the survivors keep working, both ways
    assert sorted(m.segment_names()) == sorted([b.hostname, s.get_hostname()])
    for i in range(4):
        key = f"killed/after/{i}"
        assert s.put(key, pattern(60 + i, MiB + 7)) == 0
        assert b.check_pattern(key, MiB + 7, 60 + i)
        assert b.put_pattern(key + "/b", 4096 + i, 70 + i) == 0
        assert s.get(key + "/b") == pattern(70 + i, 4096 + i)
    assert s.health_check() == 0 and b.health_check() == 0


def test_put_with_no_segment_anywhere_is_200(master, store_factory):
    s = store_factory(master, segment=0)
    assert s.put("nospace/k", b"value") == -200
    assert s.put_batch(["nospace/a", "nospace/b"], [b"1", b"2"]) == -200
    assert s.get("nospace/k") == b""


def test_put_larger_than_the_pool_is_200(master, store_factory):
    s = store_factory(master, segment=8 * MiB)
    assert s.put("toolarge/k", bytes(9 * MiB)) == -200
    assert s.is_exist("toolarge/k") == 0
    assert s.put("toolarge/ok", pattern(1, 4 * MiB)) == 0
    assert s.get("toolarge/ok") == pattern(1, 4 * MiB)
