"""Segments mounted at run time (Mooncake 0.3.13's ``mount_segment``,
``allocate_and_mount_segment``, ``unmount_segment``,
``unmount_and_free_segment``), ``unmount_local_disk_segment`` and
``init_all``, against the real master binary.

The store under test is the test process' own client, set up with no
segment of its own (``global_segment_size=0``): what it mounts at run time
is then all the memory the pool has, so a peer process's puts must land
there, and its reads show the bytes really live there. Return conventions
are the wheel's (checked against ``mooncake-transfer-engine-non-cuda
0.3.13.post1``): a dict with ``ret`` and ``segment_ids`` (plus
``allocated_size``), -1 for any failed mount or an id the client never
returned, -600 for an id already being unmounted gracefully.
"""

from __future__ import annotations

import inspect
import os
import time

import pytest

from conftest import MiB, mem_available, pattern, wait_until
from gostore import ErrorCode, MooncakeDistributedStore

SLAB = 16 * MiB  # what allocate_and_mount_segment rounds up to
NO_SPACE = int(ErrorCode.NO_AVAILABLE_HANDLE)
INVALID = int(ErrorCode.INVALID_PARAMS)


def names(master):
    return sorted(s["Name"] for s in master.segments())


def mapped(path: str) -> bool:
    """Whether this process maps something named ``path``."""
    with open("/proc/self/maps") as f:
        return any(path in line for line in f)


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def owner(master, store_factory) -> MooncakeDistributedStore:
    """The test process' client, contributing no memory at setup."""
    return store_factory(master, segment=0)


@pytest.fixture
def peer(master, peer_factory):
    """Another client process, contributing no memory either."""
    return peer_factory(master, segment="0")


def test_allocated_segment_takes_objects_another_client_reads(master, owner, peer):
    assert names(master) == []
    r = owner.allocate_and_mount_segment(MiB)
    assert list(r) == ["ret", "segment_ids", "allocated_size"]
    assert r["ret"] == 0 and r["allocated_size"] == SLAB, r
    (sid,) = r["segment_ids"]
    a, b = sid.split("-")
    assert a.isdigit() and b.isdigit(), sid  # Mooncake's "N-M" form
    segs = master.segments()
    assert len(segs) == 1 and segs[0]["Size"] == SLAB
    seg = segs[0]["Name"]

    assert peer.put_pattern("alloc/k", 300_000, seed=1) == 0
    assert {x["segment"] for x in master.query_key("alloc/k")["replicas"]} == {seg}
    assert peer.check_pattern("alloc/k", 300_000, seed=1)
    assert owner.get("alloc/k") == pattern(1, 300_000)
    # a second segment adds to the pool
    r2 = owner.allocate_and_mount_segment(SLAB + 1)
    assert r2["ret"] == 0 and r2["allocated_size"] == 2 * SLAB
    assert len(names(master)) == 2

    assert owner.unmount_and_free_segment(r["segment_ids"]) == 0
    assert seg not in names(master)
    assert peer.get("alloc/k") == b""
    assert owner.unmount_and_free_segment(r2["segment_ids"]) == 0
    assert names(master) == []
    assert peer.put_pattern("alloc/k2", 1000, seed=2) == NO_SPACE
    assert not mapped("gostore:" + seg), "the freed segment's memory is still mapped"


def test_file_segment_keeps_objects_in_the_file(master, owner, peer, tmp_path):
    path = str(tmp_path / "segment.bin")
    with open(path, "wb") as f:
        f.truncate(8 * MiB)
    r = owner.mount_segment(path, 4 * MiB, 4 * MiB)
    assert list(r) == ["ret", "segment_ids"] and r["ret"] == 0 and len(r["segment_ids"]) == 1, r
    assert len(master.segments()) == 1 and master.segments()[0]["Size"] == 4 * MiB

    assert peer.put_pattern("file/k", 500_000, seed=3) == 0
    assert peer.check_pattern("file/k", 500_000, seed=3)
    assert owner.get("file/k") == pattern(3, 500_000)
    with open(path, "rb") as f:
        data = f.read()
    at = data.find(pattern(3, 500_000))
    assert at >= 4 * MiB, f"object at {at} of the file, not in the mounted range"

    assert owner.unmount_segment(r["segment_ids"]) == 0
    assert names(master) == []
    assert peer.get("file/k") == b""
    assert not mapped(path)
    with open(path, "rb") as f:  # MAP_SHARED: the bytes stay in the file
        assert f.read()[at:at + 500_000] == pattern(3, 500_000)


def test_graceful_unmount_keeps_objects_readable_then_drops_them(master, owner, peer):
    r = owner.allocate_and_mount_segment(MiB)
    assert r["ret"] == 0
    assert peer.put_pattern("grace/k", 100_000, seed=4) == 0
    t0 = time.monotonic()
    assert owner.unmount_and_free_segment(r["segment_ids"], 2) == 0
    assert time.monotonic() - t0 < 1.5, "the graceful unmount blocked"
    (seg,) = master.segments()
    assert seg["Draining"]
    # readable, nothing new lands there, a second unmount is -600 (wheel)
    assert peer.check_pattern("grace/k", 100_000, seed=4)
    assert peer.put_pattern("grace/k2", 1000, seed=5) == NO_SPACE
    assert owner.unmount_and_free_segment(r["segment_ids"], 2) == INVALID
    assert owner.unmount_and_free_segment(r["segment_ids"]) == INVALID

    wait_until(lambda: names(master) == [], timeout=10, what="the segment to go after its grace period")
    assert time.monotonic() - t0 >= 2.0, "removed before the grace period ended"
    assert peer.get("grace/k") == b""
    wait_until(lambda: not mapped("gostore:" + seg["Name"]), timeout=10,
               what="the memory to be released")
    assert owner.unmount_and_free_segment(r["segment_ids"]) == -1


def test_unknown_and_foreign_ids(master, owner, tmp_path):
    path = str(tmp_path / "f")
    with open(path, "wb") as f:
        f.truncate(MiB)
    fid = owner.mount_segment(path, MiB)["segment_ids"]
    aid = owner.allocate_and_mount_segment(1)["segment_ids"]
    assert len(fid) == len(aid) == 1
    assert owner.unmount_segment(["1-2"]) == -1
    assert owner.unmount_segment(["not an id"]) == -1
    assert owner.unmount_segment([]) == 0
    assert owner.unmount_and_free_segment([]) == 0
    # each kind unmounts only with its own call
    assert owner.unmount_segment(aid) == -1
    assert owner.unmount_and_free_segment(fid) == -1
    assert len(master.segments()) == 2
    # every id is tried; the first failure is the answer
    assert owner.unmount_segment(["1-2"] + fid) == -1
    assert owner.unmount_and_free_segment(("1-2",) + tuple(aid)) == -1
    assert names(master) == []
    assert owner.unmount_segment(fid) == -1


def test_overlapping_file_ranges_are_refused(master, owner, tmp_path):
    """The wheel mounts the same file bytes twice (two segments, one
    memory: objects would overwrite each other); gostore refuses with -1."""
    path = str(tmp_path / "f")
    with open(path, "wb") as f:
        f.truncate(4 * MiB)
    first = owner.mount_segment(path, 2 * MiB)
    assert first["ret"] == 0
    assert owner.mount_segment(path, 2 * MiB) == {"ret": -1, "segment_ids": []}
    assert owner.mount_segment(path, 2 * MiB, MiB) == {"ret": -1, "segment_ids": []}
    os.symlink(path, str(tmp_path / "link"))
    assert owner.mount_segment(str(tmp_path / "link"), 4096)["ret"] == -1
    second = owner.mount_segment(str(tmp_path / "link"), 2 * MiB, 2 * MiB)
    assert second["ret"] == 0 and len(master.segments()) == 2
    assert owner.unmount_segment(first["segment_ids"] + second["segment_ids"]) == 0
    assert names(master) == []


def test_not_set_up_or_closed_answers_minus_one(master, store_factory, tmp_path):
    fresh = MooncakeDistributedStore()
    assert fresh.mount_segment("/nonexistent", 4096) == {"ret": -1, "segment_ids": []}
    assert fresh.allocate_and_mount_segment(MiB) == {"ret": -1, "segment_ids": [], "allocated_size": 0}
    assert fresh.unmount_segment([]) == -1
    assert fresh.unmount_and_free_segment(["1-2"]) == -1
    assert fresh.unmount_local_disk_segment() == -1
    s = store_factory(master, segment=0)
    assert s.close() == 0
    assert s.allocate_and_mount_segment(MiB) == {"ret": -1, "segment_ids": [], "allocated_size": 0}
    assert s.unmount_segment(["1-2"]) == -1
    assert s.unmount_local_disk_segment() == -1


def test_bad_types_raise_type_error(master, owner, tmp_path):
    path = str(tmp_path / "f")
    with open(path, "wb") as f:
        f.truncate(MiB)
    calls = [
        lambda: owner.mount_segment(1, MiB),
        lambda: owner.mount_segment(path, "1MB"),
        lambda: owner.mount_segment(path, -1),
        lambda: owner.mount_segment(path, 2**64),
        lambda: owner.mount_segment(path, MiB, 1.0),
        lambda: owner.mount_segment(path, MiB, protocol=None),
        lambda: owner.mount_segment(path, MiB, location=1),
        lambda: owner.mount_segment(path, MiB, bogus=1),
        lambda: owner.allocate_and_mount_segment(1.0),
        lambda: owner.allocate_and_mount_segment(-1),
        lambda: owner.allocate_and_mount_segment(None),
        lambda: owner.allocate_and_mount_segment("16MB"),
        lambda: owner.unmount_segment("1-2"),
        lambda: owner.unmount_segment([1]),
        lambda: owner.unmount_segment({"1-2"}),
        lambda: owner.unmount_segment(x for x in ["1-2"]),
        lambda: owner.unmount_segment(None),
        lambda: owner.unmount_segment([], -1),
        lambda: owner.unmount_segment([], 1.5),
        lambda: owner.unmount_and_free_segment([], 2**64),
        lambda: owner.unmount_local_disk_segment(-1),
        lambda: owner.unmount_local_disk_segment("1"),
        lambda: owner.init_all(1, "", MiB),
        lambda: owner.init_all("tcp", None, MiB),
        lambda: owner.init_all("tcp", "", -1),
        lambda: owner.init_all("tcp", ""),
        lambda: owner.init_all(protocol="tcp", device_name="", mount_segment_size=MiB),
    ]
    for i, call in enumerate(calls):
        with pytest.raises(TypeError):
            call()
            pytest.fail(f"call {i} did not raise")
    assert names(master) == [], "a rejected call mounted something"
    # what the wheel accepts: bools and numpy ints as ints, bytes as text
    np = pytest.importorskip("numpy")
    assert owner.unmount_segment((), True) == 0
    assert owner.unmount_segment([b"1-2"], np.int32(0)) == -1
    r = owner.mount_segment(path.encode(), np.int64(MiB), protocol=b"tcp")
    assert r["ret"] == 0, r
    assert owner.unmount_segment(np.array(r["segment_ids"])) == 0


def test_signatures_match_the_wheel():
    S = MooncakeDistributedStore

    def params(fn):
        return [(p.name, p.default, p.kind) for p in inspect.signature(fn).parameters.values()][1:]

    e, kw, po = inspect.Parameter.empty, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY
    assert params(S.mount_segment) == [("path", e, kw), ("size", e, kw), ("offset", 0, kw),
                                       ("protocol", "tcp", kw), ("location", "", kw)]
    assert params(S.allocate_and_mount_segment) == [("size", e, kw), ("protocol", "tcp", kw), ("location", "", kw)]
    for fn in (S.unmount_segment, S.unmount_and_free_segment):
        assert params(fn) == [("segment_ids", e, kw), ("grace_period_seconds", 0, kw)]
    assert params(S.unmount_local_disk_segment) == [("grace_period_seconds", 0, kw)]
    # the wheel's init_all has no keyword names (pybind11's arg0..arg2)
    assert [(k, d) for _, d, k in params(S.init_all)] == [(po, e)] * 3


def test_sizes_beyond_what_is_available_fail_and_take_nothing(master, owner, tmp_path):
    before_rss = rss()
    for size in (mem_available() + SLAB, 1 << 50, 2**64 - 1, 0):
        assert owner.allocate_and_mount_segment(size) == {"ret": -1, "segment_ids": [], "allocated_size": 0}, size
    assert names(master) == []
    assert rss() - before_rss < 64 * MiB, "a refused allocation kept memory"

    path = str(tmp_path / "small")
    with open(path, "wb") as f:
        f.truncate(MiB)
    page = os.sysconf("SC_PAGE_SIZE")
    for size, offset in ((2 * MiB, 0), (MiB, page), (page, 2 * MiB), (page, 100), (2**64 - 1, page)):
        assert owner.mount_segment(path, size, offset) == {"ret": -1, "segment_ids": []}, (size, offset)
    assert owner.mount_segment(str(tmp_path / "missing"), page) == {"ret": -1, "segment_ids": []}
    assert owner.mount_segment(str(tmp_path), page) == {"ret": -1, "segment_ids": []}
    assert names(master) == []
    assert not mapped(path), "a refused mount left the file mapped"
    # size 0 mounts nothing and is no error (as in the wheel)
    assert owner.mount_segment(path, 0) == {"ret": 0, "segment_ids": []}
    # the whole file, up to its last byte, is fine
    r = owner.mount_segment(path, MiB - page, page)
    assert r["ret"] == 0 and len(master.segments()) == 1
    assert owner.unmount_segment(r["segment_ids"]) == 0


def test_init_all(master, store_factory):
    s = store_factory(master, segment=0)
    host = s.get_hostname()
    # set up already: -600 and nothing changes (the wheel's answer)
    assert s.init_all("tcp", "", 16 * MiB) == INVALID
    assert s.get_hostname() == host and s.health_check() == 0
    # a fresh store goes through setup's checks (this protocol fails them
    # before anything is contacted: a real init_all would reach for the
    # master at 127.0.0.1:50051)
    fresh = MooncakeDistributedStore()
    assert fresh.init_all("no-such-protocol", "", 16 * MiB) == INVALID
    assert fresh.health_check() == 1


def test_unmount_local_disk_segment(master, master_factory, store_factory, peer_factory, tmp_path, monkeypatch):
    # without an SSD tier there is nothing to do: 0, as in the wheel
    plain = store_factory(master, segment=0)
    assert plain.unmount_local_disk_segment() == 0
    assert plain.unmount_local_disk_segment(0) == 0

    m = master_factory(enable_offload=True, tick_interval_ms=20, eviction_high_watermark_ratio=0.8,
                       eviction_ratio=0.2)
    for k, v in {"MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS": "0.1",
                 "MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES": str(8 * MiB)}.items():
        monkeypatch.setenv(k, v)
    (tmp_path / "ssd").mkdir()
    holder = MooncakeDistributedStore()
    assert holder.setup("127.0.0.1", "P2PHANDSHAKE", 4 * MiB, 4 * MiB, "tcp", "", m.addr,
                        enable_ssd_offload=True, ssd_offload_path=str(tmp_path / "ssd")) == 0
    try:
        writer = peer_factory(m, segment="0")
        n, size = 32, 256 * 1024  # 8 MiB through a 4 MiB segment
        for i in range(n):
            deadline = time.monotonic() + 30
            while (rc := writer.put_pattern(f"disk/{i}", size, seed=i)) == NO_SPACE and time.monotonic() < deadline:
                time.sleep(0.02)
            assert rc == 0, (i, rc)

        def where():
            infos = {i: m.query_key(f"disk/{i}") for i in range(n)}
            return ({i for i, x in infos.items() if x and x.get("disk") and not x["replicas"]},
                    {i for i, x in infos.items() if x and x["replicas"]})

        wait_until(lambda: all(m.query_key(f"disk/{i}").get("disk") for i in range(n)), timeout=30,
                   what="every object on disk")
        # The master evicts on its ticks while the pool is above its 0.8
        # watermark, and an object waiting for its disk copy goes only once
        # the copy exists: until usage falls under the watermark, a memory
        # replica seen here may be gone at the unmount.
        wait_until(lambda: len(where()[1]) * size <= 0.8 * 4 * MiB, timeout=30,
                   what="the pool under its eviction watermark")
        disk_only, in_memory = where()
        assert disk_only and in_memory, (disk_only, in_memory)

        t0 = time.monotonic()
        assert holder.unmount_local_disk_segment(1) == 0
        assert time.monotonic() - t0 >= 1.0, "returned before its grace period"
        for i in disk_only:
            assert m.query_key(f"disk/{i}") is None, f"disk/{i} lived only on the tier"
            assert writer.get(f"disk/{i}") == b""
        for i in in_memory:
            info = m.query_key(f"disk/{i}")
            assert info and not info.get("disk"), info
            assert writer.check_pattern(f"disk/{i}", size, seed=i)
        # no more offloads: new objects never get a disk copy
        assert writer.put_pattern("disk/new", size, seed=99) == 0
        time.sleep(0.5)
        assert not (m.query_key("disk/new") or {}).get("disk")
        assert holder.unmount_local_disk_segment() == 0
    finally:
        holder.close()
