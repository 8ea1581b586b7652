"""Standalone mode, application side: a get's objects copied straight out of
the segments that hold them (``gs_get_places``).

An application's own memory (the ``bytes`` of ``get_batch``) is written by
``gostore-client`` with ``process_vm_writev``, at a third of memcpy's speed
or less on the machines measured. When an object lies in host memory on
this host, the server names its place instead (segment, offset, size, and
the segment's memfd, ``/proc/<owner>/fd/<n>``), and this process maps the
segment read-only and copies: one memcpy. The server keeps the object's
lease and counts this process as its reader until ``gs_get_finish``, which
checks the lease after the copy as it does for its own copies (a copy that
outlived it gives -707).

A segment is mapped on first use and kept for the next calls. Its pages
enter this process's page tables as they are first read (a fault per few
pages); unlike the server's own mappings it is not populated ahead, so an
application pays page tables only for what it reads. At each call
the path is checked against the file mapped (a segment that went away and
whose path now names another memfd is mapped again); a mapping unused for
``IDLE_S`` seconds is let go at the next call, and all at ``close`` and in
a forked child. A segment this process cannot open (another PID namespace,
no rights over its owner) is left to the server for ``RETRY_S`` seconds.
Opening one needs what reading the owner's memory needs anyway: the
kernel's checks on ``/proc/<pid>/fd`` decide, nothing here widens them.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .shm import unmap
from ..buffers.hostmem import map_memory

__all__ = ["Segments", "parse_paths", "copy_parts", "IDLE_S", "RETRY_S", "PARALLEL_MIN"]

_log = logging.getLogger("gostore.standalone")

IDLE_S = 30.0  # a mapping unused this long is let go at the next call
RETRY_S = 30.0  # a segment that could not be opened is not tried again for this long
# A copy of at least this many bytes in all is split among threads (one
# per core, four at most): ctypes releases the GIL, and memcpy from one
# thread reaches about half of what the memory gives on the machines
# measured. Below it, a thread's hand-off costs more than it saves.
PARALLEL_MIN = 4 << 20
_CHUNK = 1 << 20  # the piece of a large copy a thread takes at a time


@dataclass
class _Mapping:
    seg_id: int
    path: str
    ident: Tuple[int, int]  # (st_dev, st_ino) of the file mapped
    addr: int
    size: int
    used: float  # monotonic time of the last call that used it
    busy: int = 0  # calls copying from it now

    def names(self, path: str, ident: Tuple[int, int], size: int) -> bool:
        return self.path == path and self.ident == ident and self.size == size


def parse_paths(doc: bytes) -> Dict[int, Tuple[int, str]]:
    """``gs_get_places``' lines ``<segment id> <size> <path>`` as
    ``{segment id: (size, path)}``; a line that does not parse is left out."""
    out: Dict[int, Tuple[int, str]] = {}
    for line in doc.decode("utf-8", "replace").splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
            out[int(parts[0])] = (int(parts[1]), parts[2])
    return out


class Segments:
    """The segments this process copies from, mapped read-only (see the
    module text). Thread-safe: a mapping replaced or let go while a call
    copies from it is unmapped when that call releases it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: Dict[int, _Mapping] = {}  # by segment id: what acquire hands out
        self._mapped: Dict[int, _Mapping] = {}  # by address: every mapping not yet unmapped
        self._failed: Dict[str, float] = {}  # path -> when opening it failed

    def acquire(self, seg_id: int, size: int, path: str) -> Optional[int]:
        """The address of segment ``seg_id`` (``size`` bytes, memfd
        ``path``) mapped here, held until :meth:`release`; None when it
        cannot be mapped (the caller leaves its objects to the server)."""
        now = time.monotonic()
        try:
            st = os.stat(path)
        except OSError:
            return None
        ident = (st.st_dev, st.st_ino)
        with self._lock:
            m = self._current.get(seg_id)
            if m is not None and m.names(path, ident, size):
                m.busy += 1
                m.used = now
                return m.addr
            if now - self._failed.get(path, -RETRY_S) < RETRY_S:
                return None
        addr = self._map(path, size, ident)
        with self._lock:
            if addr is None:
                self._failed[path] = now
                return None
            m = self._current.get(seg_id)
            if m is not None and m.names(path, ident, size):  # another thread mapped it meanwhile
                m.busy += 1
                m.used = now
                unmap(addr, size)
                return m.addr
            if m is not None:
                self._retire(m)
            m = _Mapping(seg_id, path, ident, addr, size, now, busy=1)
            self._current[seg_id] = m
            self._mapped[addr] = m
        return addr

    def release(self, addr: int) -> None:
        """End a call's use of a mapping :meth:`acquire` returned."""
        with self._lock:
            m = self._mapped.get(addr)
            if m is None:
                return
            m.busy -= 1
            if m.busy == 0 and self._current.get(m.seg_id) is not m:
                del self._mapped[addr]
                unmap(m.addr, m.size)

    def _retire(self, m: _Mapping) -> None:
        """No longer hand m out; unmap it once no call copies from it."""
        if self._current.get(m.seg_id) is m:
            del self._current[m.seg_id]
        if m.busy == 0:
            self._mapped.pop(m.addr, None)
            unmap(m.addr, m.size)

    @staticmethod
    def _map(path: str, size: int, ident: Tuple[int, int]) -> Optional[int]:
        # The path must name a memfd, as gostore-client checks for its own
        # mappings: a recycled pid or fd number must not make this process
        # copy out of some unrelated file (nor block opening a FIFO).
        try:
            target = os.readlink(path)
            if not target.startswith("/memfd:"):
                _log.info("gostore: segment path %s names %r, not a memfd: the server copies its objects",
                          path, target)
                return None
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as e:
            _log.info("gostore: cannot open segment %s here (%s): the server copies its objects", path, e)
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != ident or st.st_size < size:
                return None  # replaced between the two looks, or not the segment named
            return map_memory(size, fd, mmap.PROT_READ)
        except (OSError, RuntimeError) as e:
            _log.info("gostore: cannot map segment %s here (%s): the server copies its objects", path, e)
            return None
        finally:
            os.close(fd)

    def expire(self) -> None:
        """Let go of the mappings no call used for IDLE_S seconds. Every
        forwarded call asks: with nothing mapped it costs a lookup."""
        if not self._current:
            return
        cut = time.monotonic() - IDLE_S
        with self._lock:
            for m in list(self._current.values()):
                if m.busy == 0 and m.used < cut:
                    self._retire(m)

    def forget_all(self) -> None:
        """Unmap everything now: in a forked child, where no other thread
        of the parent runs. Not under the lock, which such a thread may
        have held at the fork: a new one replaces it."""
        self._lock = threading.Lock()
        for m in self._mapped.values():
            unmap(m.addr, m.size)
        self._mapped.clear()
        self._current.clear()
        self._failed.clear()

    def close(self) -> None:
        """Let go of every mapping (those in use once their calls end)."""
        with self._lock:
            for m in list(self._current.values()):
                self._retire(m)
            self._failed.clear()

    def mapped(self) -> int:
        """How many mappings are not yet unmapped (for tests and introspection)."""
        with self._lock:
            return len(self._mapped)


_pool: Optional[ThreadPoolExecutor] = None
_pool_lock = threading.Lock()
_WORKERS = max(1, min(os.cpu_count() or 1, 4))


def _copy(parts: Iterable[Tuple[int, int, int]]) -> None:
    for dst, src, n in parts:
        ctypes.memmove(dst, src, n)


def copy_parts(parts: Sequence[Tuple[int, int, int]]) -> None:
    """Copy each ``(dst, src, n)``; split among threads when they are
    PARALLEL_MIN bytes or more in all. The threads take _CHUNK pieces from
    one queue, the calling thread too: a pool thread that wakes late (tens
    of microseconds on a VM) takes fewer instead of holding the end back."""
    total = sum(n for _d, _s, n in parts)
    if _WORKERS < 2 or total < PARALLEL_MIN:
        _copy(parts)
        return
    pieces: List[Tuple[int, int, int]] = []
    for dst, src, n in parts:
        for off in range(0, n, _CHUNK):
            pieces.append((dst + off, src + off, min(_CHUNK, n - off)))
    queue = _Pieces(pieces)
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_WORKERS - 1, thread_name_prefix="gostore-copy")
        pool = _pool
    futures = [pool.submit(_copy, queue) for _ in range(_WORKERS - 1)]
    _copy(queue)
    for f in futures:
        f.result()


class _Pieces:
    """Pieces handed out once each, to whichever thread asks first."""

    def __init__(self, pieces: List[Tuple[int, int, int]]) -> None:
        self._pieces = pieces
        self._next = 0
        self._lock = threading.Lock()

    def __iter__(self) -> "_Pieces":
        return self

    def __next__(self) -> Tuple[int, int, int]:
        with self._lock:
            i = self._next
            if i >= len(self._pieces):
                raise StopIteration
            self._next = i + 1
        return self._pieces[i]


def _after_fork_in_child() -> None:
    global _pool, _pool_lock
    _pool = None  # the parent's threads are not here
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
