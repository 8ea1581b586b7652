"""BufferPool over a real store: its leases are registered memory that the
zero-copy calls read and write; closing the pool unregisters it. (The
allocation rules themselves: tests/unit/test_buffer_pool_rules.py.)
"""

from __future__ import annotations

import pytest

from conftest import MiB, pattern
from gostore import BufferPool, MooncakeDistributedStore, MooncakeHostMemAllocator

ALIGN = 1 * MiB


@pytest.fixture
def one(master, store_factory):
    """A store of its own (16 MiB segment) against a fresh master."""
    return store_factory(master, segment=16 * MiB)


def test_leases_serve_the_zero_copy_calls(one):
    s = one
    pool = BufferPool(s, alignment=ALIGN)
    src, dst = pool.acquire(300_000), pool.acquire(300_000)
    data = pattern(1, 300_000)
    src.buffer[:] = data
    assert s.put_from("pool/k", src.ptr, src.size) == 0
    assert s.get_into("pool/k", dst.ptr, dst.size) == 300_000
    assert bytes(dst.buffer) == data
    # batches over several leases of one pool
    leases = [pool.acquire(10_000 + i) for i in range(4)]
    for i, lease in enumerate(leases):
        lease.buffer[:] = pattern(10 + i, lease.size)
    keys = [f"pool/b{i}" for i in range(4)]
    assert s.batch_put_from(keys, [x.ptr for x in leases], [x.size for x in leases]) == [0] * 4
    outs = [pool.acquire(x.size) for x in leases]
    assert s.batch_get_into(keys, [x.ptr for x in outs], [x.size for x in outs]) == [
        x.size for x in leases]
    for i, out in enumerate(outs):
        assert bytes(out.buffer) == pattern(10 + i, out.size)
    for lease in [src, dst, *leases, *outs]:
        lease.release()
    pool.close()


def test_closed_pool_memory_is_no_longer_registered(one):
    s = one
    pool = BufferPool(s, alignment=ALIGN)
    lease = pool.acquire(4096)
    ptr = lease.ptr
    assert s.register_buffer(ptr, 4096) < 0  # already registered, by the pool
    lease.release()
    pool.close()
    # unregistered (and unmapped): refused without touching the memory
    assert s.put_from("pool/gone", ptr, 4096) == -600


def test_pool_needs_a_set_up_store(one):
    with pytest.raises(RuntimeError, match="not initialized"):
        BufferPool(MooncakeDistributedStore())
    pool = BufferPool(one, alignment=ALIGN, prewarm_size=ALIGN, prewarm_count=2)
    pool.close()


def test_host_allocator_memory_registers_with_a_store(one):
    s = one
    alloc = MooncakeHostMemAllocator()
    p = alloc.alloc(2 * MiB)
    try:
        assert s.register_buffer(p, 2 * MiB) == 0
        import ctypes

        ctypes.memmove(p, pattern(5, MiB), MiB)
        assert s.put_from("hostmem/k", p, MiB) == 0
        assert s.get_into("hostmem/k", p + MiB, MiB) == MiB
        assert ctypes.string_at(p + MiB, MiB) == pattern(5, MiB)
        assert s.unregister_buffer(p) == 0
    finally:
        assert alloc.free(p) == 0
