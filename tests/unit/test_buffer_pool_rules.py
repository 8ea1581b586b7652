"""BufferPool's allocation rules, over a stand-in store that records
register_buffer / unregister_buffer (no master, no native library). The
same pool against a real store: tests/test_buffer_pool.py.
"""

from __future__ import annotations

import ctypes
import gc
import threading
import time

import pytest

import gostore
from gostore import (
    BufferLease,
    BufferLeaseView,
    BufferPool,
    MooncakeDistributedStore,
    RegisteredBufferLease,
    RegisteredBufferLeaseView,
    RegisteredBufferPool,
)
from gostore.buffers.pool import GRANULE

KiB = 1024
ALIGN = 64 * KiB


class FakeStore(MooncakeDistributedStore):
    """A set-up store as far as BufferPool can tell, without native code."""

    def __init__(self) -> None:
        super().__init__()
        self.registered: dict = {}
        self.calls: list = []

    def get_hostname(self) -> str:
        return "fake:1"

    def register_buffer(self, ptr: int, size: int) -> int:
        self.calls.append(("register", ptr, size))
        for p, n in self.registered.items():
            if ptr < p + n and p < ptr + size:
                return -600
        self.registered[ptr] = size
        return 0

    def unregister_buffer(self, ptr: int) -> int:
        self.calls.append(("unregister", ptr))
        return 0 if self.registered.pop(ptr, None) is not None else -600

    def inside_registered(self, ptr: int, size: int) -> bool:
        return any(p <= ptr and ptr + size <= p + n for p, n in self.registered.items())


@pytest.fixture
def store():
    return FakeStore()


def test_mooncake_names_are_the_same_classes():
    assert RegisteredBufferPool is BufferPool
    assert RegisteredBufferLease is BufferLease
    assert RegisteredBufferLeaseView is BufferLeaseView
    assert gostore.RegisteredBufferPool is gostore.BufferPool


def test_leases_are_real_disjoint_registered_ranges(store):
    pool = BufferPool(store, alignment=ALIGN)
    sizes = [1, 63, 64, 65, 1000, 4096, 100 * KiB, 0]
    leases = [pool.acquire(n) for n in sizes]
    spans = []
    for lease, n in zip(leases, sizes):
        assert lease.size == n
        assert lease.ptr % GRANULE == 0
        assert store.inside_registered(lease.ptr, max(n, 1))
        spans.append((lease.ptr, lease.ptr + max(n, 1)))
    spans.sort()
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    # each lease's bytes are its own: fill all, then check all
    for i, lease in enumerate(leases):
        if lease.size:
            ctypes.memset(lease.ptr, i + 1, lease.size)
    for i, lease in enumerate(leases):
        if lease.size:
            assert ctypes.string_at(lease.ptr, lease.size) == bytes([i + 1]) * lease.size
    for lease in leases:
        lease.release()


def test_regions_are_aligned_registered_and_released_on_close(store):
    pool = BufferPool(store, alignment=ALIGN)
    big = pool.acquire(3 * ALIGN + 1)  # a region of 4 * ALIGN
    small = pool.acquire(100)  # fits in the same region's tail
    regs = [c for c in store.calls if c[0] == "register"]
    assert len(regs) == 1
    _, base, size = regs[0]
    assert base % ALIGN == 0 and size == 4 * ALIGN and big.ptr == base
    assert base < small.ptr < base + size
    with pytest.raises(RuntimeError, match="active leases"):
        pool.close()
    big.release()
    small.release()
    pool.close()
    assert store.registered == {} and ("unregister", base) in store.calls
    pool.close()  # again: nothing to do
    with pytest.raises(RuntimeError, match="closed"):
        pool.acquire(1)


def test_released_ranges_are_reused_and_merge(store):
    pool = BufferPool(store, alignment=ALIGN)
    a, b, c = (pool.acquire(1000) for _ in range(3))  # 1024 bytes each, adjacent
    assert (b.ptr - a.ptr, c.ptr - b.ptr) == (1024, 1024)
    a_ptr = a.ptr
    a.release()
    b.release()
    d = pool.acquire(2048)  # only fits where a and b were, merged
    assert d.ptr == a_ptr
    assert len([x for x in store.calls if x[0] == "register"]) == 1


def test_limits(store):
    pool = BufferPool(store, max_bytes=2 * ALIGN, alignment=ALIGN, block_on_exhaustion=False)
    with pytest.raises(RuntimeError, match="exceeds pool capacity"):
        pool.acquire(2 * ALIGN + 1)
    x = pool.acquire(ALIGN)
    y = pool.acquire(ALIGN)
    with pytest.raises(RuntimeError, match="exhausted"):
        pool.acquire(1)
    x.release()
    pool.acquire(ALIGN).release()
    y.release()
    capped = BufferPool(FakeStore(), alignment=ALIGN, max_regions=1, block_on_exhaustion=False)
    z = capped.acquire(ALIGN)
    with pytest.raises(RuntimeError, match="exhausted"):
        capped.acquire(1)
    z.release()


def test_blocking_acquire_waits_for_a_release_or_times_out(store):
    pool = BufferPool(store, max_bytes=ALIGN, alignment=ALIGN, default_timeout=0.2)
    held = pool.acquire(ALIGN)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out"):
        pool.acquire(ALIGN)
    assert time.monotonic() - t0 >= 0.2
    with pytest.raises(RuntimeError, match="timed out"):
        pool.acquire(ALIGN, timeout=0.01)
    with pytest.raises(RuntimeError, match="exhausted"):
        pool.acquire(ALIGN, block=False)
    with pytest.raises(RuntimeError, match="non-negative"):
        pool.acquire(ALIGN, timeout=-1)
    released = threading.Event()

    def release_soon():
        time.sleep(0.05)
        released.set()
        held.release()

    threading.Thread(target=release_soon).start()
    got = pool.acquire(ALIGN, timeout=10)
    assert released.is_set() and got.size == ALIGN
    got.release()


def test_lease_views(store):
    pool = BufferPool(store, alignment=ALIGN)
    lease = pool.acquire(10)
    mv = lease.buffer
    assert (mv.format, mv.nbytes, mv.readonly) == ("B", 10, False)
    assert isinstance(mv.obj, BufferLeaseView)
    assert isinstance(mv.obj.buffer, memoryview) and mv.obj.buffer.nbytes == 10
    mv[:5] = b"hello"
    assert ctypes.string_at(lease.ptr, 5) == b"hello"
    assert bytes(lease.buffer[:5]) == b"hello"  # a new view each time
    with pytest.raises(RuntimeError, match="exported views"):
        lease.release()
    del mv
    gc.collect()
    lease.release()
    lease.release()  # again: nothing
    with pytest.raises(RuntimeError, match="closed"):
        lease.ptr
    with pytest.raises(RuntimeError, match="closed"):
        lease.size
    with pytest.raises(BufferError):
        lease.buffer


def test_with_block_and_dropped_leases_give_the_range_back(store):
    pool = BufferPool(store, alignment=ALIGN)
    with pool.acquire(100) as lease:
        ptr = lease.ptr
    with pytest.raises(RuntimeError):
        lease.ptr
    assert pool.acquire(100).ptr == ptr  # the lease dropped at once is given back too
    gc.collect()
    again = pool.acquire(100)
    assert again.ptr == ptr
    del again
    gc.collect()
    pool.close()  # no live lease left
    assert store.registered == {}


def test_prewarm_makes_regions_ahead(store):
    warm = BufferPool(store, alignment=ALIGN, prewarm_size=ALIGN, prewarm_count=3)
    assert len(store.registered) == 3
    warm.close()
    other = FakeStore()
    pool = BufferPool(other, alignment=ALIGN)
    pool.prewarm(100, 10)  # ten small leases: one region
    assert len(other.registered) == 1
    before = len(other.calls)
    leases = [pool.acquire(100) for _ in range(10)]
    assert len(other.calls) == before  # no new region needed
    for lease in leases:
        lease.release()


def test_pool_collected_without_close_unmaps_and_unregisters(store):
    pool = BufferPool(store, alignment=ALIGN)
    pool.acquire(1).release()
    assert len(store.registered) == 1
    del pool
    gc.collect()
    assert store.registered == {}


def test_constructor_checks():
    with pytest.raises(RuntimeError, match="not initialized"):
        BufferPool(None)
    with pytest.raises(RuntimeError, match="not initialized"):
        BufferPool(MooncakeDistributedStore())  # never set up: no native call
    with pytest.raises(RuntimeError):
        BufferPool(object())
    s = FakeStore()
    for kw in (dict(alignment=3), dict(alignment=4), dict(alignment=0), dict(min_size_class=0),
               dict(default_timeout=-1), dict(max_size_class=1, min_size_class=2)):
        with pytest.raises(RuntimeError):
            BufferPool(s, **kw)
    for kw in (dict(max_bytes=-1), dict(alignment="8"), dict(default_timeout="x"),
               dict(block_on_exhaustion="yes")):
        with pytest.raises(TypeError):
            BufferPool(s, **kw)
    pool = BufferPool(s, alignment=ALIGN)
    for bad in (-1, 1.5, "1", None):
        with pytest.raises(TypeError):
            pool.acquire(bad)
    assert s.registered == {}  # nothing mapped for refused calls


def test_failed_registration_unmaps_and_raises():
    class Refusing(FakeStore):
        def register_buffer(self, ptr, size):
            return -600

    pool = BufferPool(Refusing(), alignment=ALIGN)
    with pytest.raises(RuntimeError, match="register_buffer"):
        pool.acquire(10)


def test_concurrent_leases_never_overlap(store):
    import random

    pool = BufferPool(store, alignment=ALIGN, default_timeout=10)
    live: dict = {}
    lock = threading.Lock()
    errors: list = []

    def worker(seed: int) -> None:
        rnd = random.Random(seed)
        mine = []
        try:
            for _ in range(300):
                if mine and (len(mine) >= 4 or rnd.random() < 0.5):
                    lease = mine.pop(rnd.randrange(len(mine)))
                    with lock:
                        del live[lease.ptr]
                    lease.release()
                    continue
                lease = pool.acquire(rnd.randrange(1, 40 * KiB))
                with lock:
                    for p, n in live.items():
                        if lease.ptr < p + n and p < lease.ptr + lease.size:
                            errors.append((lease.ptr, lease.size, p, n))
                    live[lease.ptr] = lease.size
                mine.append(lease)
            for lease in mine:
                with lock:
                    del live[lease.ptr]
                lease.release()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    pool.close()
    assert store.registered == {}
