"""Shared memory and TCP between client processes of one host.

``GOSTORE_TRANSPORT=tcp`` is read when a store connects, from the Go side's
copy of the environment: a process that has already loaded the native library
does not see a later ``os.environ`` change. So the TCP variants run entirely
in peer processes started with that variable: a writer puts with
``preferred_segment`` naming another peer's segment, and a third reads.

Which path was taken is checked from ``/proc/<pid>/maps``: a process that
reached a peer's segment through shared memory has that segment's memfd
mapped; a TCP-only process maps nothing but its own segment.
"""

from __future__ import annotations

import zlib

import pytest

from conftest import MiB, pattern

SIZES = [1, 4096, MiB + 3, 16 * MiB + 12345]
SIZE_IDS = ["1B", "4KiB", "1MiB+3", "16MiB+12345"]


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    """A master, two default (shm) peers and two TCP-only peers."""
    from conftest import _Launcher

    lau = _Launcher(str(tmp_path_factory.mktemp("transports")))
    m = lau.master()
    peers = {
        "shm1": lau.peer(m, segment="48MB"),
        "shm2": lau.peer(m, segment="48MB"),
        "tcp1": lau.peer(m, segment="48MB", transport="tcp"),
        "tcp2": lau.peer(m, segment="48MB", transport="tcp"),
    }
    yield m, peers
    errors = lau.teardown()
    assert not errors, errors


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize(
    "writer,owner,reader",
    [
        ("shm1", "tcp1", "tcp2"),  # the object lives on a TCP peer, TCP peers read it
        ("tcp1", "shm1", "tcp2"),  # a TCP peer writes into a shm peer's segment
        ("tcp1", "tcp2", "shm2"),  # a shm peer reads a TCP peer's segment
        ("shm1", "shm2", "tcp1"),
        ("tcp2", "tcp2", "tcp1"),  # local write, remote TCP read
    ],
)
def test_cross_process_roundtrip_per_transport(four, writer, owner, reader, size):
    m, peers = four
    w, o, r = peers[writer], peers[owner], peers[reader]
    key = f"transport/{writer}-{owner}-{reader}/{size}"
    seed = zlib.crc32(key.encode())
    assert w.put_pattern(key, size, seed, preferred_segment=o.hostname) == 0
    info = m.query_key(key)
    assert [rep["segment"] for rep in info["replicas"]] == [o.hostname]
    assert info["size"] == size
    assert r.check_pattern(key, size, seed)
    assert w.check_pattern(key, size, seed)
    # a mismatch would be reported (the check is not vacuous)
    assert not r.check_pattern(key, size, seed + 1)
    assert r.remove(key, force=True) == 0


def test_tcp_peers_never_map_other_segments(four):
    m, peers = four
    # make sure every peer has read from and written to every other segment
    for wname, w in peers.items():
        for oname, o in peers.items():
            key = f"transport/mapcheck/{wname}/{oname}"
            assert w.put_pattern(key, 8192, 1, preferred_segment=o.hostname) == 0
            for rname, r in peers.items():
                assert r.check_pattern(key, 8192, 1), (wname, oname, rname)
    for name, p in peers.items():
        mapped = p.mapped_segments()
        assert p.hostname in mapped, (name, mapped)  # its own segment
        others = sorted(set(mapped) - {p.hostname})
        if name.startswith("tcp"):
            assert others == [], f"TCP-only peer {name} mapped {others}"
        else:
            # the default path on one host is shared memory
            want = sorted(q.hostname for n, q in peers.items() if n != name)
            assert others == want, f"shm peer {name} mapped {others}, expected {want}"


def test_test_process_reads_objects_written_over_tcp(four, store_factory):
    """The test process (default transport) and TCP peers interoperate."""
    m, peers = four
    s = store_factory(m.addr, segment=16 * MiB)
    key = "transport/from-tcp-to-test-process"
    assert peers["tcp1"].put_pattern(key, 5 * MiB + 1, 7, preferred_segment=peers["tcp2"].hostname) == 0
    assert s.get(key) == pattern(7, 5 * MiB + 1)
    key2 = "transport/from-test-process-to-tcp"
    from gostore import ReplicateConfig

    assert s.put(key2, pattern(8, 3 * MiB), ReplicateConfig(preferred_segment=s.get_hostname())) == 0
    assert peers["tcp2"].check_pattern(key2, 3 * MiB, 8)
    assert s.remove(key, force=True) == 0 and s.remove(key2, force=True) == 0


def test_zero_copy_on_memory_never_registered_over_tcp(four):
    """put_from and get_into take memory the caller never registered over
    TCP too (Mooncake 0.3.13 does): a TCP peer writes into another TCP
    peer's segment and reads it back, bytes compared."""
    m, peers = four
    for size in (4096, 3 * MiB + 7):
        ans = peers["tcp1"].call("unregistered", key=f"transport/unregistered-{size}", size=size, seed=9,
                                 replica_num=1, preferred_segment=peers["tcp2"].hostname)
        assert ans == {"put": 0, "get": size, "ok": True}, ans
        assert peers["tcp2"].check_pattern(f"transport/unregistered-{size}", size, 9)
