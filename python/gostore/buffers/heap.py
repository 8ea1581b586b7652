"""Keep the memory of freed read results warm for the next copying read.

A copying read (``get``, ``get_batch``, the tensor reads) returns objects
Python allocates, and glibc's malloc serves large ones from fresh pages:
past its mmap threshold each one is a new mapping, and below it the top of
the heap is given back to the kernel once more than the trim threshold is
free there. Every fresh page costs a fault and the kernel zeroing it before
the store's copy can write it; a batch of 32 x 16 MiB paid 131,072 faults on
every call and ran at a tenth of the zero-copy read of the same objects.

:func:`keep_freed_results` sets, once per process at a store's first
``setup``, the mmap threshold, the trim threshold and the top pad:
allocations up to 32 MiB (the largest mmap threshold glibc accepts, and the
ceiling of its own dynamic one) come from the heap, and up to
``GOSTORE_HEAP_RETAIN_BYTES`` freed bytes (default 1 GiB; ``0`` leaves
malloc as it was) stay mapped for the next call. Those bytes are still free
memory to every allocation of the process; they are just not returned to
the kernel. Without glibc (``mallopt`` missing) it does nothing.

Why the top pad too: glibc trims the heap once its free top reaches the
trim threshold, and a trim keeps only the top pad (128 KiB by default), not
the threshold. With the threshold alone, a workload that frees at once as
much as it is meant to keep (two calls' results, or results and the values
it wrote meanwhile) lost all of it, and its next reads faulted every page
in again. With the pad at the same bound a trim gives back only what passes
it. (The pad also rounds each growth of the heap up by as much address
space; untouched, it costs no memory.)
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading

__all__ = ["keep_freed_results", "retain_bytes", "DEFAULT_RETAIN_BYTES"]

DEFAULT_RETAIN_BYTES = 1 << 30
_MMAP_THRESHOLD_MAX = 32 << 20  # glibc: HEAP_MAX_SIZE / 2 on 64-bit
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

_log = logging.getLogger("gostore")
_lock = threading.Lock()
_done = False


def retain_bytes() -> int:
    """``GOSTORE_HEAP_RETAIN_BYTES``: how much freed memory of copying reads
    a process keeps for the next ones (DEFAULT_RETAIN_BYTES when unset;
    0, logged, when it is not a whole number)."""
    raw = os.environ.get("GOSTORE_HEAP_RETAIN_BYTES", "")
    try:
        return max(0, int(raw)) if raw.strip() else DEFAULT_RETAIN_BYTES
    except ValueError:
        _log.error("gostore: GOSTORE_HEAP_RETAIN_BYTES=%r is not a whole number of bytes; nothing is kept", raw)
        return 0


def keep_freed_results() -> int:
    """Apply ``GOSTORE_HEAP_RETAIN_BYTES`` once per process; returns the
    bytes kept (0 when malloc was left alone)."""
    global _done
    with _lock:
        if _done:
            return 0
        _done = True
        retain = retain_bytes()
        if retain <= 0:
            return 0
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (AttributeError, OSError):
            return 0  # not glibc
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        retain = min(retain, 2**31 - 1)  # mallopt takes an int
        if not (mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) and mallopt(_M_TRIM_THRESHOLD, retain)
                and mallopt(_M_TOP_PAD, retain)):
            _log.warning("gostore: mallopt refused the heap thresholds; copying reads fault in fresh pages")
            return 0
        return retain
