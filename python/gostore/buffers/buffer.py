"""``GostoreBuffer``: a value held in library-owned memory (``get_buffer``).

Why a ctypes array subclass: ``get_buffer`` must return an object that
exports the buffer protocol (``memoryview(buf)``, ``bytes(buf)``,
``numpy.frombuffer(buf)``) over memory that Go allocated, without copying it.
Before Python 3.12 (PEP 688) a class written in Python cannot implement
``__buffer__``; ctypes arrays, however, export their memory, and
``(c_ubyte * n).from_address(ptr)`` makes one over foreign memory without
owning it. So each buffer is an instance of a subclass of ``c_ubyte * n`` (one
class per size, cached) that mixes in :class:`GostoreBuffer`'s methods, and
its ``__del__`` returns the memory to the library (``gs_free_buffer``)
exactly once, when the last reference -- including any ``memoryview`` or
numpy array made from it, which keep it alive -- is gone. (``__del__``, not
``weakref.finalize``: a finalizer cost 1 us per buffer, a third of a small
``batch_get_buffer``'s time per object. At interpreter exit the process is
going away, and nothing is handed back.)

Indexing/slicing a ctypes array yields Python ints/lists; for bulk access use
``memoryview(buf)`` (``memoryview(buf).cast("B")`` for a flat byte view).
"""

from __future__ import annotations

import atexit
import ctypes
import functools
from typing import Any

__all__ = ["GostoreBuffer", "BufferHandle"]


class GostoreBuffer:
    """Methods shared by every per-size buffer class (see the module doc)."""

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # from_address (how the store makes buffers) does not call __init__.
        raise TypeError("gostore.BufferHandle: no public constructor (use get_buffer)")

    def ptr(self) -> int:
        """Address of the first byte."""
        return ctypes.addressof(self)  # type: ignore[arg-type]

    def size(self) -> int:
        """Length in bytes (same as ``len(buf)``)."""
        return ctypes.sizeof(self)  # type: ignore[arg-type]

    def tobytes(self) -> bytes:
        """A copy of the contents as ``bytes``."""
        return ctypes.string_at(self.ptr(), self.size())

    def __repr__(self) -> str:
        return f"<GostoreBuffer size={self.size()} ptr=0x{self.ptr():x}>"

    def __reduce__(self):  # foreign memory: pickle the contents
        return (bytes, (self.tobytes(),))

    def __del__(self) -> None:
        free = getattr(self, "_gs_free", None)  # (lib, owner, ptr), set by wrap
        if free is not None and not _exiting:
            lib, owner, ptr = free
            # ``owner`` keeps the store handle alive (and valid) while
            # buffers exist.
            lib.gs_free_buffer(owner.h, ptr)


BufferHandle = GostoreBuffer
"""Mooncake's name for what ``get_buffer`` returns: ``ptr()``, ``size()``,
``len()`` and the buffer protocol (``memoryview(buf)``). Only the store
makes them."""


@functools.lru_cache(maxsize=1024)
def _buffer_class(n: int) -> type:
    return type(
        "GostoreBuffer",
        (GostoreBuffer, ctypes.c_ubyte * n),
        {"__module__": __name__, "__qualname__": f"GostoreBuffer[{n}]"},
    )


_exiting = False


@atexit.register
def _at_exit() -> None:
    global _exiting
    _exiting = True


def wrap(lib: Any, owner: Any, ptr: int, size: int) -> GostoreBuffer:
    """Wrap library memory ``[ptr, ptr+size)``; freed when collected."""
    buf = _buffer_class(size).from_address(ptr)
    buf._gs_free = (lib, owner, ptr)
    return buf
