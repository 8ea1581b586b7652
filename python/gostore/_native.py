"""Loading ``libgostore.so`` and declaring its C ABI (``bindings/ABI.md``).

The library is a Go ``c-shared`` build. It is loaded lazily, on the first call
that needs it, so that importing :mod:`gostore` neither starts the Go runtime
nor fails where the library is missing (argument checks and pure-Python parts
work without it).

* Path: ``$GOSTORE_LIB`` if set, else ``libgostore.so`` next to this file.
* UCX: before the load, :func:`gostore._ucx.choose_library` sets
  ``$GOSTORE_LIBUCX`` to the ``libucx`` wheel's library when neither the user
  nor the system provides one (the Go side dlopens it at setup).
* ``ctypes.CDLL`` (not ``PyDLL``): every call releases the GIL while Go runs.
* ``RTLD_LAZY`` is required: go-nvml leaves its ``nvml*`` symbols unresolved
  until it opens ``libnvidia-ml.so.1`` at run time; an eager (``RTLD_NOW``)
  load fails with "undefined symbol" on machines without a driver.
* Array arguments are declared ``c_void_p`` and receive raw addresses (of
  ``array.array`` buffers, ``bytes`` objects, ``ctypes`` arrays): building an
  ``array.array`` from a list is several times faster than a ctypes array.

Once the Go runtime is loaded, a ``fork()``ed child cannot use it: only the
forking thread survives, and Go's own threads and locks do not, so a call into
Go there may hang forever. A fork handler therefore swaps every function of the
library in the child for one that returns the call's error value at once (-1,
or -1 in each result slot) and logs, once, the cause and the fix: the
``spawn`` (or ``forkserver``) start method of :mod:`multiprocessing`.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from ctypes import c_char_p, c_double, c_int, c_int64, c_uint32, c_uint64, c_void_p
from typing import Callable, Optional, Tuple

from . import _ucx
from .errors import ErrorCode

__all__ = ["library_path", "lib", "is_loaded", "bench_memcpy", "bench_tcp_stream"]

LIB_NAME = "libgostore.so"
# zero_copy bit of the data calls: ranges not in a registered buffer may be
# GPU memory, and the driver is asked about each (bindings/ABI.md)
MAY_BE_DEVICE = 2
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))

_i64 = c_int64
_vp = c_void_p  # uint32_t*/uint64_t*/int32_t*/int64_t* arrays and out buffers

# name: (restype, argtypes) -- one entry per function of bindings/ABI.md.
PROTOTYPES = {
    "gs_store_new": (_i64, []),
    "gs_setup": (c_int, [_i64, c_char_p, c_int]),
    "gs_close": (c_int, [_i64]),
    "gs_store_free": (None, [_i64]),
    "gs_health_check": (c_int, [_i64]),
    "gs_get_hostname": (c_int, [_i64, _vp, c_int]),
    # h, n, keys, key_lens, ptrs, sizes, nparts, zero_copy, replica_num, flags,
    # preferred, preferred_len, results(int32)
    "gs_put_batch": (
        None,
        [_i64, c_int, c_char_p, _vp, _vp, _vp, _vp, c_int, c_int, c_int, c_char_p, c_int, _vp],
    ),
    # h, key, key_len, ptr, size, zero_copy, replica_num, flags, preferred,
    # preferred_len, upsert -> 0 / negative: one key of gs_put_batch or
    # (upsert 1) gs_upsert_batch
    "gs_put_one": (c_int, [_i64, c_char_p, c_int, c_uint64, c_uint64, c_int, c_int, c_int, c_char_p, c_int, c_int]),
    # same arguments as gs_put_batch; inserts or replaces
    "gs_upsert_batch": (
        None,
        [_i64, c_int, c_char_p, _vp, _vp, _vp, _vp, c_int, c_int, c_int, c_char_p, c_int, _vp],
    ),
    # h, n, keys, key_lens, sizes_out(int64) -> pending handle
    "gs_get_start": (_i64, [_i64, c_int, c_char_p, _vp, _vp]),
    # h, pending, ptrs, sizes, nparts, zero_copy, results(int64)
    "gs_get_finish": (None, [_i64, _i64, _vp, _vp, _vp, c_int, _vp]),
    "gs_get_abort": (None, [_i64, _i64]),
    # h, pending, seg_ids_out, offsets_out, sizes_out, leases_ms_out (uint64
    # each), paths, cap -> bytes of "<segment id> <size> <path>" lines / -10
    # / negative
    "gs_get_places": (c_int, [_i64, _i64, _vp, _vp, _vp, _vp, _vp, c_int]),
    # h, key, key_len, scratch, cap, size_out(int64) -> 0 (in scratch) /
    # pending handle (larger than cap) / negative code
    "gs_get_one": (_i64, [_i64, c_char_p, c_int, c_uint64, c_uint64, _vp]),
    # h, n, keys, key_lens, scratch, cap, zero_copy, sizes_out(int64),
    # results(int64) -> 0 (packed in scratch) / pending handle / negative
    "gs_get_packed": (_i64, [_i64, c_int, c_char_p, _vp, c_uint64, c_uint64, c_int, _vp, _vp]),
    # h, n, keys, key_lens, ptrs, sizes, nparts, zero_copy, results(int64)
    "gs_get_into_batch": (None, [_i64, c_int, c_char_p, _vp, _vp, _vp, _vp, c_int, _vp]),
    # h, key, key_len, ptr, size, zero_copy -> bytes written / negative
    "gs_get_into_one": (_i64, [_i64, c_char_p, c_int, c_uint64, c_uint64, c_int]),
    # h, n, keys, key_lens, ptrs_out(uint64), sizes_out(int64)
    "gs_get_buffers": (None, [_i64, c_int, c_char_p, _vp, _vp, _vp]),
    "gs_free_buffer": (None, [_i64, c_uint64]),
    # h, n, keys, key_lens, results(int32)
    "gs_exist_batch": (None, [_i64, c_int, c_char_p, _vp, _vp]),
    "gs_get_size": (_i64, [_i64, c_char_p, c_int]),
    # h, n, keys, key_lens, force, results(int32)
    "gs_remove_batch": (None, [_i64, c_int, c_char_p, _vp, c_int, _vp]),
    "gs_remove_by_regex": (_i64, [_i64, c_char_p, c_int, c_int]),
    "gs_remove_all": (_i64, [_i64, c_int]),
    "gs_register_buffer": (c_int, [_i64, c_uint64, c_uint64]),
    "gs_unregister_buffer": (c_int, [_i64, c_uint64]),
    # h, ptr, size -> 1 inside one registered buffer / 0 / negative
    "gs_buffer_registered": (c_int, [_i64, c_uint64, c_uint64]),
    "gs_buffers_registered": (c_int, [_i64, c_int, c_void_p, c_void_p, c_void_p]),
    # h, key, key_len, targets ("\n"-separated), targets_len, id_out, id_cap
    "gs_create_copy_task": (c_int, [_i64, c_char_p, c_int, c_char_p, c_int, _vp, c_int]),
    # h, key, key_len, source, source_len, target, target_len, id_out, id_cap
    "gs_create_move_task": (
        c_int,
        [_i64, c_char_p, c_int, c_char_p, c_int, c_char_p, c_int, _vp, c_int],
    ),
    # h, id, id_len, out (JSON), cap
    "gs_query_task": (c_int, [_i64, c_char_p, c_int, _vp, c_int]),
    # plan API (bindings/plan.go): plans are uint64[10], metas uint64[9]
    "gs_plan_join": (_i64, [_i64]),
    "gs_plan_members": (c_int, [_i64, _vp, c_int]),
    # h, key, key_len, bytes, page_bytes, pref_rank, pref_seg, pref_seg_len,
    # low_watermark, out(uint64[10])
    "gs_plan_open": (
        c_int,
        [_i64, c_char_p, c_int, c_uint64, c_uint32, _i64, c_char_p, c_int, c_double, _vp],
    ),
    # h, key, key_len, offset, ptr, size
    "gs_plan_write": (c_int, [_i64, c_char_p, c_int, c_uint64, c_uint64, c_uint64]),
    "gs_plan_commit": (c_int, [_i64, c_char_p, c_int]),
    "gs_plan_flush": (c_int, [_i64]),
    # h, key, key_len, out(uint64[9])
    "gs_plan_locate": (c_int, [_i64, c_char_p, c_int, _vp]),
    # h, key, key_len, dst, capacity -> bytes / negative
    "gs_plan_read": (_i64, [_i64, c_char_p, c_int, c_uint64, c_uint64]),
    # h, meta(uint64[9]), dst, capacity -> bytes / negative
    "gs_plan_read_at": (_i64, [_i64, _vp, c_uint64, c_uint64]),
    "gs_plan_remove": (c_int, [_i64, c_char_p, c_int]),
    # h, ratio, usage_out(double*) -> objects evicted / negative
    "gs_plan_evict_until": (_i64, [_i64, c_double, _vp]),
    "gs_plan_stats": (c_int, [_i64, _vp, c_int]),
    "gs_gpu_info": (c_int, [_vp, c_int]),
    # h, out, cap: JSON of the transport setup decided
    "gs_transport_info": (c_int, [_i64, _vp, c_int]),
    # dst, src, n: a CUDA driver copy where one side is device memory
    "gs_device_copy": (c_int, [c_uint64, c_uint64, c_uint64]),
    # root, root_len, out, cap
    "gs_topology": (c_int, [c_char_p, c_int, _vp, c_int]),
    "gs_master_start": (_i64, [c_char_p, c_int]),
    "gs_master_addr": (c_int, [_i64, _vp, c_int]),
    # h, n, keys, key_lens, sizes(uint64), replica_num, flags, preferred,
    # preferred_len, results(int32)
    "gs_put_session_start": (
        None, [_i64, c_int, c_char_p, _vp, _vp, c_int, c_int, c_char_p, c_int, _vp],
    ),
    # h, n, keys, key_lens, ptrs, sizes, offsets, nparts, zero_copy,
    # results(int64: one per key)
    "gs_put_session_write": (None, [_i64, c_int, c_char_p, _vp, _vp, _vp, _vp, _vp, c_int, _vp]),
    # h, n, keys, key_lens, revoke, results(int32)
    "gs_put_session_end": (None, [_i64, c_int, c_char_p, _vp, c_int, _vp]),
    # h, n, keys, key_lens, results(int32)
    "gs_get_session_start": (None, [_i64, c_int, c_char_p, _vp, _vp]),
    # as gs_put_session_write
    "gs_get_session_read": (None, [_i64, c_int, c_char_p, _vp, _vp, _vp, _vp, _vp, c_int, _vp]),
    "gs_get_session_end": (c_int, [_i64, c_int, c_char_p, _vp]),
    # as gs_put_session_write, results(int64: one per part)
    "gs_get_ranges": (None, [_i64, c_int, c_char_p, _vp, _vp, _vp, _vp, _vp, c_int, _vp]),
    # h, n, keys, key_lens, out, cap -> bytes of JSON written / -10 (grow)
    "gs_replica_descs": (c_int, [_i64, c_int, c_char_p, _vp, _vp, c_int]),
    "gs_disk_read_count": (_i64, [_i64]),
    # h, n, keys, key_lens, segment, segment_len, out, cap -> JSON length / -10 / code
    "gs_replica_clear": (c_int, [_i64, c_int, c_char_p, _vp, c_char_p, c_int, _vp]),
    # h, path, path_len, offset, size, protocol, protocol_len, location,
    # location_len, out, cap -> bytes of the JSON list of segment ids / code
    "gs_mount_segment": (
        c_int, [_i64, c_char_p, c_int, c_uint64, c_uint64, c_char_p, c_int, c_char_p, c_int, _vp, c_int],
    ),
    # h, size, protocol, protocol_len, location, location_len,
    # allocated(uint64 out), out, cap -> as gs_mount_segment
    "gs_allocate_segment": (c_int, [_i64, c_uint64, c_char_p, c_int, c_char_p, c_int, _vp, _vp, c_int]),
    # h, ids (JSON list), ids_len, grace_seconds, allocated -> 0 / code
    "gs_unmount_segments": (c_int, [_i64, c_char_p, c_int, c_uint64, c_int]),
    "gs_unmount_local_disk": (c_int, [_i64, c_uint64]),
    # h, protocol, protocol_len, device_name, device_name_len, segment_size
    "gs_init_all": (c_int, [_i64, c_char_p, c_int, c_char_p, c_int, c_uint64]),
    "gs_master_http_addr": (c_int, [_i64, _vp, c_int]),
    "gs_master_stop": (c_int, [_i64]),
    "gs_bench_memcpy": (c_double, [c_uint64, c_int]),
    "gs_bench_tcp_stream": (c_double, [c_uint64, c_int]),
}

# Void functions that report per key through a results array (their last
# argument, of n = the second argument entries): in a forked child each
# entry reads -1.
_RESULT_ARRAYS = {
    "gs_put_batch": ctypes.c_int32,
    "gs_upsert_batch": ctypes.c_int32,
    "gs_get_into_batch": ctypes.c_int64,
    "gs_put_session_start": ctypes.c_int32,
    "gs_put_session_write": ctypes.c_int64,
    "gs_put_session_end": ctypes.c_int32,
    "gs_get_session_start": ctypes.c_int32,
    "gs_get_session_read": ctypes.c_int64,
    "gs_exist_batch": ctypes.c_int32,
    "gs_remove_batch": ctypes.c_int32,
}

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
# pid of the process whose Go runtime the library runs in: set before the
# load starts the runtime, so a fork in the middle of it counts too.
_loaded_by: int = 0


def library_path() -> str:
    """Where the library is looked for: ``$GOSTORE_LIB`` or the package dir."""
    return os.environ.get("GOSTORE_LIB") or os.path.join(_PKG_DIR, LIB_NAME)


def is_loaded() -> bool:
    return _lib is not None


def forked() -> bool:
    """True in a process forked after the library was loaded (see above)."""
    return _loaded_by not in (0, os.getpid())


def _warn_forked(name: str) -> None:
    """The one log line a forked child gets, at its first call."""
    global _fork_warned
    if _fork_warned:
        return
    _fork_warned = True
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    sys.stderr.write(
        f'time={stamp} level=ERROR msg="gostore: this process was forked from process {_loaded_by}, '
        "which had loaded the gostore library; the Go runtime does not survive fork(), so every "
        "gostore call here fails (-1) instead of hanging. Start workers with multiprocessing's "
        "'spawn' (or 'forkserver') method: multiprocessing.set_start_method('spawn') or "
        f"multiprocessing.get_context('spawn')\" call={name} pid={os.getpid()}\n"
    )
    sys.stderr.flush()


_fork_warned = False


# Releases that finalizers run (also at a forked child's exit): in a child
# they do nothing, silently; the memory belongs to the parent's runtime.
_SILENT_IN_CHILD = frozenset({"gs_store_free", "gs_free_buffer", "gs_get_abort", "gs_master_stop"})


def _forked_stub(name: str, restype: object) -> Callable[..., object]:
    results = _RESULT_ARRAYS.get(name)
    silent = name in _SILENT_IN_CHILD

    def call(*args: object) -> object:
        if not silent:
            _warn_forked(name)
        if results is not None:
            n, addr = args[1], args[-1]
            if isinstance(n, int) and n > 0 and isinstance(addr, int) and addr:
                ctypes.memset(addr, 0xFF, n * ctypes.sizeof(results))  # -1 in two's complement
        if restype is None:
            return None
        return -1.0 if restype is c_double else -1

    return call


class _ForkedLibrary:
    """What :func:`lib` gives a child forked while another thread was still
    loading the library: the stubs alone."""


def _after_fork_in_child() -> None:
    global _fork_warned, _lib, _lock
    # Another thread may have held the lock at the fork; it does not exist
    # in the child, and would never release it.
    _lock = threading.Lock()
    if not forked():
        return
    _fork_warned = False
    if _lib is None:
        _lib = _ForkedLibrary()  # type: ignore[assignment]
    for name, (restype, _argtypes) in PROTOTYPES.items():
        setattr(_lib, name, _forked_stub(name, restype))


# Registered at import, not at load: a fork while a thread loads the
# library must find the handler in place.
os.register_at_fork(after_in_child=_after_fork_in_child)


def _missing(name: str, path: str):
    def call(*_args, **_kw):
        raise NotImplementedError(f"{name} is not exported by {path}; rebuild libgostore.so")

    return call


def lib() -> ctypes.CDLL:
    """The loaded library (loading it and declaring prototypes on first use)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = library_path()
        if not os.path.exists(path):
            raise OSError(
                f"gostore native library not found at {path!r}: install the package "
                "with `pip install .` (needs the Go toolchain), build it in place with "
                "`python setup.py build_ext --inplace`, or point GOSTORE_LIB at a "
                "libgostore.so"
            )
        # Which UCX the Go side will dlopen (GOSTORE_LIBUCX, read at setup):
        # decided here, before the runtime starts (gostore/_ucx.py).
        _ucx.choose_library()
        global _loaded_by
        _loaded_by = os.getpid()
        try:
            handle = ctypes.CDLL(path, mode=os.RTLD_LAZY | os.RTLD_GLOBAL)
        except BaseException:
            _loaded_by = 0  # no runtime started
            raise
        for name, (restype, argtypes) in PROTOTYPES.items():
            try:
                fn = getattr(handle, name)
            except AttributeError:
                # Keep an older/partial library usable for the calls it has.
                setattr(handle, name, _missing(name, path))
                continue
            fn.restype = restype
            fn.argtypes = argtypes
        _lib = handle
        return _lib


def read_string(fn, handle: int, cap: int = 1024) -> Optional[str]:
    """Call an ``int f(h, char *out, int cap)`` ABI function; ``None`` on error."""
    while True:
        buf = ctypes.create_string_buffer(cap)
        n = fn(handle, buf, cap)
        if n < 0:
            return None
        if n <= cap:
            return buf.raw[:n].decode("utf-8", "replace")
        cap = n  # a library that reports the needed size: retry once bigger


def call_growing(call: Callable[[ctypes.Array, int], int], cap: int = 1024,
                 limit: int = 1 << 26) -> Tuple[int, bytes]:
    """Call ``call(out, cap)``, an ABI function that writes at most ``cap``
    bytes to ``out`` and answers BUFFER_OVERFLOW (-10) when they do not fit,
    with a buffer four times larger each time it does (up to ``limit``).
    Returns ``(n, the n bytes)``, or ``(negative code, b"")``."""
    while True:
        out = ctypes.create_string_buffer(cap)
        n = call(out, cap)
        if n == int(ErrorCode.BUFFER_OVERFLOW) and cap < limit:
            cap *= 4
            continue
        return (n, out.raw[:n]) if n >= 0 else (n, b"")


def bench_memcpy(size: int, iters: int) -> float:
    """GB/s of Go's ``copy`` between two ``size``-byte buffers (for benchmarks)."""
    return lib().gs_bench_memcpy(size, iters)


def bench_tcp_stream(size: int, iters: int) -> float:
    """GB/s of one loopback TCP stream carrying ``iters`` messages of ``size``."""
    return lib().gs_bench_tcp_stream(size, iters)
