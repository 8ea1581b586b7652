"""Host memory for zero-copy transfers, and NUMA placement of the caller.

- :class:`MooncakeHostMemAllocator`: ``alloc(size)`` maps ``size`` bytes of
  shared, zero-filled, page-aligned memory (a ``memfd``, as Mooncake's, so a
  store in standalone mode can hand it to its ``gostore-client``) and
  returns its address; ``free(addr)`` unmaps it (``0``),
  or returns ``-1`` for an address it did not hand out. Register the memory
  with a store (``register_buffer``) before the zero-copy calls use it.
- :func:`get_alloc_func_addr` / :func:`get_free_func_addr`: addresses of C
  functions ``void *alloc(size_t)`` and ``void free(void *)`` over the same
  memory, for code that wants function pointers (``ctypes.CFUNCTYPE``, C
  extensions). They are ctypes callbacks into Python, so they take the GIL:
  call them from threads while the interpreter runs, not during its
  shutdown. ``alloc`` returns NULL on failure; ``free`` ignores addresses
  it does not know.
- :func:`bind_to_numa_node`: binds the calling thread's CPUs to a NUMA node
  and prefers that node for its memory (``sched_setaffinity`` and
  ``set_mempolicy(MPOL_PREFERRED)``), read from ``/sys``. It does what it
  can and, like Mooncake, returns ``None`` either way; every step that
  could not be done is reported with a ``RuntimeWarning``.

All allocators share one table of live mappings, so any of them (and the C
``free``) can release what another handed out.
"""

from __future__ import annotations

import ctypes
import mmap
import operator
import os
import platform
import threading
import warnings
from typing import Dict, List, Optional, Set, Tuple

from .._args import _u64_int

__all__ = [
    "MooncakeHostMemAllocator",
    "bind_to_numa_node",
    "get_alloc_func_addr",
    "get_free_func_addr",
    "map_memory",
    "unmap_memory",
]

_MAP_FAILED = 2**64 - 1 if ctypes.sizeof(ctypes.c_void_p) == 8 else 2**32 - 1

_libc = ctypes.CDLL(None, use_errno=True)  # a private handle: argtypes set here stay here
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_munmap = _libc.munmap
_munmap.restype = ctypes.c_int
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def map_memory(size: int, fd: int = -1, prot: int = mmap.PROT_READ | mmap.PROT_WRITE) -> int:
    """``size`` (> 0) bytes of shared memory, read-write unless ``prot``
    says otherwise; its address: anonymous, or the first ``size`` bytes of
    file ``fd``. ``RuntimeError`` when the kernel refuses (say ``ENOMEM``)."""
    flags = mmap.MAP_SHARED if fd >= 0 else mmap.MAP_SHARED | mmap.MAP_ANONYMOUS
    addr = _mmap(None, size, prot, flags, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise RuntimeError(f"cannot map {size} bytes of shared memory: {os.strerror(err)}")
    return addr


def unmap_memory(addr: int, size: int) -> None:
    if _munmap(addr, size) != 0:
        err = ctypes.get_errno()
        raise RuntimeError(f"munmap(0x{addr:x}, {size}) failed: {os.strerror(err)}")


# addr -> (size, memfd) of every mapping handed out by alloc (shared by all
# allocators)
_live: Dict[int, Tuple[int, int]] = {}
_live_lock = threading.Lock()


def _host_alloc(size: int) -> int:
    fd = os.memfd_create("gostore-hostmem", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        addr = map_memory(size, fd)
    except BaseException:
        os.close(fd)
        raise
    with _live_lock:
        _live[addr] = (size, fd)
    return addr


def _host_free(addr: int) -> int:
    with _live_lock:
        entry = _live.pop(addr, None)
    if entry is None:
        return -1
    unmap_memory(addr, entry[0])
    os.close(entry[1])
    return 0


def mapping_of(addr: int, size: int) -> Optional[Tuple[int, int, int]]:
    """The allocation holding ``[addr, addr+size)``: (its address, its size,
    its memfd), or None when no allocator handed it out."""
    with _live_lock:
        for base, (n, fd) in _live.items():
            if base <= addr and addr + size <= base + n:
                return base, n, fd
    return None




class MooncakeHostMemAllocator:
    """Allocates host memory for zero-copy transfers (see the module doc).

    ``alloc(size)`` returns the address of ``size`` new bytes (shared,
    zero-filled, page-aligned) and raises ``RuntimeError`` when the memory
    cannot be mapped (``size == 0`` included); ``free(addr)`` returns ``0``,
    or ``-1`` for an address no allocator handed out (or one already freed).
    Memory not freed stays mapped until the process ends.
    """

    __slots__ = ()

    def alloc(self, size: int) -> int:
        n = _u64_int(size, "size")
        if n == 0:
            raise RuntimeError("cannot map 0 bytes of shared memory: Invalid argument")
        return _host_alloc(n)

    def free(self, ptr: int) -> int:
        return _host_free(_u64_int(ptr, "ptr"))

    def __repr__(self) -> str:
        return "<gostore.MooncakeHostMemAllocator>"


# ---- C function pointers ----------------------------------------------------

_ALLOC_T = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)
_FREE_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_callbacks: List[object] = []  # kept alive for the life of the process
_callbacks_lock = threading.Lock()


def _c_alloc(size: int) -> Optional[int]:
    try:
        return _host_alloc(size) if size > 0 else None
    except BaseException:  # noqa: BLE001 -- a C caller gets NULL, never an exception
        return None


def _c_free(ptr: Optional[int]) -> None:
    try:
        if ptr:
            _host_free(ptr)
    except BaseException:  # noqa: BLE001
        pass


def _c_functions() -> List[object]:
    with _callbacks_lock:
        if not _callbacks:
            _callbacks.extend([_ALLOC_T(_c_alloc), _FREE_T(_c_free)])
        return _callbacks


def get_alloc_func_addr() -> int:
    """Address of ``void *alloc(size_t size)`` (see the module doc)."""
    return ctypes.cast(_c_functions()[0], ctypes.c_void_p).value or 0


def get_free_func_addr() -> int:
    """Address of ``void free(void *ptr)`` (see the module doc)."""
    return ctypes.cast(_c_functions()[1], ctypes.c_void_p).value or 0


# ---- NUMA -------------------------------------------------------------------

_NODE_ROOT = "/sys/devices/system/node"
_MPOL_PREFERRED = 1
_SYS_SET_MEMPOLICY = {"x86_64": 238, "amd64": 238, "aarch64": 237, "arm64": 237}


def _parse_list(text: str) -> Set[int]:
    """``"0-3,8,10-11"`` -> {0, 1, 2, 3, 8, 10, 11}."""
    out: Set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _read_list(path: str) -> Optional[Set[int]]:
    try:
        with open(path) as f:
            return _parse_list(f.read())
    except (OSError, ValueError):
        return None


def _warn(msg: str) -> None:
    warnings.warn(f"bind_to_numa_node: {msg}", RuntimeWarning, stacklevel=3)


def _set_preferred_node(node: int) -> Optional[str]:
    """Prefer ``node`` for the calling thread's allocations; ``None`` or why not."""
    nr = _SYS_SET_MEMPOLICY.get(platform.machine().lower())
    if nr is None:
        return f"set_mempolicy is not known on {platform.machine()}"
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    mask = (ctypes.c_ulong * (node // bits + 1))()
    mask[node // bits] = 1 << (node % bits)
    syscall = _libc.syscall
    syscall.restype = ctypes.c_long
    rc = syscall(
        ctypes.c_long(nr),
        ctypes.c_int(_MPOL_PREFERRED),
        ctypes.byref(mask),
        ctypes.c_ulong(len(mask) * bits + 1),
    )
    if rc != 0:
        return f"set_mempolicy failed: {os.strerror(ctypes.get_errno())}"
    return None


def bind_to_numa_node(node: int) -> None:
    """Run the calling thread on NUMA node ``node``'s CPUs and prefer its
    memory. Returns ``None``; what could not be done is a ``RuntimeWarning``
    (no NUMA information, an unknown node, a refused affinity or policy)."""
    if isinstance(node, bool) or not isinstance(node, int):
        try:
            node = operator.index(node)
        except TypeError:
            raise TypeError(f"node must be an int, not {type(node).__name__}") from None
    online = _read_list(os.path.join(_NODE_ROOT, "online"))
    if not online:
        _warn("NUMA is not available on this system; binding skipped")
        return None
    if node not in online:
        _warn(f"invalid NUMA node {node}; online nodes: {sorted(online)}")
        return None
    cpus = _read_list(os.path.join(_NODE_ROOT, f"node{node}", "cpulist"))
    if not cpus:
        _warn(f"NUMA node {node} has no CPUs; CPU binding skipped")
    else:
        try:
            os.sched_setaffinity(0, cpus)  # pid 0: the calling thread
        except OSError as e:
            _warn(f"cannot run on node {node}'s CPUs {sorted(cpus)}: {e}")
    why = _set_preferred_node(node)
    if why:
        _warn(why)
    return None
