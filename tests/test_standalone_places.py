"""Standalone mode: copying gets of large objects copy them in the
application, from the segment on this host that holds them, mapped
read-only (``gostore._places``), while ``gostore-client`` holds their
leases; the real master, the real server process, a real peer process's
segment, bytes checked."""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time
from array import array
from typing import Any, List

import pytest

from conftest import wait_until
from test_standalone import _in_forked_child
from gostore import MooncakeDistributedStore
from gostore import standalone
from gostore.standalone import places as _places
from gostore.standalone import protocol as P
from gostore.errors import ErrorCode
from gostore.buffers.hostmem import map_memory, unmap_memory

MiB = 1 << 20
BUSY = int(ErrorCode.OBJECT_REPLICA_BUSY)


def _pattern(seed: int, n: int) -> bytes:
    return bytes((seed * 131 + i * 7) & 0xFF for i in range(256)) * (n // 256) + bytes(n % 256)


def _dummy(server_address: str) -> MooncakeDistributedStore:
    s = MooncakeDistributedStore()
    assert s.setup_dummy(64 * MiB, 1 * MiB, server_address) == 0
    return s


class _Spy:
    """Records what the application copies itself and what the server is
    asked to read (the parts each object of a finish still has)."""

    def __init__(self, lib: Any, monkeypatch: Any) -> None:
        self.copied: List[int] = []  # sizes copied here
        self.server_parts: List[List[int]] = []  # nparts per forwarded finish
        self.during: Any = None  # run inside the copy, before it
        real_copy, real_finish = _places.copy_parts, lib._forward_finish

        def copy(parts):
            if self.during is not None:
                self.during()
            self.copied.extend(n for _d, _s, n in parts)
            real_copy(parts)

        self.deferred = 0  # finishes sent without waiting for their answers

        def finish(h, pending, ptrs, sizes, nparts, zero_copy, results, defer=False):
            n = lib._conn().pending[int(pending)]
            counts = array("I")
            counts.frombytes(ctypes.string_at(nparts, 4 * n))
            self.server_parts.append(list(counts))
            self.deferred += defer
            return real_finish(h, pending, ptrs, sizes, nparts, zero_copy, results, defer=defer)

        self.asked = 0  # gs_get_places calls of the application's own
        real_places = lib.gs_get_places

        def places(*a):
            self.asked += 1
            return real_places(*a)

        monkeypatch.setattr(_places, "copy_parts", copy)
        monkeypatch.setattr(lib, "_finish_forwarder", finish)
        monkeypatch.setattr(lib, "gs_get_places", places)


@pytest.mark.parametrize("holder", ["server", "peer"])
def test_copying_gets_copy_here_from_the_segment_that_holds_them(master, client_process_factory, peer_factory,
                                                                  store_factory, monkeypatch, holder):
    """The objects lie in gostore-client's own segment, or in another
    process's: either way this process maps it and copies them, the server
    copies nothing, and the objects stay the reader's until the finish (an
    upsert by another client meanwhile is busy)."""
    if holder == "server":
        srv = client_process_factory(master)
    else:
        srv = client_process_factory(master, segment="0")
        peer_factory(master, segment="64MB")
    writer = store_factory(master, segment=0)
    app = _dummy(srv.server_address)
    lib = app._lib()
    spy = _Spy(lib, monkeypatch)
    values = {f"pl-{holder}-{i}": _pattern(i, MiB + 3 * i + 1) for i in range(4)}
    for k, v in values.items():
        assert writer.put(k, v) == 0
    keys = list(values)

    busy: List[int] = []
    spy.during = lambda: busy.append(writer.upsert(keys[0], b"x" * MiB))
    assert app.get_batch(keys) == [values[k] for k in keys]
    assert busy == [BUSY], "the object was not the reader's while this process copied it"
    assert sorted(spy.copied) == sorted(len(v) for v in values.values())
    assert spy.server_parts[-1] == [0, 0, 0, 0], "the server was asked to read as well"
    # Everything was copied here, inside the leases: the finish went
    # without waiting for its answer (read before the next call).
    assert spy.deferred == 1 and lib._conn().owed == 1
    assert lib._segments.mapped() == 1

    # Once the get ended, the object is free again; the next get reads the
    # new value through the same mapping.
    spy.during = None
    wait_until(lambda: writer.upsert(keys[0], _pattern(9, 2 * MiB)) == 0, what="the upsert after the get")
    spy.copied.clear()
    assert app.get(keys[0]) == _pattern(9, 2 * MiB)
    assert spy.copied == [2 * MiB] and lib._segments.mapped() == 1

    # The places came with the reply that opened each get: never asked.
    assert spy.asked == 0
    # Asked (as a server of another version would make the application
    # do), with segment lines that do not fit the first room: asked again
    # with more.
    monkeypatch.setattr(P, "PATHS_CAP", 8)
    lens, sizes = array("I", [len(k) for k in keys[1:3]]), array("q", [0, 0])
    pend = lib.gs_get_start(1, 2, "".join(keys[1:3]).encode(), lens.buffer_info()[0], sizes.buffer_info()[0])
    placed = P.ask_places(lib.gs_get_places, 1, pend, 2)
    lib.gs_get_abort(1, pend)
    assert placed and all(placed.seg_ids) and list(placed.sizes) == [len(values[k]) for k in keys[1:3]]
    assert all(placed.leases_ms) and placed.found is None
    assert len(_places.parse_paths(placed.paths)) == 1 and spy.asked == 2

    # A miss among the hits, and a value small enough for the server's
    # packed read: only the large hits are copied here.
    spy.copied.clear()
    assert writer.put("pl-small", b"s" * 1000) == 0
    got = app.get_batch([keys[1], "pl-missing", keys[2]])
    assert got == [values[keys[1]], b"", values[keys[2]]]
    assert sorted(spy.copied) == sorted([len(values[keys[1]]), len(values[keys[2]])])
    assert app.get_batch(["pl-small"]) == [b"s" * 1000]

    # A forked child lets the parent's mappings go and maps its own.
    def in_child() -> bool:
        gone = lib._segments.mapped() == 0  # after the fork handler, before any call
        return app.get_batch(keys[1:3]) == [values[k] for k in keys[1:3]] and gone and lib._segments.mapped() == 1

    assert _in_forked_child(in_child)
    assert lib._segments.mapped() == 1 and app.get_batch(keys[3:]) == [values[keys[3]]]
    assert srv.alive()


def test_below_the_threshold_and_without_a_place_the_server_copies(master, client_process_factory, store_factory,
                                                                    monkeypatch):
    srv = client_process_factory(master)
    writer = store_factory(master, segment=0)
    app = _dummy(srv.server_address)
    lib = app._lib()
    spy = _Spy(lib, monkeypatch)
    v = _pattern(3, 3 * MiB + 7)
    assert writer.put("np-0", v) == 0
    # Below PLACES_MIN: not asked, the server writes this process's memory.
    monkeypatch.setattr(standalone, "PLACES_MIN", 4 * MiB)
    assert app.get_batch(["np-0"]) == [v]
    assert spy.copied == [] and spy.server_parts[-1] == [1]
    monkeypatch.setattr(standalone, "PLACES_MIN", 512 << 10)

    # A segment this process may not open (a fake refusal standing in for
    # another PID namespace or no rights over its owner: the kernel's
    # answer to open(2)): the server reads it, and the path is not tried
    # again at once.
    opens: List[str] = []

    class RefusingOs:
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        @staticmethod
        def open(path: str, *a: Any) -> int:
            opens.append(path)
            raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(_places, "os", RefusingOs())
    for _ in range(2):
        assert app.get_batch(["np-0"]) == [v]
        assert spy.copied == [] and spy.server_parts[-1] == [1]
    assert len(opens) == 1 and opens[0].startswith("/proc/")
    assert lib._segments.mapped() == 0


def test_a_copy_here_that_outlives_the_lease_is_read_again(master_factory, client_process_factory, store_factory,
                                                           monkeypatch):
    """The copy here is discarded (its bytes may be a newer object's) and
    the server reads the object into the destination, looking it up again
    (tests/test_lease_reads.py: the same with an upsert meanwhile)."""
    m = master_factory(default_kv_lease_ttl=200)
    srv = client_process_factory(m)
    writer = store_factory(m, segment=0)
    app = _dummy(srv.server_address)
    spy = _Spy(app._lib(), monkeypatch)
    v = _pattern(5, 2 * MiB)
    assert writer.put("ll-0", v) == 0
    # A copy that takes 0.3 s: it ends past the 200 ms lease, which counts
    # from when the server's lookup left, before the copy began.
    spy.during = lambda: time.sleep(0.3)
    assert app.get_batch(["ll-0"]) == [v]
    assert spy.copied == [len(v)] and spy.deferred == 0, "a copy past its lease ended without asking the server"
    assert spy.server_parts[-1] == [1], "the server was not asked to read the object again"
    spy.during = None
    assert app.get_batch(["ll-0"]) == [v]


def _memfd(data: bytes) -> int:
    fd = os.memfd_create("places-test", os.MFD_CLOEXEC)
    os.write(fd, data)
    return fd


def test_a_path_that_names_another_segment_is_mapped_again(monkeypatch):
    """Segments keeps a mapping per segment while the path still names the
    file mapped; the path reused by another memfd is mapped again, the old
    mapping unmapped once the call copying from it ends; idle mappings go,
    busy ones when released."""
    segs = _places.Segments()
    a = _memfd(b"A" * mmap.PAGESIZE)
    path = f"/proc/{os.getpid()}/fd/{a}"
    base = segs.acquire(7, mmap.PAGESIZE, path)
    assert base and ctypes.string_at(base, 4) == b"AAAA"
    segs.release(base)
    held = segs.acquire(7, mmap.PAGESIZE, path)
    assert held == base  # kept
    # The owner closed it and the fd number names another segment now.
    b = _memfd(b"B" * mmap.PAGESIZE)
    os.dup2(b, a)
    os.close(b)
    again = segs.acquire(7, mmap.PAGESIZE, path)
    assert again and again != base and ctypes.string_at(again, 4) == b"BBBB"
    assert ctypes.string_at(base, 4) == b"AAAA", "a mapping in use was unmapped"
    assert segs.mapped() == 2
    segs.release(held)
    assert segs.mapped() == 1
    # A segment larger than the file is not mapped.
    assert segs.acquire(8, 2 * mmap.PAGESIZE, path) is None
    monkeypatch.setattr(_places, "IDLE_S", 0.0)
    segs.expire()
    assert segs.mapped() == 1, "a mapping in use was let go"
    segs.release(again)
    segs.expire()
    assert segs.mapped() == 0
    os.close(a)


def test_two_threads_mapping_one_segment_keep_one_mapping():
    segs = _places.Segments()
    fd = _memfd(b"C" * mmap.PAGESIZE)
    path = f"/proc/{os.getpid()}/fd/{fd}"
    bases: List[int] = []
    barrier = threading.Barrier(4)

    def take():
        barrier.wait()
        bases.append(segs.acquire(3, mmap.PAGESIZE, path))

    ts = [threading.Thread(target=take) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(set(bases)) == 1 and bases[0] and segs.mapped() == 1
    for b in bases:
        segs.release(b)
    segs.close()
    assert segs.mapped() == 0
    os.close(fd)


def test_copy_parts_splits_large_copies_among_threads():
    n = 3 * _places.PARALLEL_MIN + 12345
    src_fd = _memfd(_pattern(11, n))
    src = map_memory(n, src_fd, mmap.PROT_READ)
    try:
        dst = ctypes.create_string_buffer(n + 10)
        half = n // 2
        _places.copy_parts([(ctypes.addressof(dst), src, half),
                            (ctypes.addressof(dst) + half, src + half, n - half)])
        assert dst.raw[:n] == _pattern(11, n) and dst.raw[n:] == bytes(10)
    finally:
        unmap_memory(src, n)
        os.close(src_fd)


def test_nothing_placed_is_said_once(master, client_process_factory, store_factory, monkeypatch):
    """A server that reaches the objects over TCP only (forced here, as for
    objects on another host) places nothing and says so in its answer: the
    application does not ask, and the server copies into its memory
    through a bounce (which needed a GPU driver to pin it before)."""
    monkeypatch.setenv("GOSTORE_TRANSPORT", "tcp")
    srv = client_process_factory(master, segment="0")
    monkeypatch.delenv("GOSTORE_TRANSPORT")
    owner = store_factory(master)  # in this process: over TCP for the server
    app = _dummy(srv.server_address)
    spy = _Spy(app._lib(), monkeypatch)
    v = _pattern(7, 2 * MiB + 5)
    assert owner.put("nw-0", v) == 0
    assert app.get_batch(["nw-0", "nw-missing"]) == [v, b""]
    assert spy.asked == 0 and spy.copied == [] and spy.server_parts[-1] == [1, 0]


def test_an_interrupted_copy_ends_the_get(master, client_process_factory, store_factory, monkeypatch):
    srv = client_process_factory(master)
    writer = store_factory(master, segment=0)
    app = _dummy(srv.server_address)
    v = _pattern(8, 2 * MiB)
    assert writer.put("ic-0", v) == 0

    def interrupted(parts):
        raise KeyboardInterrupt

    monkeypatch.setattr(_places, "copy_parts", interrupted)
    with pytest.raises(KeyboardInterrupt):
        app.get_batch(["ic-0"])
    # The get was ended (no reader left behind: an upsert goes through),
    # and the connection still serves.
    wait_until(lambda: writer.upsert("ic-0", _pattern(9, 2 * MiB)) == 0, what="the upsert after the abort")
    monkeypatch.undo()
    assert app.get_batch(["ic-0"]) == [_pattern(9, 2 * MiB)]
    assert not app._lib()._conn().pending and not app._lib()._conn().places


def test_only_a_memfd_is_mapped(tmp_path):
    segs = _places.Segments()
    f = tmp_path / "plain"
    f.write_bytes(b"P" * mmap.PAGESIZE)
    fd = os.open(f, os.O_RDONLY)
    try:
        assert segs.acquire(1, mmap.PAGESIZE, f"/proc/{os.getpid()}/fd/{fd}") is None
        assert segs.mapped() == 0
    finally:
        os.close(fd)


def test_a_forked_child_does_not_wait_for_the_parents_lock():
    segs = _places.Segments()
    fd = _memfd(b"F" * mmap.PAGESIZE)
    base = segs.acquire(2, mmap.PAGESIZE, f"/proc/{os.getpid()}/fd/{fd}")
    assert base
    segs._lock.acquire()  # as another thread of the parent may hold it at the fork
    segs.forget_all()
    assert segs.mapped() == 0 and segs.acquire(2, mmap.PAGESIZE, f"/proc/{os.getpid()}/fd/{fd}")
    os.close(fd)
