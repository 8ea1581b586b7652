"""Shared memory both processes of standalone mode map: ``memfd`` regions
mapped with ``mmap(2)`` through libc, so their addresses are plain integers
the C ABI takes (Python's ``mmap`` module hides them)."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import threading
from typing import List, Optional, Tuple

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.msync.restype = ctypes.c_int
_libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

_PROT_RW = 0x1 | 0x2
_MAP_SHARED = 0x01
_MAP_FAILED = ctypes.c_void_p(-1).value
_MS_ASYNC = 1
PAGE = os.sysconf("SC_PAGE_SIZE")


def map_fd(fd: int, size: int) -> int:
    """Map ``size`` bytes of ``fd`` shared, read-write; the address.
    Raises OSError."""
    addr = _libc.mmap(None, size, _PROT_RW, _MAP_SHARED, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap of {size} bytes: {os.strerror(err)}")
    return int(addr)


def unmap(addr: int, size: int) -> None:
    _libc.munmap(addr, size)


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

    __slots__ = ("fd", "addr", "size")

    def __init__(self, size: int, name: str = "gostore") -> None:
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            self.addr = map_fd(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self.fd, self.size = fd, size

    def contains(self, addr: int, size: int) -> bool:
        return self.addr <= addr and addr + size <= self.addr + self.size

    def close(self) -> None:
        if self.fd >= 0:
            unmap(self.addr, self.size)
            os.close(self.fd)
            self.fd = -1


class Arena:
    """First-fit allocation of [0, size) in ``align``-byte units, with
    coalescing frees; thread-safe. Staging areas are short-lived, so the
    free list stays short."""

    def __init__(self, size: int, align: int = 64) -> None:
        self._align = align
        self._free: List[Tuple[int, int]] = [(0, size)] if size > 0 else []
        self._lock = threading.Lock()

    def alloc(self, n: int) -> Optional[int]:
        n = -(-n // self._align) * self._align
        with self._lock:
            for i, (off, length) in enumerate(self._free):
                if length >= n:
                    if length == n:
                        del self._free[i]
                    else:
                        self._free[i] = (off + n, length - n)
                    return off
        return None

    def free(self, off: int, n: int) -> None:
        n = -(-n // self._align) * self._align
        with self._lock:
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
