"""``BufferPool``: leases of host memory registered with a store, for the
zero-copy calls (``put_from``, ``get_into``, ``batch_*_into``...).

A pool maps regions of shared anonymous memory, registers each with its
store (``register_buffer``) and carves leases out of them::

    pool = BufferPool(store)
    with pool.acquire(4096) as lease:        # lease.ptr, lease.size
        lease.buffer[:5] = b"hello"          # a writable memoryview
        store.put_from("k", lease.ptr, 5)

- Regions are multiples of ``alignment`` bytes and start on an
  ``alignment`` boundary; they are made on demand (``prewarm`` makes them
  ahead) and kept until :meth:`BufferPool.close`, which unregisters and
  unmaps them.
- A lease is a range of 64-byte granules, first fit inside the regions;
  ranges of live leases never overlap. ``release()`` (or leaving the
  ``with`` block, or dropping the last reference to the lease) gives the
  range back; neighbouring free ranges merge.
- ``max_bytes`` (``0``: no limit) caps the bytes of all regions together,
  ``max_regions`` their number. A request that could never fit raises
  ``RuntimeError``; one that does not fit now waits for a release when
  blocking (``block_on_exhaustion``, or ``block=``) up to ``timeout``
  seconds (``default_timeout``; ``None``: no limit), else raises
  ``RuntimeError``.
- ``lease.buffer`` is a ``memoryview`` (format ``"B"``) whose ``obj`` is a
  :class:`BufferLeaseView`. While any view of a lease is alive, the lease
  cannot be released (``RuntimeError``): memory handed back is never still
  visible through an old view.
- ``min_size_class`` and ``max_size_class`` are validated and kept, and do
  not change how ranges are carved (gostore does not use size classes).

``RegisteredBufferPool``, ``RegisteredBufferLease`` and
``RegisteredBufferLeaseView`` are the same classes under Mooncake's other
names.
"""

from __future__ import annotations

import bisect
import collections
import ctypes
import functools
import math
import mmap
import threading
import time
import weakref
from typing import Any, Deque, List, Optional

from .. import _fields as F
from .hostmem import map_memory, unmap_memory

__all__ = [
    "BufferPool",
    "BufferLease",
    "BufferLeaseView",
    "RegisteredBufferPool",
    "RegisteredBufferLease",
    "RegisteredBufferLeaseView",
]

GRANULE = 64
_POLL = 0.1  # seconds: the longest a blocked acquire sleeps between passes
_PAGE = mmap.PAGESIZE


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


class _Region:
    """``[base, base+size)``: registered, carved by a sorted free list."""

    __slots__ = ("base", "size", "map_addr", "map_size", "free_offs", "free_lens")

    def __init__(self, base: int, size: int, map_addr: int, map_size: int) -> None:
        self.base, self.size = base, size
        self.map_addr, self.map_size = map_addr, map_size
        self.free_offs: List[int] = [0]
        self.free_lens: List[int] = [size]

    def take(self, n: int) -> Optional[int]:
        for i, ln in enumerate(self.free_lens):
            if ln >= n:
                off = self.free_offs[i]
                if ln == n:
                    del self.free_offs[i], self.free_lens[i]
                else:
                    self.free_offs[i] += n
                    self.free_lens[i] -= n
                return off
        return None

    def give(self, off: int, n: int) -> None:
        i = bisect.bisect_left(self.free_offs, off)
        offs, lens = self.free_offs, self.free_lens
        if i > 0 and offs[i - 1] + lens[i - 1] == off:  # merge with the left
            i -= 1
            lens[i] += n
        else:
            offs.insert(i, off)
            lens.insert(i, n)
        if i + 1 < len(offs) and offs[i] + lens[i] == offs[i + 1]:  # and the right
            lens[i] += lens.pop(i + 1)
            offs.pop(i + 1)

    def largest_free(self) -> int:
        return max(self.free_lens, default=0)


def _drop_regions(store: Any, regions: List[_Region]) -> None:
    """Unregister and unmap ``regions`` (emptied)."""
    while regions:
        r = regions.pop()
        try:
            store.unregister_buffer(r.base)
        except Exception:  # noqa: BLE001 -- the store may be gone; the memory must still go
            pass
        unmap_memory(r.map_addr, r.map_size)


class BufferPool:
    """Leases of registered host memory (see the module doc).

    ``BufferPool(store, max_bytes=0, min_size_class=65536,
    max_size_class=None, alignment=8 MiB, block_on_exhaustion=True,
    default_timeout=None, max_regions=None, prewarm_size=None,
    prewarm_count=0)``: ``store`` is a set-up ``MooncakeDistributedStore``
    (``RuntimeError`` otherwise); ``alignment`` a power of two of at least
    8; with ``prewarm_size``, ``prewarm(prewarm_size, prewarm_count)`` runs
    at once.
    """

    def __init__(
        self,
        store: Any,
        max_bytes: int = 0,
        min_size_class: int = 65536,
        max_size_class: Optional[int] = None,
        alignment: int = 8 * 1024 * 1024,
        block_on_exhaustion: bool = True,
        default_timeout: Optional[float] = None,
        max_regions: Optional[int] = None,
        prewarm_size: Optional[int] = None,
        prewarm_count: int = 0,
    ) -> None:
        from ..store.distributed_store import MooncakeDistributedStore

        max_bytes = F.u64("max_bytes", max_bytes)
        min_size_class = F.u64("min_size_class", min_size_class)
        max_size_class = F.optional(F.u64)("max_size_class", max_size_class)
        alignment = F.u64("alignment", alignment)
        block_on_exhaustion = F.boolean("block_on_exhaustion", block_on_exhaustion)
        default_timeout = F.optional(F.number)("default_timeout", default_timeout)
        max_regions = F.optional(F.u64)("max_regions", max_regions)
        prewarm_size = F.optional(F.u64)("prewarm_size", prewarm_size)
        prewarm_count = F.u64("prewarm_count", prewarm_count)
        if store is None or (
            isinstance(store, MooncakeDistributedStore) and not store.get_hostname()
        ):
            raise RuntimeError("MooncakeDistributedStore is not initialized (call setup first)")
        if not isinstance(store, MooncakeDistributedStore):
            raise RuntimeError(
                f"BufferPool needs a MooncakeDistributedStore, not {type(store).__name__}"
            )
        if min_size_class == 0 or alignment == 0:
            raise RuntimeError("min_size_class and alignment must be positive")
        if alignment & (alignment - 1) or alignment < ctypes.sizeof(ctypes.c_void_p):
            raise RuntimeError("alignment must be a power of two and at least sizeof(void*)")
        if max_size_class is not None and max_size_class < min_size_class:
            raise RuntimeError("max_size_class must be at least min_size_class")
        if default_timeout is not None and (default_timeout < 0 or math.isnan(default_timeout)):
            raise RuntimeError("default_timeout must be non-negative")
        self._store = store
        self._max_bytes = max_bytes
        self._min_size_class = min_size_class
        self._max_size_class = max_size_class
        self._alignment = alignment
        self._block = block_on_exhaustion
        self._default_timeout = default_timeout
        self._max_regions = max_regions
        self._cond = threading.Condition(threading.Lock())
        self._regions: List[_Region] = []
        self._mapped = 0  # bytes of all regions
        self._leases = 0  # live leases
        self._pending: Deque[tuple] = collections.deque()  # ranges of collected leases
        self._closed = False
        fin = weakref.finalize(self, _drop_regions, store, self._regions)
        fin.atexit = False  # the process is ending: no calls into the library
        self._finalizer = fin
        if prewarm_size is not None and prewarm_count:
            self.prewarm(prewarm_size, prewarm_count)

    # ---- leases -----------------------------------------------------------

    def acquire(
        self, size: int, block: Optional[bool] = None, timeout: Optional[float] = None
    ) -> "BufferLease":
        """A lease of ``size`` bytes (``0`` allowed). Waits for room when
        blocking (``block``, default ``block_on_exhaustion``) up to
        ``timeout`` seconds (default ``default_timeout``; ``None``: no
        limit). ``RuntimeError``: closed pool, a size that can never fit,
        no room without blocking, or the timeout."""
        size = F.u64("size", size)
        blocking = self._block if block is None else F.boolean("block", block)
        wait = self._default_timeout if timeout is None else F.number("timeout", timeout)
        if wait is not None and (wait < 0 or math.isnan(wait)):
            raise RuntimeError("timeout must be non-negative")
        need = max(_round_up(size, GRANULE), GRANULE)
        if self._max_bytes and need > self._max_bytes:
            raise RuntimeError("requested buffer size exceeds pool capacity")
        deadline = None if wait is None else time.monotonic() + wait
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("buffer pool is closed")
                self._drain()
                got = self._take(need)
                if got is not None:
                    region, off = got
                    self._leases += 1
                    return BufferLease._new(self, region, off, need, size)
                if not blocking:
                    raise RuntimeError("buffer pool is exhausted")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise RuntimeError("timed out waiting for a buffer")
                # Bounded waits: a lease collected while another thread held
                # the lock is applied by the next pass (see _give_later).
                self._cond.wait(_POLL if left is None else min(left, _POLL))

    buffer = acquire

    def _take(self, need: int) -> Optional[tuple]:
        """A free range of ``need`` bytes, making a region when allowed;
        ``None`` when there is no room. Holds ``_cond``."""
        for r in self._regions:
            off = r.take(need)
            if off is not None:
                return r, off
        region = self._grow(need)
        if region is None:
            return None
        off = region.take(need)
        assert off == 0
        return region, off

    def _grow(self, need: int) -> Optional[_Region]:
        if self._max_regions is not None and len(self._regions) >= self._max_regions:
            return None
        size = _round_up(need, self._alignment)
        if self._max_bytes:
            room = self._max_bytes - self._mapped
            if room < need:
                return None
            size = min(size, room)
        extra = self._alignment - _PAGE if self._alignment > _PAGE else 0
        map_size = _round_up(size, _PAGE) + extra
        map_addr = map_memory(map_size)
        base = _round_up(map_addr, self._alignment)
        rc = self._store.register_buffer(base, size)
        if rc != 0:
            unmap_memory(map_addr, map_size)
            raise RuntimeError(f"register_buffer of a {size}-byte pool region failed: {rc}")
        region = _Region(base, size, map_addr, map_size)
        self._regions.append(region)
        self._mapped += size
        return region

    def _give(self, lease: "BufferLease") -> None:
        with self._cond:
            if lease._pool is None:  # released by another thread meanwhile
                return
            lease._pool = None
            self._drain()
            lease._region.give(lease._off, lease._len)
            self._leases -= 1
            self._cond.notify_all()

    def _give_later(self, region: _Region, off: int, n: int) -> None:
        """``_give`` for a lease being collected: the collector may run in a
        thread that holds ``_cond`` already, so never wait for it."""
        self._pending.append((region, off, n))
        if self._cond.acquire(blocking=False):
            try:
                self._drain()
                self._cond.notify_all()
            finally:
                self._cond.release()

    def _drain(self) -> None:
        """Apply the ranges of collected leases. Holds ``_cond``."""
        while self._pending:
            region, off, n = self._pending.popleft()
            region.give(off, n)
            self._leases -= 1

    # ---- pool ---------------------------------------------------------------

    def prewarm(self, size: int, count: int) -> None:
        """Make the regions for ``count`` leases of ``size`` bytes now
        (without blocking), so that later acquires need no new region."""
        size = F.u64("size", size)
        count = F.u64("count", count)
        leases = []
        try:
            for _ in range(count):
                leases.append(self.acquire(size, block=False))
        finally:
            for lease in leases:
                lease.release()

    def close(self) -> None:
        """Unregister and unmap every region. ``RuntimeError`` while leases
        are live; closing again does nothing."""
        with self._cond:
            if self._closed:
                return
            self._drain()
            if self._leases:
                raise RuntimeError("cannot close buffer pool with active leases")
            self._closed = True
            self._mapped = 0
            self._cond.notify_all()
        self._finalizer()

    def __enter__(self) -> "BufferPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._regions)} regions, {self._leases} leases"
        return f"<gostore.BufferPool {state}, {self._mapped} bytes>"


class BufferLease:
    """``size`` bytes at ``ptr`` from a :class:`BufferPool`, until
    :meth:`release`. ``buffer`` is a writable ``memoryview`` over them.
    After release, ``ptr`` and ``size`` raise ``RuntimeError`` and
    ``buffer`` raises ``BufferError``. Only a pool makes leases."""

    __slots__ = ("_pool", "_region", "_off", "_len", "_ptr", "_size", "_views", "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("gostore.BufferLease: no public constructor (use BufferPool.acquire)")

    @classmethod
    def _new(cls, pool: BufferPool, region: _Region, off: int, n: int, size: int) -> "BufferLease":
        self = cls.__new__(cls)
        self._pool: Optional[BufferPool] = pool
        self._region, self._off, self._len = region, off, n
        self._ptr, self._size = region.base + off, size
        self._views: List["weakref.ref[Any]"] = []  # views are unhashable: no WeakSet
        return self

    def _check(self) -> None:
        if self._pool is None:
            raise RuntimeError("buffer lease is closed")

    @property
    def ptr(self) -> int:
        """Address of the first byte."""
        self._check()
        return self._ptr

    @property
    def size(self) -> int:
        """Bytes asked for (the range behind may be a little larger)."""
        self._check()
        return self._size

    @property
    def buffer(self) -> memoryview:
        """A new writable ``memoryview`` (format ``"B"``) over the lease."""
        if self._pool is None:
            raise BufferError("buffer lease is closed")
        return _new_view(self).buffer

    def release(self) -> None:
        """Give the range back to the pool. ``RuntimeError`` while a view
        (``buffer``, or anything made from it) is alive; releasing again
        does nothing."""
        pool = self._pool
        if pool is None:
            return
        if any(ref() is not None for ref in self._views):
            raise RuntimeError("cannot release buffer while exported views exist")
        pool._give(self)

    def __enter__(self) -> "BufferLease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        # Views hold their lease: none is alive once the lease is collected.
        pool = getattr(self, "_pool", None)
        if pool is not None:
            self._pool = None
            try:
                pool._give_later(self._region, self._off, self._len)
            except Exception:  # noqa: BLE001 -- at interpreter exit, say
                pass

    def __repr__(self) -> str:
        if self._pool is None:
            return "<gostore.BufferLease released>"
        return f"<gostore.BufferLease ptr=0x{self._ptr:x} size={self._size}>"


class BufferLeaseView:
    """The object behind ``lease.buffer``: it exports the lease's bytes
    (buffer protocol) and keeps the lease from being released while it
    lives. ``view.buffer`` is another ``memoryview`` over the same bytes."""

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("gostore.BufferLeaseView: no public constructor (use BufferLease.buffer)")

    @property
    def buffer(self) -> memoryview:
        return memoryview(self).cast("B")  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"<gostore.BufferLeaseView ptr=0x{ctypes.addressof(self):x} size={ctypes.sizeof(self)}>"  # type: ignore[arg-type]


@functools.lru_cache(maxsize=256)
def _view_class(n: int) -> type:
    # A ctypes array exports its memory through the buffer protocol, which a
    # Python class cannot do before 3.12 (the same trick as GostoreBuffer).
    return type(
        "BufferLeaseView",
        (BufferLeaseView, ctypes.c_ubyte * n),
        {"__module__": __name__, "__qualname__": f"BufferLeaseView[{n}]"},
    )


def _new_view(lease: BufferLease) -> BufferLeaseView:
    view = _view_class(lease._size).from_address(lease._ptr)
    view._lease = lease  # keeps the lease (and so the range) alive
    lease._views[:] = [r for r in lease._views if r() is not None]
    lease._views.append(weakref.ref(view))
    return view


RegisteredBufferPool = BufferPool
RegisteredBufferLease = BufferLease
RegisteredBufferLeaseView = BufferLeaseView
