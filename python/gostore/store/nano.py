"""The plan API of the Nano Mooncake seed: producers write straight into the
memory of the process that will read.

``NanoKVCache`` joins a gostore cluster as a member with a heap of its own
(a segment of the store) and gets a ``rank`` from the master, in join order.
A producer opens a :class:`WritePlan` for a key on an owner -- a rank, a
segment name, or ``hash(key) % world_size`` -- writes the payload through
:meth:`NanoKVCache.writable` (a memoryview over the owner's memory, mapped
into the producer on the same host) and :meth:`~NanoKVCache.commit`\\ s:
the object's 64-byte header in the owner's memory turns READY with release
semantics and the master publishes it. Until then readers see nothing.
Readers :meth:`~NanoKVCache.get` by key, or take an :class:`ObjMeta` with
:meth:`~NanoKVCache.get_location` and read straight from the owner with
:meth:`~NanoKVCache.read_location`; a slot removed, reclaimed or reused
since the meta was taken is refused (its epoch moved on), never read.

A plan object is an object of the store: ``is_exist``, ``remove`` and
eviction see it; its value, read through ``MooncakeDistributedStore``, is
the header followed by the payload.

Errors: ``KeyError`` for an unknown key (:class:`PlanNotReady`, a KeyError,
before the commit), ``ValueError`` for sizes that cannot fit, ``MemoryError``
when no room is left after eviction, :class:`PlanError` (with the contract's
``code``) for anything else. All the work is done in Go; this module only
shapes arguments and results.
"""

from __future__ import annotations

import ctypes
import json
import os
from array import array
from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

from .. import _native
from .._args import _key
from ..buffers.pins import BufferPins, new_bytes
from ..errors import ErrorCode
from .distributed_store import MooncakeDistributedStore

__all__ = ["NanoKVCache", "WritePlan", "ObjMeta", "PlanError", "PlanNotReady", "plan_address"]

_PLAN_FIELDS = 10
_META_FIELDS = 16  # 9 fields, then the read grant (7 words, zero: none)


class PlanError(RuntimeError):
    """A plan call failed; ``code`` is the contract's negative number."""

    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what}: {ErrorCode.name_of(code)} ({code})")
        self.code = code


class PlanNotReady(KeyError):
    """The key exists but its producer has not committed it (-703)."""


@dataclass(frozen=True)
class WritePlan:
    """Where a producer writes (the seed's fields); offsets are in the
    owner's heap."""

    key: str
    key_hash: int
    dst_rank: int
    header_off: int
    payload_base: int
    page_bytes: int
    n_pages: int
    bytes_total: int
    epoch: int
    segment_id: int
    address: int  # of the payload in this process (0: owner reachable over TCP only)


@dataclass(frozen=True)
class ObjMeta:
    """A READY object's location (the seed's fields)."""

    key_hash: int
    owner_rank: int
    header_off: int
    payload_off: int
    bytes_total: int
    page_bytes: int
    n_pages: int
    epoch: int
    segment_id: int
    # The master's grant to read the object over TCP (56 bytes, good for
    # the lease plus slack); empty for a meta made by hand, which a reader
    # on another host is refused with.
    grant: bytes = b""

    def _native(self) -> array:
        g = array("Q", self.grant.ljust(56, b"\0")[:56])  # all zero: no grant
        return array("Q", [self.key_hash, self.owner_rank & 0xFFFFFFFFFFFFFFFF, self.segment_id,
                           self.header_off, self.payload_off, self.bytes_total, self.page_bytes,
                           self.n_pages, self.epoch]) + g


def plan_address(plan: WritePlan) -> int:
    """The payload's address in this process, for native producers (0 when
    the owner is reachable over TCP only)."""
    return plan.address


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _addr(a: array) -> int:
    return a.buffer_info()[0]


class NanoKVCache:
    """A member of a gostore cluster speaking the plan API."""

    def __init__(
        self,
        heap_bytes: int,
        master_rank: int = 0,
        page_bytes: int = 256 * 1024,
        *,
        master_server_addr: Optional[str] = None,
        local_hostname: str = "127.0.0.1",
        low_watermark: float = 0.85,
    ) -> None:
        """Join the cluster whose master is ``master_server_addr`` (default:
        ``$MOONCAKE_MASTER``) with a heap of ``heap_bytes``. ``master_rank`` is
        accepted for the seed's signature (the master is its own process).
        When an open finds no room, eviction brings the pool below
        ``low_watermark`` first."""
        if not isinstance(heap_bytes, int) or heap_bytes <= 0:
            raise ValueError("heap_bytes must be a positive int")
        if not isinstance(page_bytes, int) or not 0 < page_bytes < 1 << 32:
            raise ValueError("page_bytes must be a positive 32-bit int")
        addr = master_server_addr or os.environ.get("MOONCAKE_MASTER", "127.0.0.1:50051")
        self.page_bytes = page_bytes
        self.low_watermark = float(low_watermark)
        self._store = MooncakeDistributedStore()
        rc = self._store.setup(local_hostname, "P2PHANDSHAKE", heap_bytes, 16 * 1024 * 1024,
                               "tcp", "", addr)
        if rc != 0:
            raise PlanError(f"joining the cluster at {addr}", rc)
        rank = _native.lib().gs_plan_join(self._store._h())
        if rank < 0:
            self._store.close()
            raise PlanError("joining the plan members", rank)
        self.rank = int(rank)

    # ---- introspection ----------------------------------------------------------

    def members(self) -> list:
        """The live members: ``[{"rank", "segment", "size", "used"}, ...]``."""
        h = self._store._h()
        n, raw = _native.call_growing(lambda out, cap: _native.lib().gs_plan_members(h, out, cap), cap=1 << 16)
        if n < 0:
            raise PlanError("listing the members", n)
        return json.loads(raw)

    @property
    def world_size(self) -> int:
        """How many members there are now."""
        return len(self.members())

    @property
    def segment(self) -> str:
        """This member's segment name (usable as ``preferred_segment``)."""
        return self._store.get_hostname()

    def stats(self) -> Dict[str, Any]:
        """This process's counters (opened, committed, reads, bytes_tx/rx,
        stale_reads, not_ready, cas_failures, oom, ...) and every member's
        heap: ``heap_used``/``heap_total`` for this rank, ``heaps`` by rank."""
        out = ctypes.create_string_buffer(4096)
        n = _native.lib().gs_plan_stats(self._store._h(), out, 4096)
        if n < 0:
            raise PlanError("stats", n)
        st: Dict[str, Any] = json.loads(out.raw[:n])
        heaps = {m["rank"]: {"used": m["used"], "total": m["size"]} for m in self.members()}
        st["heaps"] = heaps
        st["world_size"] = len(heaps)
        mine = heaps.get(self.rank, {"used": 0, "total": 0})
        st["heap_used"], st["heap_total"] = mine["used"], mine["total"]
        return st

    # ---- the plan API -----------------------------------------------------------

    def open_for_write(
        self, key: str, bytes_total: int, *, preferred_segment: Union[int, str, None] = None
    ) -> WritePlan:
        """Reserve ``bytes_total`` bytes for ``key`` on an owner and return
        the plan; the object stays invisible until :meth:`commit`."""
        k = _key(key)
        if k is None:
            raise KeyError(key)
        if not isinstance(bytes_total, int) or isinstance(bytes_total, bool):
            raise TypeError(f"bytes_total must be int, not {type(bytes_total).__name__}")
        if bytes_total <= 0 or bytes_total >= 1 << 63:
            raise ValueError(f"bytes_total must be positive, got {bytes_total}")
        rank, seg = -1, b""
        if isinstance(preferred_segment, bool) or not isinstance(preferred_segment, (int, str, type(None))):
            raise TypeError("preferred_segment must be a rank (int), a segment name (str) or None")
        if isinstance(preferred_segment, int):
            if preferred_segment < 0:
                raise ValueError(f"rank {preferred_segment} does not exist")
            rank = preferred_segment
        elif isinstance(preferred_segment, str):
            seg = preferred_segment.encode("utf-8")
        out = array("Q", bytes(8 * _PLAN_FIELDS))
        rc = _native.lib().gs_plan_open(self._store._h(), k, len(k), bytes_total, self.page_bytes,
                                        rank, seg, len(seg), self.low_watermark, _addr(out))
        if rc == int(ErrorCode.INVALID_PARAMS):
            raise ValueError(f"{bytes_total} bytes cannot be planned for {key!r} (empty key, or more than the owner's heap)")
        if rc == int(ErrorCode.NO_AVAILABLE_HANDLE):
            raise MemoryError(f"no room for {bytes_total} bytes of {key!r}, even after eviction")
        if rc == int(ErrorCode.SEGMENT_NOT_FOUND):
            raise ValueError(f"no member {preferred_segment!r}")
        if rc < 0:
            raise PlanError(f"open_for_write({key!r})", rc)
        return WritePlan(key, out[0], _signed(out[1]), out[3], out[4], out[5], out[6], out[7],
                         out[8], out[2], out[9])

    def writable(self, plan: WritePlan) -> Optional[memoryview]:
        """A writable memoryview over the plan's payload in the owner's
        memory (nothing copied), or None when the owner is reachable over
        TCP only (use :meth:`write`). Valid until the plan is committed or
        removed and while the owner lives."""
        if not plan.address:
            return None
        return memoryview((ctypes.c_char * plan.bytes_total).from_address(plan.address)).cast("B")

    def write(self, plan: WritePlan, data: Any, offset: int = 0) -> None:
        """Copy ``data`` (any buffer) into the plan's payload at ``offset``
        (any transport)."""
        k = plan.key.encode("utf-8")
        with BufferPins() as pins:
            addr, n = pins.pin(data)
            if offset < 0 or offset + n > plan.bytes_total:
                raise ValueError(f"{n} bytes at {offset} do not fit the {plan.bytes_total}-byte payload")
            if n == 0:
                return
            rc = _native.lib().gs_plan_write(self._store._h(), k, len(k), offset, addr, n)
        if rc == int(ErrorCode.OBJECT_NOT_FOUND):
            raise KeyError(f"{plan.key!r} has no open plan in this process")
        if rc < 0:
            raise PlanError(f"write to {plan.key!r}", rc)

    def commit(self, key: str) -> None:
        """Publish the plan this process opened for ``key``: its header turns
        READY and from then on readers see exactly what was written. The
        master hears of it in the background (the regular API sees the
        object once it has: :meth:`flush` waits for that); a commit costs
        no round trip."""
        k = _key(key)
        rc = _native.lib().gs_plan_commit(self._store._h(), k or b"", len(k or b""))
        if rc == int(ErrorCode.OBJECT_NOT_FOUND):
            raise KeyError(f"{key!r}: no open plan in this process (never opened, or removed)")
        if rc < 0:
            raise PlanError(f"commit({key!r})", rc)

    def flush(self) -> None:
        """Return once the master has heard of every commit made here."""
        _native.lib().gs_plan_flush(self._store._h())

    def get_location(self, key: str) -> ObjMeta:
        """Where ``key``'s READY object lives (grants a read lease)."""
        k = _key(key)
        if k is None:
            raise KeyError(key)
        out = array("Q", bytes(8 * _META_FIELDS))
        rc = _native.lib().gs_plan_locate(self._store._h(), k, len(k), _addr(out))
        self._raise_missing(key, rc)
        if rc < 0:
            raise PlanError(f"get_location({key!r})", rc)
        grant = out[9:].tobytes()
        return ObjMeta(out[0], _signed(out[1]), out[3], out[4], out[5], out[6], out[7], out[8], out[2],
                       b"" if not any(grant) else grant)

    @staticmethod
    def _raise_missing(key: str, rc: int) -> None:
        if rc == int(ErrorCode.OBJECT_NOT_FOUND):
            raise KeyError(key)
        if rc == int(ErrorCode.REPLICA_IS_NOT_READY):
            raise PlanNotReady(key)

    def get(self, key: str, *, dst: Any = None) -> Any:
        """``key``'s payload as ``bytes``, or copied into ``dst`` (any writable
        buffer at least that large), which is returned; None while the key
        is missing or not committed."""
        try:
            meta = self.get_location(key)
        except KeyError:
            return None
        # One master call (the location); the bytes come straight from the
        # owner. A slot removed since the location was taken (-702) means
        # the key is gone.
        return self._read_at(meta, dst, key, gone=int(ErrorCode.INVALID_REPLICA))

    def read_location(self, meta: ObjMeta, *, dst: Any = None) -> Any:
        """Read the object ``meta`` describes straight from its owner, without
        the master; :class:`PlanError` when its slot was removed, reclaimed or
        reused since (never another object's bytes)."""
        return self._read_at(meta, dst, f"meta of epoch {meta.epoch}", gone=None)

    def _read_at(self, meta: ObjMeta, dst: Any, what: str, gone: Optional[int]) -> Any:
        """Reads meta's payload into new bytes or dst; None when the read
        fails with ``gone``."""
        m, size = meta._native(), meta.bytes_total
        with BufferPins() as pins:
            if dst is None:
                out, addr = new_bytes(size)
                n = size
            else:
                addr, n = pins.pin(dst, writable=True)
                if n < size:
                    raise ValueError(f"dst holds {n} bytes, the object {size}")
                out = dst
            rc = _native.lib().gs_plan_read_at(self._store._h(), _addr(m), addr, n)
        if rc == size:
            return out
        if gone is not None and rc == gone:
            return None
        raise PlanError(f"read of {what}", rc)

    def put(self, key: str, data: Any, *, preferred_segment: Union[int, str, None] = None) -> None:
        """``open_for_write`` + one copy of ``data`` into the owner + ``commit``."""
        with BufferPins() as pins:
            addr, n = pins.pin(data)
            if n == 0:
                raise ValueError("data is empty")
            plan = self.open_for_write(key, n, preferred_segment=preferred_segment)
            try:
                if plan.address:
                    ctypes.memmove(plan.address, addr, n)
                else:
                    self.write(plan, data)
            except BaseException:
                self.remove(key)
                raise
        self.commit(key)

    def remove(self, key: str) -> None:
        """Remove ``key``: its header turns DEAD (readers holding its meta are
        refused), its space goes back to the pool."""
        k = _key(key)
        if k is None:
            raise KeyError(key)
        rc = _native.lib().gs_plan_remove(self._store._h(), k, len(k))
        if rc == int(ErrorCode.OBJECT_NOT_FOUND):
            raise KeyError(key)
        if rc < 0:
            raise PlanError(f"remove({key!r})", rc)

    def evict_until_below(self, usage_ratio: float) -> int:
        """Evict (least recently used first, never pinned, leased or
        uncommitted objects) until the pool's usage is below
        ``usage_ratio``; returns how many objects went."""
        if not 0 <= float(usage_ratio) <= 1:
            raise ValueError(f"usage_ratio must be within [0, 1], got {usage_ratio}")
        usage = ctypes.c_double()
        n = _native.lib().gs_plan_evict_until(self._store._h(), float(usage_ratio), ctypes.addressof(usage))
        if n < 0:
            raise PlanError("evict_until_below", n)
        return int(n)

    @property
    def store(self) -> MooncakeDistributedStore:
        """The underlying store client (the regular API on the same pool)."""
        return self._store

    def close(self) -> None:
        """Leave the cluster; objects whose only copy is in this heap go."""
        self._store.close()

    def __enter__(self) -> "NanoKVCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
