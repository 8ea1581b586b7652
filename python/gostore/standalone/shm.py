"""Shared memory both processes of standalone mode map: ``memfd`` regions
mapped through :func:`gostore.buffers.hostmem.map_memory`, so their addresses are
plain integers the C ABI takes (Python's ``mmap`` module hides them); and
the two system calls of cross memory, the application's memory reached
from the server (:func:`name_tracer`, :func:`read_process`)."""

from __future__ import annotations

import ctypes
import errno
import os
import threading
import time
from typing import List, Optional, Tuple

from ..buffers.hostmem import map_memory, unmap_memory

_libc = ctypes.CDLL(None, use_errno=True)  # a private handle, as hostmem's
_libc.msync.restype = ctypes.c_int
_libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

_MS_ASYNC = 1
PAGE = os.sysconf("SC_PAGE_SIZE")
_PR_SET_PTRACER = 0x59616D61
_YAMA_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"


class _IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc.process_vm_readv.restype = ctypes.c_ssize_t
_libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.POINTER(_IOVec), ctypes.c_ulong,
                                   ctypes.POINTER(_IOVec), ctypes.c_ulong, ctypes.c_ulong]


def name_tracer(pid: int) -> None:
    """Let process ``pid`` read and write this process's memory where
    Yama's "restricted" mode (``ptrace_scope`` 1) asks for it
    (``PR_SET_PTRACER``; it replaces a tracer named before); without Yama,
    the same user is enough. Raises OSError when the kernel refuses."""
    try:
        with open(_YAMA_SCOPE) as f:
            scope = f.read().strip()
    except OSError:
        return  # no Yama
    if scope == "1" and _libc.prctl(_PR_SET_PTRACER, pid, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"PR_SET_PTRACER({pid}): {os.strerror(err)}")


def read_process(pid: int, addr: int, n: int) -> bytes:
    """``n`` bytes at ``addr`` in process ``pid`` (``process_vm_readv``;
    fewer when the range ends early). Raises OSError when none can be read."""
    buf = ctypes.create_string_buffer(n)
    local, remote = _IOVec(ctypes.addressof(buf), n), _IOVec(addr, n)
    got = _libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if got < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return buf.raw[:got]


def map_fd(fd: int, size: int) -> int:
    """Map ``size`` bytes of ``fd`` shared, read-write; the address.
    Raises OSError (what the callers here catch for every failure)."""
    try:
        return map_memory(size, fd)
    except RuntimeError as e:
        raise OSError(str(e)) from None


def unmap(addr: int, size: int) -> None:
    try:
        unmap_memory(addr, size)
    except RuntimeError:
        pass  # an address we mapped: nothing to undo


def mapped(addr: int, size: int) -> bool:
    """Whether every page of [addr, addr+size) is mapped in this process
    (``msync`` answers ENOMEM for a hole): a pointer is checked before it is
    read or written, so a bad one gives an error code, not a crash."""
    if addr <= 0 or size <= 0 or addr + size > 1 << 48:
        return False
    start = addr - addr % PAGE
    if _libc.msync(start, addr + size - start, _MS_ASYNC) == 0:
        return True
    return ctypes.get_errno() != errno.ENOMEM


class Region:
    """One memfd of ``size`` bytes mapped at ``addr`` in this process."""

    __slots__ = ("fd", "addr", "size", "owned")

    def __init__(self, size: int, name: str = "gostore") -> None:
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            self.addr = map_fd(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self.fd, self.size, self.owned = fd, size, True

    @classmethod
    def borrowed(cls, fd: int, addr: int, size: int) -> "Region":
        """A memfd mapping someone else owns (close() leaves it alone)."""
        r = cls.__new__(cls)
        r.fd, r.addr, r.size, r.owned = fd, addr, size, False
        return r

    def contains(self, addr: int, size: int) -> bool:
        return self.addr <= addr and addr + size <= self.addr + self.size

    def close(self) -> None:
        if self.fd >= 0 and self.owned:
            unmap(self.addr, self.size)
            os.close(self.fd)
            self.fd = -1


ALIGN = 64  # staging allocations start on cache lines


def round_up(n: int) -> int:
    """``n`` rounded up to a multiple of ALIGN: what an allocation of n takes."""
    return -(-n // ALIGN) * ALIGN


class Arena:
    """First-fit allocation of [0, size) in ALIGN-byte units, with
    coalescing frees; thread-safe. Staging areas are short-lived, so the
    free list stays short."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._free: List[Tuple[int, int]] = [(0, size)] if size > 0 else []
        self._lock = threading.Lock()
        self._used_at = time.monotonic()  # the last alloc or free
        self._retired = False

    def alloc(self, n: int) -> Optional[int]:
        n = round_up(n)
        with self._lock:
            if self._retired:
                return None
            self._used_at = time.monotonic()
            for i, (off, length) in enumerate(self._free):
                if length >= n:
                    if length == n:
                        del self._free[i]
                    else:
                        self._free[i] = (off + n, length - n)
                    return off
        return None

    def free(self, off: int, n: int) -> None:
        n = round_up(n)
        with self._lock:
            self._used_at = time.monotonic()
            free = self._free
            lo, hi = 0, len(free)
            while lo < hi:
                mid = (lo + hi) // 2
                if free[mid][0] < off:
                    lo = mid + 1
                else:
                    hi = mid
            free.insert(lo, (off, n))
            # merge with the right neighbour, then the left one
            if lo + 1 < len(free) and off + n == free[lo + 1][0]:
                free[lo] = (off, n + free[lo + 1][1])
                del free[lo + 1]
            if lo > 0 and free[lo - 1][0] + free[lo - 1][1] == off:
                free[lo - 1] = (free[lo - 1][0], free[lo - 1][1] + free[lo][1])
                del free[lo]

    def retire_if_idle(self, before: float) -> bool:
        """Retire the arena (alloc answers None from then on) if nothing of
        it is allocated and it was last used before ``before``
        (time.monotonic()); whether it did. A retired arena's memory can go:
        no allocation is out, and none will be made."""
        with self._lock:
            if self._retired or self._free != [(0, self._size)] or self._used_at >= before:
                return False
            self._retired = True
            return True
